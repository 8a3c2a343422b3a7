"""Committed offsets and group metadata in __consumer_offsets (``offsets.storage=kafka``):
Kafka's GroupMetadataManager, with Kafka's record formats (wire/coordinator_records.py).

Invariants: the leader of partition p coordinates p's groups; it serves them from memory once
it has loaded p (COORDINATOR_LOAD_IN_PROGRESS until then), and every append names the leader
epoch p was loaded in, so a deposed leader's write fails (NOT_COORDINATOR) instead of reaching
the log.  Loading, the move from ``offsets.storage=zookeeper``, out-of-order commits:
docs/internals.md ("pybroker/coord/group/offsets_log.py").
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pybroker.clock import Clock
from pybroker.coord.group.classic_store import ClassicGroupStore
from pybroker.coord.group.offsets import CommittedOffset, Offsets, OffsetStore
from pybroker.coord.group.txn_offsets import ROOT as TXN_OFFSETS_ROOT
from pybroker.coord.group.txn_offsets import decode_pending
from pybroker.coord.metadata import paths
from pybroker.coord.metadata.internal_log import (
    CoordinatorWriteError,
    InternalLog,
    LogBatch,
    Record,
    coordinator_error,
)
from pybroker.coord.metadata.model import TopicPartition
from pybroker.coord.metadata.partition_loads import LoadedPartition, PartitionLoads
from pybroker.coord.metadata.placement import OFFSETS_PARTITIONS
from pybroker.coord.metadata.store import MetadataStore, NoNodeError, StoreError
from pybroker.errors import ErrorCode
from pybroker.wire import coordinator_records as cr
from pybroker.wire.primitives import DecodeError

log = logging.getLogger(__name__)

LOAD_RETRY_S = 1.0
LISTING_S = 5.0  # a listing of the metadata store's offsets serves the loads that follow


@dataclass
class _Group:
    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    record_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    metadata: cr.GroupMetadataValue | None = None

    @property
    def empty(self) -> bool:
        return not self.offsets and self.metadata is None

    def put(self, tp: TopicPartition, co: CommittedOffset | None, at: int) -> None:
        """The offset the record at log offset ``at`` commits (None: a tombstone)."""
        if co is None:
            self.offsets.pop(tp, None)
            self.record_offsets.pop(tp, None)
        else:
            self.offsets[tp] = co
            self.record_offsets[tp] = at


@dataclass
class PartitionCache(LoadedPartition):
    groups: dict[str, _Group] = field(default_factory=dict)
    # producer id -> group -> partition -> (offset pending in the producer's open
    # transaction, the log offset of its record)
    pending: dict[int, dict[str, dict[TopicPartition, tuple[CommittedOffset, int]]]] = field(
        default_factory=dict
    )
    next_offset: int = 0  # where the last replay stopped


def _committed(v: cr.OffsetCommitValue) -> CommittedOffset:
    return CommittedOffset(
        v.offset,
        v.leader_epoch,
        v.metadata,
        v.commit_timestamp,
        None if v.expire_timestamp < 0 else v.expire_timestamp,
    )


# A group's commits repeat the same keys: those of short group ids are remembered (the last
# 16,384: a few MiB at most, group ids may be 32,767 characters long), as
# placement.partition_for remembers its answers.
_CACHED_GROUP_CHARS = 255
_cached_offset_commit_key = functools.lru_cache(maxsize=16384)(cr.offset_commit_key)


def offset_record(group: str, tp: TopicPartition, co: CommittedOffset | None) -> Record:
    if len(group) <= _CACHED_GROUP_CHARS:
        key = _cached_offset_commit_key(group, tp[0], tp[1])
    else:
        key = cr.offset_commit_key(group, tp[0], tp[1])
    if co is None:
        return key, None
    expire = co.expire_timestamp
    value = cr.offset_commit_value_of(
        co.offset,
        co.leader_epoch,
        co.metadata,
        co.commit_timestamp,
        -1 if expire is None else expire,
    )
    return key, value


class LogOffsetStore(PartitionLoads[PartitionCache]):
    topic = "__consumer_offsets"
    task_prefix = "offsets-load"
    retry_on = (StoreError, DecodeError, OSError)

    def __init__(
        self,
        log_: InternalLog,
        store: MetadataStore,
        clock: Clock,
        *,
        partitions: int = OFFSETS_PARTITIONS,
        load_retry_s: float = LOAD_RETRY_S,
    ) -> None:
        super().__init__(partitions=partitions, load_retry_s=load_retry_s)
        self.log = log_
        self.store = store  # the metadata store (KIP-848 state, the migration's source)
        self.clock = clock
        # (when, groups by partition, pending by partition): the metadata store's offsets
        self._listing: tuple[float, dict, dict] | None = None

    # -- loading (ownership: PartitionLoads) ---------------------------------------------
    def _new_partition(self, leader_epoch: int) -> PartitionCache:
        return PartitionCache(leader_epoch)

    async def _fill(self, partition: int, st: PartitionCache) -> None:
        await self._replay(partition, st)
        await self._import_from_store(partition, st)
        await self._replay(partition, st, tail_only=True)

    def _reset(self, st: PartitionCache) -> None:
        st.groups.clear()
        st.pending.clear()
        st.next_offset = 0

    def _loaded_what(self, st: PartitionCache) -> str:
        return f"{len(st.groups)} groups"

    async def _replay(self, partition: int, st: PartitionCache, *, tail_only: bool = False) -> None:
        """Apply the partition's batches to ``st`` (from where the last replay stopped when
        ``tail_only``)."""
        start = st.next_offset if tail_only else 0
        async for batch in self.log.replay(partition, st.leader_epoch):
            if batch.last_offset < start:
                continue
            apply_batch(st, batch)
            st.next_offset = batch.last_offset + 1

    async def _import_from_store(self, partition: int, st: PartitionCache) -> None:
        """Move what the metadata store holds for the groups of ``partition`` into the log
        (module docstring: switching from offsets.storage=zookeeper).  The partition's mark
        of an earlier move the other way (offsets_drain.py) goes: a later switch back to the
        metadata store moves the log's offsets again."""
        try:
            await self.store.delete(f"{paths.OFFSETS_DRAINED}/{partition}")
        except NoNodeError:
            pass
        zk = OffsetStore(self.store, self.clock, timestamp_refresh_ms=0)
        groups_in, pending_in = await self._store_listing()
        for group in groups_in.get(partition, ()):
            stored = await zk.load(group)
            have = st.groups.get(group)
            newer = {
                tp: co
                for tp, co in stored.items()
                if have is None
                or tp not in have.offsets
                or have.offsets[tp].commit_timestamp < co.commit_timestamp
            }
            if newer:
                await self._append_offsets(partition, st, group, newer)
            await zk.delete_group(group)
            log.info(
                "group %s: %d committed offsets moved from the metadata store into "
                "__consumer_offsets-%d",
                group,
                len(newer),
                partition,
            )
        for pid, group, path in pending_in.get(partition, ()):
            try:
                data, stat = await self.store.get(path)
            except NoNodeError:
                continue
            epoch, offsets = decode_pending(data)
            await self.add_pending(partition, st, group, pid, epoch, offsets)
            try:
                await self.store.delete(path, stat.version)
            except NoNodeError:
                pass

    async def _store_listing(
        self,
    ) -> tuple[dict[int, list[str]], dict[int, list[tuple[int, str, str]]]]:
        """What the metadata store holds, by partition: the groups with offsets under
        /consumers, and (producer id, group, path) of the pending transactional offsets.
        Listed once for the partitions that load together (kept LISTING_S), not once each."""
        now = self.clock.monotonic()
        if self._listing is not None and now - self._listing[0] < LISTING_S:
            return self._listing[1], self._listing[2]
        groups: dict[int, list[str]] = {}
        try:
            children = await self.store.get_children(paths.CONSUMERS)
        except NoNodeError:
            children = []
        for c in children:
            name = paths.component_to_name(c)
            groups.setdefault(self.partition_of(name), []).append(name)
        pending: dict[int, list[tuple[int, str, str]]] = {}
        try:
            pids = await self.store.get_children(TXN_OFFSETS_ROOT)
        except NoNodeError:
            pids = []
        for pid_name in pids:
            try:
                pid = int(pid_name)
                kids = await self.store.get_children(f"{TXN_OFFSETS_ROOT}/{pid_name}")
            except (ValueError, NoNodeError):
                continue
            for child in kids:
                group = paths.component_to_name(child)
                path = f"{TXN_OFFSETS_ROOT}/{pid_name}/{child}"
                pending.setdefault(self.partition_of(group), []).append((pid, group, path))
        self._listing = (now, groups, pending)
        return groups, pending

    # -- reads (OffsetStore's interface) ---------------------------------------------------
    async def load(self, group: str) -> Offsets:
        """The group's committed offsets (a copy); empty when this broker does not serve the
        group (the coordinator checks ownership before asking)."""
        got = self.cached(group)
        return {} if got is None else got

    def cached(self, group: str) -> Offsets | None:
        st = self._parts.get(self.partition_of(group))
        if st is None or not st.loaded:
            return None
        g = st.groups.get(group)
        return {} if g is None else dict(g.offsets)

    def group_metadata(self, group: str) -> cr.GroupMetadataValue | None:
        st = self._parts.get(self.partition_of(group))
        g = st.groups.get(group) if st is not None and st.loaded else None
        return None if g is None else g.metadata

    def forget(self, group: str) -> None:
        """Nothing to forget: the cache of a partition this broker leads is exact."""

    def forget_all(self) -> None:
        """(as ``forget``)"""

    async def groups(self) -> list[str]:
        """The groups with committed offsets or metadata in the partitions served here."""
        return sorted(g for st in self._parts.values() if st.loaded for g, v in st.groups.items())

    # -- writes ----------------------------------------------------------------------------
    async def _append(
        self,
        partition: int,
        st: PartitionCache,
        records: list[Record],
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> int:
        """Append one batch; the offset of its first record."""
        try:
            last = await self.log.append(
                partition,
                records,
                leader_epoch=st.leader_epoch,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                transactional=producer_id >= 0,
            )
        except CoordinatorWriteError as e:
            raise self._append_failed(partition, st, e) from e
        return last - len(records) + 1

    def _append_failed(
        self, partition: int, st: PartitionCache, e: CoordinatorWriteError
    ) -> CoordinatorWriteError:
        """The error to raise for a failed append (Kafka's maybeConvertOffsetCommitError)."""
        if e.code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
            # another broker leads the partition now (its leadership notice is on the
            # way): its groups are unloaded here
            if self._parts.get(partition) is st:
                self.on_resignation(partition)
        return CoordinatorWriteError(coordinator_error(e.code), str(e))

    async def _append_offsets(
        self,
        partition: int,
        st: PartitionCache,
        group: str,
        offsets: dict[TopicPartition, CommittedOffset | None],
    ) -> None:
        items = list(offsets.items())
        first = await self._append(
            partition, st, [offset_record(group, tp, co) for tp, co in items]
        )
        self._offsets_appended(partition, st, group, items, first)

    def _offsets_appended(
        self,
        partition: int,
        st: PartitionCache,
        group: str,
        items: list[tuple[TopicPartition, CommittedOffset | None]],
        first: int,
    ) -> None:
        """The cache after an append of ``items`` at offsets ``first``...: a partition's newer
        offset wins (a later commit of it may have finished first)."""
        if self._parts.get(partition) is not st:
            return
        g = st.groups.get(group)
        if g is None:  # (not setdefault: a _Group built per commit, two dicts, 1.8%)
            g = st.groups[group] = _Group()
        for i, (tp, co) in enumerate(items):
            at = first + i
            if g.record_offsets.get(tp, -1) > at:
                continue  # a later commit of this partition finished first
            g.put(tp, co, at)
        if g.empty:
            st.groups.pop(group, None)

    async def commit(self, group: str, offsets: Offsets) -> None:
        """Append the offsets as one batch (all or nothing) and wait for the in-sync
        replicas.  Raises CoordinatorWriteError with the code to answer."""
        waiting = self.commit_now(group, offsets)
        if waiting is not None:
            await waiting

    def commit_now(self, group: str, offsets: Offsets) -> Awaitable[None] | None:
        """``commit`` without a coroutine when nothing waits: None once the batch is appended
        and the in-sync replicas have it (at once when the partition has no other ISR
        member), else an awaitable of the rest.  Raises CoordinatorWriteError."""
        if not offsets:
            return None
        p = self.partition_of(group)
        st = self._served(group)
        items = list(offsets.items())
        records = [offset_record(group, tp, co) for tp, co in items]
        try:
            got = self.log.append_now(p, records, leader_epoch=st.leader_epoch)
        except CoordinatorWriteError as e:
            raise self._append_failed(p, st, e) from e
        if type(got) is int:
            self._offsets_appended(p, st, group, items, got - len(records) + 1)
            return None
        return self._offsets_replicated(p, st, group, items, got)

    async def _offsets_replicated(
        self,
        partition: int,
        st: PartitionCache,
        group: str,
        items: list[tuple[TopicPartition, CommittedOffset | None]],
        waiting: Awaitable[int],
    ) -> None:
        try:
            last = await waiting
        except CoordinatorWriteError as e:
            raise self._append_failed(partition, st, e) from e
        self._offsets_appended(partition, st, group, items, last - len(items) + 1)

    async def delete_offsets(self, group: str, partitions: Iterable[TopicPartition]) -> None:
        """Tombstones for these partitions' offsets; missing ones are ignored."""
        st = self._served(group)
        g = st.groups.get(group)
        doomed = [tp for tp in dict.fromkeys(partitions) if g is not None and tp in g.offsets]
        if doomed:
            await self._append_offsets(self.partition_of(group), st, group, dict.fromkeys(doomed))

    async def expire(self, group: str, older_than_ms: int) -> int:
        """Tombstones for offsets committed before ``older_than_ms`` (or past their explicit
        expire timestamp, OffsetCommit v2-v4); how many."""
        st = self._served(group)
        g = st.groups.get(group)
        if g is None:
            return 0
        now = self.clock.time_ms()
        doomed = [
            tp
            for tp, co in g.offsets.items()
            if (
                co.expire_timestamp <= now
                if co.expire_timestamp is not None
                else co.commit_timestamp < older_than_ms
            )
        ]
        if doomed:
            await self._append_offsets(self.partition_of(group), st, group, dict.fromkeys(doomed))
        return len(doomed)

    async def delete_group(self, group: str) -> None:
        """Tombstones for every offset of the group and its metadata (one batch)."""
        st = self._served(group)
        g = st.groups.get(group)
        if g is None:
            return
        records = [offset_record(group, tp, None) for tp in g.offsets]
        records.append((cr.group_metadata_key(group), None))
        p = self.partition_of(group)
        await self._append(p, st, records)
        if self._parts.get(p) is st:
            st.groups.pop(group, None)

    async def store_group_metadata(self, group: str, value: cr.GroupMetadataValue | None) -> None:
        """Write (None: delete) the classic group's metadata record."""
        st = self._served(group)
        p = self.partition_of(group)
        g = st.groups.get(group)
        if value is None and (g is None or g.metadata is None):
            return
        data = None if value is None else cr.group_metadata_value(value)
        await self._append(p, st, [(cr.group_metadata_key(group), data)])
        if self._parts.get(p) is st:
            g = st.groups.setdefault(group, _Group())
            g.metadata = value
            if g.empty:
                st.groups.pop(group, None)

    # -- transactional offsets (txn_offsets.py's interface) --------------------------------
    def invalidate(self) -> None:
        """Nothing to invalidate (``forget``)."""

    async def pending_partitions(self, group: str) -> set[TopicPartition]:
        st = self._parts.get(self.partition_of(group))
        if st is None:
            return set()
        return {tp for groups in st.pending.values() for tp in groups.get(group, {})}

    async def add(self, group: str, pid: int, epoch: int, offsets: Offsets) -> bool:
        """TxnOffsetCommit: the offsets as a transactional batch of the producer; False when
        the log refuses its epoch (a fenced producer)."""
        return await self.add_pending(
            self.partition_of(group), self._served(group), group, pid, epoch, offsets
        )

    async def add_pending(
        self, partition: int, st: PartitionCache, group: str, pid: int, epoch: int, offsets: Offsets
    ) -> bool:
        records = [offset_record(group, tp, co) for tp, co in offsets.items()]
        try:
            first = await self._append(
                partition, st, records, producer_id=pid, producer_epoch=epoch
            )
        except CoordinatorWriteError as e:
            if e.code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED):
                return False
            raise
        if self._parts.get(partition) is st:
            pending = st.pending.setdefault(pid, {}).setdefault(group, {})
            for i, (tp, co) in enumerate(offsets.items()):
                pending[tp] = (co, first + i)
        return True

    async def complete(
        self,
        pid: int,
        committed: bool,
        partition: int,
        commit: Callable[[str, Offsets], Awaitable[None]] | None = None,
    ) -> int:
        """The producer's transaction ended in ``partition`` (its marker is in the log
        already): its pending offsets become the groups' committed offsets, or are dropped.
        While the partition loads nothing is done here: the replay reads the marker."""
        st = self._parts.get(partition)
        if st is None or not st.loaded:
            return 0
        return _complete(st, pid, committed)


def apply_batch(st: PartitionCache, batch: LogBatch) -> None:
    """Replay one batch of __consumer_offsets into ``st`` (Kafka's loadGroupsAndOffsets)."""
    if batch.control is not None:
        _complete(st, batch.producer_id, batch.control)
        return
    for offset, key, value in batch.records:
        if key is None:
            continue
        try:
            _apply_record(st, batch, offset, key, value)
        except DecodeError as e:  # (written by something else than a coordinator)
            log.warning("__consumer_offsets: record at offset %d skipped: %s", offset, e)


def _apply_record(
    st: PartitionCache, batch: LogBatch, offset: int, key: bytes, value: bytes | None
) -> None:
    k = cr.read_group_key(key)
    if isinstance(k, cr.OffsetCommitKey):
        tp = (k.topic, k.partition)
        if batch.transactional:
            if value is not None:
                pending = st.pending.setdefault(batch.producer_id, {})
                co = _committed(cr.read_offset_commit_value(value))
                pending.setdefault(k.group, {})[tp] = (co, offset)
            return
        co = None if value is None else _committed(cr.read_offset_commit_value(value))
        g = st.groups.setdefault(k.group, _Group())
        g.put(tp, co, offset)
        if g.empty:
            del st.groups[k.group]
    elif isinstance(k, cr.GroupMetadataKey):
        metadata = None if value is None else cr.read_group_metadata_value(value)
        g = st.groups.setdefault(k.group, _Group())
        g.metadata = metadata
        if g.empty:
            del st.groups[k.group]
    # other keys (Kafka 4's KIP-848 and share-group records) are not ours


def _complete(st: PartitionCache, pid: int, committed: bool) -> int:
    """The marker of ``pid``'s transaction: its pending offsets committed (each unless a
    later record of the partition is committed already, as Kafka's
    completePendingTxnOffsetCommit) or dropped; how many groups had some."""
    groups = st.pending.pop(pid, {})
    if committed:
        for group, offsets in groups.items():
            g = st.groups.setdefault(group, _Group())
            for tp, (co, at) in offsets.items():
                if g.record_offsets.get(tp, -1) < at:
                    g.put(tp, co, at)
    return len(groups)


class LogClassicGroupStore(ClassicGroupStore):
    """Classic groups' metadata (classic_store.py's records) as GroupMetadataValue records in
    __consumer_offsets, with no members (pybroker keeps classic membership in memory; Kafka's
    loader reads a record without members as an Empty group, as pybroker loads it).  A Stable
    group's record carries currentStateTimestamp -1 (loaded: empty since now), an Empty one
    the time it became empty."""

    def __init__(self, offsets: LogOffsetStore) -> None:
        super().__init__(offsets.store)
        self.offsets = offsets

    async def groups(self) -> list[str]:
        return sorted(
            g
            for st in self.offsets._parts.values()
            if st.loaded
            for g, v in st.groups.items()
            if v.metadata is not None
        )

    async def load(self, group_id: str) -> dict[str, Any] | None:
        v = self.offsets.group_metadata(group_id)
        if v is None:
            return None
        empty = v.current_state_timestamp >= 0
        record = {
            "protocol_type": v.protocol_type or None,
            "generation": v.generation,
            "protocol": v.protocol,
            "state": "Empty" if empty else "Stable",
        }
        if empty:
            record["current_state_timestamp"] = v.current_state_timestamp
        return record

    async def _put(self, group_id: str, data: bytes | None) -> None:
        if data is None:
            await self.offsets.store_group_metadata(group_id, None)
            return
        r = json.loads(data)
        empty = r.get("state") == "Empty"
        value = cr.GroupMetadataValue(
            r.get("protocol_type") or "",
            int(r["generation"]),
            r.get("protocol"),
            None,
            int(r.get("current_state_timestamp", -1)) if empty else -1,
        )
        await self.offsets.store_group_metadata(group_id, value)


__all__ = ["LogClassicGroupStore", "LogOffsetStore", "apply_batch", "offset_record"]
