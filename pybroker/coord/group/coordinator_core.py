"""The group coordinator's core: the asyncio shell around the pure group state machines that
the request paths (coordinator_classic.py, coordinator_consumer.py, coordinator_offsets.py)
stand on.  The event loop owns every group and a call into a state machine never awaits, so
each request applies atomically (the loop is the queue).  The coordinator of a group is the
owner of its offsets partition, computed from the live brokers; others answer
NOT_COORDINATOR.  A classic group's metadata is stored as Kafka's (classic_store.py), a
KIP-848 group's state too (consumer_store.py).  What a broker holds
about a group is valid only within one coordination term: a moved membership epoch drops the
cached offsets and unloads the groups (KIP-848 groups are loaded again from the store).
Ownership and terms: docs/internals.md ("pybroker/coord/group/coordinator.py").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from pybroker.clock import Clock
from pybroker.coord.group.classic import (
    Group,
    GroupConfig,
    GroupState,
    Output,
)
from pybroker.coord.group.classic_store import ClassicGroupStore
from pybroker.coord.group.consumer import ConsumerGroup
from pybroker.coord.group.consumer_member import (
    ConsumerGroupConfig,
    TopicMeta,
)
from pybroker.coord.group.consumer_store import ConsumerGroupStore
from pybroker.coord.group.migration import (
    MigrationRefused,
    can_downgrade,
    downgrade,
)
from pybroker.coord.group.offsets import OffsetStore
from pybroker.coord.group.offsets_drain import OffsetsDrain
from pybroker.coord.group.offsets_log import LogClassicGroupStore, LogOffsetStore
from pybroker.coord.group.txn_offsets import PendingTxnOffsets
from pybroker.coord.metadata.internal_log import CoordinatorWriteError
from pybroker.coord.metadata.partition_loads import load_once
from pybroker.coord.metadata.placement import (
    Placement,
    Rendezvous,
    SingleBroker,
    partition_for,
)
from pybroker.coord.metadata.placement import moved as placement_moved
from pybroker.coord.metadata.placement import terms as placement_terms
from pybroker.coord.metadata.store import StoreError
from pybroker.errors import ErrorCode

log = logging.getLogger(__name__)
# (read once: an Enum class attribute is a slow lookup on 3.11, and these are on every commit)
_NOT_COORDINATOR = ErrorCode.NOT_COORDINATOR
_LOAD_IN_PROGRESS = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
# the states a classic group's metadata record is written in (read once: an Enum class
# attribute is a slow lookup on 3.11, and _store_metadata runs on every commit)
RECORDED_STATES = (GroupState.STABLE, GroupState.EMPTY)


def group_empty(g: Group | ConsumerGroup) -> bool:
    return g.is_empty if isinstance(g, ConsumerGroup) else g.state == GroupState.EMPTY


def group_dead(g: Group | ConsumerGroup) -> bool:
    return g.dead if isinstance(g, ConsumerGroup) else g.state == GroupState.DEAD


def store_error_code(e: StoreError) -> int:
    """The answer to a write that failed: the internal topic's error (LogOffsetStore's
    CoordinatorWriteError.code), else COORDINATOR_NOT_AVAILABLE (the metadata store)."""
    return getattr(e, "code", ErrorCode.COORDINATOR_NOT_AVAILABLE)


class GroupCoordinatorCore:
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
        self._terms = placement_terms(placement)
        self.clock = clock
        self.config = config
        self.offsets_retention_ms = offsets_retention_ms
        self.offsets_retention_check_interval_ms = offsets_retention_check_interval_ms
        self.offset_metadata_max_bytes = offset_metadata_max_bytes
        self.groups: dict[str, Group | ConsumerGroup] = {}
        # each group's timer and the loop time it is due: uvloop's call_at makes a due time
        # already past a plain Handle, which has no when()
        self._timers: dict[str, tuple[float, asyncio.Handle]] = {}
        self._timer_loop: asyncio.AbstractEventLoop | None = None  # (_schedule's, cached)
        self._expiry_task: asyncio.Task | None = None
        self._adopt_task: asyncio.Task | None = None
        self._background: set[asyncio.Task] = set()
        # share groups (KIP-932) share the group-id namespace: set by the broker, True when a
        # share group holds the id (raises StoreError)
        self.share_group_exists: Callable[[str], Awaitable[bool]] | None = None

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
        for _due, t in self._timers.values():
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
        self._terms, moved = placement_moved(self.placement, self._terms)
        if not moved:
            return
        everything = len(moved) == len(self._terms)  # (rendezvous placement: any change of brokers)
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
        return self.partition_error(self.partition_of(group_id))  # (checks the membership)

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
        """The group's timer at its next deadline.  A timer due no later stays (a group's
        tick is idempotent before a deadline, and its _deliver schedules the next one): a
        commit or heartbeat, which only pushes the member's deadline out, costs no timer."""
        g = self.groups.get(group_id)
        deadline = None
        if g is not None:
            self._store_metadata(g)
            deadline = g.next_deadline()
        old = self._timers.get(group_id)
        if deadline is None:
            if old is not None:
                del self._timers[group_id]
                old[1].cancel()
            return
        loop = self._timer_loop
        if loop is None or loop.is_closed():  # (get_running_loop is a getpid system call)
            loop = self._timer_loop = asyncio.get_running_loop()
        when = loop.time() + max(deadline - self.clock.time_ms(), 0) / 1000.0
        if old is not None:
            if old[0] <= when:
                return
            old[1].cancel()
        self._timers[group_id] = (when, loop.call_at(when, self._on_timer, group_id))

    def _store_metadata(self, g: Group | ConsumerGroup) -> None:
        """Keep a classic group's metadata record in step (classic_group_store.py): written
        when a rebalance completed (Stable) or the group became Empty, as Kafka writes it;
        deleted when the group turned into a KIP-848 group (which has its own records)."""
        if isinstance(g, ConsumerGroup):
            self.classic_store.save(g.group_id, None)
        elif g.state in RECORDED_STATES and g.protocol_type is not None:
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
        if g is not None and (d := g.next_deadline()) is not None and d > self.clock.time_ms():
            self._schedule(group_id)  # an earlier deadline's timer; the group's moved on
            return
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
        await load_once(self._loading, group_id, lambda: self._load(group_id))

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
        if member_ids is None:
            g.take_target_changed()  # a full comparison covers them
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
            return store_error_code(e)
        return None

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

    def partition_error(self, partition: int) -> int | None:
        """NOT_COORDINATOR unless this broker coordinates offsets partition ``partition``
        (COORDINATOR_LOAD_IN_PROGRESS while it loads it)."""
        self.check_membership()
        if self.placement.owner(partition) != self.broker_id:
            return _NOT_COORDINATOR
        if isinstance(self.offsets, LogOffsetStore):
            # the metadata names this broker the partition's leader: if the store has not
            # been told yet (the replica takes the leadership up a moment later), it is as
            # good as loading
            code = self.offsets.load_error(partition)
            if code is None:  # (served: every commit's path)
                return None
            return _LOAD_IN_PROGRESS if code == _NOT_COORDINATOR else code
        if self.drain is not None and self.drain.blocked(partition):
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return None
