"""The coordinators' view of an internal topic's log (__consumer_offsets, __transaction_state):
what coord needs of the log layer, which it never imports.  The broker implements it over its
replica manager (pybroker/internal_topics.py) and injects it.

A coordinator appends only to partitions it leads, each append conditional on the leader
epoch it loaded the partition in (a deposed leader's append fails: that is the fencing the
metadata store's compare-and-set gives the other storage), replicated as an acks=all produce
(Kafka's offsets.commit.required.acks=-1).  Loading reads a partition's batches from its log
start to its log end, as Kafka's GroupMetadataManager and TransactionStateManager do when this
broker becomes its leader.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import NamedTuple, Protocol

from pybroker.coord.metadata.store import StoreError
from pybroker.errors import ErrorCode

Record = tuple[bytes, bytes | None]  # (key, value); a None value is a tombstone


class LogBatch(NamedTuple):
    """One batch of a replayed partition: its records with their offsets."""

    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    transactional: bool
    control: bool | None  # a transaction marker: True COMMIT, False ABORT; None otherwise
    records: list[tuple[int, bytes | None, bytes | None]]  # (offset, key, value)


class CoordinatorWriteError(StoreError):
    """An append to an internal topic failed; ``code`` is the Kafka error to answer (Kafka's
    GroupMetadataManager.maybeConvertOffsetCommitError already applied)."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message or ErrorCode(code).name)
        self.code = code


def coordinator_error(code: int) -> int:
    """Kafka's maybeConvertOffsetCommitError: the append's error as a coordinator answers it."""
    if code in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (
        ErrorCode.MESSAGE_TOO_LARGE,
        ErrorCode.RECORD_LIST_TOO_LARGE,
        ErrorCode.INVALID_FETCH_SIZE,
    ):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return code


class InternalLog(Protocol):
    """One internal topic's partitions on this broker."""

    async def append(
        self,
        partition: int,
        records: Sequence[Record],
        *,
        leader_epoch: int,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> int:
        """Append the records, contiguous and all or nothing, as the leader in ``leader_epoch``
        and wait until every in-sync replica has them; the last one's offset.  Raises CoordinatorWriteError (the raw append error in ``code``: NOT_LEADER_OR_FOLLOWER
        when the epoch moved, REQUEST_TIMED_OUT, ...)."""
        ...

    def append_now(
        self, partition: int, records: Sequence[Record], *, leader_epoch: int
    ) -> int | Awaitable[int]:
        """``append`` (not transactional) answered without a coroutine when nothing waits:
        the last offset when the in-sync replicas have the records at once, else an
        awaitable of it.  Raises CoordinatorWriteError (at once, or from the awaitable)."""
        ...

    def replay(self, partition: int, leader_epoch: int) -> AsyncIterator[LogBatch]:
        """The partition's batches in offset order, from its log start to its log end (read
        again at each step, so what is appended meanwhile is read too); stops with
        CoordinatorWriteError(NOT_LEADER_OR_FOLLOWER) once this broker no longer leads it in
        ``leader_epoch``."""
        ...


__all__ = ["CoordinatorWriteError", "InternalLog", "LogBatch", "Record", "coordinator_error"]
