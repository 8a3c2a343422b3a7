"""log/producer_state.py and its use by PartitionLog: idempotent producers."""

from __future__ import annotations

import pytest

from pybroker.clock import ManualClock
from pybroker.errors import ErrorCode, KafkaError
from pybroker.log.partition_log import LogConfig, PartitionLog
from pybroker.log.producer_state import ProducerStateManager
from pybroker.wire.records import build_batch, parse_batches


def pbatch(pid, epoch, seq, n=2) -> bytearray:
    return bytearray(
        build_batch(
            [(None, b"x" * 20, [])] * n,
            timestamp=1_000,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
        )
    )


def append(log, buf):
    info = log.append(buf, parse_batches(buf))
    log.high_watermark = log.log_end_offset  # the only replica: committed at once
    return info


def code_of(log, buf) -> ErrorCode:
    with pytest.raises(KafkaError) as ei:
        append(log, buf)
    return ei.value.code


@pytest.fixture
def clock():
    return ManualClock()


def open_log(tmp_path, clock, **kw):
    return PartitionLog.open(tmp_path / "t-0", LogConfig(**kw.pop("cfg", {})), clock, **kw)


def test_duplicate_returns_original_offsets(tmp_path, clock):
    log = open_log(tmp_path, clock)
    append(log, pbatch(-1, -1, -1, n=3))  # non-idempotent data first
    a = append(log, pbatch(7, 0, 0))
    b = append(log, pbatch(7, 0, 2))
    assert (a.first_offset, a.last_offset, b.first_offset) == (3, 4, 5)
    dup = append(log, pbatch(7, 0, 0))
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (3, 4)
    assert log.log_end_offset == 7
    # only the last 5 batches are remembered
    for seq in range(4, 14, 2):
        append(log, pbatch(7, 0, seq))
    assert code_of(log, pbatch(7, 0, 0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert append(log, pbatch(7, 0, 6)).duplicate
    log.close()


def test_sequence_and_epoch_rules(tmp_path, clock):
    log = open_log(tmp_path, clock)
    assert append(log, pbatch(1, 3, 42)).first_offset == 0  # unknown producer: any sequence
    assert code_of(log, pbatch(1, 3, 45)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # gap
    assert code_of(log, pbatch(1, 3, 43)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # overlap
    assert code_of(log, pbatch(1, 2, 44)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert code_of(log, pbatch(1, 4, 5)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # new epoch
    assert append(log, pbatch(1, 4, 0)).first_offset == 2
    assert code_of(log, pbatch(1, 3, 44)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert append(log, pbatch(1, 4, 2)).first_offset == 4
    assert log.log_end_offset == 6
    log.close()


def test_sequence_wraps(tmp_path, clock):
    log = open_log(tmp_path, clock)
    append(log, pbatch(9, 0, 2**31 - 2))  # last sequence 2**31-1
    assert append(log, pbatch(9, 0, 0)).first_offset == 2
    log.close()


def test_several_batches_checked_in_order(tmp_path, clock):
    log = open_log(tmp_path, clock)
    buf = pbatch(5, 0, 0) + pbatch(5, 0, 2) + pbatch(6, 1, 10)
    info = append(log, buf)
    assert (info.first_offset, info.last_offset) == (0, 5)
    assert log.producer_state.last_entry(5).last_seq == 3
    bad = pbatch(5, 0, 4) + pbatch(5, 0, 7)
    assert code_of(log, bad) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.log_end_offset == 6  # nothing of the failed append was written
    log.close()


def _fill(log):
    append(log, pbatch(1, 0, 0))
    append(log, pbatch(2, 5, 100))
    append(log, pbatch(1, 0, 2))
    append(log, pbatch(2, 5, 102))


def _check_state(log):
    assert append(log, pbatch(1, 0, 2)).duplicate
    assert append(log, pbatch(2, 5, 100)).first_offset == 2  # original offsets
    assert code_of(log, pbatch(1, 0, 6)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert append(log, pbatch(1, 0, 4)).first_offset == 8


@pytest.mark.parametrize("mode", ["clean", "unclean", "unclean_no_snapshot", "snapshot_then_more"])
def test_state_survives_restart(tmp_path, clock, mode):
    one = len(pbatch(1, 0, 0))
    cfg = {"segment_bytes": one * 3}
    log = open_log(tmp_path, clock, cfg=cfg)
    _fill(log)
    d = tmp_path / "t-0"
    if mode == "clean":
        log.close()
        assert (d / "00000000000000000008.snapshot").exists()
        log = open_log(tmp_path, clock, cfg=cfg, clean_shutdown=True)
    else:
        for s in log.segments:
            s.close()
        if mode == "unclean_no_snapshot":
            for p in d.glob("*.snapshot"):
                p.unlink()
        elif mode == "snapshot_then_more":
            assert [p.name for p in d.glob("*.snapshot")] == ["00000000000000000006.snapshot"]
        log = open_log(tmp_path, clock, cfg=cfg)
    assert log.log_end_offset == 8
    _check_state(log)
    log.close()


def test_snapshot_above_recovered_end_is_dropped(tmp_path, clock):
    one = len(pbatch(1, 0, 0))
    log = open_log(tmp_path, clock, cfg={"segment_bytes": one * 3})
    _fill(log)
    log.close()
    d = tmp_path / "t-0"
    # lose the tail of the last segment: the snapshot at 8 is now above the log end
    seg = d / "00000000000000000006.log"
    seg.write_bytes(seg.read_bytes()[:-5])
    log = open_log(tmp_path, clock, cfg={"segment_bytes": one * 3})
    assert log.log_end_offset == 6
    assert not (d / "00000000000000000008.snapshot").exists()
    assert append(log, pbatch(2, 5, 102)).first_offset == 6  # rebuilt state: 102 is next
    log.close()


def test_corrupt_snapshot_is_ignored(tmp_path, clock):
    log = open_log(tmp_path, clock)
    _fill(log)
    log.close()
    snap = tmp_path / "t-0" / "00000000000000000008.snapshot"
    data = bytearray(snap.read_bytes())
    data[-1] ^= 1
    snap.write_bytes(bytes(data))
    log = open_log(tmp_path, clock, clean_shutdown=True)
    _check_state(log)
    log.close()


def test_retention_keeps_producer_state(tmp_path, clock):
    one = len(pbatch(1, 0, 0))
    cfg = {"segment_bytes": one, "retention_bytes": 0, "retention_ms": -1}
    log = open_log(tmp_path, clock, cfg=cfg)
    _fill(log)
    log.delete_old_segments()
    assert log.log_start_offset == 8
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.snapshot")) == [
        "00000000000000000008.snapshot"
    ]
    log.close()
    log = open_log(tmp_path, clock, cfg=cfg)
    _check_state(log)
    log.close()


def test_snapshot_roundtrip(tmp_path):
    m = ProducerStateManager(tmp_path)
    for seq in range(0, 14, 2):
        m.update(parse_batches(pbatch(3, 1, seq))[0], 100 + seq)
    path = m.take_snapshot(fsync=True)
    assert path.name == "00000000000000000114.snapshot"
    m2 = ProducerStateManager(tmp_path)
    assert m2.load_latest_snapshot(10**6) == 114
    e = m2.last_entry(3)
    assert e.producer_epoch == 1 and len(e.batches) == 5 and e.last_seq == 13
    assert m2.producers == m.producers
