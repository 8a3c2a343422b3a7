"""The group coordinator: the asyncio shell around the pure group state machine.  The event loop
owns every group and a call into the state machine never awaits, so each request applies
atomically (the loop is the queue).  The coordinator of a group is the owner of its offsets
partition, computed from the live brokers; others answer NOT_COORDINATOR.  A classic group's metadata is stored as Kafka's
(classic_store.py), a KIP-848 group's state too (consumer_store.py).  What a broker holds
about a group is valid only within one coordination term: a moved membership epoch drops the
cached offsets and unloads the groups (KIP-848 groups are loaded again from the store).
Ownership and terms: docs/internals.md ("pybroker/coord/group/coordinator.py").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from pybroker.clock import Clock
from pybroker.coord.group.classic import (
    Group,
    GroupConfig,
    GroupState,
    JoinRequest,
    Output,
    join_error,
)
from pybroker.coord.group.classic_store import ClassicGroupStore
from pybroker.coord.group.consumer import ConsumerGroup
from pybroker.coord.group.consumer_member import (
    ConsumerGroupConfig,
    ConsumerGroupError,
    HeartbeatRequest,
    TopicMeta,
)
from pybroker.coord.group.consumer_store import ConsumerGroupStore
from pybroker.coord.group.migration import (
    MigrationRefused,
    can_downgrade,
    can_upgrade,
    downgrade,
    upgrade,
)
from pybroker.coord.group.offsets import CommittedOffset, OffsetStore
from pybroker.coord.group.offsets_drain import OffsetsDrain
from pybroker.coord.group.offsets_log import LogClassicGroupStore, LogOffsetStore
from pybroker.coord.group.txn_offsets import PendingTxnOffsets
from pybroker.coord.metadata.internal_log import CoordinatorWriteError
from pybroker.coord.metadata.placement import Placement, Rendezvous, SingleBroker, partition_for
from pybroker.coord.metadata.store import StoreError
from pybroker.errors import ErrorCode, KafkaError
from pybroker.wire.consumer_protocol import PROTOCOL_TYPE, subscription_topics

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


def _subscribed_topics(g: Group) -> set[str] | None:
    """The topics the members of a "consumer" group subscribe to (Kafka's
    GroupMetadata.computeSubscribedTopics), read from each member's metadata for the group's
    protocol; None (unknown) before the group has chosen a protocol or when a member's
    metadata does not follow the consumer protocol."""
    if g.protocol_name is None or not g.members:
        return None
    topics: set[str] = set()
    for m in g.members.values():
        try:
            topics.update(subscription_topics(m.metadata(g.protocol_name)))
        except ValueError:  # UnicodeDecodeError included
            return None
    return topics


def _empty(g: Group | ConsumerGroup) -> bool:
    return g.is_empty if isinstance(g, ConsumerGroup) else g.state == GroupState.EMPTY


def _dead(g: Group | ConsumerGroup) -> bool:
    return g.dead if isinstance(g, ConsumerGroup) else g.state == GroupState.DEAD


def _store_error_code(e: StoreError) -> int:
    """The answer to a write that failed: the internal topic's error (LogOffsetStore's
    CoordinatorWriteError.code), else COORDINATOR_NOT_AVAILABLE (the metadata store)."""
    return getattr(e, "code", ErrorCode.COORDINATOR_NOT_AVAILABLE)


def _heartbeat_error(code: int, message: str | None) -> dict:
    return {
        "error_code": code,
        "error_message": message,
        "member_id": None,
        "member_epoch": 0,
        "heartbeat_interval_ms": 0,
        "assignment": None,
    }


class GroupCoordinator:
    def __init__(
        self,
        offsets: OffsetStore | LogOffsetStore,
        clock: Clock,
        config: GroupConfig,
        *,
        offsets_retention_ms: int,
        offsets_retention_check_interval_ms: int,
        offset_metadata_max_bytes: int,
        broker_id: int = 0,
        membership: Callable[[], tuple[int, Iterable[int]]] | None = None,
        consumer_config: ConsumerGroupConfig | None = None,
        topics: Callable[[], TopicMeta] | None = None,
        placement: Placement | None = None,
        drain: OffsetsDrain | None = None,
    ) -> None:
        """``placement``: who coordinates each offsets partition (default: rendezvous
        hashing over ``membership``'s live brokers; without either, this broker coordinates
        every group).  With offsets in __consumer_offsets (a LogOffsetStore) it is the
        partitions' leaders, and the store says whether a partition is loaded here."""
        self.offsets = offsets
        self.consumer_store = ConsumerGroupStore(offsets.store)
        self.classic_store = (
            LogClassicGroupStore(offsets)
            if isinstance(offsets, LogOffsetStore)
            else ClassicGroupStore(offsets.store)
        )
        # groups whose KIP-848 state was looked for in the store in this coordination term
        self._checked: set[str] = set()
        self._loading: dict[str, asyncio.Future[None]] = {}
        self.consumer_config = consumer_config or ConsumerGroupConfig()
        # the cluster's topics (name -> (id, partitions)) for KIP-848 assignments
        self._topics = topics or dict
        self.txn_offsets: PendingTxnOffsets | LogOffsetStore = (
            offsets if isinstance(offsets, LogOffsetStore) else PendingTxnOffsets(offsets.store)
        )
        self.broker_id = broker_id
        if placement is None:
            placement = SingleBroker(broker_id) if membership is None else Rendezvous(membership)
        self.placement = placement
        # offsets.storage=zookeeper after kafka: __consumer_offsets being moved into the store
        self.drain = drain
        self._membership_epoch = placement.epoch()
        # each offsets partition's coordination term as last seen (placement.term)
        self._terms = [placement.term(p) for p in range(placement.partitions)]
        self.clock = clock
        self.config = config
        self.offsets_retention_ms = offsets_retention_ms
        self.offsets_retention_check_interval_ms = offsets_retention_check_interval_ms
        self.offset_metadata_max_bytes = offset_metadata_max_bytes
        self.groups: dict[str, Group | ConsumerGroup] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._expiry_task: asyncio.Task | None = None
        self._adopt_task: asyncio.Task | None = None
        self._background: set[asyncio.Task] = set()
        # share groups (KIP-932) share the group-id namespace: set by the broker, True when a
        # share group holds the id (raises StoreError)
        self.share_group_exists: Callable[[str], Awaitable[bool]] | None = None

    async def start(self) -> None:
        await self._adopt_groups()
        self._expiry_task = asyncio.create_task(self._expire_loop(), name="offset-expiry")

    def partition_of(self, group_id: str) -> int:
        """The group's partition of __consumer_offsets (Kafka's partitionFor)."""
        return partition_for(group_id, self.placement.partitions)

    def coordinator_node(self, group_id: str) -> int:
        """The broker coordinating the group, as far as this broker knows (-1: none)."""
        return self.placement.owner(self.partition_of(group_id))

    def _coordinates(self, group_id: str) -> bool:
        return self.coordinator_node(group_id) == self.broker_id

    async def _adopt_groups(self) -> None:
        """Load, as Empty, the groups with committed offsets that this broker coordinates and
        does not hold yet (Kafka loads a coordinator's groups when it takes over their offsets
        partition): ListGroups shows them and offset expiry covers them."""
        epoch = self._membership_epoch
        names = await self.offsets.groups()
        consumer_groups = await self.consumer_store.groups()
        classic_groups = await self.classic_store.groups()
        if epoch != self._membership_epoch:
            return  # coordination moved meanwhile: the next adoption decides
        for gid in consumer_groups:
            if self._coordinates(gid):
                await self._ensure_loaded(gid)
        wanted = [g for g in classic_groups if g not in self.groups and self._coordinates(g)]
        records = dict(
            zip(wanted, await asyncio.gather(*map(self.classic_store.load, wanted)), strict=True)
        )
        if epoch != self._membership_epoch:
            return
        now = self.clock.time_ms()
        for gid in dict.fromkeys([*names, *records]):
            if gid not in self.groups and self._coordinates(gid):
                self.groups[gid] = self._adopted(gid, records.get(gid), now)

    def _adopted(self, group_id: str, record: dict | None, now: int) -> Group:
        """An Empty group as its stored metadata describes it (Kafka's loadGroup), or a
        group known only by its offsets: no protocol type, empty at least since now."""
        g = Group(group_id, self.config, state_timestamp_ms=now)
        if record is not None:
            g.protocol_type = record.get("protocol_type")
            g.generation_id = record["generation"]
            if record.get("state") == GroupState.EMPTY.value:
                g.state_timestamp_ms = int(record.get("current_state_timestamp", now))
        return g

    def _adopt_in_background(self) -> None:
        if self._adopt_task is not None and not self._adopt_task.done():
            self._adopt_task.cancel()

        async def adopt() -> None:
            try:
                await self._adopt_groups()
            except StoreError as e:
                log.info("loading the groups this broker now coordinates failed: %s", e)

        self._adopt_task = asyncio.get_running_loop().create_task(adopt(), name="adopt-groups")

    async def stop(self) -> None:
        await self.classic_store.drain()
        for task in (self._expiry_task, self._adopt_task, *self._background):
            if task is None:
                continue
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        for t in self._timers.values():
            t.cancel()
        self._timers.clear()

    # -- coordination ----------------------------------------------------------------------
    def check_membership(self) -> None:
        """If the placement's epoch moved since the last look: for every offsets partition
        whose coordination term moved (all of them with rendezvous placement; with
        __consumer_offsets only those this broker started or stopped leading), forget the
        cached offsets and KIP-848 state of its groups and unload its groups (with rendezvous
        placement, only the KIP-848 groups and those coordinated elsewhere now: module
        docstring)."""
        epoch = self.placement.epoch()
        if epoch == self._membership_epoch:
            return
        self._membership_epoch = epoch
        terms = [self.placement.term(p) for p in range(self.placement.partitions)]
        moved = {p for p, t in enumerate(terms) if t != self._terms[p]}
        self._terms = terms
        if not moved:
            return
        everything = len(moved) == len(terms)  # (rendezvous placement: any change of brokers)
        if everything:
            self.offsets.forget_all()
            self.consumer_store.forget_all()
            self._checked.clear()
        else:
            for gid in list(self._checked):
                if self.partition_of(gid) in moved:
                    self._checked.discard(gid)
                    self.offsets.forget(gid)
                    self.consumer_store.forget(gid)
        self.txn_offsets.invalidate()
        now = self.clock.time_ms()
        for gid in [
            gid
            for gid, g in self.groups.items()
            if self.partition_of(gid) in moved
            and (
                # a partition whose own term moved was interrupted here: its groups go
                not everything or isinstance(g, ConsumerGroup) or not self._coordinates(gid)
            )
        ]:
            g = self.groups.pop(gid)
            log.info("group %s: coordination may have moved; unloading it", gid)
            self._deliver(gid, g.unload(now))  # _deliver also cancels the group's timer
        self._adopt_in_background()

    def coordinator_error(self, group_id: str) -> int | None:
        """NOT_COORDINATOR unless this broker coordinates the group now,
        COORDINATOR_LOAD_IN_PROGRESS while it loads the group's partition; None if it
        serves it."""
        self.check_membership()
        return self.partition_error(self.partition_of(group_id))

    # -- plumbing --------------------------------------------------------------------------
    def _get(self, group_id: str, create: bool) -> Group | None:
        """The classic group; with ``create``, a new one (also in place of an empty KIP-848
        group, as Kafka converts an empty group to the protocol that joins it).  None for a
        KIP-848 group with members (whose classic members the classic APIs reach through
        ConsumerGroup.classic_*, before calling this)."""
        g = self.groups.get(group_id)
        if isinstance(g, ConsumerGroup):
            if not (create and g.is_empty):
                return None
            g = None
        if g is None and create:
            g = Group(group_id, self.config, state_timestamp_ms=self.clock.time_ms())
            self.groups[group_id] = g
        return g

    def _any(self, group_id: str) -> Group | ConsumerGroup | None:
        return self.groups.get(group_id)

    def _deliver(self, group_id: str, outputs: list[Output]) -> None:
        for fut, response in outputs:
            if isinstance(fut, asyncio.Future) and not fut.done():
                fut.set_result(response)
        self._schedule(group_id)

    def _schedule(self, group_id: str) -> None:
        old = self._timers.pop(group_id, None)
        if old is not None:
            old.cancel()
        g = self.groups.get(group_id)
        if g is None:
            return
        self._store_metadata(g)
        deadline = g.next_deadline()
        if deadline is None:
            return
        delay = max(deadline - self.clock.time_ms(), 0) / 1000.0
        self._timers[group_id] = asyncio.get_running_loop().call_later(
            delay, self._on_timer, group_id
        )

    def _store_metadata(self, g: Group | ConsumerGroup) -> None:
        """Keep a classic group's metadata record in step (classic_group_store.py): written
        when a rebalance completed (Stable) or the group became Empty, as Kafka writes it;
        deleted when the group turned into a KIP-848 group (which has its own records)."""
        if isinstance(g, ConsumerGroup):
            self.classic_store.save(g.group_id, None)
        elif g.state in (GroupState.STABLE, GroupState.EMPTY) and g.protocol_type is not None:
            record = {
                "protocol_type": g.protocol_type,
                "generation": g.generation_id,
                "protocol": g.protocol_name,
                "state": g.state.value,
                "current_state_timestamp": g.state_timestamp_ms,
            }
            self.classic_store.save(g.group_id, record)

    def _on_timer(self, group_id: str) -> None:
        self._timers.pop(group_id, None)
        g = self.groups.get(group_id)
        if isinstance(g, ConsumerGroup):
            had_consumer_members, epoch = not g.all_classic, g.group_epoch
            self._deliver(group_id, g.tick(self.clock.time_ms(), self._topics()))
            self._persist_in_background(g, epoch if had_consumer_members else None)
        elif g is not None:
            self._deliver(group_id, g.tick(self.clock.time_ms()))

    # -- KIP-848 groups' durable state ----------------------------------------------------
    async def _ensure_loaded(self, group_id: str) -> None:
        """Load the group's KIP-848 state from the store, once per coordination term, before
        anything else touches the group.  Raises StoreError."""
        if group_id in self._checked:
            return
        fut = self._loading.get(group_id)
        if fut is None:
            fut = asyncio.ensure_future(self._load(group_id))
            self._loading[group_id] = fut
            fut.add_done_callback(lambda _: self._loading.pop(group_id, None))
        await asyncio.shield(fut)

    async def _load(self, group_id: str) -> None:
        partition = self.partition_of(group_id)
        term = self.placement.term(partition)
        stored = await self.consumer_store.load(group_id)
        self.check_membership()
        if self.placement.term(partition) != term:
            # the group's coordination term ended while reading: nothing is installed, the
            # client tries again (and the next request reads again)
            raise CoordinatorWriteError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        self._checked.add(group_id)
        if stored is None:
            return
        current = self.groups.get(group_id)
        if current is not None and not (
            isinstance(current, Group) and current.state == GroupState.EMPTY
        ):
            return
        try:
            g = ConsumerGroup.from_records(
                group_id, self.consumer_config, stored.meta, stored.members, self.clock.time_ms()
            )
        except (ValueError, KeyError, TypeError) as e:
            log.warning("group %s: its stored state cannot be read (%s); ignoring it", group_id, e)
            return
        log.info(
            "group %s: loaded at epoch %d with %d members", group_id, g.group_epoch, len(g.members)
        )
        self.groups[group_id] = g
        self._schedule(group_id)

    async def _persist(self, g: ConsumerGroup, member_ids: list[str] | None = None) -> int | None:
        """Write the group's changed records; None, or the error code to answer when the
        write failed (the group is then unloaded: the next request loads what is stored).
        A group unloaded meanwhile is no longer this broker's to write: NOT_COORDINATOR."""
        if g.dead:
            return ErrorCode.NOT_COORDINATOR
        try:
            plan = self.consumer_store.plan(g, member_ids)
            if plan is None:
                return None
            await self.consumer_store.apply(plan)
            return None
        except (StoreError, KeyError) as e:
            log.warning("group %s: writing its state failed (%s); unloading it", g.group_id, e)
            if self.groups.get(g.group_id) is g:
                del self.groups[g.group_id]
                self._checked.discard(g.group_id)
                self.consumer_store.forget(g.group_id)
                self._deliver(g.group_id, g.unload(self.clock.time_ms()))
            return ErrorCode.COORDINATOR_NOT_AVAILABLE

    def _persist_in_background(self, g: ConsumerGroup, downgrade_at: int | None = None) -> None:
        """Write the group; then, with ``downgrade_at`` (the group epoch before members were
        removed), downgrade it if only classic members are left."""

        async def run() -> None:
            if await self._persist(g) is None and downgrade_at is not None:
                await self._maybe_downgrade(g, downgrade_at)

        task = asyncio.get_running_loop().create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _maybe_downgrade(self, g: ConsumerGroup, generation_id: int) -> None:
        """After a member speaking the consumer protocol left: a group of classic members
        only becomes a classic group again (coord/group/migration.py), its stored KIP-848 state
        deleted first."""
        if self.groups.get(g.group_id) is not g or not can_downgrade(g, self.consumer_config):
            return
        now = self.clock.time_ms()
        try:
            classic, outputs = downgrade(g, self.config, now, generation_id)
        except MigrationRefused as e:
            log.info("group %s: cannot downgrade to a classic group: %s", g.group_id, e)
            return
        plan = self.consumer_store.plan_delete(g.group_id)
        try:
            if plan is not None:
                await self.consumer_store.apply(plan)
        except StoreError as e:
            log.warning("group %s: deleting its state failed (%s); unloading it", g.group_id, e)
            if self.groups.get(g.group_id) is g:
                del self.groups[g.group_id]
                self._checked.discard(g.group_id)
                self._deliver(g.group_id, g.unload(now))
            return
        if self.groups.get(g.group_id) is not g:
            return
        g.mark_dead(now)
        self.groups[g.group_id] = classic
        log.info("group %s: downgraded from consumer to classic (online migration)", g.group_id)
        self._deliver(g.group_id, outputs)

    async def load_group(self, group_id: str) -> int | None:
        """Make sure the group's durable state is loaded; None, or COORDINATOR_NOT_AVAILABLE
        when the store cannot be read."""
        try:
            await self._ensure_loaded(group_id)
        except StoreError as e:
            log.info("group %s: loading its state failed: %s", group_id, e)
            return _store_error_code(e)
        return None

    # -- the protocol ------------------------------------------------------------------------
    async def join(self, group_id: str, req: JoinRequest) -> dict:
        code = await self.load_group(group_id)
        if code is not None:
            return {
                "error_code": code,
                "generation_id": -1,
                "protocol_type": None,
                "protocol_name": None,
                "leader": "",
                "skip_assignment": False,
                "member_id": req.member_id,
                "members": [],
            }
        cg = self.groups.get(group_id)
        if isinstance(cg, ConsumerGroup) and not cg.is_empty and not cg.dead:
            # a classic member of a KIP-848 group (online migration)
            try:
                resp = cg.classic_join(self.clock.time_ms(), req, self._topics())
            except ConsumerGroupError as e:
                resp = {**join_error(e.code), "member_id": req.member_id}
            self._schedule(group_id)
            code = await self._persist(cg)
            if code is not None:
                return {**join_error(code), "member_id": req.member_id}
            return resp
        if cg is None:
            code = await self._share_group_holds(group_id)
            if code is not None:  # Kafka's classicGroupJoin: INCONSISTENT_GROUP_PROTOCOL
                return join_error(code)
            if self.groups.get(group_id) is not None:
                # another request created the group while the share groups were read (a
                # consumer-protocol group among them): start again with that one
                return await self.join(group_id, req)
        g = self._get(group_id, create=True)
        assert g is not None
        fut = asyncio.get_running_loop().create_future()
        self._deliver(group_id, g.join(fut, self.clock.time_ms(), req))
        return await fut

    async def _share_group_holds(self, group_id: str) -> int | None:
        """INCONSISTENT_GROUP_PROTOCOL when a share group holds the id (COORDINATOR_NOT_AVAILABLE
        when that cannot be read); None when none does."""
        if self.share_group_exists is None:
            return None
        try:
            held = await self.share_group_exists(group_id)
        except StoreError:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.INCONSISTENT_GROUP_PROTOCOL if held else None

    async def sync(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> dict:
        cg = self.groups.get(group_id)
        if isinstance(cg, ConsumerGroup) and not cg.is_empty and not cg.dead:
            try:
                resp = cg.classic_sync(
                    self.clock.time_ms(),
                    member_id,
                    instance_id,
                    generation_id,
                    protocol_type,
                    protocol_name,
                )
            except ConsumerGroupError as e:
                resp = {
                    "error_code": e.code,
                    "protocol_type": None,
                    "protocol_name": None,
                    "assignment": b"",
                }
            self._schedule(group_id)
            return resp
        g = self._get(group_id, create=False)
        if g is None:
            return {"error_code": ErrorCode.UNKNOWN_MEMBER_ID, "assignment": b""}
        fut = asyncio.get_running_loop().create_future()
        outputs = g.sync(
            fut,
            self.clock.time_ms(),
            member_id,
            instance_id,
            generation_id,
            protocol_type,
            protocol_name,
            assignments,
        )
        self._deliver(group_id, outputs)
        return await fut

    def heartbeat(
        self, group_id: str, member_id: str, instance_id: str | None, generation_id: int
    ) -> int:
        cg = self.groups.get(group_id)
        if isinstance(cg, ConsumerGroup) and not cg.is_empty and not cg.dead:
            code = cg.classic_heartbeat(self.clock.time_ms(), member_id, instance_id, generation_id)
            self._schedule(group_id)
            return code
        g = self._get(group_id, create=False)
        if g is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        code = g.heartbeat(self.clock.time_ms(), member_id, instance_id, generation_id)
        self._schedule(group_id)
        return code

    async def leave(self, group_id: str, leaving: list[tuple[str, str | None]]) -> list[int]:
        cg = self.groups.get(group_id)
        if isinstance(cg, ConsumerGroup) and not cg.is_empty and not cg.dead:
            errors = cg.classic_leave(self.clock.time_ms(), leaving, self._topics())
            self._schedule(group_id)
            code = await self._persist(cg)
            return errors if code is None else [code] * len(leaving)
        g = self._get(group_id, create=False)
        if g is None:
            return [ErrorCode.UNKNOWN_MEMBER_ID] * len(leaving)
        errors, outputs = g.leave(self.clock.time_ms(), leaving)
        self._deliver(group_id, outputs)
        return errors

    # -- offsets -------------------------------------------------------------------------------
    async def commit(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        offsets: dict[TopicPartition, tuple[int, int, str | None]],
        *,
        retention_ms: int | None = None,
        commit_timestamps: dict[TopicPartition, int] | None = None,
        api_version: int = 9,
    ) -> dict[TopicPartition, int]:
        """Commit (offset, leader epoch, metadata) per partition; an error code per partition.
        ``retention_ms`` (OffsetCommit v2-4) gives these commits an explicit expiry time, and
        ``commit_timestamps`` (v1) their commit time instead of now.  In a KIP-848 group the
        generation is the member epoch (ConsumerGroup.validate_offset_commit)."""
        load_error = await self.load_group(group_id)
        if load_error is not None:
            return dict.fromkeys(offsets, load_error)
        now = self.clock.time_ms()
        cg = self.groups.get(group_id)
        if isinstance(cg, ConsumerGroup):
            code = cg.validate_offset_commit(member_id, generation_id, api_version)
        else:
            g = self._get(group_id, create=True)
            assert g is not None
            code = g.validate_commit(member_id, instance_id, generation_id, now)
        self._schedule(group_id)
        if code != ErrorCode.NONE:
            return dict.fromkeys(offsets, code)
        results: dict[TopicPartition, int] = {}
        to_write: dict[TopicPartition, CommittedOffset] = {}
        for tp, (offset, epoch, metadata) in offsets.items():
            metadata = metadata or ""
            if len(metadata.encode()) > self.offset_metadata_max_bytes:
                results[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            expire = now + retention_ms if retention_ms is not None else None
            stamp = now if commit_timestamps is None else commit_timestamps.get(tp, now)
            to_write[tp] = CommittedOffset(offset, epoch, metadata, stamp, expire)
        if to_write:
            try:
                await self.offsets.commit(group_id, to_write)
                code = ErrorCode.NONE
            except StoreError as e:
                log.warning("offset commit for group %s failed: %s", group_id, e)
                code = _store_error_code(e)
            for tp in to_write:
                results[tp] = code
        return results

    async def fetch(
        self, group_id: str, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, CommittedOffset | None]:
        """The group's committed offsets (of ``partitions``, or all); KafkaError(
        COORDINATOR_NOT_AVAILABLE) when the store cannot be reached (retriable, as the
        commit's answer)."""
        try:
            committed = await self.offsets.load(group_id)
        except StoreError as e:
            log.warning("offset fetch for group %s failed: %s", group_id, e)
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e)) from e
        if partitions is None:
            return dict(committed)
        return {tp: committed.get(tp) for tp in partitions}

    async def unstable_partitions(self, group_id: str) -> set[TopicPartition]:
        """Partitions with an offset pending in an open transaction (require_stable);
        KafkaError(COORDINATOR_NOT_AVAILABLE) when the store cannot be reached."""
        try:
            return await self.txn_offsets.pending_partitions(group_id)
        except StoreError as e:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e)) from e

    # -- transactions ----------------------------------------------------------------------
    def partition_error(self, partition: int) -> int | None:
        """NOT_COORDINATOR unless this broker coordinates offsets partition ``partition``
        (COORDINATOR_LOAD_IN_PROGRESS while it loads it)."""
        self.check_membership()
        if self.placement.owner(partition) != self.broker_id:
            return ErrorCode.NOT_COORDINATOR
        if isinstance(self.offsets, LogOffsetStore):
            # the metadata names this broker the partition's leader: if the store has not
            # been told yet (the replica takes the leadership up a moment later), it is as
            # good as loading
            code = self.offsets.load_error(partition)
            return (
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                if code == ErrorCode.NOT_COORDINATOR
                else code
            )
        if self.drain is not None and self.drain.blocked(partition):
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return None

    async def txn_commit(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        offsets: dict[TopicPartition, tuple[int, int, str | None]],
    ) -> dict[TopicPartition, int]:
        """TxnOffsetCommit: keep the offsets pending until the transaction's marker."""
        load_error = await self.load_group(group_id)
        if load_error is not None:
            return dict.fromkeys(offsets, load_error)
        g: Group | ConsumerGroup | None = self.groups.get(group_id)
        if not isinstance(g, ConsumerGroup):
            g = self._get(group_id, create=True)
        assert g is not None
        code = g.validate_txn_commit(member_id, instance_id, generation_id)
        if code != ErrorCode.NONE:
            return dict.fromkeys(offsets, code)
        now = self.clock.time_ms()
        results: dict[TopicPartition, int] = {}
        pending: dict[TopicPartition, CommittedOffset] = {}
        for tp, (offset, epoch, metadata) in offsets.items():
            metadata = metadata or ""
            if len(metadata.encode()) > self.offset_metadata_max_bytes:
                results[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                pending[tp] = CommittedOffset(offset, epoch, metadata, now)
        if pending:
            try:
                ok = await self.txn_offsets.add(group_id, producer_id, producer_epoch, pending)
                code = ErrorCode.NONE if ok else ErrorCode.INVALID_PRODUCER_EPOCH
            except StoreError as e:
                log.warning("transactional offset commit for group %s failed: %s", group_id, e)
                self.txn_offsets.invalidate()
                code = _store_error_code(e)
            results.update(dict.fromkeys(pending, code))
        return results

    async def complete_txn(self, producer_id: int, committed: bool, partition: int) -> int:
        """The marker of a transaction for offsets partition ``partition``: the pending
        offsets of its groups become committed (or are dropped).  An error code."""
        if isinstance(self.offsets, LogOffsetStore):
            # the marker is in the partition's log already (the replay of a partition being
            # loaded reads it there); NOT_COORDINATOR once another broker leads it
            if not self.offsets.owns(partition):
                return ErrorCode.NOT_COORDINATOR
            await self.offsets.complete(producer_id, committed, partition)
            return ErrorCode.NONE
        code = self.partition_error(partition)
        if code is not None:
            return code

        async def commit(group_id: str, offsets: dict[TopicPartition, CommittedOffset]) -> None:
            await self.offsets.commit(group_id, offsets)

        try:
            await self.txn_offsets.complete(producer_id, committed, partition, commit)
        except StoreError as e:
            log.warning("completing transactional offsets of producer %d: %s", producer_id, e)
            self.txn_offsets.invalidate()
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE

    # -- admin -----------------------------------------------------------------------------------
    def list_groups(self) -> list[Group | ConsumerGroup]:
        """The groups this broker coordinates now (ListGroups asks every broker)."""
        self.check_membership()
        return [g for g in self.groups.values() if not _dead(g)]

    def describe(self, group_id: str) -> dict[str, Any] | None:
        """DescribeGroups: classic groups only; a KIP-848 group is not found there, as in
        Kafka 3.9 (ConsumerGroupDescribe describes it)."""
        g = self.groups.get(group_id)
        return g.describe() if isinstance(g, Group) else None

    async def describe_consumer_group(self, group_id: str) -> dict[str, Any] | None:
        """ConsumerGroupDescribe: a KIP-848 group's entry; None when there is none.  Raises
        StoreError when the group's state cannot be loaded."""
        self.check_membership()
        await self._ensure_loaded(group_id)
        g = self.groups.get(group_id)
        if not isinstance(g, ConsumerGroup) or g.dead:
            return None
        return g.describe_consumer(self._topics())

    # -- KIP-848 ---------------------------------------------------------------------------
    async def consumer_heartbeat(self, group_id: str, req: HeartbeatRequest) -> dict:
        """ConsumerGroupHeartbeat: the response body (its error code included), sent once the
        change it made is stored."""
        code = await self.load_group(group_id)
        if code is not None:
            return _heartbeat_error(code, "The coordinator is loading the group.")
        now = self.clock.time_ms()
        g = self.groups.get(group_id)
        if isinstance(g, Group):
            if g.state in (GroupState.EMPTY, GroupState.DEAD):
                g = None  # an empty classic group (offsets only) becomes a consumer group
            else:
                why = can_upgrade(g, self.consumer_config) if req.member_epoch == 0 else ""
                if why is not None:
                    if why:
                        log.info("group %s: cannot upgrade to a consumer group: %s", group_id, why)
                    return _heartbeat_error(
                        ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group."
                    )
                try:
                    cg, outputs = upgrade(g, self.consumer_config, now, self._topics())
                except MigrationRefused as e:
                    return _heartbeat_error(ErrorCode.GROUP_ID_NOT_FOUND, str(e))
                log.info("group %s: upgraded from classic to consumer (online migration)", group_id)
                self.groups[group_id] = cg
                self._deliver(group_id, outputs)
                g = cg
        if g is None or g.dead:
            seen = self.groups.get(group_id)
            code = await self._share_group_holds(group_id)
            if code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL:
                return _heartbeat_error(
                    ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group."
                )
            if code is not None:
                return _heartbeat_error(code, "The coordinator could not read the group.")
            if self.groups.get(group_id) is not seen:
                # another request created or replaced the group while the share groups were
                # read: start again with that one (replacing it would fence its members)
                return await self.consumer_heartbeat(group_id, req)
            if req.member_epoch != 0:
                # no such group (stored or in memory): the member is unknown and rejoins at
                # epoch 0 (a GROUP_ID_NOT_FOUND would be fatal to the Java consumer)
                return _heartbeat_error(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"Member {req.member_id} is not a member of group {group_id}.",
                )
            g = ConsumerGroup(group_id, self.consumer_config, state_timestamp_ms=now)
            self.groups[group_id] = g
        before = (g.group_epoch, g.assignment_epoch, len(g.members))
        had_consumer_members = not g.all_classic
        try:
            resp = g.heartbeat(now, req, self._topics())
        except ConsumerGroupError as e:
            resp = _heartbeat_error(e.code, e.message)
        self._schedule(group_id)
        # only the heartbeat's member can have changed unless the epochs or members did
        unchanged = before == (g.group_epoch, g.assignment_epoch, len(g.members))
        member = resp.get("member_id") or req.member_id
        code = await self._persist(g, [member] if unchanged else None)
        if code is not None:
            return _heartbeat_error(code, "The group's state could not be stored.")
        if had_consumer_members and len(g.members) < before[2]:
            await self._maybe_downgrade(g, before[0])
        return resp

    async def validate_offset_fetch(self, group_id: str, member_id: str | None, epoch: int) -> int:
        """OffsetFetch v9+ with a member id and epoch: checked in a KIP-848 group only."""
        code = await self.load_group(group_id)
        if code is not None:
            return code
        g = self.groups.get(group_id)
        if isinstance(g, ConsumerGroup):
            return g.validate_offset_fetch(member_id, epoch)
        return ErrorCode.NONE

    async def delete(self, group_id: str) -> int:
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if not _empty(g):
            return ErrorCode.NON_EMPTY_GROUP
        try:
            await self.offsets.delete_group(group_id)
        except StoreError as e:
            log.warning("deleting group %s failed: %s", group_id, e)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self.groups.get(group_id) is g and _empty(g):
            g.mark_dead(self.clock.time_ms())
            del self.groups[group_id]
            self._schedule(group_id)
            self.classic_store.save(group_id, None)
            await self.classic_store.flush(group_id)
        return ErrorCode.NONE

    async def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[int, dict[TopicPartition, int]]:
        """OffsetDelete (Kafka's GroupCoordinator.handleDeleteOffsets): (group error, error per
        partition).  An empty group loses the offsets of every partition asked for; a non-empty
        "consumer" group only those of topics no member subscribes to (the others answer
        GROUP_SUBSCRIBED_TO_TOPIC; when the subscriptions cannot be read, every topic counts
        as subscribed); any other non-empty group is NON_EMPTY_GROUP.  An unknown (or dead)
        group is GROUP_ID_NOT_FOUND.  A partition without a committed offset answers NONE.
        An empty group left without offsets is removed (it becomes Dead), as in Kafka."""
        g = self.groups.get(group_id)
        if g is None or _dead(g):
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        results: dict[TopicPartition, int] = {}
        if _empty(g):
            eligible = list(dict.fromkeys(partitions))
        elif g.protocol_type == PROTOCOL_TYPE:
            subscribed = (
                g.subscribed_topics(self._topics())
                if isinstance(g, ConsumerGroup)
                else _subscribed_topics(g)
            )
            eligible = []
            for tp in dict.fromkeys(partitions):
                if subscribed is None or tp[0] in subscribed:
                    results[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    eligible.append(tp)
        else:
            return ErrorCode.NON_EMPTY_GROUP, {}
        if eligible:
            try:
                await self.offsets.delete_offsets(group_id, eligible)
            except StoreError as e:
                log.warning("deleting offsets of group %s failed: %s", group_id, e)
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, {}
            results.update(dict.fromkeys(eligible, ErrorCode.NONE))
            log.info("deleted the offsets of group %s for %s", group_id, eligible)
            try:
                none_left = not await self.offsets.load(group_id)
            except StoreError:
                none_left = False
            if none_left and self.groups.get(group_id) is g and _empty(g):
                g.mark_dead(self.clock.time_ms())
                del self.groups[group_id]
                self._schedule(group_id)
                self.classic_store.save(group_id, None)
        return ErrorCode.NONE, results

    async def expire_offsets(self) -> int:
        """Drop the offsets of groups that have been empty for offsets.retention.minutes, and
        offsets whose explicit expiry time (OffsetCommit v2-4) has passed."""
        now = self.clock.time_ms()
        dropped = 0
        for gid, g in list(self.groups.items()):
            empty_long_enough = (
                _empty(g) and now - g.state_timestamp_ms >= self.offsets_retention_ms
            )
            cached = self.offsets.cached(gid) or {}
            explicit = any(co.expire_timestamp is not None for co in cached.values())
            if not empty_long_enough and not explicit:
                continue
            older_than = now - self.offsets_retention_ms + 1 if empty_long_enough else -(2**63)
            try:
                dropped += await self.offsets.expire(gid, older_than)
                if not await self.offsets.load(gid) and _empty(g):
                    g.mark_dead(now)
                    self.groups.pop(gid, None)
                    self.classic_store.save(gid, None)
            except StoreError as e:
                log.warning("offset expiry for group %s failed: %s", gid, e)
        return dropped

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(self.offsets_retention_check_interval_ms / 1000.0)
            try:
                n = await self.expire_offsets()
                if n:
                    log.info("expired %d committed offsets of empty groups", n)
            except Exception:
                log.exception("offset expiry failed")
