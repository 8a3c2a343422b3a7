"""Descriptors of the log: one per partition in steady state (pybroker/log/segment.py,
pybroker/log/index.py, pybroker/log/partition_log.py), and what must keep working with it:
appends and sendfile reads sharing the active segment's descriptor, in-flight reads of
released or deleted segments, index entries written at flush, close and crash recovery."""

from __future__ import annotations

import asyncio
import gc
import os
import socket
import struct

import pytest

import pybroker.log.index as index_mod
from pybroker.clock import ManualClock
from pybroker.log.index import OffsetIndex, TimeIndex
from pybroker.log.manager import LogManager
from pybroker.log.partition_log import LogConfig, PartitionLog
from pybroker.log.segment import LogSegment
from pybroker.wire.record_walker import decode_records
from pybroker.wire.records import build_batch, parse_batches, set_base_offset

NOW = 1_700_000_000_000


def open_fds() -> int:
    """Descriptors of files (what a log holds): sockets and pipes are left out, which a
    ZooKeeper client or thread an earlier test left behind may open and close at any time (a
    whole-suite run once counted one socket more here)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # (closed meanwhile, or the listing's own descriptor)
        n += target.startswith("/") and not target.startswith(("/dev/", "/proc/"))
    return n


def fd_baseline() -> int:
    """Open descriptors once the garbage of earlier tests is collected (a cycle holding a file
    closed by a later gc.collect() would otherwise lower the count below the baseline)."""
    gc.collect()
    return open_fds()


def batch(n: int = 2, value: bytes = b"v" * 100, ts: int = NOW) -> bytearray:
    return bytearray(build_batch([(None, value, [])] * n, timestamp=ts))


def seg_append(seg: LogSegment, n: int = 2, value: bytes = b"v" * 100) -> bytes:
    buf = batch(n, value)
    set_base_offset(buf, 0, seg.next_offset)
    seg.append(memoryview(buf), parse_batches(buf), seg.next_offset, NOW)
    return bytes(buf)


def log_append(log: PartitionLog, n: int = 2, value: bytes = b"v" * 100):
    buf = batch(n, value)
    info = log.append(buf, parse_batches(buf))
    log.high_watermark = log.log_end_offset
    return info


def offsets_in(data: bytes) -> list[int]:
    return [
        r.offset
        for h in parse_batches(data)
        for r in decode_records(data[h.position : h.position + h.size])
    ]


# -- the active segment: one descriptor for appends and reads ---------------------------------


def test_appends_land_at_the_end_whatever_sendfile_does_to_the_position(tmp_path):
    base = fd_baseline()
    seg = LogSegment(tmp_path, 0)
    assert open_fds() == base + 1  # the .log; the indexes hold none
    written = seg_append(seg)
    s = seg.read(0, 1 << 20)
    assert s.file.fileno() == seg._handle().fd  # reads share the append descriptor
    for _ in range(5):
        s.file.seek(0)  # what loop.sendfile does to the region's file object
        os.lseek(s.file.fileno(), 0, os.SEEK_SET)  # and, on its native path, to the fd
        written += seg_append(seg)
    with open(seg.log_path, "rb") as f:
        assert f.read() == written
    assert seg.size == len(written) and seg.next_offset == 12
    # the slice's file reads from its own position, not the one appends moved to the end
    s = seg.read(4, 1 << 20)
    s.file.seek(s.position)
    buf = bytearray(s.size)
    got = 0
    while got < s.size:
        view = memoryview(buf)[got : got + 100]
        n = s.file.readinto(view)
        assert n > 0
        got += n
        seg_append(seg)  # interleaved with the read, as the event loop may do
    assert bytes(buf) == written[s.position : s.position + s.size]
    assert offsets_in(bytes(buf)) == list(range(4, 12))
    assert open_fds() == base + 1
    seg.close()
    del s
    assert open_fds() == base


@pytest.mark.parametrize("mode", ["native", "fallback"])
def test_loop_sendfile_of_a_region_while_appending(tmp_path, monkeypatch, mode):
    if mode == "fallback":
        monkeypatch.delattr(os, "sendfile")  # asyncio then seeks and reads the file object
    seg = LogSegment(tmp_path, 0)
    for _ in range(200):
        seg_append(seg, 5, b"x" * 1000)
    region = seg.read(0, 1 << 30)
    expected = os.pread(region.file.fileno(), region.size, region.position)
    assert region.size > 500_000

    async def run() -> bytes:
        a, b = socket.socketpair()
        reader, writer = await asyncio.open_connection(sock=a)
        peer_reader, peer_writer = await asyncio.open_connection(sock=b)
        received = bytearray()
        appending = True

        async def drain_slowly() -> None:
            while len(received) < region.size:
                received.extend(await peer_reader.read(8192))
                await asyncio.sleep(0)

        async def keep_appending() -> None:
            while appending:
                seg_append(seg, 1, b"y" * 300)
                await asyncio.sleep(0)

        consumer = asyncio.ensure_future(drain_slowly())
        producer = asyncio.ensure_future(keep_appending())
        loop = asyncio.get_running_loop()
        sent = await loop.sendfile(writer.transport, region.file, region.position, region.size)
        await consumer
        appending = False
        await producer
        assert sent == region.size
        writer.close()
        peer_writer.close()
        return bytes(received)

    async def bounded() -> bytes:  # a broken region would leave the reader waiting
        return await asyncio.wait_for(run(), 30)

    assert asyncio.run(bounded()) == expected
    assert seg.size > region.size  # the appends went on meanwhile, at the end
    seg.close()


# -- released, deleted and lazily reopened segments ---------------------------------------------


def test_release_and_delete_keep_in_flight_reads(tmp_path):
    base = fd_baseline()
    seg = LogSegment(tmp_path, 0)
    data = seg_append(seg) + seg_append(seg)
    seg.flush()
    seg.release()
    assert open_fds() == base and not seg.has_handle
    region = seg.read(2, 1 << 20)  # reopened on demand
    assert open_fds() == base + 1
    seg.release()  # an in-flight reader keeps the descriptor
    assert open_fds() == base + 1
    seg.rename_for_delete()
    seg.delete_files()
    assert not any(tmp_path.iterdir())
    region.file.seek(region.position)
    assert region.file.read(region.size) == data[region.position :]
    del region
    gc.collect()
    assert open_fds() == base


def test_partition_log_holds_one_descriptor_and_one_reader(tmp_path):
    clock = ManualClock()
    one = len(batch())
    base = fd_baseline()
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=one * 2), clock)
    for _ in range(10):
        log_append(log)
    assert len(log.segments) == 5
    log.flush()
    assert open_fds() == base + 1  # rolled segments let go once fsynced
    assert offsets_in(_bytes(log.read(0, 1 << 20))) == [0, 1, 2, 3]
    assert open_fds() == base + 2  # the older segment being read
    assert offsets_in(_bytes(log.read(5, 1 << 20))) == [4, 5, 6, 7]
    assert open_fds() == base + 2  # still one reader: the previous one was released
    assert log.offset_for_timestamp(NOW) == (0, NOW)
    assert open_fds() == base + 2
    log.flush()
    assert open_fds() == base + 1
    # retention renames segments; an in-flight read of one keeps working until it is done
    region = log.read(0, 1 << 20)
    expected = _bytes(region)
    clock.advance(8 * 24 * 3600 * 1000)
    assert log.delete_old_segments() == 5  # all: a new active segment is rolled
    assert open_fds() == base + 2  # the region's descriptor: still in use
    log.delete_pending_files(force=True)
    region.file.seek(region.position)
    assert region.file.read(region.size) == expected
    del region
    assert open_fds() == base + 1
    log.close()
    assert open_fds() == base


def _bytes(region) -> bytes:
    return os.pread(region.file.fileno(), region.size, region.position)


def test_log_manager_fd_budget_is_one_per_partition(tmp_path):
    mgr = LogManager(tmp_path, LogConfig(), ManualClock())
    mgr.load_all()
    base = fd_baseline()
    n = 500
    for p in range(n):
        log_append(mgr.get_or_create("fds", p))
    assert open_fds() - base <= n + 5
    for _, _, log in mgr.partitions():  # as flush.ms does
        mgr.log_flusher.flush(log).result()
    assert open_fds() - base <= n + 5
    mgr.close()
    assert open_fds() <= base + 5
    mgr = LogManager(tmp_path, LogConfig(), ManualClock())
    mgr.load_all()
    assert open_fds() - base <= n + 5
    assert all(log.log_end_offset == 2 for _, _, log in mgr.partitions())
    mgr.close()


# -- indexes: in memory, written at flush, close and every PENDING_ENTRIES ---------------------


def test_index_writes_pending_entries_in_batches(tmp_path, monkeypatch):
    monkeypatch.setattr(index_mod, "PENDING_ENTRIES", 3)
    p = tmp_path / "0.index"
    base = fd_baseline()
    idx = OffsetIndex(p, 0, 1024)
    assert open_fds() == base and p.exists()
    for i in range(1, 6):
        idx.append(i, i * 10)
    assert p.stat().st_size == 3 * 8 and idx.pending == 2
    idx.flush()
    assert p.read_bytes() == struct.pack(
        ">" + "ii" * 5, *[x for i in range(1, 6) for x in (i, i * 10)]
    )
    idx.truncate_to(3)  # below what is on disk: the file follows at once
    assert p.stat().st_size == 2 * 8 and idx.entries == 2
    idx.append(7, 70)
    idx.release()  # an entry is pending: kept
    assert idx.entries == 3
    idx.close()
    assert p.stat().st_size == 3 * 8
    idx.release()
    assert idx._keys is None and idx.entries == 3 and idx.lookup(8) == (7, 70)
    assert open_fds() == base


def test_index_torn_tail_is_overwritten(tmp_path):
    p = tmp_path / "0.timeindex"
    p.write_bytes(struct.pack(">qi", 100, 1) + b"\x00\x01\x02")
    ti = TimeIndex(p, 0, 1024)
    ti.maybe_append(200, 2)
    ti.flush()
    assert p.read_bytes() == struct.pack(">qiqi", 100, 1, 200, 2)


def test_flush_puts_whole_indexes_below_the_recovery_point(tmp_path):
    clock = ManualClock()
    one = len(batch())
    cfg = LogConfig(segment_bytes=one * 10, index_interval_bytes=1)
    log = PartitionLog.open(tmp_path / "t-0", cfg, clock)
    for _ in range(25):
        log_append(log)
    assert log.active_segment.offset_index.pending > 0  # nothing written yet
    rp = log.flush()
    assert rp == 50
    for seg in log.segments:
        assert seg.offset_index.path.stat().st_size == seg.offset_index.entries * 8 > 0
        assert seg.time_index.path.stat().st_size == seg.time_index.entries * 12
    # a crash: entries appended after the flush are lost with the process
    for _ in range(3):
        log_append(log)
    active = log.active_segment
    assert active.offset_index.pending > 0
    on_disk = active.offset_index.path.stat().st_size
    del log, active, seg
    gc.collect()
    log = PartitionLog.open(tmp_path / "t-0", cfg, clock, recovery_point=rp)
    assert log.log_end_offset == 56
    for off in range(56):
        assert offsets_in(_bytes(log.read(off, 1)))[-1] >= off
    log.flush()
    assert log.active_segment.offset_index.path.stat().st_size > on_disk  # rebuilt
    log.close()
    # a clean shutdown writes every entry: trusted on open, no scan
    sizes = {p.name: p.stat().st_size for p in (tmp_path / "t-0").glob("*index")}
    log = PartitionLog.open(tmp_path / "t-0", cfg, clock, clean_shutdown=True)
    assert {s.base_offset: s.offset_index.entries for s in log.segments} == {
        s.base_offset: sizes[s.offset_index.path.name] // 8 for s in log.segments
    }
    assert log.log_end_offset == 56
    log.close()


def test_flushes_in_threads_while_appending(tmp_path, monkeypatch):
    """The checkpoint loop and the flush policy may flush a log at once, in two threads,
    while the loop appends, rolls and reads: every entry ends up in the index files once."""
    import threading

    monkeypatch.setattr(index_mod, "PENDING_ENTRIES", 7)
    clock = ManualClock()
    one = len(batch())
    cfg = LogConfig(segment_bytes=one * 40, index_interval_bytes=1)
    log = PartitionLog.open(tmp_path / "t-0", cfg, clock)
    stop = threading.Event()
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            while not stop.is_set():
                log.flush()
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=flusher) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for i in range(300):
            log_append(log)
            if i % 10 == 0:
                assert offsets_in(_bytes(log.read(i, 1)))[-1] >= i
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    log.close()
    log = PartitionLog.open(tmp_path / "t-0", cfg, clock, clean_shutdown=True)
    for seg in log.segments:
        assert seg.offset_index.entries == seg.offset_index.path.stat().st_size // 8
        assert seg.offset_index.entries >= (seg.next_offset - seg.base_offset) // 2 - 1
    for off in range(0, 600, 7):
        assert offsets_in(_bytes(log.read(off, 1)))[-1] >= off
    log.close()
