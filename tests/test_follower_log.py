"""log/partition_log.py as a replica: append_as_follower, truncation after divergence (the
OffsetForLeaderEpoch dance of docs/replication.md), producer state across promotion, and
delete_records_before (DeleteRecords) including restarts."""

from __future__ import annotations

import os

import pytest

from pybroker.clock import ManualClock
from pybroker.errors import ErrorCode, KafkaError
from pybroker.log.checkpoints import LOG_START_OFFSET_CHECKPOINT, read_checkpoint
from pybroker.log.leader_epoch import EpochEntry as E
from pybroker.log.manager import LogManager
from pybroker.log.partition_log import LogConfig, PartitionLog
from pybroker.wire.record_walker import decode_records
from pybroker.wire.records import build_batch, parse_batches


@pytest.fixture
def clock():
    return ManualClock()


def open_log(path, clock, name="t-0", **cfg) -> PartitionLog:
    return PartitionLog.open(path / name, LogConfig(**cfg), clock)


def records(n=2, value=b"v", **kw) -> bytearray:
    return bytearray(build_batch([(None, value, [])] * n, timestamp=1, **kw))


def lead(log: PartitionLog, epoch: int, n=2, **kw):
    buf = records(n, **kw)
    info = log.append(buf, parse_batches(buf), leader_epoch=epoch)
    log.high_watermark = log.log_end_offset  # the only replica: committed at once
    return info


def follower_batch(base_offset: int, epoch: int, n=2, **kw) -> bytearray:
    return records(n, base_offset=base_offset, partition_leader_epoch=epoch, **kw)


def follow(log: PartitionLog, buf: bytearray):
    return log.append_as_follower(buf, parse_batches(buf))


def pread(s) -> bytes:
    return os.pread(s.file.fileno(), s.size, s.position)


def replicate(leader: PartitionLog, follower: PartitionLog) -> None:
    """What the fetcher does: read from the follower's LEO, append as follower, HW."""
    while follower.log_end_offset < leader.log_end_offset:
        data = bytearray(pread(leader.read(follower.log_end_offset, 1 << 20)))
        follow(follower, data)
    follower.high_watermark = min(leader.high_watermark, follower.log_end_offset)


def offsets_and_values(log: PartitionLog) -> list[tuple[int, bytes]]:
    out, off = [], log.log_start_offset
    while off < log.log_end_offset:
        data = pread(log.read(off, 1 << 20))
        recs = [
            r
            for h in parse_batches(data)
            for r in decode_records(data[h.position : h.position + h.size])
        ]
        out += [(r.offset, r.value) for r in recs if r.offset >= off]
        off = recs[-1].offset + 1
    return out


# -- append_as_follower ---------------------------------------------------------------------


def test_follower_append_keeps_offsets_and_bytes(tmp_path, clock):
    leader = open_log(tmp_path, clock, "l-0")
    follower = open_log(tmp_path, clock, "f-0")
    lead(leader, 0, 3)
    lead(leader, 0, 2, producer_id=9, producer_epoch=0, base_sequence=0)
    lead(leader, 1, 1)
    replicate(leader, follower)
    assert follower.log_end_offset == 6 and follower.high_watermark == 6
    assert pread(follower.read(0, 1 << 20)) == pread(leader.read(0, 1 << 20))
    assert follower.leader_epochs.entries() == [E(0, 0), E(1, 5)]
    assert follower.producer_state.last_entry(9).last_seq == 1
    for log in (leader, follower):
        log.close()


def test_follower_append_does_not_move_high_watermark(tmp_path, clock):
    log = open_log(tmp_path, clock)
    info = follow(log, follower_batch(0, 0, 3) + follower_batch(3, 0, 2))
    assert (info.first_offset, info.last_offset, info.duplicate) == (0, 4, False)
    assert log.log_end_offset == 5 and log.high_watermark == 0
    log.high_watermark = 3
    follow(log, follower_batch(5, 1, 1))
    assert log.high_watermark == 3
    log.close()


@pytest.mark.parametrize(
    "bad",
    [
        lambda: follower_batch(3, 0),  # overlaps the log
        lambda: follower_batch(4, 0) + follower_batch(5, 0),  # overlap inside the append
    ],
)
def test_follower_append_offsets_must_ascend(tmp_path, clock, bad):
    log = open_log(tmp_path, clock)
    follow(log, follower_batch(0, 0, 4))
    size = log.active_segment.size
    with pytest.raises(KafkaError) as e:
        follow(log, bad())
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert log.log_end_offset == 4 and log.active_segment.size == size  # nothing written
    assert follow(log, follower_batch(4, 1)).first_offset == 4
    log.close()


def test_follower_rolls_segments_like_the_leader(tmp_path, clock):
    one = len(follower_batch(0, 0))
    log = open_log(tmp_path, clock, segment_bytes=one * 2)
    for base in range(0, 10, 2):
        follow(log, follower_batch(base, 0))
    assert [s.base_offset for s in log.segments] == [0, 4, 8]
    with pytest.raises(KafkaError) as e:
        follow(log, follower_batch(10, 0, 40))
    assert e.value.code == ErrorCode.RECORD_LIST_TOO_LARGE
    log.close()


def test_follower_append_survives_crash(tmp_path, clock):
    log = open_log(tmp_path, clock)
    follow(log, follower_batch(0, 0) + follower_batch(2, 3))
    follow(log, follower_batch(4, 3, producer_id=5, producer_epoch=1, base_sequence=0))
    for s in log.segments:  # crash: nothing flushed, no producer snapshot
        s.close()
    (log.directory / "leader-epoch-checkpoint").unlink()
    log = open_log(tmp_path, clock)
    assert log.log_end_offset == 6
    assert log.leader_epochs.entries() == [E(0, 0), E(3, 2)]
    assert log.producer_state.last_entry(5).last_seq == 1
    log.close()


# -- truncation after divergence ---------------------------------------------------------------


def test_truncation_after_divergence(tmp_path, clock):
    """Old leader A wrote epoch 1 up to offset 8 but only 0..5 reached B.  B becomes leader
    (epoch 2) and appends; A, now a follower, asks B for the end of its latest epoch (1),
    truncates its divergent tail and replicates B's epoch 2."""
    a = open_log(tmp_path, clock, "a-0")
    b = open_log(tmp_path, clock, "b-0")
    lead(a, 0, 2)
    lead(a, 0, 2)  # epoch 0: 0..3
    lead(a, 1, 2, value=b"a1")  # epoch 1: 4..5, replicated
    replicate(a, b)
    lead(a, 1, 3, value=b"lost")  # 6..8 only on A
    assert a.leader_epochs.entries() == [E(0, 0), E(1, 4)]
    assert b.leader_epochs.entries() == [E(0, 0), E(1, 4)]

    b.leader_epochs.assign(2, b.log_end_offset)  # B is elected leader in epoch 2
    b.high_watermark = 6
    lead(b, 2, 2, value=b"b2")  # 6..7
    lead(b, 2, 1, value=b"b2")  # 8

    asked = a.leader_epochs.latest_epoch()
    leader_epoch, end = b.end_offset_for_epoch(asked)
    assert (asked, leader_epoch, end) == (1, 1, 6)
    a.truncate_to(min(end, a.log_end_offset))
    assert a.log_end_offset == 6 and a.high_watermark <= 6
    assert a.leader_epochs.entries() == [E(0, 0), E(1, 4)]
    replicate(b, a)
    assert a.leader_epochs.entries() == [E(0, 0), E(1, 4), E(2, 6)]
    assert offsets_and_values(a) == offsets_and_values(b)
    assert [v for _, v in offsets_and_values(a)][4:] == [b"a1"] * 2 + [b"b2"] * 3
    # both logs answer OffsetForLeaderEpoch alike from now on
    for epoch in (0, 1, 2):
        assert a.end_offset_for_epoch(epoch) == b.end_offset_for_epoch(epoch)
    for log in (a, b):
        log.close()


def test_truncation_when_leader_never_had_our_epoch(tmp_path, clock):
    """Follower has epochs 0, 1; the leader has 0 then 2 (it never saw epoch 1): it answers
    epoch 0 and the start of 2; the follower truncates to the end of ITS epoch 0 as well."""
    leader = open_log(tmp_path, clock, "l-0")
    follower = open_log(tmp_path, clock, "f-0")
    lead(leader, 0, 3)
    replicate(leader, follower)
    lead(follower, 1, 2)  # 3..4: the follower once led in epoch 1, nobody copied it
    lead(leader, 0, 1)  # 3
    lead(leader, 2, 2)  # 4..5
    epoch, end = leader.end_offset_for_epoch(follower.leader_epochs.latest_epoch())
    assert (epoch, end) == (0, 4)
    _, local_end = follower.leader_epochs.end_offset_for(epoch, follower.log_end_offset)
    assert local_end == 3
    follower.truncate_to(min(end, local_end, follower.log_end_offset))
    assert follower.leader_epochs.entries() == [E(0, 0)]
    replicate(leader, follower)
    assert offsets_and_values(follower) == offsets_and_values(leader)
    assert follower.leader_epochs.entries() == leader.leader_epochs.entries()
    for log in (leader, follower):
        log.close()


def test_truncate_to_lowers_high_watermark_and_keeps_segments_consistent(tmp_path, clock):
    one = len(follower_batch(0, 0))
    log = open_log(tmp_path, clock, segment_bytes=one)
    for base in range(0, 12, 2):
        follow(log, follower_batch(base, base // 4))
    log.high_watermark = 10
    log.truncate_to(7)  # inside the batch 6..7: it goes
    assert (log.log_end_offset, log.high_watermark) == (6, 6)
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6]  # 6 kept, emptied
    assert log.active_segment.size == 0
    assert log.leader_epochs.entries() == [E(0, 0), E(1, 4)]
    log.truncate_to(100)  # beyond the LEO: nothing
    assert log.log_end_offset == 6
    log.close()
    log = open_log(tmp_path, clock)
    assert log.log_end_offset == 6 and log.leader_epochs.entries() == [E(0, 0), E(1, 4)]
    log.close()


def test_truncate_fully_and_start_at(tmp_path, clock):
    log = open_log(tmp_path, clock)
    follow(log, follower_batch(0, 0, producer_id=3, producer_epoch=0, base_sequence=0))
    log.roll()
    follow(log, follower_batch(2, 1))
    log.truncate_fully_and_start_at(50)  # the leader's log starts beyond ours
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (50, 50, 50)
    assert log.leader_epochs.entries() == []
    assert log.producer_state.last_entry(3) is None
    assert not list(log.directory.glob("*.snapshot"))
    follow(log, follower_batch(50, 4))
    log.close()
    log = open_log(tmp_path, clock)
    assert (log.log_start_offset, log.log_end_offset) == (50, 52)
    assert log.leader_epochs.entries() == [E(4, 50)]
    assert log.producer_state.last_entry(3) is None
    log.close()


# -- producer state: follower append, truncation, promotion --------------------------------------


def idem(seq: int, n=2, pid=42, epoch=0, base_offset=0, leader_epoch=0) -> bytearray:
    return records(
        n,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        base_offset=base_offset,
        partition_leader_epoch=leader_epoch,
    )


def test_promoted_follower_detects_duplicate_retry(tmp_path, clock):
    leader = open_log(tmp_path, clock, "l-0")
    follower = open_log(tmp_path, clock, "f-0")
    for seq in (0, 2, 4):
        buf = idem(seq)
        leader.append(buf, parse_batches(buf), leader_epoch=0)
    replicate(leader, follower)
    # the leader dies before answering the last produce; the follower is elected (epoch 1)
    follower.leader_epochs.assign(1, follower.log_end_offset)
    retry = idem(4)
    info = follower.append(retry, parse_batches(retry), leader_epoch=1)
    assert info.duplicate and (info.first_offset, info.last_offset) == (4, 5)
    assert follower.log_end_offset == 6
    older = idem(2)  # an older retained batch is a duplicate too
    assert follower.append(older, parse_batches(older), leader_epoch=1).duplicate
    gap = idem(8)
    with pytest.raises(KafkaError) as e:
        follower.append(gap, parse_batches(gap), leader_epoch=1)
    assert e.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    nxt = idem(6)
    info = follower.append(nxt, parse_batches(nxt), leader_epoch=1)
    assert not info.duplicate and info.first_offset == 6
    assert follower.leader_epochs.entries() == [E(0, 0), E(1, 6)]
    for log in (leader, follower):
        log.close()


def test_follower_append_skips_sequence_checks(tmp_path, clock):
    log = open_log(tmp_path, clock)
    follow(log, idem(0))
    follow(log, idem(0, base_offset=2))  # a "duplicate" the leader accepted: written anyway
    follow(log, idem(7, base_offset=4))  # out of order: the leader decided, we copy
    assert log.log_end_offset == 6
    assert log.producer_state.last_entry(42).last_seq == 8
    log.close()


def test_truncation_rebuilds_producer_state(tmp_path, clock):
    log = open_log(tmp_path, clock)
    follow(log, idem(0, base_offset=0))
    follow(log, idem(2, base_offset=2))
    log.roll()  # producer snapshot at 4
    follow(log, idem(4, base_offset=4))
    follow(log, idem(6, base_offset=6))
    log.truncate_to(6)
    assert log.producer_state.last_entry(42).last_seq == 5
    log.truncate_to(3)  # below the snapshot at 4: it is deleted, state rebuilt from the log
    assert log.log_end_offset == 2
    assert [p.name for p in log.directory.glob("*.snapshot")] == []
    assert log.producer_state.last_entry(42).last_seq == 1
    # promoted: the truncated batch is not a duplicate any more, the kept one is
    kept, lost = idem(0), idem(2)
    assert log.append(kept, parse_batches(kept)).duplicate
    info = log.append(lost, parse_batches(lost))
    assert not info.duplicate and info.first_offset == 2
    log.close()


# -- DeleteRecords -------------------------------------------------------------------------------


def test_delete_records_before(tmp_path, clock):
    one = len(follower_batch(0, 0))
    log = open_log(tmp_path, clock, segment_bytes=one * 2, retention_ms=-1, file_delete_delay_ms=0)
    for base in range(0, 12, 2):  # segments [0,4) [4,8) [8,12)
        follow(log, follower_batch(base, base // 4))
    log.high_watermark = 10
    with pytest.raises(KafkaError) as e:
        log.delete_records_before(11)  # beyond the high watermark
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    with pytest.raises(KafkaError):
        log.delete_records_before(-1)
    assert log.delete_records_before(5) == 5
    assert [s.base_offset for s in log.segments] == [4, 8]
    assert len(list(log.directory.glob("*.deleted"))) == 3  # .log, .index, .timeindex
    log.delete_pending_files()
    assert not list(log.directory.glob("*.deleted"))
    assert log.leader_epochs.entries() == [E(1, 5), E(2, 8)]
    for off in (0, 3, 4):
        with pytest.raises(KafkaError) as e:
            log.read(off, 1 << 20)  # inside the first kept segment, still below the start
        assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert parse_batches(pread(log.read(5, 1 << 20)))[0].base_offset == 4  # whole batch
    assert log.delete_records_before(2) == 5  # below the start: nothing
    assert log.delete_records_before(5) == 5
    assert log.offset_for_timestamp(0) == (5, 1)
    buf = records(1)
    assert log.append(buf, parse_batches(buf)).log_start_offset == 5
    log.high_watermark = log.log_end_offset
    assert log.delete_records_before(13) == 13  # everything: the active segment stays
    assert log.log_end_offset == 13 and [s.base_offset for s in log.segments] == [12]
    with pytest.raises(KafkaError):
        log.read(12, 1 << 20)
    assert log.read(13, 1 << 20) is None
    log.close()


def test_retention_deletes_segments_below_log_start(tmp_path, clock):
    """A checkpointed log start inside a later segment (e.g. the start came from the leader):
    the next retention pass deletes the segments wholly below it, as Kafka's
    deleteLogStartOffsetBreachedSegments."""
    one = len(follower_batch(0, 0))
    log = open_log(tmp_path, clock, segment_bytes=one, retention_ms=-1)
    for base in range(0, 8, 2):
        follow(log, follower_batch(base, base // 2))
    log.close()
    log = PartitionLog.open(
        tmp_path / "t-0", LogConfig(segment_bytes=one, retention_ms=-1), clock, log_start_offset=5
    )
    assert log.log_start_offset == 5 and [s.base_offset for s in log.segments] == [0, 2, 4, 6]
    assert log.leader_epochs.entries() == [E(2, 5), E(3, 6)]
    assert log.delete_old_segments() == 2
    assert [s.base_offset for s in log.segments] == [4, 6] and log.log_start_offset == 5
    assert log.delete_old_segments() == 0
    log.close()


def test_delete_records_survives_restart(tmp_path, clock):
    mgr = LogManager(tmp_path, LogConfig(retention_ms=-1), clock)
    mgr.load_all()
    log = mgr.get_or_create("t", 0)
    for epoch in (0, 0, 1):
        lead(log, epoch, 2)
    assert mgr.delete_records("t", 0, 3) == 3
    assert read_checkpoint(tmp_path / LOG_START_OFFSET_CHECKPOINT) == {("t", 0): 3}
    for s in log.segments:  # crash
        s.close()
    mgr = LogManager(tmp_path, LogConfig(retention_ms=-1), clock)
    mgr.load_all()
    log = mgr.get("t", 0)
    assert (log.log_start_offset, log.log_end_offset) == (3, 6)
    assert log.leader_epochs.entries() == [E(0, 3), E(1, 4)]
    with pytest.raises(KafkaError):
        log.read(2, 1 << 20)
    log.delete_records_before(5)
    mgr.close()  # clean shutdown writes the checkpoint too
    mgr = LogManager(tmp_path, LogConfig(retention_ms=-1), clock)
    mgr.load_all()
    assert mgr.get("t", 0).log_start_offset == 5
    assert mgr.get("t", 0).leader_epochs.entries() == [E(1, 5)]
    mgr.close()


def test_log_start_beyond_recovered_end_empties_log(tmp_path, clock):
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), clock)
    follow(log, follower_batch(0, 0, producer_id=1, producer_epoch=0, base_sequence=0))
    log.close()
    # the checkpointed start (8) lies in a tail the crash lost
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), clock, log_start_offset=8)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (8, 8, 8)
    assert [s.base_offset for s in log.segments] == [8]
    assert log.leader_epochs.entries() == [] and log.producer_state.last_entry(1) is None
    assert not (tmp_path / "t-0" / "00000000000000000000.log").exists()
    log.close()


def test_follower_append_with_gaps_of_a_compacted_leader(tmp_path, clock):
    """A compacted leader's log has gaps: offsets only ascend (Kafka's follower append)."""
    log = open_log(tmp_path, clock)
    follow(log, follower_batch(0, 0, 4))
    info = follow(log, follower_batch(9, 1) + follower_batch(20, 1, 2))
    assert (info.first_offset, info.last_offset, log.log_end_offset) == (9, 21, 22)
    assert log.leader_epochs.entries() == [E(0, 0), E(1, 9)]
    for offset, base in ((4, 9), (9, 9), (10, 9), (11, 20), (21, 20)):
        assert parse_batches(pread(log.read(offset, 1 << 20)))[0].base_offset == base
    log.close()
    reopened = open_log(tmp_path, clock)
    assert reopened.log_end_offset == 22
    assert follow(reopened, follower_batch(22, 1)).first_offset == 22
    reopened.close()
