"""Transaction coordinator state in __transaction_state (``transaction.state.storage=kafka``):
Kafka's TransactionStateManager.

One record per state change, key TransactionLogKey(transactional.id), value
TransactionLogValue (wire/coordinator_records.py; a tombstone when an id expires), in partition
``partitionFor(transactional.id)`` of __transaction_state.  The leader of partition p
coordinates the ids of p: when this broker becomes the leader (``on_election``) it replays p
(meanwhile COORDINATOR_LOAD_IN_PROGRESS, ``load_error``), then serves the ids from memory;
``on_resignation`` drops them.

The TxnStorage contract (store.py) maps onto the log: an id's version is the log offset of its
latest record, and ``put`` with an older version fails with BadVersionError (only this
broker's coordinator writes the ids of a partition it leads, so that only guards the
coordinator's own cache); every append names the leader epoch the partition was loaded in, so
a deposed leader's write fails (CoordinatorWriteError NOT_LEADER_OR_FOLLOWER, which the
coordinator answers NOT_COORDINATOR).  The coordinator epoch of markers is that leader epoch,
as in Kafka.  Kafka's log keeps no lastProducerEpoch (KIP-360's retry of a lost epoch bump):
a replayed state has none, as a Kafka coordinator that loaded it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from pybroker.coord.metadata.internal_log import CoordinatorWriteError, InternalLog, LogBatch
from pybroker.coord.metadata.placement import OFFSETS_PARTITIONS, partition_for
from pybroker.coord.metadata.store import BadVersionError, NodeExistsError, NoNodeError, StoreError
from pybroker.coord.txn import state as ts
from pybroker.errors import ErrorCode
from pybroker.wire import coordinator_records as cr
from pybroker.wire.primitives import DecodeError

log = logging.getLogger(__name__)

LOAD_RETRY_S = 1.0


def to_value(md: ts.TxnMetadata) -> cr.TransactionLogValue:
    return cr.TransactionLogValue(
        md.producer_id,
        md.producer_epoch,
        md.timeout_ms,
        md.state.value,
        tuple(sorted(md.partitions)),
        md.update_ms,
        md.start_ms,
    )


def from_value(tid: str, v: cr.TransactionLogValue) -> ts.TxnMetadata:
    return ts.TxnMetadata(
        tid,
        v.producer_id,
        v.producer_epoch,
        v.timeout_ms,
        ts.TxnState(v.status),
        frozenset(v.partitions),
        start_ms=v.start_ms,
        update_ms=v.last_update_ms,
    )


_serials = itertools.count(1)


@dataclass
class _Partition:
    leader_epoch: int
    serial: int = field(default_factory=lambda: next(_serials))
    loaded: bool = False
    txns: dict[str, tuple[ts.TxnMetadata, int]] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None


class TxnStateLog:
    """TxnStorage over __transaction_state (module docstring)."""

    def __init__(
        self,
        log_: InternalLog,
        *,
        partitions: int = OFFSETS_PARTITIONS,
        load_retry_s: float = LOAD_RETRY_S,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.log = log_
        self.partitions = partitions
        self.load_retry_s = load_retry_s
        self.on_change = on_change  # an election, a resignation or a finished load
        self._parts: dict[int, _Partition] = {}
        self.epoch = 0

    def partition_of(self, tid: str) -> int:
        return partition_for(tid, self.partitions)

    # -- ownership -------------------------------------------------------------------------
    def on_election(self, partition: int, leader_epoch: int, continued: bool = False) -> None:
        """(as LogOffsetStore.on_election)"""
        old = self._parts.get(partition)
        if old is not None and (old.leader_epoch == leader_epoch or continued):
            old.leader_epoch = leader_epoch
            return
        self._drop(partition)
        st = _Partition(leader_epoch)
        self._parts[partition] = st
        st.task = asyncio.get_running_loop().create_task(
            self._load(partition, st), name=f"txn-state-load-{partition}"
        )
        self._changed()

    def on_resignation(self, partition: int) -> None:
        if self._drop(partition):
            self._changed()

    def _drop(self, partition: int) -> bool:
        st = self._parts.pop(partition, None)
        if st is None:
            return False
        if st.task is not None and not st.task.done():
            st.task.cancel()
        return True

    def _changed(self) -> None:
        self.epoch += 1
        if self.on_change is not None:
            self.on_change()

    def owns(self, partition: int) -> bool:
        return partition in self._parts

    def term(self, partition: int) -> object:
        """This broker's load of the partition (None: not led here): it changes with every
        election here and when the load completes, and only then."""
        st = self._parts.get(partition)
        return None if st is None else (st.serial, st.loaded)

    def load_error(self, partition: int) -> int | None:
        st = self._parts.get(partition)
        if st is None:
            return ErrorCode.NOT_COORDINATOR
        return None if st.loaded else ErrorCode.COORDINATOR_LOAD_IN_PROGRESS

    async def stop(self) -> None:
        tasks = [st.task for st in self._parts.values() if st.task is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _load(self, partition: int, st: _Partition) -> None:
        while True:
            st.txns.clear()
            try:
                async for batch in self.log.replay(partition, st.leader_epoch):
                    self._apply(st, batch)
            except asyncio.CancelledError:
                raise
            except (StoreError, OSError) as e:
                if self._parts.get(partition) is not st:
                    return
                log.warning(
                    "__transaction_state-%d: loading failed (%s); retrying in %.1f s",
                    partition,
                    e,
                    self.load_retry_s,
                )
                await asyncio.sleep(self.load_retry_s)
                continue
            break
        if self._parts.get(partition) is st:
            st.loaded = True
            log.info(
                "__transaction_state-%d: loaded %d transactional ids (leader epoch %d)",
                partition,
                len(st.txns),
                st.leader_epoch,
            )
            self._changed()

    def _apply(self, st: _Partition, batch: LogBatch) -> None:
        if batch.control is not None:
            return
        for offset, key, value in batch.records:
            if key is None:
                continue
            try:
                tid = cr.read_txn_key(key)
                if not isinstance(tid, str):
                    continue
                if value is None:
                    st.txns.pop(tid, None)
                else:
                    st.txns[tid] = (from_value(tid, cr.read_txn_log_value(value)), offset)
            except (DecodeError, ValueError) as e:  # (written by something else)
                log.warning("__transaction_state: record at offset %d skipped: %s", offset, e)

    # -- TxnStorage ------------------------------------------------------------------------
    def _served(self, tid: str) -> _Partition:
        p = self.partition_of(tid)
        code = self.load_error(p)
        if code is not None:
            raise CoordinatorWriteError(code)
        return self._parts[p]

    async def load_all(self) -> dict[str, tuple[ts.TxnMetadata, int]]:
        return {
            tid: got for st in self._parts.values() if st.loaded for tid, got in st.txns.items()
        }

    async def load(self, tid: str) -> tuple[ts.TxnMetadata, int] | None:
        return self._served(tid).txns.get(tid)

    async def put(self, md: ts.TxnMetadata, version: int | None) -> int:
        tid = md.transactional_id
        st = self._served(tid)
        cur = st.txns.get(tid)
        if version is None and cur is not None:
            raise NodeExistsError(path=tid)
        if version is not None and (cur is None or cur[1] != version):
            raise BadVersionError(path=tid)
        record = (cr.txn_log_key(tid), cr.txn_log_value(to_value(md)))
        offset = await self._append(tid, st, record)
        if self._parts.get(self.partition_of(tid)) is st:
            st.txns[tid] = (md, offset)
        return offset

    async def delete(self, tid: str, version: int) -> None:
        st = self._served(tid)
        cur = st.txns.get(tid)
        if cur is None:
            raise NoNodeError(path=tid)
        if cur[1] != version:
            raise BadVersionError(path=tid)
        await self._append(tid, st, (cr.txn_log_key(tid), None))
        if self._parts.get(self.partition_of(tid)) is st:
            st.txns.pop(tid, None)

    def coordinator_epoch(self, tid: str, version: int) -> int:
        st = self._parts.get(self.partition_of(tid))
        return st.leader_epoch if st is not None else -1

    async def _append(self, tid: str, st: _Partition, record: tuple[bytes, bytes | None]) -> int:
        try:
            return await self.log.append(
                self.partition_of(tid), [record], leader_epoch=st.leader_epoch
            )
        except CoordinatorWriteError as e:
            if e.code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
                # another broker leads the partition now (its leadership notice is on the
                # way): unloaded here, and answered as a lost compare-and-set
                p = self.partition_of(tid)
                if self._parts.get(p) is st:
                    self.on_resignation(p)
                raise BadVersionError(f"{tid}: {e}", path=tid) from e
            raise


__all__ = ["TxnStateLog", "from_value", "to_value"]
