"""log/manager.py: log dir layout, checkpoints, clean shutdown marker."""

from __future__ import annotations

import base64
import errno
import os
import threading
import uuid

import pytest
from broker_fixture import wait_until

from pybroker.clock import ManualClock
from pybroker.log.checkpoints import (
    CLEAN_SHUTDOWN_FILE,
    RECOVERY_POINT_CHECKPOINT,
    read_checkpoint,
    write_checkpoint,
)
from pybroker.log.manager import LogManager
from pybroker.log.partition_log import LogConfig, PartitionLog
from pybroker.log.segment import LogSegment
from pybroker.wire.records import build_batch, parse_batches


def append(log, n=2):
    buf = bytearray(build_batch([(None, b"v", [])] * n, timestamp=1))
    info = log.append(buf, parse_batches(buf))
    log.high_watermark = log.log_end_offset  # the only replica: committed at once
    return info


@pytest.fixture
def clock():
    return ManualClock()


def test_checkpoint_format(tmp_path):
    p = tmp_path / RECOVERY_POINT_CHECKPOINT
    write_checkpoint(p, [("my.topic-x", 3, 42), ("b", 0, 0)])
    assert p.read_text() == "0\n2\nmy.topic-x 3 42\nb 0 0\n"
    assert read_checkpoint(p) == {("my.topic-x", 3): 42, ("b", 0): 0}
    p.write_text("0\n3\na 0 1\n")
    assert read_checkpoint(p) == {}
    assert read_checkpoint(tmp_path / "missing") == {}


def test_lifecycle_clean_and_unclean(tmp_path, clock, monkeypatch):
    mgr = LogManager(tmp_path, LogConfig(), clock)
    mgr.load_all()
    a = mgr.get_or_create("orders-v2", 0)
    b = mgr.get_or_create("orders-v2", 1)
    assert mgr.get_or_create("orders-v2", 0) is a and mgr.get("nope", 0) is None
    append(a, 3)
    append(b)
    (tmp_path / "not-a-partition.txt").write_text("operator notes")
    (tmp_path / "lost+found").mkdir()
    mgr.close()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert read_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT) == {
        ("orders-v2", 0): 3,
        ("orders-v2", 1): 2,
    }

    scanned = []
    orig = LogSegment.recover
    monkeypatch.setattr(
        LogSegment, "recover", lambda self, now: scanned.append(self.base_offset) or orig(self, now)
    )
    mgr = LogManager(tmp_path, LogConfig(), clock)
    mgr.load_all()
    assert mgr.had_clean_shutdown and scanned == []
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # a crash from now on is unclean
    assert sorted((t, p, log.log_end_offset) for t, p, log in mgr.partitions()) == [
        ("orders-v2", 0, 3),
        ("orders-v2", 1, 2),
    ]
    append(mgr.get("orders-v2", 0))
    for _, _, log in mgr.partitions():  # crash: no close
        for s in log.segments:
            s.close()

    mgr = LogManager(tmp_path, LogConfig(), clock)
    mgr.load_all()
    assert not mgr.had_clean_shutdown and sorted(scanned) == [0, 0]
    assert mgr.get("orders-v2", 0).log_end_offset == 5
    mgr.close()


def _two_dirs_with_logs(tmp_path, clock, partitions=12):
    dirs = [tmp_path / "a", tmp_path / "b"]
    mgr = LogManager(dirs, LogConfig(), clock)
    mgr.load_all()
    for p in range(partitions):
        append(mgr.get_or_create("t", p), 1 + p % 3)
    assert {mgr.dir_of(lg) for _, _, lg in mgr.partitions()} == set(dirs)
    return mgr, dirs


def test_close_closes_each_dirs_logs_on_a_pool_then_marks_every_dir_clean(
    tmp_path, clock, monkeypatch
):
    """Kafka's LogManager.shutdown: num.recovery.threads.per.data.dir threads per dir close
    its logs.  Every close here waits for a second one to run at the same time (a barrier of
    two per dir): closing in turn on one thread would break the barrier."""
    mgr, dirs = _two_dirs_with_logs(tmp_path, clock)
    barriers = {d: threading.Barrier(2, timeout=30) for d in dirs}
    threads: dict[object, set[int]] = {d: set() for d in dirs}
    orig = PartitionLog.close

    def close(self):
        d = LogManager.dir_of(self)
        threads[d].add(threading.get_ident())
        barriers[d].wait()
        orig(self)

    monkeypatch.setattr(PartitionLog, "close", close)
    mgr.close(threads_per_dir=2)
    assert all(len(ids) == 2 for ids in threads.values()), threads
    assert all((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)
    assert all(lg.closed for _, _, lg in mgr.partitions())
    monkeypatch.setattr(PartitionLog, "close", orig)

    again = LogManager(dirs, LogConfig(), clock)
    again.load_all()
    assert again.had_clean_shutdown
    assert {(t, p): lg.log_end_offset for t, p, lg in again.partitions()} == {
        ("t", p): 1 + p % 3 for p in range(12)
    }
    again.close()


def test_a_close_interrupted_midway_leaves_no_marker_and_the_next_start_recovers(
    tmp_path, clock, monkeypatch
):
    """A log whose close fails with an unexpected error (the process dying mid-close): the
    others still close, the error propagates and no dir is marked clean, so the next start
    recovers every log instead of trusting them."""
    mgr, dirs = _two_dirs_with_logs(tmp_path, clock)
    victim = mgr.get("t", 5)
    orig = PartitionLog.close

    def close(self):
        if self is victim:
            raise RuntimeError("killed mid-close")
        orig(self)

    monkeypatch.setattr(PartitionLog, "close", close)
    with pytest.raises(RuntimeError, match="killed mid-close"):
        mgr.close(threads_per_dir=4)
    assert not any((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)
    assert all(lg.closed for _, _, lg in mgr.partitions() if lg is not victim)
    monkeypatch.setattr(PartitionLog, "close", orig)
    for s in victim.segments:  # (what the dying process's descriptors would do)
        s.close()

    scanned = []
    recover = LogSegment.recover
    monkeypatch.setattr(
        LogSegment,
        "recover",
        lambda self, now: scanned.append(self.base_offset) or recover(self, now),
    )
    again = LogManager(dirs, LogConfig(), clock)
    again.load_all()
    assert not again.had_clean_shutdown and len(scanned) == 12
    assert {(t, p): lg.log_end_offset for t, p, lg in again.partitions()} == {
        ("t", p): 1 + p % 3 for p in range(12)
    }
    again.close()


def test_a_dir_whose_log_fails_to_close_is_not_marked_clean(tmp_path, clock, monkeypatch):
    """An I/O error closing a log: its dir gets no clean-shutdown marker, even while the
    dir's failure is still queued to the event loop; the other dir gets its marker."""
    mgr, dirs = _two_dirs_with_logs(tmp_path, clock)
    victim = mgr.get("t", 3)
    bad = mgr.dir_of(victim)
    orig = PartitionLog.close

    def close(self):
        if self is victim:
            raise OSError(errno.EIO, "I/O error")
        orig(self)

    monkeypatch.setattr(PartitionLog, "close", close)
    # the broker closes the logs in a worker thread: fail_dir is only queued to the loop
    queued = []
    mgr.owner_thread, mgr.call_on_owner = -1, lambda f, *args: queued.append((f, args))
    mgr.close(threads_per_dir=3)
    assert [args[0] for _, args in queued] == [bad]
    assert not (bad / CLEAN_SHUTDOWN_FILE).exists()
    assert [(d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs if d != bad] == [True]


def test_delete_partition_and_retention(tmp_path, clock):
    one = len(build_batch([(None, b"v", [])] * 2, timestamp=1))
    mgr = LogManager(
        tmp_path, LogConfig(segment_bytes=one, retention_ms=1000, file_delete_delay_ms=10), clock
    )
    mgr.load_all()
    log = mgr.get_or_create("t", 0)
    for _ in range(3):
        append(log)
    assert mgr.run_retention() == 3  # timestamps are ancient: every segment goes (after a roll)
    assert log.log_start_offset == 6
    clock.advance(10)
    mgr.delete_pending_files()
    assert not list((tmp_path / "t-0").glob("*.deleted"))
    mgr.delete("t", 0)
    assert mgr.get("t", 0) is None and not (tmp_path / "t-0").exists()
    assert len(list(tmp_path.glob("t-0.*-delete"))) == 1
    clock.advance(10)
    mgr.delete_pending_files()
    assert not list(tmp_path.glob("t-0.*-delete"))
    mgr.checkpoint()  # the periodic work: the deleted log is in no checkpoint
    assert read_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT) == {}
    mgr.close()


def test_partition_metadata_file_names_the_topic_id_in_kafkas_format(tmp_path, clock):
    """Kafka's partition.metadata: 'version: 0' and 'topic_id: <base64url, no padding>'."""
    tid = uuid.UUID("5f3e8c1a-0c6d-4b4e-9a57-1d2f3e4a5b6c")
    mgr = LogManager(tmp_path, LogConfig(), clock)
    log = mgr.get_or_create("t", 0, topic_id=tid)
    text = (tmp_path / "t-0" / "partition.metadata").read_text()
    encoded = base64.urlsafe_b64encode(tid.bytes).decode().rstrip("=")
    assert text == f"version: 0\ntopic_id: {encoded}\n"
    assert log.topic_id == tid
    mgr.close()
    again = LogManager(tmp_path, LogConfig(), clock)
    again.load_all()
    assert again.get("t", 0).topic_id == tid
    again.close()


def test_a_log_of_another_incarnation_of_the_topic_is_replaced_not_reused(tmp_path, clock):
    """A topic deleted and created again under the same name has a new topic id: the log of
    the old incarnation is deleted (renamed -delete) and an empty one opened, never reused."""
    old, new = uuid.uuid4(), uuid.uuid4()
    mgr = LogManager(tmp_path, LogConfig(), clock)
    log = mgr.get_or_create("t", 0, topic_id=old)
    append(log)
    assert mgr.get_or_create("t", 0, topic_id=old) is log
    fresh = mgr.get_or_create("t", 0, topic_id=new)
    assert fresh is not log and fresh.topic_id == new and fresh.log_end_offset == 0
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith("-delete")]
    # a log without an id (written before partition.metadata existed) is adopted
    legacy = mgr.get_or_create("u", 0)
    assert legacy.topic_id is None
    assert mgr.get_or_create("u", 0, topic_id=new) is legacy and legacy.topic_id == new
    mgr.close()


def test_removing_a_deleted_partition_leaves_a_new_log_of_the_same_name_alone(tmp_path, clock):
    """A partition deleted and at once created again (same directory name): the deleted log's
    files are renamed away with its directory, and its removal later (file.delete.delay.ms, or
    at shutdown) must unlink only those, never the new log's files at the old path."""
    mgr = LogManager(tmp_path, LogConfig(), clock)
    old = mgr.get_or_create("t", 0, topic_id=uuid.uuid4())
    append(old)
    mgr.delete("t", 0)
    assert old.directory.name.endswith("-delete")
    assert all(seg.log_path.parent == old.directory for seg in old.segments)
    new = mgr.get_or_create("t", 0, topic_id=uuid.uuid4())
    append(new, 3)
    mgr.delete_pending_files(force=True)
    assert not old.directory.exists()
    mgr.close()
    again = LogManager(tmp_path, LogConfig(), clock)
    again.load_all()
    assert again.get("t", 0).log_end_offset == 3
    again.close()


def test_a_deleted_partition_holds_no_descriptor_while_it_awaits_removal(tmp_path, clock):
    """Found by the protocol fuzzer: 2,721 of 2,880 open descriptors pointed into ``-delete``
    directories, held until file.delete.delay.ms and the retention check removed them.  As
    Kafka closes a deleted log's handles at once, so does LogManager.delete (a read in flight
    keeps its own reference until it is done)."""

    def held() -> list[str]:
        out = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if str(tmp_path) in target and "-delete" in target:
                out.append(target)
        return out

    mgr = LogManager(tmp_path, LogConfig(segment_bytes=200), clock)
    log = mgr.get_or_create("t", 0, topic_id=uuid.uuid4())
    for _ in range(5):
        append(log)
    assert len(log.segments) > 1
    # the rolls' background flushes are done (one in flight, like a read in flight, keeps
    # its descriptor until it ends)
    wait_until(lambda: log.recovery_point == log.active_segment.base_offset)
    log.read(0, 1 << 20)  # an older segment's descriptor too
    mgr.delete("t", 0)
    assert held() == []
    mgr.close()


def test_concurrent_checkpoints_never_take_a_healthy_dir_offline(tmp_path, clock):
    """The periodic checkpoint runs in a worker thread (HostedLogs.checkpoint_loop -> LogManager.checkpoint)
    while the loop checkpoints after a replica move or DeleteRecords: both wrote the same
    ``.tmp`` file, and the second rename failed with ENOENT, taking the dir offline."""
    import threading

    mgr = LogManager(tmp_path, LogConfig(), clock)
    for p in range(20):
        append(mgr.get_or_create("t", p))
    start = threading.Barrier(4)

    def hammer():
        start.wait()
        for _ in range(200):
            mgr.checkpoint()

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert mgr.offline_dirs == set()
    assert read_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT) == {
        ("t", p): mgr.logs[("t", p)].recovery_point for p in range(20)
    }
    assert not list(tmp_path.glob("*.tmp"))
