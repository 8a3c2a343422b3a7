"""The recovery point moves as in Kafka 3.9: when a log rolls (the rolled segments are flushed in
the background), by flush.messages / flush.ms, and at a clean shutdown.  The periodic
checkpoint (log.flush.offset.checkpoint.interval.ms) writes the recovery points reached and
fsyncs no log.  A kill -9 keeps every acknowledged record (the page cache survives a process
kill) and the restart scans only from the recovery point, truncating a torn tail."""

from __future__ import annotations

import os

import pytest
from broker_fixture import BrokerFactory, batch, unique_topic, wait_until
from power_loss import PowerLoss

from pybroker.clock import ManualClock
from pybroker.log.checkpoints import RECOVERY_POINT_CHECKPOINT, read_checkpoint
from pybroker.log.manager import LogManager
from pybroker.log.partition_log import LogConfig, PartitionLog
from pybroker.log.segment import LogSegment
from pybroker.wire.records import build_batch, parse_batches


@pytest.fixture
def start_broker(tmp_path):
    with BrokerFactory(tmp_path) as factory:
        yield factory


def append(log, value=b"v"):
    buf = bytearray(build_batch([(None, value, [])], timestamp=1))
    log.append(buf, parse_batches(buf))
    log.high_watermark = log.log_end_offset


def values(log):
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).read_bytes()
        for b in parse_batches(bytearray(data)):
            out.append(b.base_offset)
        offset = b.base_offset + b.last_offset_delta + 1
    return out


def crash(mgr):
    """kill -9: nothing flushed or closed, no clean shutdown marker (the page cache keeps
    what was written)."""
    for lg in mgr.logs.values():
        for seg in lg.segments:
            seg.release()


def test_the_periodic_checkpoint_fsyncs_no_log(tmp_path, monkeypatch):
    """Kafka's checkpointLogRecoveryOffsets: written logs keep their recovery point (0 until
    their first roll) and no segment is fsynced."""
    mgr = LogManager(tmp_path, LogConfig(), ManualClock())
    for p in range(20):
        for _ in range(3):
            append(mgr.get_or_create("t", p))
    flushed = []
    monkeypatch.setattr(LogSegment, "flush", lambda seg: flushed.append(seg))
    mgr.checkpoint()
    assert flushed == []
    assert read_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT) == {("t", p): 0 for p in range(20)}
    monkeypatch.undo()
    mgr.close()  # a clean shutdown flushes every log
    assert read_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT) == {("t", p): 3 for p in range(20)}


def test_a_roll_flushes_the_rolled_segments_and_a_kill_9_recovers_from_there(tmp_path):
    cfg = LogConfig(segment_bytes=300)
    mgr = LogManager(tmp_path, cfg, ManualClock())
    log = mgr.get_or_create("t", 0)
    while len(log.segments) < 3:
        append(log)
    active = log.active_segment.base_offset
    # the roll's flush runs in the background (Kafka's "flush-log" task)
    wait_until(lambda: log.recovery_point == active)
    append(log)  # acknowledged, not flushed
    end = log.log_end_offset
    mgr.checkpoint()
    assert read_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT) == {("t", 0): active}
    crash(mgr)
    with open(log.active_segment.log_path, "ab") as f:
        f.write(build_batch([(None, b"torn", [])], timestamp=1)[:-5])  # a torn tail

    recovered = []
    original = LogSegment.recover

    def spy(seg, now):
        recovered.append(seg.base_offset)
        return original(seg, now)

    LogSegment.recover = spy
    try:
        again = LogManager(tmp_path, cfg, ManualClock())
        again.load_all()
    finally:
        LogSegment.recover = original
    assert recovered == [active]  # the segments below the recovery point are trusted
    log2 = again.get("t", 0)
    assert log2.log_end_offset == end  # every acknowledged record, the torn batch cut
    assert values(log2) == list(range(end))
    again.close()


def test_flush_messages_moves_the_recovery_point_and_the_checkpoint_writes_it(start_broker):
    """Through a broker: a topic with flush.messages=1 is flushed after each produce and its
    recovery point checkpointed; a topic with Kafka's defaults keeps its recovery point
    until it rolls."""
    b = start_broker(**{"log.flush.offset.checkpoint.interval.ms": 100})
    flushed, default = unique_topic("flushed"), unique_topic("default")
    with b.client() as c:
        c.create_topic(flushed, configs={"flush.messages": "1"})
        c.create_topic(default)
        for _ in range(3):
            assert c.produce(flushed, 0, batch([b"a"]))["error_code"] == 0
            assert c.produce(default, 0, batch([b"a"]))["error_code"] == 0
    path = b.log_dir / RECOVERY_POINT_CHECKPOINT
    wait_until(lambda: read_checkpoint(path).get((flushed, 0)) == 3)
    assert read_checkpoint(path).get((default, 0)) == 0
    assert b.broker.logs.get(default, 0).log_end_offset == 3


def idempotent(log, pid, seq, value=b"v"):
    buf = bytearray(
        build_batch(
            [(None, value, [])], timestamp=1, producer_id=pid, producer_epoch=0, base_sequence=seq
        )
    )
    info = log.append(buf, parse_batches(buf))
    log.high_watermark = log.log_end_offset
    return info


def test_a_power_loss_after_a_roll_keeps_the_producer_state_the_recovery_point_passed(
    tmp_path, monkeypatch
):
    """Kafka 3.9 (KAFKA-15046): the producer-state snapshot a roll writes is not fsynced on the
    append path; the roll's background flush fsyncs it before the recovery point moves past
    it.  A power loss then keeps the snapshot, and a producer's retry of a batch whose
    segment DeleteRecords removed is still a duplicate (its original offsets), as Kafka's."""
    power = PowerLoss(monkeypatch)
    cfg = LogConfig(segment_bytes=300)
    mgr = LogManager(tmp_path, cfg, ManualClock())
    log = mgr.get_or_create("t", 0)
    first = idempotent(log, pid=7, seq=0)
    while len(log.segments) < 2:
        append(log)
    active = log.active_segment.base_offset
    wait_until(lambda: log.recovery_point == active)  # the roll's flush
    snapshot = log.directory / f"{active:020d}.snapshot"
    assert str(snapshot) in power.fsynced  # before the recovery point moved past it
    assert mgr.delete_records("t", 0, active) == active  # the batch's segment goes
    crash(mgr)
    power.cut(tmp_path)

    again = LogManager(tmp_path, cfg, ManualClock())
    again.load_all()
    log2 = again.get("t", 0)
    assert (log2.log_start_offset, log2.recovery_point) == (active, active)
    retry = idempotent(log2, pid=7, seq=0)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (
        first.first_offset,
        first.last_offset,
    )
    assert log2.log_end_offset == active  # nothing appended
    nxt = idempotent(log2, pid=7, seq=1)  # the producer's next batch is in sequence
    assert not nxt.duplicate and nxt.first_offset == active
    again.close()


def test_the_recovery_point_stays_when_the_snapshot_fsync_fails(tmp_path, monkeypatch):
    """Kafka's testRecoveryPointNotIncrementedOnProducerStateSnapshotFlushFailure: the roll's
    flush fails on the snapshot, the recovery point does not move past it."""
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), ManualClock())
    append(log)
    log.roll()
    assert log.producer_state.unflushed_snapshots == [1]

    def fail(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OSError):
        log.flush(upto=1)
    assert log.recovery_point == 0
    monkeypatch.undo()
    assert log.flush(upto=1) == 1
    assert log.producer_state.unflushed_snapshots == []
    log.close()
