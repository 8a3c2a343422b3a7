"""Transaction coordinator state machine (Kafka's TransactionCoordinator error answers)."""

from __future__ import annotations

import pytest

from pybroker.clock import ManualClock
from pybroker.coord.txn import state as ts
from pybroker.coord.txn.state import TxnMetadata, TxnState
from pybroker.errors import ErrorCode

MAX = 900_000
TP = frozenset({("t", 0), ("t", 1)})


def _init(md: TxnMetadata | None, now: int, pid: int = 7, exp: tuple[int, int] = (-1, -1)):
    return ts.init_producer_id(md, "tx", 60_000, MAX, exp[0], exp[1], now, pid)


def _fresh(clock: ManualClock) -> TxnMetadata:
    d = _init(None, clock.time_ms())
    assert d.error is ErrorCode.NONE and d.new is not None
    return d.new


def test_first_init_gives_epoch_zero_empty() -> None:
    md = _fresh(ManualClock())
    assert (md.producer_id, md.producer_epoch, md.state) == (7, 0, TxnState.EMPTY)


@pytest.mark.parametrize("timeout", [0, -1, MAX + 1])
def test_invalid_timeout(timeout: int) -> None:
    d = ts.init_producer_id(None, "tx", timeout, MAX, -1, -1, 0, 7)
    assert d.error is ErrorCode.INVALID_TRANSACTION_TIMEOUT and d.new is None


def test_empty_transactional_id_is_invalid_request() -> None:
    assert ts.init_producer_id(None, "", 1000, MAX, -1, -1, 0, 7).error is ErrorCode.INVALID_REQUEST


def test_reinit_bumps_epoch_and_fences_old_producer() -> None:
    clock = ManualClock()
    md = _fresh(clock)
    md2 = _init(md, clock.time_ms()).new
    assert md2 is not None and md2.producer_epoch == 1
    assert ts.add_partitions(md2, 7, 0, TP, clock.time_ms()).error is ErrorCode.PRODUCER_FENCED
    assert ts.end_txn(md2, 7, 0, True, 0).error is ErrorCode.PRODUCER_FENCED
    assert ts.end_txn(md2, 8, 1, True, 0).error is ErrorCode.INVALID_PRODUCER_ID_MAPPING


def test_commit_cycle_and_retries() -> None:
    clock = ManualClock()
    md = _fresh(clock)
    assert ts.end_txn(md, 7, 0, True, 0).error is ErrorCode.INVALID_TXN_STATE  # nothing begun
    md = ts.add_partitions(md, 7, 0, TP, clock.time_ms()).new
    assert md is not None and md.state is TxnState.ONGOING and md.partitions == TP
    assert ts.add_partitions(md, 7, 0, frozenset({("t", 0)}), 0).new is None  # already in
    md = ts.end_txn(md, 7, 0, True, clock.time_ms()).new
    assert md is not None and md.state is TxnState.PREPARE_COMMIT
    # markers in flight
    assert ts.add_partitions(md, 7, 0, TP, 0).error is ErrorCode.CONCURRENT_TRANSACTIONS
    assert ts.end_txn(md, 7, 0, True, 0).error is ErrorCode.CONCURRENT_TRANSACTIONS
    assert ts.end_txn(md, 7, 0, False, 0).error is ErrorCode.INVALID_TXN_STATE
    assert _init(md, 0).error is ErrorCode.CONCURRENT_TRANSACTIONS
    md = ts.complete(md, clock.time_ms())
    assert md.state is TxnState.COMPLETE_COMMIT and md.partitions == frozenset()
    assert ts.end_txn(md, 7, 0, True, 0) == ts.Decision(ErrorCode.NONE)  # retried commit
    assert ts.end_txn(md, 7, 0, False, 0).error is ErrorCode.INVALID_TXN_STATE


def test_init_during_ongoing_fences_then_aborts() -> None:
    clock = ManualClock()
    md = ts.add_partitions(_fresh(clock), 7, 0, TP, clock.time_ms()).new
    d = _init(md, clock.time_ms())
    assert d.error is ErrorCode.CONCURRENT_TRANSACTIONS
    assert d.new is not None and d.new.state is TxnState.PREPARE_ABORT
    assert (d.new.producer_epoch, d.new.partitions) == (1, TP)
    assert ts.add_partitions(d.new, 7, 0, TP, 0).error is ErrorCode.PRODUCER_FENCED
    assert _init(d.new, clock.time_ms()).error is ErrorCode.CONCURRENT_TRANSACTIONS
    done = ts.complete(d.new, clock.time_ms())
    assert done.state is TxnState.COMPLETE_ABORT
    again = _init(done, clock.time_ms()).new
    assert again is not None and again.producer_epoch == 2


def test_timeout_abort_bumps_epoch() -> None:
    clock = ManualClock()
    md = ts.add_partitions(_fresh(clock), 7, 0, TP, clock.time_ms()).new
    assert md is not None
    clock.advance(60_000)
    assert ts.abort_expired(md, clock.time_ms()) is None
    clock.advance(1)
    aborted = ts.abort_expired(md, clock.time_ms())
    assert aborted is not None and aborted.state is TxnState.PREPARE_ABORT
    assert aborted.producer_epoch == 1
    # the timed-out producer is fenced
    assert ts.end_txn(aborted, 7, 0, True, 0).error is ErrorCode.PRODUCER_FENCED


def test_kip360_recovery() -> None:
    clock = ManualClock()
    md = _fresh(clock)  # (7, 0)
    bumped = _init(md, 0, exp=(7, 0)).new
    assert bumped is not None and bumped.producer_epoch == 1
    retried = _init(bumped, 0, exp=(7, 0)).new  # the answer was lost: same epoch again
    assert retried is not None and retried.producer_epoch == 1
    assert _init(bumped, 0, exp=(99, 0)).error is ErrorCode.PRODUCER_FENCED
    assert _init(bumped, 0, exp=(7, 5)).error is ErrorCode.PRODUCER_FENCED


def test_epoch_exhaustion_allocates_new_producer_id() -> None:
    md = TxnMetadata("tx", 7, ts.MAX_EPOCH - 1, 1000)
    new = _init(md, 0, pid=42).new
    assert new is not None and (new.producer_id, new.producer_epoch) == (42, 0)
    assert (new.last_producer_id, new.last_producer_epoch) == (7, -1)
    # KIP-360 retry of the rotation from the old id with its exhausted epoch is not fenced
    rec = _init(md, 0, pid=42, exp=(7, ts.MAX_EPOCH - 1)).new
    assert rec is not None and (rec.last_producer_id, rec.last_producer_epoch) == (
        7,
        ts.MAX_EPOCH - 1,
    )
    assert _init(rec, 0, pid=43, exp=(7, ts.MAX_EPOCH - 1)).error is ErrorCode.NONE


def test_illegal_transitions_raise() -> None:
    md = TxnMetadata("tx", 7, 0, 1000)
    with pytest.raises(ts.IllegalTransition):
        md.transition(TxnState.PREPARE_COMMIT, 0)
    with pytest.raises(ts.IllegalTransition):
        md.transition(TxnState.COMPLETE_ABORT, 0)


def test_persisted_form_round_trips() -> None:
    clock = ManualClock()
    md = ts.add_partitions(_fresh(clock), 7, 0, TP, clock.time_ms()).new
    assert md is not None
    assert TxnMetadata.from_dict(md.to_dict()) == md


def test_id_expiration_only_when_idle() -> None:
    clock = ManualClock()
    md = _fresh(clock)
    assert not ts.expire_id(md, clock.time_ms() + 999, 1000)
    assert ts.expire_id(md, clock.time_ms() + 1000, 1000)
    ongoing = ts.add_partitions(md, 7, 0, TP, clock.time_ms()).new
    assert ongoing is not None and not ts.expire_id(ongoing, clock.time_ms() + 10**9, 1000)
