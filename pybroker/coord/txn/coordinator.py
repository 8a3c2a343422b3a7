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
from pybroker.coord.metadata.paths import MAX_NAME_CHARS
from pybroker.coord.metadata.placement import coordinator_for
from pybroker.coord.metadata.store import (
    BadVersionError,
    InvalidPathError,
    NodeExistsError,
    StoreError,
)
from pybroker.coord.txn import state as ts
from pybroker.coord.txn.store import TxnStateStore
from pybroker.errors import ErrorCode

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
#: (producer id, epoch, committed, coordinator epoch, partitions) -> error code per partition
MarkerWriter = Callable[
    [int, int, bool, int, list[TopicPartition]], Awaitable[dict[TopicPartition, int]]
]


@dataclass(frozen=True)
class TxnConfig:
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    abort_interval_ms: int = 10_000  # transaction.abort.timed.out.transaction.cleanup.interval.ms
    expire_interval_ms: int = (
        3_600_000  # transaction.remove.expired.transaction.cleanup.interval.ms
    )
    marker_retry_ms: int = 100


class TransactionCoordinator:
    def __init__(
        self,
        store: TxnStateStore,
        clock: Clock,
        config: TxnConfig,
        allocate_producer_id: Callable[[], Awaitable[int]],
        write_markers: MarkerWriter,
        *,
        broker_id: int = 0,
        membership: Callable[[], tuple[int, Iterable[int]]] | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.config = config
        self._allocate = allocate_producer_id
        self._write_markers = write_markers
        self.broker_id = broker_id
        self._membership = membership
        self.txns: dict[str, tuple[ts.TxnMetadata, int]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._completing: dict[str, asyncio.Task] = {}
        self._membership_epoch = membership()[0] if membership is not None else 0
        self._background: list[asyncio.Task] = []

    # -- ownership -------------------------------------------------------------------------
    def coordinates(self, transactional_id: str) -> bool:
        if self._membership is None or len(transactional_id) > MAX_NAME_CHARS:
            return True  # (too long to store: nothing is found under it, nothing is written)
        return coordinator_for(transactional_id, self._membership()[1]) == self.broker_id

    def _lock(self, tid: str) -> asyncio.Lock:
        return self._locks.setdefault(tid, asyncio.Lock())

    async def _current(self, tid: str) -> tuple[ts.TxnMetadata, int] | None:
        got = self.txns.get(tid)
        if got is None:
            got = await self.store.load(tid)
            if got is not None:
                self.txns[tid] = got
        return got

    async def _persist(self, md: ts.TxnMetadata, version: int | None) -> int | None:
        """Write; None (and the cache entry dropped) when another coordinator wrote first."""
        try:
            new_version = await self.store.put(md, version)
        except (BadVersionError, NodeExistsError):
            self.txns.pop(md.transactional_id, None)
            return None
        self.txns[md.transactional_id] = (md, new_version)
        if md.state in (ts.TxnState.PREPARE_COMMIT, ts.TxnState.PREPARE_ABORT):
            self._start_completion(md.transactional_id)
        return new_version

    # -- requests --------------------------------------------------------------------------
    # A store error answers COORDINATOR_NOT_AVAILABLE (the client finds the coordinator again
    # and retries), as Kafka answers a failed transaction log append; a transactional.id no
    # store path can hold (far longer than any real one) is INVALID_REQUEST.
    async def init_producer_id(
        self, tid: str, timeout_ms: int, expected_pid: int = -1, expected_epoch: int = -1
    ) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch) for InitProducerId with a transactional.id."""
        try:
            return await self._init_producer_id(tid, timeout_ms, expected_pid, expected_epoch)
        except InvalidPathError as e:
            log.info("transactional.id refused: %s", e)
            return ErrorCode.INVALID_REQUEST, -1, -1
        except StoreError as e:
            log.warning("InitProducerId: the metadata store failed: %s", e)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1

    async def _init_producer_id(
        self, tid: str, timeout_ms: int, expected_pid: int, expected_epoch: int
    ) -> tuple[ErrorCode, int, int]:
        if not self.coordinates(tid):
            return ErrorCode.NOT_COORDINATOR, -1, -1
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
        if not self.coordinates(tid):
            return ErrorCode.NOT_COORDINATOR
        try:
            async with self._lock(tid):
                cur = await self._current(tid)
                md, version = cur if cur is not None else (None, None)
                d = ts.add_partitions(md, pid, epoch, frozenset(partitions), self.clock.time_ms())
                if d.new is not None and await self._persist(d.new, version) is None:
                    return ErrorCode.NOT_COORDINATOR
                return d.error
        except StoreError as e:
            log.warning("transaction %.100s: the metadata store failed: %s", tid, e)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE

    async def verify_partitions(
        self, tid: str, pid: int, epoch: int, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        if not self.coordinates(tid):
            return dict.fromkeys(partitions, ErrorCode.NOT_COORDINATOR)
        try:
            async with self._lock(tid):
                cur = await self._current(tid)
                return ts.verify_partitions(cur[0] if cur else None, pid, epoch, partitions)
        except StoreError as e:
            log.warning("transaction %.100s: the metadata store failed: %s", tid, e)
            return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)

    async def end_txn(self, tid: str, pid: int, epoch: int, commit: bool) -> ErrorCode:
        if not self.coordinates(tid):
            return ErrorCode.NOT_COORDINATOR
        try:
            async with self._lock(tid):
                cur = await self._current(tid)
                md, version = cur if cur is not None else (None, None)
                d = ts.end_txn(md, pid, epoch, commit, self.clock.time_ms())
                if d.new is not None and await self._persist(d.new, version) is None:
                    return ErrorCode.NOT_COORDINATOR
                return d.error
        except StoreError as e:
            log.warning("transaction %.100s: the metadata store failed: %s", tid, e)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE

    async def describe(self, tid: str) -> tuple[ErrorCode, ts.TxnMetadata | None]:
        """DescribeTransactions: the id's state, if this broker coordinates it."""
        if not self.coordinates(tid):
            return ErrorCode.NOT_COORDINATOR, None
        try:
            async with self._lock(tid):
                cur = await self._current(tid)
            if cur is None or cur[0].state is ts.TxnState.DEAD:
                return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None
            return ErrorCode.NONE, cur[0]
        except StoreError as e:
            log.warning("transaction %.100s: the metadata store failed: %s", tid, e)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None

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
                if cached is not None and cached[1] > got[1]:
                    continue  # written by us since the read
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
                    md.producer_id, md.producer_epoch, committed, version, sorted(md.partitions)
                )
            except (StoreError, OSError) as e:
                log.info("transaction %s: writing markers failed: %s", tid, e)
                codes = {tp: ErrorCode.UNKNOWN for tp in md.partitions}
            # a deleted topic or partition takes no marker, as in Kafka
            done = {ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
            if all(code in done for code in codes.values()):
                async with self._lock(tid):
                    cur2 = self.txns.get(tid)
                    if cur2 is None or cur2 != cur:
                        return
                    await self._persist(ts.complete(md, self.clock.time_ms()), version)
                return
            await asyncio.sleep(self.config.marker_retry_ms / 1000)

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
        ]

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
        if self._membership is None:
            return
        epoch = self._membership()[0]
        if epoch == self._membership_epoch:
            return
        self._membership_epoch = epoch
        for tid in [t for t in self.txns if not self.coordinates(t)]:
            self.txns.pop(tid, None)

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
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._background.clear()
        for task in self._completing.values():
            task.cancel()
        await asyncio.gather(*self._completing.values(), return_exceptions=True)
        self._completing.clear()
