"""The transaction coordinator: the asyncio shell around coord/txn/state.py.

Ownership of a transactional.id is the owner of its partition (metadata/placement.py,
``coordinator_for``), so it moves exactly as group ownership does.  Every accepted
decision is persisted (coord/txn/store.py, compare-and-set) before it is answered; a write
that loses the compare-and-set means another broker coordinates the id now: the cached state
is dropped and the client gets NOT_COORDINATOR.  A transaction in PrepareCommit/PrepareAbort
has its markers written in the background (``write_markers``, retried until every partition
accepts) and is then persisted Complete*; meanwhile the state machine answers
CONCURRENT_TRANSACTIONS.  ``resume`` (on start and when ownership moves here) loads every
owned id and finishes its prepared transactions.  The coordinator epoch given to markers is
the state znode's version at the Prepare write, which only grows for an id.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from pybroker.clock import Clock
from pybroker.coord.metadata.internal_log import CoordinatorWriteError
from pybroker.coord.metadata.model import TopicPartition
from pybroker.coord.metadata.paths import MAX_NAME_CHARS
from pybroker.coord.metadata.placement import (
    Placement,
    Rendezvous,
    SingleBroker,
    partition_for,
)
from pybroker.coord.metadata.placement import moved as placement_moved
from pybroker.coord.metadata.placement import terms as placement_terms
from pybroker.coord.metadata.store import (
    BadVersionError,
    InvalidPathError,
    NodeExistsError,
    StoreError,
)
from pybroker.coord.txn import state as ts
from pybroker.coord.txn.store import TxnStorage
from pybroker.errors import ErrorCode

log = logging.getLogger(__name__)

#: (producer id, epoch, committed, coordinator epoch, partitions) -> error code per partition
MarkerWriter = Callable[
    [int, int, bool, int, list[TopicPartition]], Awaitable[dict[TopicPartition, int]]
]


def _write_error(code: int) -> ErrorCode:
    """Kafka's TransactionStateManager.appendTransactionToLog: a failed write's answer."""
    if code in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return ErrorCode(code)


def _code_of(e: StoreError) -> ErrorCode:
    """A storage failure's answer: its code (CoordinatorWriteError), else the store is not
    reachable: COORDINATOR_NOT_AVAILABLE (the client finds the coordinator again and retries,
    as Kafka answers a failed transaction log append)."""
    if not hasattr(e, "code"):
        log.warning("transaction coordinator: the metadata store failed: %s", e)
    return ErrorCode(getattr(e, "code", ErrorCode.COORDINATOR_NOT_AVAILABLE))


@dataclass(frozen=True)
class TxnConfig:
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    abort_interval_ms: int = 10_000  # transaction.abort.timed.out.transaction.cleanup.interval.ms
    expire_interval_ms: int = (
        3_600_000  # transaction.remove.expired.transaction.cleanup.interval.ms
    )
    marker_retry_ms: int = 100
    # a CompleteCommit/CompleteAbort is persisted this long after its markers at the latest
    # (or with the transactional id's next write, whichever comes first)
    complete_flush_ms: int = 1000


class TransactionCoordinator:
    def __init__(
        self,
        store: TxnStorage,
        clock: Clock,
        config: TxnConfig,
        allocate_producer_id: Callable[[], Awaitable[int]],
        write_markers: MarkerWriter,
        *,
        broker_id: int = 0,
        membership: Callable[[], tuple[int, Iterable[int]]] | None = None,
        placement: Placement | None = None,
    ) -> None:
        """``placement``: who coordinates each partition of the transactional ids (default:
        rendezvous hashing over ``membership``'s live brokers; neither: this broker)."""
        self.store = store
        self.clock = clock
        self.config = config
        self._allocate = allocate_producer_id
        self._write_markers = write_markers
        self.broker_id = broker_id
        if placement is None:
            placement = SingleBroker(broker_id) if membership is None else Rendezvous(membership)
        self.placement = placement
        # transactional id -> (its state, the version stored); the state may be a Complete*
        # not stored yet (``_unpersisted``): the store still holds the Prepare* at that version
        self.txns: dict[str, tuple[ts.TxnMetadata, int]] = {}
        self._unpersisted: set[str] = set()
        self._locks: dict[str, asyncio.Lock] = {}
        self._completing: dict[str, asyncio.Task] = {}
        self._membership_epoch = placement.epoch()
        self._terms = placement_terms(placement)
        self._background: list[asyncio.Task] = []

    # -- ownership -------------------------------------------------------------------------
    def partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.placement.partitions)

    def coordinator_node(self, transactional_id: str) -> int:
        """The broker coordinating the id, as far as this broker knows (-1: none)."""
        return self.placement.owner(self.partition_of(transactional_id))

    def coordinates(self, transactional_id: str) -> bool:
        """Whether this broker coordinates the id now; every request asks first, so a moved
        membership epoch drops the stale cached states before any is answered from
        (check_membership)."""
        if len(transactional_id) > MAX_NAME_CHARS:
            return True  # (too long to store: nothing is found under it, nothing is written)
        if self.placement.epoch() != self._membership_epoch:
            self.check_membership()
        return self.coordinator_node(transactional_id) == self.broker_id

    def coordinator_error(self, transactional_id: str) -> ErrorCode | None:
        """NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS (the storage is loading the id's
        partition), or None when this broker serves the id."""
        if not self.coordinates(transactional_id):
            return ErrorCode.NOT_COORDINATOR
        load_error = getattr(self.store, "load_error", None)
        if load_error is not None:
            code = load_error(self.partition_of(transactional_id))
            if code is not None:
                # named the leader, not told yet: as good as loading (the group coordinator's
                # partition_error)
                return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return None

    def _lock(self, tid: str) -> asyncio.Lock:
        return self._locks.setdefault(tid, asyncio.Lock())

    async def _current(self, tid: str) -> tuple[ts.TxnMetadata, int] | None:
        got = self.txns.get(tid)
        if got is None:
            got = await self.store.load(tid)
            if got is not None:
                self.txns[tid] = got
                if got[0].state in (ts.TxnState.PREPARE_COMMIT, ts.TxnState.PREPARE_ABORT):
                    self._start_completion(tid)  # (prepared by a write whose answer was lost)
        return got

    async def _persist(self, md: ts.TxnMetadata, version: int | None) -> int | None:
        """Write; None (and the cache entry dropped) when another coordinator wrote first."""
        try:
            new_version = await self.store.put(md, version)
        except (BadVersionError, NodeExistsError):
            self.txns.pop(md.transactional_id, None)
            self._unpersisted.discard(md.transactional_id)
            return None
        except StoreError as e:  # the outcome is unknown: read the storage again next time
            self.txns.pop(md.transactional_id, None)
            self._unpersisted.discard(md.transactional_id)
            log.info("transaction %s: storing its state failed: %s", md.transactional_id, e)
            raise CoordinatorWriteError(
                _write_error(getattr(e, "code", ErrorCode.COORDINATOR_NOT_AVAILABLE)), str(e)
            ) from e
        self.txns[md.transactional_id] = (md, new_version)
        self._unpersisted.discard(md.transactional_id)
        if md.state in (ts.TxnState.PREPARE_COMMIT, ts.TxnState.PREPARE_ABORT):
            self._start_completion(md.transactional_id)
        return new_version

    # -- requests --------------------------------------------------------------------------
    async def init_producer_id(
        self, tid: str, timeout_ms: int, expected_pid: int = -1, expected_epoch: int = -1
    ) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch) for InitProducerId with a transactional.id."""
        code = self.coordinator_error(tid)
        if code is not None:
            return code, -1, -1
        try:
            return await self._init_producer_id(tid, timeout_ms, expected_pid, expected_epoch)
        except InvalidPathError as e:
            log.info("transactional.id refused: %s", e)
            return ErrorCode.INVALID_REQUEST, -1, -1
        except StoreError as e:
            return _code_of(e), -1, -1

    async def _init_producer_id(
        self, tid: str, timeout_ms: int, expected_pid: int, expected_epoch: int
    ) -> tuple[ErrorCode, int, int]:
        async with self._lock(tid):
            cur = await self._current(tid)
            md, version = cur if cur is not None else (None, None)
            needs_id = md is None or md.producer_epoch >= ts.MAX_EPOCH - 1
            new_pid = await self._allocate() if needs_id else -1
            d = ts.init_producer_id(
                md,
                tid,
                timeout_ms,
                self.config.max_timeout_ms,
                expected_pid,
                expected_epoch,
                self.clock.time_ms(),
                new_pid,
            )
            if d.new is not None and await self._persist(d.new, version) is None:
                return ErrorCode.NOT_COORDINATOR, -1, -1
            if d.error is not ErrorCode.NONE:
                return d.error, -1, -1
            out = d.new if d.new is not None else md
            assert out is not None
            return ErrorCode.NONE, out.producer_id, out.producer_epoch

    async def add_partitions(
        self, tid: str, pid: int, epoch: int, partitions: Iterable[TopicPartition]
    ) -> ErrorCode:
        code = self.coordinator_error(tid)
        if code is not None:
            return code
        try:
            async with self._lock(tid):
                cur = await self._current(tid)
                md, version = cur if cur is not None else (None, None)
                now = self.clock.time_ms()
                d = ts.add_partitions(md, pid, epoch, frozenset(partitions), now)
                if d.new is not None and await self._persist(d.new, version) is None:
                    return ErrorCode.NOT_COORDINATOR
                return d.error
        except StoreError as e:
            return _code_of(e)

    async def verify_partitions(
        self, tid: str, pid: int, epoch: int, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        code = self.coordinator_error(tid)
        if code is not None:
            return dict.fromkeys(partitions, code)
        try:
            async with self._lock(tid):
                cur = await self._current(tid)
                return ts.verify_partitions(cur[0] if cur else None, pid, epoch, partitions)
        except StoreError as e:
            return dict.fromkeys(partitions, _code_of(e))

    async def end_txn(self, tid: str, pid: int, epoch: int, commit: bool) -> ErrorCode:
        code = self.coordinator_error(tid)
        if code is not None:
            return code
        try:
            async with self._lock(tid):
                cur = await self._current(tid)
                md, version = cur if cur is not None else (None, None)
                d = ts.end_txn(md, pid, epoch, commit, self.clock.time_ms())
                if d.new is not None and await self._persist(d.new, version) is None:
                    return ErrorCode.NOT_COORDINATOR
                if d.error is ErrorCode.INVALID_TXN_STATE:  # (fatal to the client: say why)
                    log.info(
                        "transaction %.100s: EndTxn(%s) of producer %d epoch %d in state %s "
                        "(store version %s): INVALID_TXN_STATE",
                        tid,
                        "commit" if commit else "abort",
                        pid,
                        epoch,
                        md.state.value if md is not None else None,
                        version,
                    )
                return d.error
        except StoreError as e:
            return _code_of(e)

    async def describe(self, tid: str) -> tuple[ErrorCode, ts.TxnMetadata | None]:
        """DescribeTransactions: the id's state, if this broker coordinates it."""
        code = self.coordinator_error(tid)
        if code is not None:
            return code, None
        try:
            async with self._lock(tid):
                cur = await self._current(tid)
        except StoreError as e:
            return _code_of(e), None
        if cur is None or cur[0].state is ts.TxnState.DEAD:
            return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None
        return ErrorCode.NONE, cur[0]

    def list_states(
        self, producer_ids: Iterable[int] = (), states: Iterable[str] = ()
    ) -> list[ts.TxnMetadata]:
        """Owned transactions (Kafka's listTransactionStates): empty filters match all;
        Dead ones are being expired and are left out."""
        pids, names = set(producer_ids), set(states)
        return [
            md
            for tid, (md, _) in sorted(self.txns.items())
            if self.coordinates(tid)
            and md.state is not ts.TxnState.DEAD
            and (not pids or md.producer_id in pids)
            and (not names or md.state.value in names)
        ]

    async def expire_ids(self) -> list[str]:
        """transactional.id.expiration.ms: delete owned ids idle (Empty/Complete*) past it."""
        expired = []
        for tid in list(self.txns):
            if not self.coordinates(tid):
                continue
            async with self._lock(tid):
                cur = self.txns.get(tid)
                if cur is None or not ts.expire_id(
                    cur[0], self.clock.time_ms(), self.config.id_expiration_ms
                ):
                    continue
                try:
                    await self.store.delete(tid, cur[1])
                except StoreError:
                    pass  # another coordinator wrote meanwhile: not ours to expire
                else:
                    expired.append(tid)
                self.txns.pop(tid, None)
                self._unpersisted.discard(tid)
        return expired

    # -- background ------------------------------------------------------------------------
    async def abort_timed_out(self) -> list[str]:
        """Abort (with an epoch bump) every owned Ongoing transaction past its timeout."""
        aborted = []
        for tid in list(self.txns):
            if not self.coordinates(tid):
                continue
            async with self._lock(tid):
                cur = self.txns.get(tid)
                if cur is None:
                    continue
                new = ts.abort_expired(cur[0], self.clock.time_ms())
                if new is not None and await self._persist(new, cur[1]) is not None:
                    aborted.append(tid)
        return aborted

    async def resume(self) -> None:
        """Load every owned transactional.id and finish its prepared transaction."""
        for tid, got in (await self.store.load_all()).items():
            if self.coordinates(tid):
                cached = self.txns.get(tid)
                if cached is not None and cached[1] >= got[1]:
                    continue  # ours is as new (or written by us since the read)
                self.txns[tid] = got
                if got[0].state in (ts.TxnState.PREPARE_COMMIT, ts.TxnState.PREPARE_ABORT):
                    self._start_completion(tid)

    def _start_completion(self, tid: str) -> None:
        task = self._completing.get(tid)
        if task is None or task.done():
            self._completing[tid] = asyncio.get_running_loop().create_task(
                self._complete(tid), name=f"txn-markers-{tid}"
            )

    async def _complete(self, tid: str) -> None:
        while True:
            cur = self.txns.get(tid)
            if cur is None or not self.coordinates(tid):
                return
            md, version = cur
            committed = md.state is ts.TxnState.PREPARE_COMMIT
            try:
                codes = await self._write_markers(
                    md.producer_id,
                    md.producer_epoch,
                    committed,
                    self.store.coordinator_epoch(tid, version),
                    sorted(md.partitions),
                )
            except (StoreError, OSError) as e:
                log.info("transaction %s: writing markers failed: %s", tid, e)
                codes = {tp: ErrorCode.UNKNOWN for tp in md.partitions}
            # a deleted topic or partition takes no marker, as in Kafka
            done = {ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
            if all(code in done for code in codes.values()):
                await self._persist_complete(tid, cur)
                return
            await asyncio.sleep(self.config.marker_retry_ms / 1000)

    async def _persist_complete(self, tid: str, cur: tuple[ts.TxnMetadata, int]) -> None:
        """The markers are written: Complete{Commit,Abort}, tried again while the store
        cannot be reached (as Kafka retries its transaction log append), so a transaction
        never stays prepared behind a lost connection.  A write that did land before the
        connection was lost makes the retry's compare-and-set fail: the cache entry is
        dropped and the next request reads the completed state."""
        md, version = cur
        while True:
            try:
                async with self._lock(tid):
                    if self.txns.get(tid) != cur:
                        return
                    # Complete* is stored with the id's next write, or by the flush pass: the
                    # store keeps the Prepare* meanwhile (a coordinator taking over writes
                    # the markers again, which completes nothing twice)
                    self.txns[tid] = (ts.complete(md, self.clock.time_ms()), version)
                    self._unpersisted.add(tid)
                return
            except StoreError as e:
                log.info("transaction %s: completing it failed, trying again: %s", tid, e)
            await asyncio.sleep(self.config.marker_retry_ms / 1000)
            if not self.coordinates(tid):
                return

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Take up the owned transactions, then run the timeout and expiration passes."""
        await self.resume()
        loop = asyncio.get_running_loop()
        self._background = [
            loop.create_task(
                self._every(self.config.abort_interval_ms, self.abort_timed_out),
                name="txn-abort-timed-out",
            ),
            loop.create_task(
                self._every(self.config.expire_interval_ms, self.expire_ids),
                name="txn-expire-ids",
            ),
            loop.create_task(
                self._every(self.config.complete_flush_ms, self.flush_completed),
                name="txn-flush-completed",
            ),
        ]

    async def flush_completed(self) -> int:
        """Store the Complete* states kept in memory since their markers; how many."""
        n = 0
        for tid in list(self._unpersisted):
            async with self._lock(tid):
                cur = self.txns.get(tid)
                if tid not in self._unpersisted or cur is None or not self.coordinates(tid):
                    self._unpersisted.discard(tid)
                    continue
                if await self._persist(cur[0], cur[1]) is not None:
                    n += 1
        return n

    async def _every(self, interval_ms: int, step: Callable[[], Awaitable[object]]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await step()
            except StoreError as e:
                log.info("transaction coordinator: %s failed: %s", step.__name__, e)

    def check_membership(self) -> None:
        """The live brokers changed: forget the ids another broker coordinates now and take
        up (in the background) the ones that moved here, finishing their prepared
        transactions, as Kafka's coordinator does when it loads a transaction log partition."""
        epoch = self.placement.epoch()
        if epoch == self._membership_epoch:
            return
        self._membership_epoch = epoch
        self._terms, moved = placement_moved(self.placement, self._terms)
        # what was cached of a partition whose term moved may be stale (another broker may
        # have written it meanwhile): read again from the storage.  Rendezvous placement
        # moves every term at once: then every cached state goes, ids still coordinated here
        # too -- an id may have moved away and back, and a cached state answers some requests
        # without a write whose compare-and-set would catch it (found by the fault campaign).
        for tid in [
            t for t in self.txns if self.partition_of(t) in moved or not self.coordinates(t)
        ]:
            self.txns.pop(tid, None)
            self._unpersisted.discard(tid)

        async def take_up() -> None:
            try:
                await self.resume()
            except StoreError as e:
                log.info("transaction coordinator: loading moved transactions: %s", e)

        self._background.append(
            asyncio.get_running_loop().create_task(take_up(), name="txn-take-up")
        )
        self._background = [t for t in self._background if not t.done()]

    async def stop(self) -> None:
        """A clean stop stores the Complete* states kept in memory first (bounded by the
        caller), so the next coordinator writes no marker twice."""
        try:
            await self.flush_completed()
        except StoreError as e:
            log.info("transaction coordinator: storing completed transactions: %s", e)
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._background.clear()
        for task in self._completing.values():
            task.cancel()
        await asyncio.gather(*self._completing.values(), return_exceptions=True)
        self._completing.clear()
