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

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from pybroker.coord.metadata.internal_log import CoordinatorWriteError, InternalLog, LogBatch
from pybroker.coord.metadata.partition_loads import LoadedPartition, PartitionLoads
from pybroker.coord.metadata.placement import OFFSETS_PARTITIONS
from pybroker.coord.metadata.store import BadVersionError, NodeExistsError, NoNodeError
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


@dataclass
class _Partition(LoadedPartition):
    txns: dict[str, tuple[ts.TxnMetadata, int]] = field(default_factory=dict)


class TxnStateLog(PartitionLoads[_Partition]):
    """TxnStorage over __transaction_state (module docstring)."""

    topic = "__transaction_state"
    task_prefix = "txn-state-load"

    def __init__(
        self,
        log_: InternalLog,
        *,
        partitions: int = OFFSETS_PARTITIONS,
        load_retry_s: float = LOAD_RETRY_S,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(partitions=partitions, load_retry_s=load_retry_s, on_change=on_change)
        self.log = log_

    # -- loading (ownership: PartitionLoads) ---------------------------------------------
    def _new_partition(self, leader_epoch: int) -> _Partition:
        return _Partition(leader_epoch)

    async def _fill(self, partition: int, st: _Partition) -> None:
        async for batch in self.log.replay(partition, st.leader_epoch):
            self._apply(st, batch)

    def _reset(self, st: _Partition) -> None:
        st.txns.clear()

    def _loaded_what(self, st: _Partition) -> str:
        return f"{len(st.txns)} transactional ids"

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
