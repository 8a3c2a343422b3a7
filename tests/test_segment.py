"""log/segment.py: append, index interval, read, recover, truncate."""

from __future__ import annotations

import os

from pybroker.log.segment import LogSegment
from pybroker.wire.record_walker import decode_records
from pybroker.wire.records import build_batch, parse_batches, set_base_offset

NOW = 1_700_000_000_000


def _append(seg: LogSegment, n_records: int, ts: int = NOW, value: bytes = b"v" * 100):
    buf = bytearray(build_batch([(None, value, [])] * n_records, timestamp=ts))
    hs = parse_batches(buf)
    first = seg.next_offset
    set_base_offset(buf, 0, first)
    seg.append(memoryview(buf), hs, first, NOW)
    return first, len(buf)


def _slice_bytes(s) -> bytes:
    return os.pread(s.file.fileno(), s.size, s.position)


def test_append_indexes_every_interval_and_read(tmp_path):
    seg = LogSegment(tmp_path, 0, index_interval_bytes=300)
    sizes = []
    for i in range(10):
        _, size = _append(seg, 2, ts=NOW + i)
        sizes.append(size)
    assert seg.next_offset == 20 and seg.size == sum(sizes)
    # an entry once more than 300 bytes were appended since the last one
    assert seg.offset_index.entries >= 3
    assert seg.max_timestamp == NOW + 9 and seg.offset_of_max_timestamp == 19
    for off in range(20):
        h = seg.translate_offset(off)
        assert h.base_offset <= off <= h.last_offset
    s = seg.read(7, 1)
    recs = decode_records(_slice_bytes(s))
    assert s.size == sizes[0] and [r.offset for r in recs] == [6, 7]
    s = seg.read(7, sizes[0] * 3 + 5)
    assert s.size == sizes[0] * 3
    assert seg.read(7, 1, min_one_batch=False) is None
    s = seg.read(0, 10**6, max_offset=4)
    assert s.size == sizes[0] * 2
    assert seg.read(4, 10**6, max_offset=4) is None
    assert seg.find_offset_by_timestamp(NOW + 3, 0) == (6, NOW + 3)
    seg.close()


def test_recover_rebuilds_indexes_and_truncates(tmp_path):
    seg = LogSegment(tmp_path, 0, index_interval_bytes=200)
    for _ in range(8):
        _append(seg, 3)
    good_size, entries = seg.size, seg.offset_index.entries
    with open(seg.log_path, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x18\x00\x00\x01\x00garbage")
    seg.close()
    seg = LogSegment(tmp_path, 0, index_interval_bytes=200)
    assert seg.recover(NOW) == 19
    assert seg.size == good_size and seg.next_offset == 24
    assert seg.offset_index.entries == entries
    seg.close()


def test_recover_handles_batches_larger_than_the_chunk(tmp_path, monkeypatch):
    import pybroker.log.segment as segmod

    monkeypatch.setattr(segmod, "RECOVERY_CHUNK", 100)
    seg = LogSegment(tmp_path, 0)
    for _ in range(3):
        _append(seg, 5)
    size = seg.size
    seg.close()
    seg = LogSegment(tmp_path, 0)
    assert seg.recover(NOW) == 0 and seg.size == size and seg.next_offset == 15
    seg.close()


def test_truncate_to(tmp_path):
    seg = LogSegment(tmp_path, 0, index_interval_bytes=100)
    ends = []
    for _ in range(6):
        _append(seg, 2)
        ends.append(seg.size)
    seg.truncate_to(6)
    assert seg.size == ends[2] and seg.next_offset == 6
    assert seg.offset_index.last_offset < 6
    _append(seg, 2)
    assert seg.next_offset == 8
    seg.close()


def test_load_trusted_reads_only_tail(tmp_path):
    seg = LogSegment(tmp_path, 0, index_interval_bytes=100)
    for i in range(6):
        _append(seg, 2, ts=NOW + i)
    seg.close()
    seg = LogSegment(tmp_path, 0, index_interval_bytes=100)
    seg.load(NOW)
    assert seg.next_offset == 12 and seg.max_timestamp == NOW + 5
    assert seg.offset_of_max_timestamp == 11
    seg.close()


def test_a_write_cut_short_by_a_full_disk_leaves_no_torn_batch(tmp_path, monkeypatch):
    """ENOSPC: the kernel writes part of the data, then the next write fails.  The append
    raises the OSError (the caller takes the log dir offline) and the .log is cut back to
    its last whole batch; once there is space again the segment appends as before."""
    import errno

    import pytest

    seg = LogSegment(tmp_path, 0)
    _append(seg, 2)
    good_size, good_next = seg.size, seg.next_offset
    real_write = os.write
    calls = []

    def short_then_enospc(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", short_then_enospc)
    with pytest.raises(OSError) as e:
        _append(seg, 3)
    assert e.value.errno == errno.ENOSPC and len(calls) == 2
    monkeypatch.setattr(os, "write", real_write)
    assert os.path.getsize(seg.log_path) == good_size
    assert (seg.size, seg.next_offset) == (good_size, good_next)
    first, size = _append(seg, 1)
    assert first == good_next
    seg.close()
    seg = LogSegment(tmp_path, 0)
    assert seg.recover(NOW) == 0  # nothing torn to cut at the next start either
    assert (seg.size, seg.next_offset) == (good_size + size, 3)
    recs = decode_records(_slice_bytes(seg.read(2, 10**6)))
    assert [(r.offset, r.value) for r in recs] == [(2, b"v" * 100)]
