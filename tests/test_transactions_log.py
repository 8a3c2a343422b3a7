"""The log side of transactions (KIP-98): producer state, markers, LSO, .txnindex, recovery."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from pybroker.clock import ManualClock
from pybroker.errors import ErrorCode, KafkaError
from pybroker.log.partition_log import LogConfig, PartitionLog
from pybroker.log.txn_index import AbortedTxn
from pybroker.wire.control_records import read_end_txn_marker
from pybroker.wire.records import build_batch, parse_batches, unpack_header

PID_A, PID_B = 1000, 2000


@pytest.fixture
def clock():
    return ManualClock()


def open_log(path: Path, clock, **kw) -> PartitionLog:
    return PartitionLog.open(path / "t-0", LogConfig(**kw.pop("config", {})), clock, **kw)


def txn_batch(pid: int, seq: int, n: int = 2, epoch: int = 0, transactional: bool = True):
    return bytearray(
        build_batch(
            [(None, b"x" * 50, [])] * n,
            timestamp=1_700_000_000_000,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=transactional,
        )
    )


def append(log: PartitionLog, buf: bytearray):
    info = log.append(buf, parse_batches(buf))
    log.high_watermark = log.log_end_offset
    return info


def marker(log: PartitionLog, pid: int, committed: bool, epoch: int = 0, coord: int = 0):
    info = log.append_txn_marker(pid, epoch, coord, committed)
    log.high_watermark = log.log_end_offset
    return info


def test_marker_batch_layout(tmp_path, clock) -> None:
    log = open_log(tmp_path, clock)
    append(log, txn_batch(PID_A, 0))
    info = marker(log, PID_A, committed=True, epoch=0, coord=7)
    assert (info.first_offset, info.last_offset) == (2, 2)
    s = log.read(2, 1 << 20)
    import os

    data = os.pread(s.file.fileno(), s.size, s.position)
    h = unpack_header(data)
    assert h.is_control and h.is_transactional
    assert (h.base_offset, h.producer_id, h.producer_epoch, h.base_sequence) == (2, PID_A, 0, -1)
    assert h.records_count == 1
    m = read_end_txn_marker(data)
    assert m is not None and m.committed and m.coordinator_epoch == 7
    # Kafka's control record key and value: version 0 + type 1 (COMMIT); version 0 + epoch
    from pybroker.wire.record_walker import decode_records

    rec = decode_records(data)[0]
    assert rec.key == struct.pack(">hh", 0, 1)
    assert rec.value == struct.pack(">hi", 0, 7)


def test_lso_stops_at_an_open_transaction_and_moves_at_its_marker(tmp_path, clock) -> None:
    log = open_log(tmp_path, clock)
    append(log, txn_batch(PID_B, 0, transactional=False))  # 0-1 idempotent, not txn
    append(log, txn_batch(PID_A, 0))  # 2-3 open
    assert log.last_stable_offset == 2
    assert log.high_watermark == 4
    append(log, txn_batch(PID_A, 2))  # 4-5 same transaction
    assert log.last_stable_offset == 2
    info = log.append_txn_marker(PID_A, 0, 0, True)  # 6
    # the marker is not yet below the high watermark: still unstable
    assert log.last_stable_offset == 2
    log.high_watermark = info.last_offset + 1
    assert log.last_stable_offset == 7
    assert log.collect_aborted_transactions(0, 7) == []


def test_abort_indexes_the_transaction(tmp_path, clock) -> None:
    log = open_log(tmp_path, clock)
    append(log, txn_batch(PID_A, 0))  # 0-1
    append(log, txn_batch(PID_B, 0))  # 2-3 (B open)
    marker(log, PID_A, committed=False)  # 4: A aborted while B is open -> LSO 2
    assert log.collect_aborted_transactions(0, 5) == [AbortedTxn(PID_A, 0, 4, 2)]
    assert log.last_stable_offset == 2
    marker(log, PID_B, committed=False)  # 5
    assert log.collect_aborted_transactions(0, 6) == [
        AbortedTxn(PID_A, 0, 4, 2),
        AbortedTxn(PID_B, 2, 5, 6),
    ]
    # only the ones overlapping the range
    assert log.collect_aborted_transactions(5, 6) == [AbortedTxn(PID_B, 2, 5, 6)]
    # Kafka's .txnindex: 34-byte entries, version 0, big-endian
    raw = (tmp_path / "t-0" / f"{0:020d}.txnindex").read_bytes()
    assert raw == struct.pack(">hqqqq", 0, PID_A, 0, 4, 2) + struct.pack(
        ">hqqqq", 0, PID_B, 2, 5, 6
    )
    assert log.last_stable_offset == 6


def test_a_marker_without_data_is_not_indexed(tmp_path, clock) -> None:
    log = open_log(tmp_path, clock)
    marker(log, PID_A, committed=False)
    assert log.collect_aborted_transactions(0, 10) == []
    assert not (tmp_path / "t-0" / f"{0:020d}.txnindex").exists()
    assert log.last_stable_offset == 1


def test_produce_checks(tmp_path, clock) -> None:
    log = open_log(tmp_path, clock)
    append(log, txn_batch(PID_A, 0, epoch=3))
    with pytest.raises(KafkaError) as e:  # non-transactional write inside a transaction
        append(log, txn_batch(PID_A, 2, epoch=3, transactional=False))
    assert e.value.code == ErrorCode.INVALID_TXN_STATE
    with pytest.raises(KafkaError) as e:
        append(log, txn_batch(PID_A, 0, epoch=2))
    assert e.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(KafkaError) as e:  # the epoch is checked first, as Kafka does
        append(log, txn_batch(PID_A, 0, epoch=2, transactional=False))
    assert e.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(KafkaError) as e:  # a marker older than the producer's epoch
        log.append_txn_marker(PID_A, 2, 0, True)
    assert e.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    marker(log, PID_A, committed=True, epoch=3, coord=5)
    with pytest.raises(KafkaError) as e:  # an older coordinator
        log.append_txn_marker(PID_A, 3, 4, True)
    assert e.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    # a coordinator's abort with a bumped epoch fences the old producer epoch
    append(log, txn_batch(PID_A, 2, epoch=3))
    marker(log, PID_A, committed=False, epoch=4, coord=5)
    with pytest.raises(KafkaError) as e:
        append(log, txn_batch(PID_A, 4, epoch=3))
    assert e.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    append(log, txn_batch(PID_A, 0, epoch=4))  # the new epoch starts at sequence 0


def _state(log: PartitionLog):
    return (
        log.last_stable_offset,
        log.collect_aborted_transactions(0, log.log_end_offset),
        {p: e.current_txn_first_offset for p, e in log.producer_state.producers.items()},
    )


def _workload(log: PartitionLog) -> None:
    append(log, txn_batch(PID_A, 0))  # 0-1
    append(log, txn_batch(PID_B, 0))  # 2-3
    marker(log, PID_A, committed=False)  # 4
    log.roll()
    append(log, txn_batch(PID_A, 2))  # 5-6
    marker(log, PID_A, committed=False)  # 7
    append(log, txn_batch(PID_A, 4))  # 8-9 A open again, B open


@pytest.mark.parametrize("how", ["clean", "unclean", "no-snapshot", "missing-index", "corrupt"])
def test_restart_keeps_ongoing_transactions_and_the_index(tmp_path, clock, how) -> None:
    log = open_log(tmp_path, clock)
    _workload(log)
    before = _state(log)
    assert before == (
        2,
        [AbortedTxn(PID_A, 0, 4, 2), AbortedTxn(PID_A, 5, 7, 2)],
        {PID_A: 8, PID_B: 2},
    )
    d = tmp_path / "t-0"
    if how == "clean":
        log.close()
        reopened = open_log(tmp_path, clock, clean_shutdown=True)
    else:
        log.flush()  # data on disk, but no clean-shutdown snapshot
        for seg in log.segments:
            seg.close()
        if how == "no-snapshot":
            for p in d.glob("*.snapshot"):
                p.unlink()
        if how == "missing-index":
            for p in d.glob("*.txnindex"):
                p.unlink()
        if how == "corrupt":
            for p in d.glob("*.txnindex"):
                p.write_bytes(p.read_bytes()[:-3])
        reopened = open_log(tmp_path, clock, recovery_point=0)
    assert _state(reopened) == before
    assert sorted(p.name for p in d.glob("*.txnindex")) == [
        f"{0:020d}.txnindex",
        f"{5:020d}.txnindex",
    ]
    marker(reopened, PID_B, committed=True)
    marker(reopened, PID_A, committed=True)
    assert reopened.last_stable_offset == reopened.log_end_offset == 12


def test_truncation_drops_index_entries_and_restores_the_transaction(tmp_path, clock) -> None:
    log = open_log(tmp_path, clock)
    append(log, txn_batch(PID_A, 0))  # 0-1
    marker(log, PID_A, committed=False)  # 2
    append(log, txn_batch(PID_A, 2))  # 3-4
    marker(log, PID_A, committed=False)  # 5
    log.truncate_to(5)
    assert log.collect_aborted_transactions(0, 10) == [AbortedTxn(PID_A, 0, 2, 3)]
    assert log.producer_state.producers[PID_A].current_txn_first_offset == 3
    assert log.last_stable_offset == 3
    log.truncate_to(2)
    assert log.collect_aborted_transactions(0, 10) == []
    assert not (tmp_path / "t-0" / f"{0:020d}.txnindex").exists()


def test_retention_deletes_the_txnindex_with_its_segment(tmp_path, clock) -> None:
    log = open_log(tmp_path, clock, config={"retention_ms": 1000, "file_delete_delay_ms": 0})
    append(log, txn_batch(PID_A, 0))
    marker(log, PID_A, committed=False)
    log.roll()
    append(log, txn_batch(PID_B, 0, transactional=False))
    d = tmp_path / "t-0"
    assert (d / f"{0:020d}.txnindex").exists()
    clock.advance(10**13)
    assert log.delete_old_segments() >= 1
    log.delete_pending_files(force=True)
    assert not list(d.glob("*.txnindex*"))
    assert log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset) == []


def test_follower_applies_markers(tmp_path, clock) -> None:
    leader = open_log(tmp_path / "l", clock)
    append(leader, txn_batch(PID_A, 0))
    marker(leader, PID_A, committed=False)
    append(leader, txn_batch(PID_B, 0))
    import os

    s = leader.read(0, 1 << 20)
    buf = bytearray(os.pread(s.file.fileno(), s.size, s.position))
    follower = open_log(tmp_path / "f", clock)
    follower.append_as_follower(buf, parse_batches(buf, allow_control=True))
    follower.high_watermark = follower.log_end_offset
    assert follower.collect_aborted_transactions(0, 10) == [AbortedTxn(PID_A, 0, 2, 3)]
    assert follower.last_stable_offset == 3
    assert (tmp_path / "f" / "t-0" / f"{0:020d}.txnindex").read_bytes() == (
        tmp_path / "l" / "t-0" / f"{0:020d}.txnindex"
    ).read_bytes()


def test_a_clean_drops_aborted_data_then_its_marker_and_stops_at_the_lso(tmp_path, clock) -> None:
    """Kafka's cleaner rules for transactions (CleanedTransactionMetadata)."""
    from test_cleaner import append as cappend
    from test_cleaner import clean_until_done, make, read_log

    _, plog, cleaner = make(tmp_path, clock)
    d = tmp_path / "t-0"
    txn = {"producer_id": PID_A, "producer_epoch": 0, "is_transactional": True}
    cappend(plog, [(b"k", b"1")])  # 0
    cappend(plog, [(b"k", b"aborted")], base_sequence=0, **txn)  # 1
    marker(plog, PID_A, committed=False)  # 2
    cappend(plog, [(b"k", b"2")])  # 3
    plog.roll()
    cappend(
        plog,
        [(b"j", b"open")],
        producer_id=PID_B,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )  # 4: open
    cappend(plog, [(b"k", b"3")])  # 5
    cappend(plog, [(b"k", b"4")])  # 6
    plog.roll()
    assert plog.last_stable_offset == 4
    clean_until_done(cleaner)

    def offsets(key: bytes) -> list[tuple[int, bytes | None]]:
        return [(o, v) for o, k, v in read_log(plog) if k == key]

    # k=1 superseded, the aborted record dropped; the segment holding the LSO is not
    # cleaned: k=2 and k=3 survive k=4.  The aborted batch, A's last, stays empty (so does
    # the marker, with its index entry, while that batch is A's last data, as in Kafka).
    assert offsets(b"k") == [(3, b"2"), (5, b"3"), (6, b"4")]
    abort_key = struct.pack(">hh", 0, 0)
    assert [o for o, _ in offsets(abort_key)] == [2]
    assert plog.collect_aborted_transactions(0, 7) == [AbortedTxn(PID_A, 1, 2, 3)]
    assert [p.name for p in d.glob("*.txnindex")] == [f"{0:020d}.txnindex"]
    # B commits: everything below the active segment becomes cleanable; A writes again
    marker(plog, PID_B, committed=True)  # 7
    cappend(plog, [(b"m", b"x")], producer_id=PID_A, producer_epoch=0, base_sequence=1)  # 8
    cappend(plog, [(b"k", b"5")])  # 9
    plog.roll()
    clean_until_done(cleaner)
    assert offsets(b"k") == [(9, b"5")]
    assert offsets(b"j") == [(4, b"open")]  # committed: kept (latest of its key)
    # the empty aborted batch went; Kafka keeps the marker and its entry for one more clean
    assert [o for o, _ in offsets(abort_key)] == [2]
    assert plog.collect_aborted_transactions(0, 10) == [AbortedTxn(PID_A, 1, 2, 3)]
    cappend(plog, [(b"k", b"6")])  # 10
    plog.roll()
    clean_until_done(cleaner)
    assert offsets(b"k") == [(10, b"6")]
    # no data left: the marker's delete horizon is stamped, its index entry gone
    assert [o for o, _ in offsets(abort_key)] == [2]
    assert plog.collect_aborted_transactions(0, 11) == []
    assert not list(d.glob("*.txnindex"))
    clock.advance(plog.config.delete_retention_ms + 1)
    clean_until_done(cleaner)
    assert offsets(abort_key) == []
    # a reopened log agrees
    plog.close()
    reopened = PartitionLog.open(d, plog.config, clock, clean_shutdown=True)
    assert reopened.collect_aborted_transactions(0, 11) == []
    assert reopened.last_stable_offset == reopened.log_end_offset


def _read_committed(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """What a read_committed consumer from the log start delivers (Kafka's Fetcher): aborted
    transactions from the log's index, control batches skipped."""
    import os

    from pybroker.wire.record_walker import decode_records
    from pybroker.wire.records import scan_batches

    aborted = sorted(
        (t.first_offset, t.producer_id)
        for t in plog.collect_aborted_transactions(plog.log_start_offset, plog.log_end_offset)
    )
    active: set[int] = set()
    out = []
    off = plog.log_start_offset
    while off < plog.log_end_offset:
        s = plog.read(off, 1 << 20)
        if s is None:
            break
        data = os.pread(s.file.fileno(), s.size, s.position)
        for h in scan_batches(data):
            while aborted and aborted[0][0] <= h.base_offset:
                active.add(aborted.pop(0)[1])
            batch = bytes(data[h.position : h.position + h.size])
            if h.is_control:
                active.discard(h.producer_id)
            elif not (h.is_transactional and h.producer_id in active):
                out += [(r.offset, r.key, r.value) for r in decode_records(batch)]
            off = h.next_offset
    return out


def _txn_crash_scenario(d: Path, clock):
    from test_cleaner import COMPACT, make, write_keys
    from test_cleaner import append as cappend

    cfg = LogConfig(**{**COMPACT.__dict__, "segment_bytes": 700})
    mgr, plog, cleaner = make(d, clock, cfg)
    seq = 0
    for t in range(8):
        write_keys(plog, [(b"k%d" % (i % 4), b"v%d-%d" % (t, i)) for i in range(4)], per_batch=2)
        committed = t % 2 == 0
        for i in range(2):
            value = b"%s-%d-%d" % (b"commit" if committed else b"abort", t, i)
            cappend(
                plog,
                [(b"t%d" % (t % 3), value)],
                producer_id=PID_A,
                producer_epoch=0,
                base_sequence=seq,
                is_transactional=True,
            )
            seq += 1
        marker(plog, PID_A, committed=committed)
    plog.roll()
    mgr.log_flusher.flush(plog).result()  # (as flush.ms would: recovery point at the end)
    mgr.checkpoint()
    return mgr, plog, cleaner, cfg


@pytest.mark.parametrize("trusted", [False, True])
def test_cleaner_crash_at_every_step_never_shows_aborted_records(tmp_path, clock, trusted):
    from test_cleaner import SimulatedCrash, clean_until_done

    from pybroker.log.cleaner import CleanerConfig, LogCleaner
    from pybroker.log.manager import LogManager

    _, plog0, c0, _ = _txn_crash_scenario(tmp_path / "dry", clock)
    steps: list[str] = []
    c0.crash_hook = steps.append
    before = _read_committed(plog0)
    assert not [v for _, _, v in before if v.startswith(b"abort")]
    clean_until_done(c0)
    expected = _read_committed(plog0)
    assert len(steps) > 10 and len(expected) < len(before)
    for n, step in enumerate(steps):
        d = tmp_path / f"crash{n}"
        mgr, plog, cleaner, cfg = _txn_crash_scenario(d, clock)
        count = 0

        def crash(name, n=n):
            nonlocal count
            if count == n:
                raise SimulatedCrash(name)
            count += 1

        cleaner.crash_hook = crash
        with pytest.raises(SimulatedCrash):
            clean_until_done(cleaner)
        del plog, mgr
        point = 10**9 if trusted else 0
        (d / "recovery-point-offset-checkpoint").write_text(f"0\n1\nt 0 {point}\n")
        mgr2 = LogManager(d, cfg, clock)
        mgr2.load_all()
        plog2 = mgr2.get("t", 0)
        plog2.high_watermark = plog2.log_end_offset
        got = _read_committed(plog2)
        assert not [v for _, _, v in got if v.startswith(b"abort")], step
        assert set(expected) <= set(got) <= set(before), step
        clean_until_done(LogCleaner(mgr2, CleanerConfig(), clock))
        assert _read_committed(plog2) == expected, step
