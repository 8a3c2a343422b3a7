"""The log cleaner (pybroker/log/cleaner.py) on temp-dir logs with an injected clock."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pybroker.clock import ManualClock
from pybroker.errors import ErrorCode, KafkaError
from pybroker.log.checkpoints import read_checkpoint
from pybroker.log.cleaner import (
    CLEANER_OFFSET_CHECKPOINT,
    CleanerConfig,
    LogCleaner,
    OffsetMap,
)
from pybroker.log.compacted_records import DELETE_HORIZON_MASK
from pybroker.log.manager import LogManager
from pybroker.log.partition_log import LogConfig, PartitionLog
from pybroker.wire.record_walker import decode_records
from pybroker.wire.records import COMPRESSION_GZIP, build_batch, parse_batches, scan_batches

DAY = 86_400_000
COMPACT = LogConfig(
    segment_bytes=2048,
    cleanup_policy="compact",
    min_cleanable_dirty_ratio=0.01,
    index_interval_bytes=100,
)


class SimulatedCrash(BaseException):
    """A kill -9 at a step of the clean: nothing after it runs, no cleanup."""


@pytest.fixture
def clock():
    return ManualClock(1_700_000_000_000)


def make(tmp_path: Path, clock, config: LogConfig = COMPACT, **cleaner_kw):
    mgr = LogManager(tmp_path, config, clock)
    mgr.load_all()
    plog = mgr.get_or_create("t", 0, config)
    cleaner = LogCleaner(mgr, CleanerConfig(**cleaner_kw), clock)
    return mgr, plog, cleaner


def append(plog: PartitionLog, records, *, allow_control: bool = False, **kw) -> int:
    """Append one batch of (key, value) records; the high watermark follows (one replica)."""
    kw.setdefault("timestamp", plog.clock.time_ms())
    buf = bytearray(build_batch([(k, v, []) for k, v in records], **kw))
    info = plog.append(buf, parse_batches(buf, allow_control=allow_control))
    plog.high_watermark = plog.log_end_offset
    return info.first_offset


def write_keys(plog, items, per_batch: int = 1, **kw) -> None:
    for i in range(0, len(items), per_batch):
        append(plog, items[i : i + per_batch], **kw)


def read_log(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record a consumer from the log start sees."""
    out = []
    off = plog.log_start_offset
    while off < plog.log_end_offset:
        s = plog.read(off, 1 << 20)
        if s is None:
            break
        data = os.pread(s.file.fileno(), s.size, s.position)
        last = off
        for h in scan_batches(data):
            batch = bytes(data[h.position : h.position + h.size])
            out.extend((r.offset, r.key, r.value) for r in decode_records(batch) if r.offset >= off)
            last = h.next_offset
        assert last > off
        off = last
    return out


def latest_per_key(items_in_order: list[tuple[int, bytes, bytes | None]]):
    latest = {}
    for off, k, v in items_in_order:
        latest[k] = (off, k, v)
    return sorted(latest.values())


def clean_until_done(cleaner: LogCleaner, offset_map=None, limit: int = 50) -> list:
    done = []
    for _ in range(limit):
        st = cleaner.clean_filthiest(offset_map)
        if st is None:
            return done
        done.append(st)
    raise AssertionError("cleaner never ran out of work")


def test_latest_value_per_key_with_gaps(tmp_path, clock):
    _, plog, cleaner = make(tmp_path, clock)
    items = [(b"k%d" % (i % 7), b"v%d" % i) for i in range(200)]
    write_keys(plog, items, per_batch=3)
    plog.roll()
    before = read_log(plog)
    stats = clean_until_done(cleaner)
    assert stats and stats[0].records_removed > 0
    after = read_log(plog)
    assert after == latest_per_key(before)
    offsets = [o for o, _, _ in after]
    assert plog.log_start_offset == 0 and offsets[0] == 193  # a gap from the log start
    assert plog.log_end_offset == 200  # offsets never change
    # reads at any offset, also inside a gap, land on the next record
    for target in range(0, 200, 13):
        s = plog.read(target, 1 << 20)
        assert s is not None
    # the offset index and the time index still answer
    assert plog.offset_for_timestamp(0)[0] == offsets[0]


def test_tombstones_removed_only_after_delete_retention(tmp_path, clock):
    cfg = LogConfig(**{**COMPACT.__dict__, "delete_retention_ms": DAY})
    _, plog, cleaner = make(tmp_path, clock, cfg)
    write_keys(plog, [(b"a", b"1"), (b"b", b"1"), (b"a", None), (b"c", b"1")])
    plog.roll()
    clean_until_done(cleaner)
    got = read_log(plog)
    assert got == [(1, b"b", b"1"), (2, b"a", None), (3, b"c", b"1")]
    # the tombstone's batch now carries its delete horizon (KIP-534)
    s = plog.read(2, 1 << 20)
    (h,) = [
        h for h in scan_batches(os.pread(s.file.fileno(), s.size, s.position)) if h.base_offset == 2
    ]
    assert h.attributes & DELETE_HORIZON_MASK and h.base_timestamp == clock.time_ms() + DAY
    clock.advance(DAY - 1)
    write_keys(plog, [(b"d", b"1")])
    plog.roll()
    clean_until_done(cleaner)
    assert (2, b"a", None) in read_log(plog)  # not yet
    clock.advance(2)
    clean_until_done(cleaner)  # nothing dirty: the expired horizon alone triggers a clean
    assert [k for _, k, _ in read_log(plog)] == [b"b", b"c", b"d"]


def test_min_compaction_lag(tmp_path, clock):
    cfg = LogConfig(**{**COMPACT.__dict__, "min_compaction_lag_ms": 60_000})
    _, plog, cleaner = make(tmp_path, clock, cfg)
    write_keys(plog, [(b"a", b"1"), (b"a", b"2"), (b"a", b"3")])
    plog.roll()
    assert cleaner.clean_filthiest() is None  # too young
    assert len(read_log(plog)) == 3
    clock.advance(60_001)
    assert cleaner.clean_filthiest() is not None
    assert read_log(plog) == [(2, b"a", b"3")]


def test_max_compaction_lag_forces_a_clean(tmp_path, clock):
    cfg = LogConfig(
        **{**COMPACT.__dict__, "min_cleanable_dirty_ratio": 1.0, "max_compaction_lag_ms": 60_000}
    )
    _, plog, cleaner = make(tmp_path, clock, cfg)
    write_keys(plog, [(b"a", b"1"), (b"a", b"2")])
    plog.roll()
    assert cleaner.clean_filthiest() is None  # the ratio never exceeds 1.0
    clock.advance(60_001)
    assert cleaner.clean_filthiest() is not None
    assert read_log(plog) == [(1, b"a", b"2")]


def test_max_compaction_lag_rolls_the_active_segment(tmp_path, clock):
    cfg = LogConfig(**{**COMPACT.__dict__, "max_compaction_lag_ms": 1000})
    _, plog, _ = make(tmp_path, clock, cfg)
    append(plog, [(b"a", b"1")])
    clock.advance(1001)
    append(plog, [(b"a", b"2")])
    assert len(plog.segments) == 2


def test_dedupe_buffer_smaller_than_the_key_set(tmp_path, clock):
    _, plog, cleaner = make(tmp_path, clock)
    items = [(b"key-%03d" % (i % 40), b"v%d" % i) for i in range(400)]
    write_keys(plog, items, per_batch=4)
    plog.roll()
    before = read_log(plog)
    small = OffsetMap(15)  # fewer slots than keys: several passes
    stats = clean_until_done(cleaner, small)
    assert len(stats) > 1 and stats[0].map_full
    assert read_log(plog) == latest_per_key(before)


def test_map_capacity_from_the_dedupe_buffer():
    cfg = CleanerConfig(threads=2, dedupe_buffer_size=128 * 1000)
    assert cfg.map_capacity == 388  # 432 entries of 148 bytes a thread at load factor 0.9


@pytest.mark.parametrize("key", [b"key-%d", b"a key of 16 bytes or more: hashed %d"])
def test_a_full_offset_map_stays_within_the_dedupe_buffer(key):
    """log.cleaner.dedupe.buffer.size bounds the memory of the map, as in Kafka: a map
    filled to its capacity, with pass 2's sorted list of its values, takes no more than the
    buffer (here 4 MiB, one thread; large offsets, the keys themselves or their MD5)."""
    import tracemalloc

    from pybroker.log.cleaner_job import LiveRecords

    cfg = CleanerConfig(threads=1, dedupe_buffer_size=4 * 1024 * 1024)
    m = OffsetMap(cfg.map_capacity)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(cfg.map_capacity + 10):
            m.put(key % i, 10**12 + i, i * 1000 % 2**20)
        live = LiveRecords(sorted(m.entries.values()))
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(m) == cfg.map_capacity and len(live.values) == len(m)
    assert used <= cfg.dedupe_buffer_size, used


def test_committed_transactions_are_compacted_and_their_marker_kept(tmp_path, clock):
    """Kafka's rules (the transactions work replaced the hook that copied transactional and
    control batches untouched): a committed transactional record supersedes older values of
    its key, and its COMMIT marker stays while data of the transaction remains."""
    _, plog, cleaner = make(tmp_path, clock)
    append(plog, [(b"a", b"1")])
    append(
        plog,
        [(b"a", b"txn")],
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    plog.append_txn_marker(7, 0, 0, True)
    plog.high_watermark = plog.log_end_offset
    append(plog, [(b"b", b"1")])
    append(plog, [(b"b", b"2")])
    plog.roll()
    raw_before = _raw_batches(plog)
    clean_until_done(cleaner)
    after = read_log(plog)
    assert [(o, k) for o, k, _ in after] == [
        (1, b"a"),
        (2, b"\x00\x00\x00\x01"),  # the COMMIT control record's key
        (4, b"b"),
    ]
    raw_after = _raw_batches(plog)
    assert raw_after[1] == raw_before[1] and raw_after[2] == raw_before[2]  # byte for byte


def _raw_batches(plog) -> dict[int, bytes]:
    out = {}
    for seg in plog.segments:
        data = open(seg.log_path, "rb").read()
        for h in scan_batches(data):
            out[h.base_offset] = bytes(data[h.position : h.position + h.size])
    return out


def test_idempotent_producer_continues_after_a_clean(tmp_path, clock):
    mgr, plog, cleaner = make(tmp_path, clock)
    pid = 1000
    append(plog, [(b"a", b"1")], producer_id=pid, producer_epoch=0, base_sequence=0)
    append(plog, [(b"a", b"2"), (b"b", b"1")], producer_id=pid, producer_epoch=0, base_sequence=1)
    append(plog, [(b"a", b"3"), (b"b", b"2")])  # supersedes every record of the producer
    plog.roll()
    clean_until_done(cleaner)
    assert [(o, k, v) for o, k, v in read_log(plog)] == [(3, b"a", b"3"), (4, b"b", b"2")]
    raw = _raw_batches(plog)
    assert 0 not in raw  # an earlier batch of the producer goes
    kept = parse_batches(raw[1], allow_control=True)[0]  # its last batch stays, empty
    assert (kept.records_count, kept.last_offset, kept.producer_id) == (0, 2, pid)
    assert kept.last_sequence == 2
    # a restart that rebuilds the producer state from the log (no snapshot) still knows it
    mgr.close()
    for f in tmp_path.glob("t-0/*.snapshot"):
        f.unlink()
    mgr2 = LogManager(tmp_path, COMPACT, clock)
    mgr2.load_all()
    plog2 = mgr2.get("t", 0)
    assert read_log(plog2) == [(3, b"a", b"3"), (4, b"b", b"2")]
    # the retry of the last batch is a duplicate, the next sequence is accepted
    dup = bytearray(
        build_batch(
            [(b"a", b"2", []), (b"b", b"1", [])], producer_id=pid, producer_epoch=0, base_sequence=1
        )
    )
    assert plog2.append(dup, parse_batches(dup)).duplicate
    nxt = bytearray(
        build_batch([(b"c", b"1", [])], producer_id=pid, producer_epoch=0, base_sequence=3)
    )
    assert plog2.append(nxt, parse_batches(nxt)).first_offset == 5
    gap = bytearray(
        build_batch([(b"c", b"1", [])], producer_id=pid, producer_epoch=0, base_sequence=9)
    )
    with pytest.raises(KafkaError) as e:
        plog2.append(gap, parse_batches(gap))
    assert e.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_small_cleaned_segments_are_grouped(tmp_path, clock):
    cfg = LogConfig(**{**COMPACT.__dict__, "segment_bytes": 700})
    _, plog, cleaner = make(tmp_path, clock, cfg)
    write_keys(plog, [(b"k%d" % (i % 3), b"x" * 40) for i in range(120)])
    plog.roll()
    n_before = len(plog.segments)
    clean_until_done(cleaner)
    # groups are sized by what the segments held before (Kafka's groupSegmentsBySize), so
    # the small cleaned segments come together at the next clean
    write_keys(plog, [(b"k%d" % (i % 3), b"y" * 40) for i in range(20)])
    plog.roll()
    before = read_log(plog)
    clean_until_done(cleaner)
    assert len(plog.segments) < n_before // 2
    assert read_log(plog) == latest_per_key(before)


def test_codec_kept(tmp_path, clock):
    _, plog, cleaner = make(tmp_path, clock)
    append(plog, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2")], compression=COMPRESSION_GZIP)
    append(plog, [(b"c", b"1")])
    plog.roll()
    clean_until_done(cleaner)
    raw = _raw_batches(plog)
    h = parse_batches(raw[0], allow_control=True)[0]
    assert h.compression == COMPRESSION_GZIP and h.records_count == 2 and h.last_offset == 2
    assert read_log(plog) == [(1, b"b", b"1"), (2, b"a", b"2"), (3, b"c", b"1")]


def test_keyless_records_are_dropped(tmp_path, clock):
    _, plog, cleaner = make(tmp_path, clock)
    write_keys(plog, [(None, b"x"), (b"a", b"1"), (b"a", b"2")])
    plog.roll()
    clean_until_done(cleaner)
    assert read_log(plog) == [(2, b"a", b"2")]


def test_retention_exemption(tmp_path, clock):
    old = clock.time_ms() - 10 * DAY
    for policy, survives in (("compact", True), ("compact,delete", False)):
        cfg = LogConfig(**{**COMPACT.__dict__, "cleanup_policy": policy, "retention_ms": DAY})
        mgr, plog, _ = make(tmp_path / policy, clock, cfg)
        write_keys(plog, [(b"a", b"1"), (b"b", b"1")], timestamp=old)
        plog.roll()
        mgr.run_retention()
        assert (len(read_log(plog)) == 2) is survives


def test_checkpoint_file_in_kafka_format(tmp_path, clock):
    _, plog, cleaner = make(tmp_path, clock)
    write_keys(plog, [(b"a", b"1"), (b"a", b"2")])
    plog.roll()
    clean_until_done(cleaner)
    text = (tmp_path / CLEANER_OFFSET_CHECKPOINT).read_text()
    assert text == "0\n1\nt 0 2\n"
    assert read_checkpoint(tmp_path / CLEANER_OFFSET_CHECKPOINT) == {("t", 0): 2}
    # a new cleaner (restart) starts from there: nothing is dirty
    mgr2 = LogManager(tmp_path, COMPACT, clock)
    c2 = LogCleaner(mgr2, CleanerConfig(), clock)
    assert c2.checkpoints == {("t", 0): 2}


def test_truncation_pulls_the_checkpoint_back(tmp_path, clock):
    _, plog, cleaner = make(tmp_path, clock)
    write_keys(plog, [(b"a", b"1"), (b"a", b"2")])
    plog.roll()
    write_keys(plog, [(b"b", b"1")])
    plog.roll()
    clean_until_done(cleaner)
    assert cleaner.checkpoints[("t", 0)] == 3
    plog.truncate_to(2)
    write_keys(plog, [(b"a", b"3")])
    plog.roll()
    c = cleaner.cleanable(plog, clock.time_ms())
    assert c.first_dirty == 2


# ------------------------------------------------------------------- crash at every step


def _crash_scenario(tmp_path: Path, clock):
    cfg = LogConfig(**{**COMPACT.__dict__, "segment_bytes": 900})
    mgr, plog, cleaner = make(tmp_path, clock, cfg)
    items = [(b"k%d" % (i % 5), b"v%03d" % i) for i in range(60)]
    write_keys(plog, items, per_batch=2)
    plog.roll()
    clean_until_done(cleaner)  # small cleaned segments: the next clean groups them
    write_keys(plog, [(b"k%d" % (i % 7), b"w%03d" % i) for i in range(30)], per_batch=3)
    plog.roll()
    append(plog, [(b"tail", b"1")])
    mgr.log_flusher.flush(plog).result()  # (as flush.ms would: recovery point at the end)
    mgr.checkpoint()
    return mgr, plog, cleaner, cfg


def _steps(tmp_path, clock) -> list[str]:
    _, _, cleaner, _ = _crash_scenario(tmp_path, clock)
    seen: list[str] = []
    cleaner.crash_hook = seen.append
    clean_until_done(cleaner)
    return seen


def test_crash_steps_are_many(tmp_path, clock):
    steps = _steps(tmp_path, clock)
    assert "cleaned written" in steps and "swapped" in steps and "checkpointed" in steps
    assert any(s.startswith("renamed to") and s.endswith(".swap") for s in steps)
    assert any(s.endswith(".deleted") for s in steps)
    # a group of several segments: several old segments renamed before one swap completes
    assert "renamed 00000000000000000020.log.deleted" in steps


@pytest.mark.parametrize("trusted", [False, True])
def test_crash_between_every_step(tmp_path, clock, trusted):
    steps = _steps(tmp_path / "dry", clock)
    for n, step in enumerate(steps):
        d = tmp_path / f"crash{n}"
        mgr, plog, cleaner, cfg = _crash_scenario(d, clock)
        before = read_log(plog)
        expected = latest_per_key([r for r in before if r[1] != b"tail"]) + [before[-1]]
        count = 0

        def crash(name, n=n):
            nonlocal count
            if count == n:
                raise SimulatedCrash(name)
            count += 1

        cleaner.crash_hook = crash
        with pytest.raises(SimulatedCrash):
            clean_until_done(cleaner)
        del plog, mgr  # kill -9: nothing flushed or closed
        points = {("t", 0): 10**9 if trusted else 0}
        (d / "recovery-point-offset-checkpoint").write_text(
            "0\n1\n" + "".join(f"t 0 {v}\n" for v in points.values())
        )
        mgr2 = LogManager(d, cfg, clock)
        mgr2.load_all()
        plog2 = mgr2.get("t", 0)
        got = read_log(plog2)
        # nothing the clean would keep is lost, nothing is duplicated, offsets ascend
        offsets = [o for o, _, _ in got]
        assert offsets == sorted(set(offsets)), step
        assert set(expected) <= set(got), step
        assert set(got) <= set(before), step
        assert not [p for p in os.listdir(d / "t-0") if p.endswith((".cleaned", ".swap"))]
        # and a clean after the restart finishes the job
        c2 = LogCleaner(mgr2, CleanerConfig(), clock)
        clean_until_done(c2)
        assert read_log(plog2) == expected, step


def test_follower_replicates_a_compacted_leader(tmp_path, clock):
    _, leader, cleaner = make(tmp_path / "leader", clock)
    pid = 55
    append(leader, [(b"a", b"1")], producer_id=pid, producer_epoch=0, base_sequence=0)
    write_keys(leader, [(b"k%d" % (i % 4), b"v%d" % i) for i in range(40)], per_batch=3)
    write_keys(leader, [(b"a", b"2")])  # the producer's only batch empties
    leader.roll()
    clean_until_done(cleaner)
    assert _raw_batches(leader)[0][-4:] == b"\x00\x00\x00\x00"  # records count 0
    write_keys(leader, [(b"k1", b"new")])
    # a new replica fetches everything from offset 0 (as the replica fetcher does)
    fmgr, follower, fcleaner = make(tmp_path / "follower", clock)
    while follower.log_end_offset < leader.log_end_offset:
        s = leader.read(follower.log_end_offset, 1 << 20)
        buf = bytearray(os.pread(s.file.fileno(), s.size, s.position))
        follower.append_as_follower(buf, parse_batches(buf, allow_control=True))
    follower.high_watermark = follower.log_end_offset
    assert follower.log_end_offset == leader.log_end_offset
    assert read_log(follower) == read_log(leader)
    assert follower.producer_state.last_entry(pid).last_seq == 0  # the kept empty batch
    # both compact on their own and end with the same offsets and key -> value map
    write_keys(leader, [(b"k2", b"x")])
    s = leader.read(follower.log_end_offset, 1 << 20)
    buf = bytearray(os.pread(s.file.fileno(), s.size, s.position))
    follower.append_as_follower(buf, parse_batches(buf, allow_control=True))
    for plog, c in ((leader, cleaner), (follower, fcleaner)):
        plog.high_watermark = plog.log_end_offset
        plog.roll()
        clean_until_done(c)
    assert read_log(follower) == read_log(leader)


def test_timestamps_and_epochs_across_gaps(tmp_path, clock):
    _, plog, cleaner = make(tmp_path, clock)
    t0 = clock.time_ms()
    for i in range(12):  # offset i has timestamp t0 + i; epoch 0 for 0-5, 1 for 6-11
        append(
            plog, [(b"k%d" % (i % 3), b"v%d" % i)], timestamp=t0 + i, partition_leader_epoch=i // 6
        )
    plog.roll()
    plog.leader_epochs.assign(2, plog.log_end_offset)
    clean_until_done(cleaner)
    assert [o for o, _, _ in read_log(plog)] == [9, 10, 11]
    # ListOffsets by timestamp: the first kept record at or after it
    assert plog.offset_for_timestamp(t0 + 3) == (9, t0 + 9)
    assert plog.offset_for_timestamp(t0 + 10) == (10, t0 + 10)
    assert plog.offset_for_timestamp(t0 + 12) is None
    # OffsetForLeaderEpoch: the epoch cache is untouched by the clean
    assert plog.end_offset_for_epoch(0) == (0, 6)
    assert plog.end_offset_for_epoch(1) == (1, 12)


def test_stale_cleaned_file_does_not_undo_a_complete_swap(tmp_path, clock):
    """A crash after the old segments were renamed .deleted, with a stale .cleaned of
    another base offset lying around: recovery completes the swap (nothing lost)."""
    mgr, plog, cleaner, cfg = _crash_scenario(tmp_path, clock)
    before = read_log(plog)
    expected = latest_per_key([r for r in before if r[1] != b"tail"]) + [before[-1]]

    def crash(name):
        if name == "renamed 00000000000000000060.log.deleted":
            raise SimulatedCrash(name)

    cleaner.crash_hook = crash
    with pytest.raises(SimulatedCrash):
        clean_until_done(cleaner)
    del plog, mgr
    (tmp_path / "t-0" / "00000000000000000000.log.cleaned").write_bytes(b"stale")
    mgr2 = LogManager(tmp_path, cfg, clock)
    mgr2.load_all()
    got = read_log(mgr2.get("t", 0))
    assert set(expected) <= set(got)
    assert [o for o, _, _ in got] == sorted({o for o, _, _ in got})


# -- the cleaner process (the broker's mode) -----------------------------------------------


def test_a_clean_in_the_cleaner_process_equals_one_in_the_thread(tmp_path, clock):
    """The broker hands the work on files to a spawned process (CleanerConfig.use_process),
    so the event loop never waits for the GIL on it: same result, byte for byte."""
    from pybroker.log.cleaner_process import CleanerProcess

    logs = {}
    for mode in ("thread", "process"):
        _, plog, cleaner = make(tmp_path / mode, clock)
        items = [(b"k%d" % (i % 11), None if i % 17 == 0 else b"v%d" % i) for i in range(300)]
        write_keys(plog, items, per_batch=4, compression=COMPRESSION_GZIP)
        plog.roll()
        before = read_log(plog)
        process = CleanerProcess("test-cleaner") if mode == "process" else None
        try:
            for _ in range(20):
                if cleaner.clean_filthiest(None, process) is None:
                    break
        finally:
            if process is not None:
                process.close()
        after = read_log(plog)
        assert after == [r for r in latest_per_key(before)], mode
        logs[mode] = b"".join(
            p.read_bytes() for p in sorted((tmp_path / mode / "t-0").glob("*.log"))
        )
    assert logs["thread"] == logs["process"]


def test_stopping_the_cleaner_ends_a_clean_in_its_process(tmp_path, clock):
    """stop() during a clean in the process: the process is killed, nothing is swapped, the
    log reads as before, and a later clean (a new process) completes."""
    import threading

    from pybroker.log.cleaner_process import CleanerProcess

    config = LogConfig(
        segment_bytes=64 * 1024, cleanup_policy="compact", min_cleanable_dirty_ratio=0.01
    )
    _, plog, cleaner = make(tmp_path, clock, config=config)
    items = [(b"k%d" % (i % 50), b"x" * 200) for i in range(20_000)]
    write_keys(plog, items, per_batch=10)
    plog.roll()
    before = read_log(plog)
    process = CleanerProcess("test-cleaner")
    started = threading.Event()
    real_run = process.run

    def run(job, stopping):  # noqa: ANN001, ANN202
        started.set()
        return real_run(job, stopping)

    process.run = run
    stopper = threading.Thread(target=lambda: (started.wait(30), cleaner._stop.set()))
    stopper.start()
    try:
        assert cleaner.clean_filthiest(None, process) is None  # abandoned
    finally:
        stopper.join()
        process.close()
    assert read_log(plog) == before
    assert not list((tmp_path / "t-0").glob("*.swap"))
    cleaner._stop.clear()
    process = CleanerProcess("test-cleaner")
    try:
        while cleaner.clean_filthiest(None, process) is not None:
            pass
    finally:
        process.close()
    assert read_log(plog) == latest_per_key(before)


def test_filtering_from_the_map_equals_filtering_record_by_record(tmp_path, clock, monkeypatch):
    """Pass 2 filters a batch whose every record was mapped from the map's values (reading
    only the records it keeps); any batch can also be filtered record by record.  Both give
    the same log, byte for byte, through tombstones and their horizons, keyless records,
    aborted and committed transactions, an idempotent producer's last batch, codecs, a map
    smaller than the key set (several passes) and cleans of already cleaned segments."""
    from pybroker.log import cleaner_job

    cfg = LogConfig(**{**COMPACT.__dict__, "delete_retention_ms": DAY})
    logs = {}
    for mode in ("from the map", "record by record"):
        if mode == "record by record":
            monkeypatch.setattr(cleaner_job, "LiveRecords", lambda values: None)
        _, plog, cleaner = make(tmp_path / mode.replace(" ", "-"), clock, cfg)
        for round_ in range(3):
            for i in range(60):
                key = b"k%d" % (i * 7 % 23) if i % 9 else None
                value = None if i % 11 == 0 else b"v%d-%d" % (round_, i) * (1 + i % 40)
                codec = COMPRESSION_GZIP if i % 4 == 0 else 0
                append(plog, [(key or b"n", value), (key, b"x")][: 1 + i % 2], compression=codec)
            pid = 100 + round_
            for k in range(2):  # a transaction of ``pid``: aborted in round 1, else committed
                append(
                    plog,
                    [(b"k%d" % k, b"txn%d" % round_)],
                    producer_id=pid,
                    producer_epoch=0,
                    base_sequence=k,
                    is_transactional=True,
                )
            plog.append_txn_marker(pid, 0, 0, round_ != 1)
            plog.high_watermark = plog.log_end_offset
            append(
                plog, [(b"k5", b"idem")], producer_id=900, producer_epoch=0, base_sequence=round_
            )
            plog.roll()
            clean_until_done(cleaner, OffsetMap(9))
            clock.advance(DAY // 2)
        clock.advance(-3 * (DAY // 2))
        logs[mode] = b"".join(
            p.read_bytes()
            for p in sorted((tmp_path / mode.replace(" ", "-") / "t-0").glob("*.log"))
        )
        assert read_log(plog)
    assert logs["from the map"] == logs["record by record"]
