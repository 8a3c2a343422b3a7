"""log/partition_log.py: offsets, reads, roll, retention, recovery."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from pybroker.clock import ManualClock
from pybroker.errors import ErrorCode, KafkaError
from pybroker.log.partition_log import LogConfig, PartitionLog
from pybroker.log.segment import LogSegment
from pybroker.wire.record_walker import decode_records
from pybroker.wire.records import COMPRESSION_GZIP, COMPRESSION_ZSTD, build_batch, parse_batches


def batch(n=3, ts=None, value=b"v" * 100, clock=None, **kw) -> bytearray:
    ts = ts if ts is not None else (clock.now_ms if clock else 1_700_000_000_000)
    return bytearray(build_batch([(None, value, [])] * n, timestamp=ts, **kw))


def append(log: PartitionLog, buf: bytearray):
    """A leader append on a broker that is the only replica: the high watermark follows."""
    info = log.append(buf, parse_batches(buf))
    log.high_watermark = log.log_end_offset
    return info


def slice_bytes(s) -> bytes:
    return os.pread(s.file.fileno(), s.size, s.position)


def batch_bases(s) -> list[int]:
    return [h.base_offset for h in parse_batches(slice_bytes(s))]


def all_offsets(log: PartitionLog) -> list[int]:
    out, off = [], log.log_start_offset
    while off < log.log_end_offset:
        s = log.read(off, 1 << 20)
        recs = [
            r
            for h in parse_batches(slice_bytes(s))
            for r in decode_records(slice_bytes(s)[h.position : h.position + h.size])
        ]
        out += [r.offset for r in recs if r.offset >= off]
        off = recs[-1].offset + 1
    return out


@pytest.fixture
def clock():
    return ManualClock()


def open_log(path: Path, clock, **cfg) -> PartitionLog:
    return PartitionLog.open(path / "topic-0", LogConfig(**cfg), clock)


def test_append_assigns_dense_offsets(tmp_path, clock):
    log = open_log(tmp_path, clock)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 0, 0)
    info = append(log, batch(3))
    assert (info.first_offset, info.last_offset, info.log_append_time, info.log_start_offset) == (
        0,
        2,
        -1,
        0,
    )
    buf = batch(2) + batch(4)
    info = append(log, buf)
    assert (info.first_offset, info.last_offset) == (3, 8)
    assert parse_batches(buf)[1].base_offset == 5  # patched in place
    assert log.log_end_offset == log.high_watermark == 9
    assert all_offsets(log) == list(range(9))
    assert (tmp_path / "topic-0" / "00000000000000000000.log").stat().st_size == len(buf) + len(
        batch(3)
    )
    log.close()


def test_read_bounds(tmp_path, clock):
    log = open_log(tmp_path, clock)
    sizes = []
    for _ in range(4):
        b = batch(3)
        sizes.append(len(b))
        append(log, b)
    assert log.read(12, 100) is None
    for bad in (-1, 13):
        with pytest.raises(KafkaError) as ei:
            log.read(bad, 100)
        assert ei.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    s = log.read(4, 10)  # max_bytes smaller than the batch: one whole batch
    assert (s.size, [r.offset for r in decode_records(slice_bytes(s))]) == (sizes[1], [3, 4, 5])
    assert log.read(4, 10, min_one_batch=False) is None
    s = log.read(4, sizes[1] * 2 + 10)
    assert s.size == sizes[1] * 2
    s = log.read(0, 1 << 20, max_offset=6)
    assert s.size == sizes[0] * 2
    assert log.read(6, 1 << 20, max_offset=6) is None
    log.high_watermark = 9  # a separate, settable attribute
    assert log.high_watermark == 9 and log.log_end_offset == 12
    log.close()


def test_roll_by_size(tmp_path, clock):
    one = len(batch(3))
    log = open_log(tmp_path, clock, segment_bytes=one * 3)
    for _ in range(7):
        append(log, batch(3))
    assert [s.base_offset for s in log.segments] == [0, 9, 18]
    names = sorted(p.name for p in (tmp_path / "topic-0").iterdir())
    assert "00000000000000000009.log" in names and "00000000000000000009.index" in names
    assert "00000000000000000009.timeindex" in names and "00000000000000000009.snapshot" in names
    assert all_offsets(log) == list(range(21))
    s = log.read(8, 1 << 20)  # one segment per read
    assert s.size == one
    with pytest.raises(KafkaError):
        append(log, batch(3 * 4 + 1))  # bigger than a segment
    log.close()


def test_reads_capped_inside_an_earlier_segment(tmp_path, clock):
    """A high watermark behind a rolled segment's end caps reads from that segment too, also
    after the log is reopened (its earlier segments loaded from disk)."""
    one = len(batch(3))
    log = open_log(tmp_path, clock, segment_bytes=one * 3)
    for _ in range(7):
        append(log, batch(3))
    assert [s.base_offset for s in log.segments] == [0, 9, 18]
    for reopen in (False, True):
        if reopen:
            log.close()
            log = open_log(tmp_path, clock, segment_bytes=one * 3)
        assert batch_bases(log.read(0, 1 << 20, max_offset=6)) == [0, 3]
        assert log.read(6, 1 << 20, max_offset=6) is None
        assert batch_bases(log.read(3, 1 << 20, max_offset=9)) == [3, 6]  # the segment's end
        assert batch_bases(log.read(9, 1 << 20, max_offset=14)) == [9, 12]  # the next one
    log.close()


def test_roll_by_time_and_full_index(tmp_path, clock):
    log = open_log(tmp_path, clock, roll_ms=1000)
    append(log, batch(clock=clock))
    clock.advance(1000)
    append(log, batch(clock=clock))
    assert len(log.segments) == 1
    clock.advance(1)
    append(log, batch(clock=clock))
    assert [s.base_offset for s in log.segments] == [0, 6]
    log.close()
    log = open_log(tmp_path / "b", clock, index_interval_bytes=1, max_index_bytes=16)
    for _ in range(5):
        append(log, batch())
    # 16 bytes hold one 12-byte time index entry: every second batch fills it
    assert [s.base_offset for s in log.segments] == [0, 6, 12]
    log.close()


def test_segment_jitter_takes_a_random_share_off_segment_ms(tmp_path, clock):
    """segment.jitter.ms (Kafka's LogConfig.randomSegmentJitter): each segment draws, when it
    is created, a jitter below min(segment.jitter.ms, segment.ms) and rolls that much earlier;
    the draws come from the log's injected random source."""
    seed, roll_ms, jitter_ms = 11, 1000, 400
    draws = random.Random(seed)
    log = PartitionLog.open(
        tmp_path / "topic-0",
        LogConfig(roll_ms=roll_ms, roll_jitter_ms=jitter_ms),
        clock,
        rng=random.Random(seed),
    )
    for _ in range(3):  # each new segment rolls at its own time
        jitter = draws.randrange(2**31) % jitter_ms
        seg = log.active_segment
        assert seg.roll_jitter_ms == jitter and 0 <= jitter < jitter_ms
        append(log, batch(clock=clock))
        clock.advance(roll_ms - jitter)
        append(log, batch(clock=clock))
        assert log.active_segment is seg  # not yet: segment.ms - jitter has not passed
        clock.advance(1)
        append(log, batch(clock=clock))
        assert log.active_segment is not seg  # rolled: the next segment drew its own
    log.close()
    # without jitter every segment waits the whole segment.ms
    plain = open_log(tmp_path / "b", clock, roll_ms=roll_ms)
    assert plain.active_segment.roll_jitter_ms == 0


def test_retention_by_time(tmp_path, clock):
    one = len(batch(1))
    log = open_log(
        tmp_path, clock, segment_bytes=one * 2, retention_ms=10_000, file_delete_delay_ms=500
    )
    for i in range(6):
        append(log, batch(1, ts=clock.now_ms + i * 1000))
    assert [s.base_offset for s in log.segments] == [0, 2, 4]
    clock.advance(11_500)  # segments 0 (max ts +1000) and 2 (+3000)? only the first is old enough
    assert log.delete_old_segments() == 1
    assert log.log_start_offset == 2 and [s.base_offset for s in log.segments] == [2, 4]
    d = tmp_path / "topic-0"
    assert (d / "00000000000000000000.log.deleted").exists()
    assert not (d / "00000000000000000000.log").exists()
    assert log.delete_pending_files() == 0  # file.delete.delay.ms not over yet
    clock.advance(500)
    assert log.delete_pending_files() == 1
    assert not (d / "00000000000000000000.log.deleted").exists()
    with pytest.raises(KafkaError):
        log.read(1, 100)
    # the whole log expires: Kafka rolls, then deletes every old segment
    clock.advance(100_000)
    assert log.delete_old_segments() == 2
    assert [s.base_offset for s in log.segments] == [6] and log.log_start_offset == 6
    assert log.log_end_offset == 6 and log.active_segment.size == 0
    assert log.read(6, 100) is None
    info = append(log, batch(1, clock=clock))
    assert info.first_offset == 6 and info.log_start_offset == 6
    log.close()
    log = open_log(tmp_path, clock)
    assert (log.log_start_offset, log.log_end_offset) == (6, 7)
    log.close()


def test_retention_by_bytes(tmp_path, clock):
    one = len(batch(1))
    log = open_log(tmp_path, clock, segment_bytes=one * 2, retention_bytes=one * 3, retention_ms=-1)
    for _ in range(7):
        append(log, batch(1))
    # segments of 2, 2, 2, 1 batches = 7; keep >= 3 batches' worth: delete the first two
    assert log.delete_old_segments() == 2
    assert log.log_start_offset == 4 and log.size == one * 3
    assert log.delete_old_segments() == 0
    log.close()


def _two_segment_log(tmp_path, clock):
    one = len(batch(2))
    log = open_log(tmp_path, clock, segment_bytes=one * 4, index_interval_bytes=100)
    for _ in range(6):
        append(log, batch(2))
    assert [s.base_offset for s in log.segments] == [0, 8]
    # simulate a crash: no close(), no clean shutdown marker
    for s in log.segments:
        s.close()
    return tmp_path / "topic-0" / "00000000000000000008.log", one


@pytest.mark.parametrize(
    "damage", ["truncate_mid_batch", "append_garbage", "flip_byte_in_last_batch"]
)
def test_torn_tail_recovery(tmp_path, clock, damage):
    path, one = _two_segment_log(tmp_path, clock)
    data = bytearray(path.read_bytes())
    if damage == "truncate_mid_batch":
        data = data[: len(data) - 7]
    elif damage == "append_garbage":
        data += os.urandom(5) + b"\x00" * 70
    else:
        data[-3] ^= 0x40
    path.write_bytes(bytes(data))
    log = open_log(tmp_path, clock, segment_bytes=one * 4)
    good_batches = 2 if damage == "append_garbage" else 1  # of the active segment
    assert log.log_end_offset == 8 + 2 * good_batches
    assert path.stat().st_size == one * good_batches
    info = append(log, batch(2))
    assert info.first_offset == 8 + 2 * good_batches
    assert all_offsets(log) == list(range(log.log_end_offset))
    log.close()


def test_corrupt_middle_segment_truncates_and_deletes_later_segments(tmp_path, clock):
    path, one = _two_segment_log(tmp_path, clock)
    first = tmp_path / "topic-0" / "00000000000000000000.log"
    data = bytearray(first.read_bytes())
    data[one * 2 + 30] ^= 0xFF  # third batch of the first segment
    first.write_bytes(bytes(data))
    log = open_log(tmp_path, clock)
    assert log.log_end_offset == 4 and [s.base_offset for s in log.segments] == [0]
    assert not path.exists()
    assert append(log, batch(2)).first_offset == 4
    log.close()


def test_segments_below_recovery_point_are_not_scanned(tmp_path, clock, monkeypatch):
    one = len(batch(2))
    log = open_log(tmp_path, clock, segment_bytes=one * 2)
    for _ in range(6):
        append(log, batch(2))
    rp = log.flush()
    assert rp == 12
    for s in log.segments:
        s.close()
    scanned = []
    orig = LogSegment.recover

    def spy(self, now_ms):
        scanned.append(self.base_offset)
        return orig(self, now_ms)

    monkeypatch.setattr(LogSegment, "recover", spy)
    log = PartitionLog.open(
        tmp_path / "topic-0", LogConfig(segment_bytes=one * 2), clock, recovery_point=rp
    )
    assert scanned == [8]  # only the segment holding the recovery point
    assert log.log_end_offset == 12
    log.close()
    scanned.clear()
    log = PartitionLog.open(tmp_path / "topic-0", LogConfig(), clock, clean_shutdown=True)
    assert scanned == [] and log.log_end_offset == 12
    log.close()


@pytest.mark.parametrize("damage", ["missing", "torn", "beyond_log"])
def test_index_rebuilt_for_trusted_segment(tmp_path, clock, damage):
    one = len(batch(2))
    log = open_log(tmp_path, clock, segment_bytes=one * 4, index_interval_bytes=100)
    for _ in range(6):
        append(log, batch(2))
    log.close()
    idx = tmp_path / "topic-0" / "00000000000000000000.index"
    good = idx.read_bytes()
    assert len(good) > 8
    if damage == "missing":
        idx.unlink()
    elif damage == "torn":
        idx.write_bytes(good + b"\x01\x02")
    else:
        idx.write_bytes(good + (100).to_bytes(4, "big") + (10**6).to_bytes(4, "big"))
    log = PartitionLog.open(
        tmp_path / "topic-0",
        LogConfig(segment_bytes=one * 4, index_interval_bytes=100),
        clock,
        clean_shutdown=True,
    )
    if damage != "missing":
        assert idx.read_bytes() == good
    assert log.log_end_offset == 12 and all_offsets(log) == list(range(12))
    for off in range(12):
        assert log.read(off, 1).size == one
    log.close()


def test_offset_for_timestamp_and_max_timestamp(tmp_path, clock):
    log = open_log(tmp_path, clock, index_interval_bytes=50)
    t = clock.now_ms
    append(
        log,
        bytearray(build_batch([(None, b"a", [], t + 10), (None, b"b", [], t + 30)], timestamp=t)),
    )
    append(
        log,
        bytearray(
            build_batch(
                [(None, b"c", [], t + 20), (None, b"d", [], t + 50), (None, b"e", [], t + 40)],
                compression=COMPRESSION_GZIP,
            )
        ),
    )
    append(log, bytearray(build_batch([(None, b"f", [], t + 60)], compression=COMPRESSION_ZSTD)))
    assert log.offset_for_timestamp(t) == (0, t + 10)
    assert log.offset_for_timestamp(t + 11) == (1, t + 30)
    assert log.offset_for_timestamp(t + 31) == (3, t + 50)  # inside a compressed batch
    assert log.offset_for_timestamp(t + 45) == (3, t + 50)
    assert log.offset_for_timestamp(t + 55) == (5, t + 60)
    assert log.offset_for_timestamp(t + 61) is None
    assert log.offset_of_max_timestamp() == (5, t + 60)
    append(
        log,
        bytearray(
            build_batch(
                [(None, b"g", [], t + 5), (None, b"h", [], t + 99), (None, b"i", [], t + 99)]
            )
        ),
    )
    assert log.offset_of_max_timestamp() == (7, t + 99)
    log.close()
    log = PartitionLog.open(tmp_path / "topic-0", LogConfig(), clock, clean_shutdown=True)
    assert log.offset_of_max_timestamp() == (7, t + 99)
    assert log.offset_for_timestamp(t + 31) == (3, t + 50)
    log.close()


def test_log_append_time(tmp_path, clock):
    log = open_log(tmp_path, clock, message_timestamp_type="LogAppendTime")
    info = append(log, batch(2, ts=5))
    assert info.log_append_time == clock.now_ms
    recs = decode_records(slice_bytes(log.read(0, 100)))
    assert {r.timestamp for r in recs} == {clock.now_ms}
    assert log.offset_for_timestamp(clock.now_ms) == (0, clock.now_ms)
    log.close()


def test_truncate_to(tmp_path, clock):
    one = len(batch(2))
    log = open_log(tmp_path, clock, segment_bytes=one * 2)
    for _ in range(5):
        append(log, batch(2))
    log.truncate_to(4)
    assert log.log_end_offset == 4 and [s.base_offset for s in log.segments] == [0]
    assert log.high_watermark == 4
    assert append(log, batch(2)).first_offset == 4
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    log.close()


def test_truncate_to_the_log_end_drops_an_epoch_without_records(tmp_path, clock):
    """Issue 10, defect 2: a broker that became leader (epoch 5 assigned at its LEO) and lost
    the leadership before appending anything must not keep epoch 5 as its latest once it
    follows a leader that never knew it; truncating to the LEO drops it, as Kafka's
    truncateTo does."""
    log = open_log(tmp_path, clock)
    log.leader_epochs.assign(4, 0)
    append(log, batch(2))
    log.leader_epochs.assign(5, log.log_end_offset)
    assert log.leader_epochs.latest_epoch() == 5
    log.truncate_to(log.log_end_offset)
    assert log.leader_epochs.latest_epoch() == 4 and log.log_end_offset == 2
    log.truncate_to(10)  # above the end: nothing else changes
    assert log.leader_epochs.latest_epoch() == 4 and log.log_end_offset == 2
    log.close()


def test_trusted_segment_with_several_batches_after_the_last_index_entry(tmp_path, clock):
    """Regression: loading a segment's tail compared each batch with the last index entry
    (a reused cursor), so >= 2 batches after that entry made truncate_to and clean reopen
    fail with 'offset index does not match the log'."""
    cfg = LogConfig(index_interval_bytes=150)
    log = PartitionLog.open(tmp_path / "t-0", cfg, clock)
    for i in range(10):
        append(log, bytearray(build_batch([(None, b"v%d" % i, [])], timestamp=1)))
    assert log.segments[-1].offset_index.entries >= 1
    log.truncate_to(8)
    assert log.log_end_offset == 8
    log.close()
    log = PartitionLog.open(tmp_path / "t-0", cfg, clock, clean_shutdown=True)
    assert log.log_end_offset == 8
    log.close()


def test_flush_of_an_unchanged_log_costs_no_fsync(tmp_path, clock, monkeypatch):
    """The periodic flush walks every log: an idle one (nothing appended, truncated or rolled
    since its last flush) is not fsynced again (100,000 idle partitions were 100,000 fsyncs a
    minute); a truncation followed by an append of the same size is flushed again."""
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), clock)
    calls: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real_fsync(fd))[1])
    append(log, batch(3))
    log.flush()
    assert calls and log.recovery_point == 3
    calls.clear()
    log.flush()
    assert calls == []
    append(log, batch(3))
    log.flush()
    assert calls and log.recovery_point == 6
    calls.clear()
    log.truncate_to(3)
    append(log, batch(3))  # same end offset and size as before, other bytes
    log.flush()
    assert calls and log.recovery_point == 6
    log.close()
