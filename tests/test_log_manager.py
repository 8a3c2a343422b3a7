"""log/manager.py: log dir layout, checkpoints, clean shutdown marker."""

from __future__ import annotations

import pytest

from pybroker.clock import ManualClock
from pybroker.log.manager import (
    CLEAN_SHUTDOWN_FILE,
    RECOVERY_POINT_CHECKPOINT,
    LogManager,
    read_checkpoint,
    write_checkpoint,
)
from pybroker.log.partition_log import LogConfig
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
    mgr.flush_all()
    mgr.close()
