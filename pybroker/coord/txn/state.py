"""Transaction coordinator state machine (Kafka's TransactionMetadata / TransactionState).

Pure decisions, no I/O: the coordinator (to come) keeps one ``TxnMetadata`` per
transactional.id, asks these functions what a request does, persists the result in the
metadata store and writes markers.  Each decision returns an ``ErrorCode`` and, when the
request is accepted, the state to persist; ``TxnMetadata`` is never mutated here.
"""

from __future__ import annotations

import dataclasses
from enum import Enum

from pybroker.errors import ErrorCode

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767


class TxnState(Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"


_COMPLETE = {TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}
_PREPARE = {TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT}

#: Kafka's validPreviousStates.
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, *_COMPLETE}),
    TxnState.ONGOING: frozenset({TxnState.ONGOING, TxnState.EMPTY, *_COMPLETE}),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, *_COMPLETE}),
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}


class IllegalTransition(Exception):
    pass


@dataclasses.dataclass(frozen=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[tuple[str, int]] = frozenset()
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    start_ms: int = -1
    update_ms: int = -1

    def transition(self, state: TxnState, now_ms: int, **changes: object) -> TxnMetadata:
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(f"{self.transactional_id}: {self.state.value} -> {state.value}")
        return dataclasses.replace(self, state=state, update_ms=now_ms, **changes)  # type: ignore[arg-type]

    def expired(self, now_ms: int) -> bool:
        """An Ongoing transaction past its timeout (the coordinator aborts it)."""
        return self.state is TxnState.ONGOING and self.start_ms + self.timeout_ms < now_ms

    def to_dict(self) -> dict[str, object]:
        d = dataclasses.asdict(self)
        d["state"] = self.state.value
        d["partitions"] = sorted([t, p] for t, p in self.partitions)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> TxnMetadata:
        d = dict(d)
        d["state"] = TxnState(d["state"])
        d["partitions"] = frozenset((str(t), int(p)) for t, p in d["partitions"])  # type: ignore[union-attr]
        return cls(**d)  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True)
class Decision:
    error: ErrorCode
    new: TxnMetadata | None = None  # state to persist (None: nothing changes)


def _exhausted(epoch: int) -> bool:
    return epoch >= MAX_EPOCH - 1


def _rotate(
    md: TxnMetadata, now_ms: int, timeout_ms: int, new_id: int, record: bool
) -> TxnMetadata:
    """Kafka's prepareProducerIdRotation: a fresh producer id at epoch 0."""
    return md.transition(
        TxnState.EMPTY,
        now_ms,
        producer_id=new_id,
        producer_epoch=0,
        last_producer_id=md.producer_id,
        last_producer_epoch=md.producer_epoch if record else NO_PRODUCER_EPOCH,
        timeout_ms=timeout_ms,
        partitions=frozenset(),
        start_ms=-1,
    )


def _increment(
    md: TxnMetadata, now_ms: int, timeout_ms: int, expected_epoch: int | None
) -> TxnMetadata | None:
    """Kafka's prepareIncrementProducerEpoch; None: the expected epoch is fenced."""
    epoch, last = md.producer_epoch + 1, md.last_producer_epoch
    if expected_epoch is not None:
        if md.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == md.producer_epoch:
            last = md.producer_epoch
        elif expected_epoch == md.last_producer_epoch:
            epoch = md.producer_epoch  # a retry of a bump whose answer was lost
        else:
            return None
    return md.transition(
        TxnState.EMPTY,
        now_ms,
        producer_epoch=epoch,
        last_producer_epoch=last,
        timeout_ms=timeout_ms,
        partitions=frozenset(),
        start_ms=-1,
    )


def init_producer_id(
    md: TxnMetadata | None,
    transactional_id: str,
    timeout_ms: int,
    max_timeout_ms: int,
    expected_producer_id: int,
    expected_epoch: int,
    now_ms: int,
    new_producer_id: int,
) -> Decision:
    """InitProducerId with a transactional.id (KIP-98, KIP-360 when expected_* are given).

    ``new_producer_id`` is a fresh id the caller allocated (used only if needed).  An
    Ongoing transaction is fenced (PrepareEpochFence, then aborted by the coordinator) and
    the client is told CONCURRENT_TRANSACTIONS so it retries."""
    if not transactional_id:
        return Decision(ErrorCode.INVALID_REQUEST)
    if timeout_ms <= 0 or timeout_ms > max_timeout_ms:
        return Decision(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
    if md is None:
        md = TxnMetadata(transactional_id, new_producer_id, NO_PRODUCER_EPOCH, timeout_ms)
    expected = expected_producer_id != NO_PRODUCER_ID
    if expected and not (
        md.producer_epoch == NO_PRODUCER_EPOCH
        or expected_producer_id == md.producer_id
        or (expected_producer_id == md.last_producer_id and _exhausted(expected_epoch))
    ):
        return Decision(ErrorCode.PRODUCER_FENCED)
    if md.state in _PREPARE or md.state is TxnState.PREPARE_EPOCH_FENCE:
        return Decision(ErrorCode.CONCURRENT_TRANSACTIONS)
    if md.state is TxnState.ONGOING:
        return Decision(ErrorCode.CONCURRENT_TRANSACTIONS, _fence_and_abort(md, now_ms))
    if md.state is TxnState.DEAD:
        return Decision(ErrorCode.CONCURRENT_TRANSACTIONS)
    # Empty / CompleteCommit / CompleteAbort
    if _exhausted(md.producer_epoch) and (not expected or expected_epoch == md.producer_epoch):
        return Decision(ErrorCode.NONE, _rotate(md, now_ms, timeout_ms, new_producer_id, expected))
    new = _increment(md, now_ms, timeout_ms, expected_epoch if expected else None)
    if new is None:
        return Decision(ErrorCode.PRODUCER_FENCED)
    return Decision(ErrorCode.NONE, new)


def _check_producer(md: TxnMetadata | None, producer_id: int, epoch: int) -> ErrorCode:
    if md is None or md.producer_id != producer_id:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    if md.producer_epoch != epoch:
        return ErrorCode.PRODUCER_FENCED
    return ErrorCode.NONE


def add_partitions(
    md: TxnMetadata | None,
    producer_id: int,
    epoch: int,
    partitions: frozenset[tuple[str, int]],
    now_ms: int,
) -> Decision:
    """AddPartitionsToTxn / AddOffsetsToTxn (the latter adds __consumer_offsets' partition)."""
    err = _check_producer(md, producer_id, epoch)
    if err is not ErrorCode.NONE:
        return Decision(err)
    assert md is not None
    if md.state in _PREPARE or md.state is TxnState.PREPARE_EPOCH_FENCE:
        return Decision(ErrorCode.CONCURRENT_TRANSACTIONS)
    if md.state is TxnState.DEAD:
        return Decision(ErrorCode.INVALID_TXN_STATE)
    if md.state is TxnState.ONGOING and partitions <= md.partitions:
        return Decision(ErrorCode.NONE)
    start = md.start_ms if md.state is TxnState.ONGOING else now_ms
    new = md.transition(
        TxnState.ONGOING, now_ms, partitions=md.partitions | partitions, start_ms=start
    )
    return Decision(ErrorCode.NONE, new)


def verify_partitions(
    md: TxnMetadata | None, producer_id: int, epoch: int, partitions: list[tuple[str, int]]
) -> dict[tuple[str, int], ErrorCode]:
    """AddPartitionsToTxn v4+ with verify_only (KIP-890): is each partition in the producer's
    transaction?  As Kafka's handleVerifyPartitionsInTransaction: producer errors, or
    CONCURRENT_TRANSACTIONS while markers are written, for all; else NONE for the partitions
    in the transaction and TRANSACTION_ABORTABLE for the others."""
    err = _check_producer(md, producer_id, epoch)
    if err is ErrorCode.NONE and md is not None and md.state in _PREPARE:
        err = ErrorCode.CONCURRENT_TRANSACTIONS
    if err is not ErrorCode.NONE or md is None:
        return dict.fromkeys(partitions, err)
    return {
        tp: ErrorCode.NONE if tp in md.partitions else ErrorCode.TRANSACTION_ABORTABLE
        for tp in partitions
    }


def end_txn(
    md: TxnMetadata | None, producer_id: int, epoch: int, commit: bool, now_ms: int
) -> Decision:
    """EndTxn from the client: Ongoing -> PrepareCommit/PrepareAbort; retries answered."""
    err = _check_producer(md, producer_id, epoch)
    if err is not ErrorCode.NONE:
        return Decision(err)
    assert md is not None
    s = md.state
    if s is TxnState.ONGOING:
        target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        return Decision(ErrorCode.NONE, md.transition(target, now_ms))
    if s is TxnState.COMPLETE_COMMIT:
        return Decision(ErrorCode.NONE if commit else ErrorCode.INVALID_TXN_STATE)
    if s is TxnState.COMPLETE_ABORT:
        return Decision(ErrorCode.INVALID_TXN_STATE if commit else ErrorCode.NONE)
    if s is TxnState.PREPARE_COMMIT:
        return Decision(
            ErrorCode.CONCURRENT_TRANSACTIONS if commit else ErrorCode.INVALID_TXN_STATE
        )
    if s is TxnState.PREPARE_ABORT:
        return Decision(
            ErrorCode.INVALID_TXN_STATE if commit else ErrorCode.CONCURRENT_TRANSACTIONS
        )
    if s is TxnState.PREPARE_EPOCH_FENCE:
        return Decision(ErrorCode.CONCURRENT_TRANSACTIONS)
    return Decision(ErrorCode.INVALID_TXN_STATE)  # Empty, Dead


def _fence_and_abort(md: TxnMetadata, now_ms: int) -> TxnMetadata:
    """Kafka's epoch fence: the epoch is bumped (never returned to a client) and the Ongoing
    transaction goes to PrepareAbort in one persisted step; PrepareEpochFence is only the
    transient state in between (Kafka's pendingState)."""
    fenced = md.transition(TxnState.PREPARE_EPOCH_FENCE, now_ms)
    return fenced.transition(
        TxnState.PREPARE_ABORT,
        now_ms,
        producer_epoch=md.producer_epoch + 1,
        last_producer_epoch=NO_PRODUCER_EPOCH,
    )


def abort_expired(md: TxnMetadata, now_ms: int) -> TxnMetadata | None:
    """The coordinator's timeout abort: bump the epoch (fencing the producer) and PrepareAbort."""
    if not md.expired(now_ms):
        return None
    return _fence_and_abort(md, now_ms)


def complete(md: TxnMetadata, now_ms: int) -> TxnMetadata:
    """Markers written: PrepareCommit -> CompleteCommit, PrepareAbort -> CompleteAbort."""
    if md.state is TxnState.PREPARE_COMMIT:
        return md.transition(TxnState.COMPLETE_COMMIT, now_ms, partitions=frozenset())
    return md.transition(TxnState.COMPLETE_ABORT, now_ms, partitions=frozenset())


def expire_id(md: TxnMetadata, now_ms: int, expiration_ms: int) -> bool:
    """transactional.id.expiration.ms: an idle id (Empty/Complete*) past it becomes Dead."""
    idle = md.state is TxnState.EMPTY or md.state in _COMPLETE
    return idle and md.update_ms + expiration_ms <= now_ms
