"""log/leader_epoch.py: Kafka's leader epoch cache semantics (cases from Kafka's
LeaderEpochFileCacheTest), the leader-epoch-checkpoint file, and how PartitionLog keeps the
cache in step with the log (appends, truncation, retention, recovery)."""

from __future__ import annotations

import os

import pytest

from pybroker.clock import ManualClock
from pybroker.log.leader_epoch import (
    LEADER_EPOCH_CHECKPOINT,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochCheckpointWriter,
    EpochEntry,
    LeaderEpochCache,
    read_leader_epoch_checkpoint,
)
from pybroker.log.partition_log import LogConfig, PartitionLog
from pybroker.wire.records import build_batch, parse_batches, set_partition_leader_epoch

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
E = EpochEntry


@pytest.fixture
def cache(tmp_path):
    return LeaderEpochCache(tmp_path / LEADER_EPOCH_CHECKPOINT)


def entries(cache):
    return [tuple(e) for e in cache.entries()]


# -- Kafka's LeaderEpochFileCacheTest ---------------------------------------------------------


def test_add_epoch_and_end_offset_of_latest(cache):
    cache.assign(2, 10)
    assert cache.latest_epoch() == 2 and cache.entries() == [E(2, 10)]
    assert cache.end_offset_for(2, 11) == (2, 11)
    cache.assign(2, 12)  # later batches of the same epoch change nothing
    assert cache.entries() == [E(2, 10)]
    assert cache.end_offset_for(2, 14) == (2, 14)


def test_undefined_epoch_requested(cache):
    assert cache.end_offset_for(UNDEFINED_EPOCH, 73) == UNDEFINED
    cache.assign(2, 11)
    cache.assign(3, 12)
    assert cache.end_offset_for(UNDEFINED_EPOCH, 0) == UNDEFINED


def test_empty_cache(cache):
    assert cache.latest_epoch() == UNDEFINED_EPOCH
    assert cache.end_offset_for(0, 0) == UNDEFINED
    assert cache.end_offset_for(7, 0) == UNDEFINED
    assert cache.truncate_from_start(7) is False
    assert cache.truncate_from_end(7) is False
    assert cache.epoch_for_offset(0) == UNDEFINED_EPOCH


def test_requested_epoch_below_first_returns_first_start_offset(cache):
    for epoch, offset in ((5, 11), (6, 12), (7, 13)):
        cache.assign(epoch, offset)
    assert cache.end_offset_for(4, 0) == (4, 11)


def test_requested_epoch_above_latest_is_undefined(cache):
    cache.assign(2, 100)
    assert cache.end_offset_for(3, 100) == UNDEFINED


def test_end_offset_is_start_of_next_epoch(cache):
    for epoch, offset in ((1, 11), (1, 12), (2, 13), (2, 14), (3, 15), (3, 16)):
        cache.assign(epoch, offset)
    assert cache.end_offset_for(2, 17) == (2, 15)
    assert cache.end_offset_for(3, 17) == (3, 17)


def test_no_exact_epoch_returns_previous_epoch_and_next_start(cache):
    cache.assign(0, 10)
    cache.assign(2, 13)
    cache.assign(4, 17)
    assert cache.end_offset_for(1, 0) == (0, 13)
    assert cache.end_offset_for(2, 0) == (2, 17)
    assert cache.end_offset_for(3, 0) == (2, 17)


def test_monotonic_start_offsets(cache):
    cache.assign(2, 9)
    cache.assign(3, 9)
    assert cache.entries() == [E(3, 9)]
    cache.clear()
    cache.assign(2, 6)
    cache.assign(3, 5)
    assert cache.entries() == [E(3, 5)]


def test_epoch_not_reassigned_to_later_offset(cache):
    cache.assign(2, 6)
    cache.assign(2, 10)
    assert cache.entries() == [E(2, 6)]


def test_same_epoch_earlier_offset_truncates(cache):
    for epoch, offset in ((5, 11), (6, 12), (7, 13)):
        cache.assign(epoch, offset)
    cache.assign(7, 12)
    assert cache.entries() == [E(5, 11), E(7, 12)]
    assert cache.end_offset_for(5, 0) == (5, 12)
    assert cache.end_offset_for(6, 0) == (5, 12)


def test_older_epoch_truncates_conflicting_entries(cache):
    cache.assign(1, 5)
    cache.assign(2, 6)
    cache.assign(1, 7)
    assert cache.latest_epoch() == 1 and cache.entries() == [E(1, 7)]
    assert cache.end_offset_for(1, 8) == (1, 8)
    assert cache.end_offset_for(2, 8) == UNDEFINED


def test_epochs_not_starting_at_zero(cache):
    cache.assign(2, 6)
    assert cache.end_offset_for(2, 7) == (2, 7)
    assert cache.entries() == [E(2, 6)]


def test_leader_changes_many_times(cache):
    cache.assign(0, 0)
    cache.assign(1, 0)  # epoch 0 wrote nothing: replaced
    assert cache.latest_epoch() == 1
    assert cache.end_offset_for(1, 0) == (1, 0)
    assert cache.end_offset_for(0, 0) == (0, 0)
    assert cache.end_offset_for(1, 5) == (1, 5)
    assert cache.end_offset_for(0, 5) == (0, 0)
    cache.assign(2, 5)
    assert cache.end_offset_for(2, 10) == (2, 10)
    assert cache.end_offset_for(1, 10) == (1, 5)
    assert cache.end_offset_for(0, 10) == (0, 0)


def test_follower_receives_many_messages(cache):
    for offset in range(9):
        cache.assign(offset // 3, offset)
    assert cache.entries() == [E(0, 0), E(1, 3), E(2, 6)]
    assert cache.end_offset_for(2, 9) == (2, 9)
    assert cache.end_offset_for(0, 9) == (0, 3)
    assert cache.end_offset_for(1, 9) == (1, 6)


def three(cache):
    for epoch, offset in ((2, 6), (3, 8), (4, 11)):
        cache.assign(epoch, offset)


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        (8, [(2, 6)]),  # entries on the boundary go
        (9, [(2, 6), (3, 8)]),
        (11, [(2, 6), (3, 8)]),
        (12, [(2, 6), (3, 8), (4, 11)]),
        (UNDEFINED_EPOCH_OFFSET, [(2, 6), (3, 8), (4, 11)]),
        (0, []),
    ],
)
def test_truncate_from_end(cache, offset, expected):
    three(cache)
    cache.truncate_from_end(offset)
    assert entries(cache) == expected


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        (8, [(3, 8), (4, 11)]),  # the entry at the new start is kept
        (1, [(2, 6), (3, 8), (4, 11)]),  # too early: nothing
        (6, [(2, 6), (3, 8), (4, 11)]),  # the first offset: nothing
        (11, [(4, 11)]),
        (9, [(3, 9), (4, 11)]),  # between boundaries: the covering entry moves
        (15, [(4, 15)]),
        (UNDEFINED_EPOCH_OFFSET, [(2, 6), (3, 8), (4, 11)]),
    ],
)
def test_truncate_from_start(cache, offset, expected):
    three(cache)
    cache.truncate_from_start(offset)
    assert entries(cache) == expected


def test_truncate_from_start_between_first_two(cache):
    cache.assign(0, 0)
    cache.assign(1, 7)
    cache.assign(2, 10)
    cache.truncate_from_start(5)
    assert entries(cache) == [(0, 5), (1, 7), (2, 10)]


def test_previous_epoch_after_truncation(cache):
    cache.assign(2, 10)
    cache.assign(4, 15)
    cache.assign(10, 20)
    cache.truncate_from_end(18)
    assert entries(cache) == [(2, 10), (4, 15)]


def test_epoch_for_offset(cache):
    cache.assign(0, 10)
    cache.assign(1, 20)
    cache.assign(5, 30)
    assert cache.epoch_for_offset(25) == 1
    assert cache.epoch_for_offset(20) == 1
    assert cache.epoch_for_offset(30) == 5
    assert cache.epoch_for_offset(50) == 5
    assert cache.epoch_for_offset(5) == UNDEFINED_EPOCH


def test_invalid_entries_refused(cache):
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -1)


# -- the checkpoint file ----------------------------------------------------------------------


def test_checkpoint_format_and_persistence(tmp_path, cache):
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    cache.assign(2, 6)
    assert path.read_text() == "0\n1\n2 6\n"
    cache.assign(3, 8)
    cache.assign(4, 11)
    cache.truncate_from_end(11)
    cache.truncate_from_start(8)
    assert path.read_text() == "0\n1\n3 8\n"  # every change is written
    again = LeaderEpochCache(path)
    assert again.load() and again.entries() == [E(3, 8)]
    assert not list(tmp_path.glob("*.tmp"))
    cache.clear()
    assert path.read_text() == "0\n0\n"
    mem = LeaderEpochCache(None, [E(1, 0), E(2, 5)])
    mem.assign(3, 9)
    assert not mem.load() and len(mem) == 0


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1\n1\n2 6\n",  # version
        "0\n2\n2 6\n",  # count
        "0\n1\n2\n",  # syntax
        "0\n1\n2 x\n",
        "0\n2\n3 6\n2 8\n",  # epochs out of order
        "0\n2\n2 8\n3 6\n",  # offsets out of order
        "0\n1\n-1 6\n",
    ],
)
def test_malformed_checkpoint(tmp_path, text):
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    path.write_text(text)
    with pytest.raises(ValueError):
        read_leader_epoch_checkpoint(path)
    c = LeaderEpochCache(path, [E(1, 1)])
    assert c.load() is False and c.entries() == []


# -- PartitionLog keeps the cache ----------------------------------------------------------------


@pytest.fixture
def clock():
    return ManualClock()


def open_log(tmp_path, clock, **kw):
    cfg = LogConfig(**kw.pop("cfg", {}))
    return PartitionLog.open(tmp_path / "t-0", cfg, clock, **kw)


def leader_append(log, n=2, epoch=-1, **kw):
    buf = bytearray(build_batch([(None, b"v", [])] * n, timestamp=1, **kw))
    batches = parse_batches(buf)
    info = log.append(buf, batches, leader_epoch=epoch) if epoch >= 0 else log.append(buf, batches)
    log.high_watermark = log.log_end_offset  # the only replica: committed at once
    return info


def test_leader_appends_feed_cache(tmp_path, clock):
    log = open_log(tmp_path, clock)
    leader_append(log, 2)  # epoch -1 (single node, no patching): no entry
    assert log.leader_epochs.entries() == []
    leader_append(log, 2, epoch=0)
    leader_append(log, 3, epoch=0)
    leader_append(log, 1, epoch=2)
    # the produce handler's way: epoch patched into the buffer, headers parsed before
    buf = bytearray(build_batch([(None, b"v", [])] * 2, timestamp=1))
    batches = parse_batches(buf)
    set_partition_leader_epoch(buf, batches[0].position, 3)
    log.append(buf, batches)
    assert log.leader_epochs.entries() == [E(0, 2), E(2, 7), E(3, 8)]
    assert log.end_offset_for_epoch(0) == (0, 7)
    assert log.end_offset_for_epoch(1) == (0, 7)
    assert log.end_offset_for_epoch(3) == (3, 10)
    assert read_leader_epoch_checkpoint(log.directory / LEADER_EPOCH_CHECKPOINT) == [
        E(0, 2),
        E(2, 7),
        E(3, 8),
    ]
    s = log.read(7, 1 << 20)
    assert parse_batches(_pread(s))[0].partition_leader_epoch == 2
    log.close()


def _pread(s):
    return os.pread(s.file.fileno(), s.size, s.position)


def test_becoming_leader_assigns_epoch_at_leo(tmp_path, clock):
    log = open_log(tmp_path, clock)
    leader_append(log, 4, epoch=0)
    log.leader_epochs.assign(1, log.log_end_offset)  # what the replica manager does on election
    assert log.end_offset_for_epoch(0) == (0, 4)
    assert log.end_offset_for_epoch(1) == (1, 4)
    leader_append(log, 2, epoch=1)
    assert log.leader_epochs.entries() == [E(0, 0), E(1, 4)]
    assert log.end_offset_for_epoch(1) == (1, 6)
    log.close()


def test_new_log_writes_its_checkpoint_at_the_first_epoch(tmp_path, clock):
    """Creating a partition writes no empty checkpoint (two fsyncs per partition, which
    dominated creating 10,000 of them); the leader's first epoch writes it, as in Kafka."""
    path = tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT
    log = open_log(tmp_path, clock)
    assert not path.exists()
    log.close()
    log = open_log(tmp_path, clock)  # reopened empty: still nothing to record
    assert not path.exists() and log.leader_epochs.entries() == []
    log.leader_epochs.assign(0, log.log_end_offset)
    assert read_leader_epoch_checkpoint(path) == [E(0, 0)]
    leader_append(log, 2, epoch=0)
    log.close()
    log = open_log(tmp_path, clock)
    assert log.leader_epochs.entries() == [E(0, 0)]
    log.close()
    path.write_text("garbage\n")  # a corrupt checkpoint is rewritten from the log
    log = open_log(tmp_path, clock)
    assert read_leader_epoch_checkpoint(path) == [E(0, 0)]
    log.close()


def test_epoch_writes_are_fsynced_by_the_log_flush_not_on_the_loop(tmp_path, clock, monkeypatch):
    """Leading a partition writes its checkpoint without an fsync (one per partition held the
    event loop for minutes when creating 10,000 partitions on a busy disk); the log's flush
    fsyncs it before the recovery point moves past the epoch, and an unchanged cache writes
    nothing at all."""
    log = open_log(tmp_path, clock)
    path = log.directory / LEADER_EPOCH_CHECKPOINT
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    log.leader_epochs.assign(0, log.log_end_offset)
    leader_append(log, 2, epoch=0)
    assert synced == [] and read_leader_epoch_checkpoint(path) == [E(0, 0)]
    assert log.leader_epochs.unsynced
    mtime = path.stat().st_mtime_ns
    log.leader_epochs.flush()  # the file holds these entries already: not rewritten
    assert path.stat().st_mtime_ns == mtime
    log.flush()
    assert synced and not log.leader_epochs.unsynced and log.recovery_point == 2
    synced.clear()
    log.flush()  # nothing new to make durable in the checkpoint
    assert not log.leader_epochs.unsynced
    log.close()
    reopened = open_log(tmp_path, clock, clean_shutdown=True, recovery_point=2)
    assert reopened.leader_epochs.entries() == [E(0, 0)]
    reopened.close()


def test_a_new_partition_without_data_costs_no_fsync_at_the_periodic_flush(
    tmp_path, clock, monkeypatch
):
    """A partition its leader has not written to yet (an epoch assigned, an empty log) has
    no recovery point to move past its epoch: the periodic flush leaves its checkpoint
    unsynced (two fsyncs per partition: 200,000 in the first flush after creating 100,000
    partitions, which ran for minutes beside W21's produce and consume).  The first data
    makes the flush sync it before the recovery point moves."""
    log = open_log(tmp_path, clock)
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    log.leader_epochs.assign(0, log.log_end_offset)
    assert log.flush() == 0
    assert synced == [] and log.leader_epochs.unsynced
    leader_append(log, 2, epoch=0)
    log.flush()
    assert synced and not log.leader_epochs.unsynced and log.recovery_point == 2
    log.close()
    reopened = open_log(tmp_path, clock, clean_shutdown=True, recovery_point=2)
    assert reopened.leader_epochs.entries() == [E(0, 0)]
    reopened.close()


def test_truncate_and_retention_update_cache(tmp_path, clock):
    one = len(build_batch([(None, b"v", [])] * 2, timestamp=1))
    log = open_log(tmp_path, clock, cfg={"segment_bytes": one, "retention_ms": -1})
    for epoch in (0, 0, 1, 1, 2, 2):
        leader_append(log, 2, epoch=epoch)  # one batch per segment, offsets 0..11
    assert log.leader_epochs.entries() == [E(0, 0), E(1, 4), E(2, 8)]
    log.truncate_to(8)
    assert log.leader_epochs.entries() == [E(0, 0), E(1, 4)]
    log.truncate_to(5)  # inside a batch: the whole batch goes
    assert log.log_end_offset == 4 and log.leader_epochs.entries() == [E(0, 0)]
    for epoch in (1, 1, 2):
        leader_append(log, 2, epoch=epoch)
    log.config = LogConfig(segment_bytes=one, retention_bytes=one * 3, retention_ms=-1)
    assert log.delete_old_segments() == 2  # offsets 0..3 go
    assert log.log_start_offset == 4
    assert log.leader_epochs.entries() == [E(1, 4), E(2, 8)]
    log.truncate_to(0)
    assert log.leader_epochs.entries() == []
    log.close()


def test_recovery_rebuilds_missing_or_corrupt_checkpoint(tmp_path, clock):
    one = len(build_batch([(None, b"v", [])] * 2, timestamp=1))
    log = open_log(tmp_path, clock, cfg={"segment_bytes": one * 2})
    for epoch in (-1, 0, 0, 3, 3, 3, 5):
        leader_append(log, 2, epoch=epoch)
    want = [E(0, 2), E(3, 6), E(5, 12)]
    assert log.leader_epochs.entries() == want
    log.close()
    path = tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT
    for damage in (path.unlink, lambda: path.write_text("0\n7\ngarbage"), lambda: None):
        damage()
        # a clean shutdown: no segment is scanned, yet the cache must come back whole
        log = open_log(tmp_path, clock, clean_shutdown=True)
        assert log.leader_epochs.entries() == want
        assert read_leader_epoch_checkpoint(path) == want
        log.close()


def test_recovery_drops_entries_beyond_recovered_leo(tmp_path, clock):
    log = open_log(tmp_path, clock)
    leader_append(log, 2, epoch=0)
    leader_append(log, 2, epoch=1)
    log.flush()
    leader_append(log, 2, epoch=2)  # this batch is torn by the crash below
    seg = log.active_segment
    size = seg.size
    for s in log.segments:
        s.close()
    with open(seg.log_path, "r+b") as f:
        f.truncate(size - 5)
    path = tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT
    assert read_leader_epoch_checkpoint(path)[-1] == E(2, 4)
    log = open_log(tmp_path, clock, recovery_point=4)
    assert log.log_end_offset == 4
    assert log.leader_epochs.entries() == [E(0, 0), E(1, 2)]
    # not rewritten at load (a write per partition at every start): every load drops the
    # entries beyond the log end again, and the file is rewritten before the log grows past
    # them, even by an append in the latest epoch, which changes nothing in the cache
    assert log.leader_epochs.dirty and read_leader_epoch_checkpoint(path)[-1] == E(2, 4)
    leader_append(log, 2, epoch=1)
    assert read_leader_epoch_checkpoint(path) == [E(0, 0), E(1, 2)]
    assert not log.leader_epochs.dirty
    log.close()
    log = open_log(tmp_path, clock, recovery_point=4)
    assert log.leader_epochs.entries() == [E(0, 0), E(1, 2)]
    log.close()


def test_recovery_adds_epochs_missing_from_stale_checkpoint(tmp_path, clock):
    log = open_log(tmp_path, clock)
    leader_append(log, 2, epoch=0)
    leader_append(log, 2, epoch=4)
    for s in log.segments:  # crash
        s.close()
    path = tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT
    path.write_text("0\n1\n0 0\n")  # as if the process died before writing the new entry
    log = open_log(tmp_path, clock, recovery_point=2)
    assert log.leader_epochs.entries() == [E(0, 0), E(4, 2)]
    log.close()


# -- the writer thread (LogManager's EpochCheckpointWriter) ---------------------------------------


class HeldWriter(EpochCheckpointWriter):
    """A writer whose thread has not run yet: what it was handed, not written."""

    def __init__(self):
        super().__init__()
        self.handed = []

    def submit(self, cache):
        self.handed.append(cache)

    def run_now(self):
        for c in self.handed:
            c.write_pending(keep_error=True)
        self.handed.clear()


def crash(log):
    for s in log.segments:
        s.close()


def test_grown_checkpoint_is_handed_to_the_writer_and_a_crash_before_it_loses_nothing(
    tmp_path, clock
):
    log = open_log(tmp_path, clock)
    writer = log.leader_epochs.writer = HeldWriter()
    path = tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT
    leader_append(log, 2, epoch=0)  # an absent file: the first write is the writer's too
    assert writer.handed == [log.leader_epochs] and not path.exists()
    writer.run_now()
    assert read_leader_epoch_checkpoint(path) == [E(0, 0)]
    log.flush()  # recovery point 2
    leader_append(log, 2, epoch=3)  # a new epoch (after a failover): not written by the caller
    leader_append(log, 1, epoch=4)
    assert writer.handed == [log.leader_epochs]  # handed once: the writer takes the newest
    assert read_leader_epoch_checkpoint(path) == [E(0, 0)]
    crash(log)  # kill -9 before the writer ran: recovery reads them from the headers
    log = open_log(tmp_path, clock, recovery_point=2)
    assert log.leader_epochs.entries() == [E(0, 0), E(3, 2), E(4, 4)]
    log.close()


def test_the_log_flush_writes_what_the_writer_has_not_before_the_recovery_point_moves(
    tmp_path, clock
):
    log = open_log(tmp_path, clock)
    writer = log.leader_epochs.writer = HeldWriter()
    path = tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT
    leader_append(log, 2, epoch=0)
    leader_append(log, 2, epoch=1)
    assert not path.exists()
    log.flush()  # the recovery point passes epoch 1's start: the entries are on disk first
    assert read_leader_epoch_checkpoint(path) == [E(0, 0), E(1, 2)]
    writer.run_now()  # (nothing left for it)
    crash(log)
    log = open_log(tmp_path, clock, recovery_point=4)  # no header scanned
    assert log.leader_epochs.entries() == [E(0, 0), E(1, 2)]
    log.close()


def test_a_truncation_is_written_at_once_and_drops_the_pending_write(tmp_path, clock):
    log = open_log(tmp_path, clock)
    writer = log.leader_epochs.writer = HeldWriter()
    path = tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT
    leader_append(log, 2, epoch=0)
    writer.run_now()
    leader_append(log, 2, epoch=2)  # pending: [0@0, 2@2]
    log.truncate_to(2)  # a follower truncating: written now, the pending write withdrawn
    assert read_leader_epoch_checkpoint(path) == [E(0, 0)]
    writer.run_now()
    assert read_leader_epoch_checkpoint(path) == [E(0, 0)]
    leader_append(log, 1, epoch=5)
    writer.run_now()
    assert read_leader_epoch_checkpoint(path) == [E(0, 0), E(5, 2)]
    log.close()


def test_the_writer_thread_writes_and_stop_drains_it(tmp_path, clock):
    log = open_log(tmp_path, clock)
    writer = log.leader_epochs.writer = EpochCheckpointWriter()
    leader_append(log, 2, epoch=0)
    leader_append(log, 2, epoch=1)
    writer.stop()
    path = tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT
    assert read_leader_epoch_checkpoint(path) == [E(0, 0), E(1, 2)]
    log.close()
