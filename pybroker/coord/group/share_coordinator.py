"""The share-group coordinator: the asyncio shell around coord/group/share.py.

Placement and terms are the group coordinator's (coord/group/coordinator_core.py): a share group is
coordinated by the broker that coordinates its group id, a broker answers NOT_COORDINATOR for
the others, and when the cluster's membership epoch moves every share group is unloaded (its
next request loads it again from the store: another broker may have written it meanwhile).
Group ids are one namespace: a classic or consumer group with the id makes share requests
fail with GROUP_ID_NOT_FOUND ("Group <id> is not a share group."), as in Kafka.

Durability (coord/group/share_store.py): a group's membership is one znode, written with
compare-and-set before the heartbeat that changed it is answered (a failed write unloads the
group and answers COORDINATOR_NOT_AVAILABLE).  An Empty group keeps its znode (ListGroups and
kafka-share-groups show it) until DeleteGroups.

Initialization.  Before a heartbeat is applied, every partition of the group's subscribed
topics that has no share-partition state gets one (start offset -1, resolved by the leader
with share.auto.offset.reset at its first load; 0 for partitions added to a topic the group
already consumes, as Kafka's initialization does), so the member's assignment, computed at
once, includes them.  Kafka answers the first heartbeat before the initialization and assigns
at a later one; pybroker writes the state first (one znode create per partition) and assigns
at once.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pybroker.clock import Clock
from pybroker.coord.group.responses import heartbeat_error
from pybroker.coord.group.share import (
    LEAVE_EPOCH,
    HeartbeatRequest,
    ShareGroup,
    ShareGroupConfig,
    ShareGroupError,
    ShareGroupState,
)
from pybroker.coord.group.share_store import PartitionState, ShareStateStore
from pybroker.coord.metadata.partition_loads import load_once
from pybroker.coord.metadata.store import StoreError
from pybroker.errors import ErrorCode

log = logging.getLogger("pybroker.coord.share_groups")

TopicMeta = dict[str, tuple[uuid.UUID, int]]  # topic name -> (topic id, partitions)


@dataclass(frozen=True)
class OffsetInfo:
    topic: str
    topic_id: uuid.UUID
    partition: int
    start_offset: int  # -1: not resolved yet
    leader_epoch: int
    terminal: int  # Acknowledged/Archived records at or above the start offset


class ShareGroupCoordinator:
    def __init__(
        self,
        store: ShareStateStore,
        clock: Clock,
        *,
        coordinator_error: Callable[[str], int | None],
        other_group: Callable[[str], bool],
        topics: Callable[[], TopicMeta],
        config: Callable[[str], ShareGroupConfig],
        membership_epoch: Callable[[], int] = lambda: 0,
    ) -> None:
        self.store = store
        self.clock = clock
        self._coordinator_error = coordinator_error
        self._other_group = other_group  # a classic/consumer group holds the id
        self._topics = topics
        self._config = config
        self._membership_epoch = membership_epoch
        self._epoch = membership_epoch()
        self.groups: dict[str, ShareGroup] = {}
        self._versions: dict[str, int | None] = {}  # group znode versions (None: none)
        self._initialized: dict[str, set[tuple[uuid.UUID, int]]] = {}
        self._loading: dict[str, asyncio.Future[None]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._background: set[asyncio.Task] = set()

    # -- terms and loading ------------------------------------------------------------------
    def _check_term(self) -> None:
        epoch = self._membership_epoch()
        if epoch == self._epoch:
            return
        self._epoch = epoch
        for gid in list(self.groups):
            self._unload(gid)
        self._versions.clear()
        self._initialized.clear()

    def _unload(self, gid: str) -> None:
        g = self.groups.pop(gid, None)
        if g is not None:
            g.mark_dead()
        self._versions.pop(gid, None)
        self._initialized.pop(gid, None)
        t = self._timers.pop(gid, None)
        if t is not None:
            t.cancel()

    def coordinator_error(self, group_id: str) -> int | None:
        self._check_term()
        return self._coordinator_error(group_id)

    async def exists(self, gid: str) -> bool:
        """A share group holds the id (members or not, until DeleteGroups).  Raises
        StoreError."""
        await self._ensure_loaded(gid)
        g = self.groups.get(gid)
        return g is not None and g.state != ShareGroupState.DEAD

    async def _ensure_loaded(self, gid: str) -> None:
        """Load the group from the store once per term.  Raises StoreError."""
        if gid in self._versions:
            return
        await load_once(self._loading, gid, lambda: self._load(gid))

    async def _load(self, gid: str) -> None:
        epoch = self._epoch
        got = await self.store.load_group(gid)
        initialized = set(await self.store.partitions(gid))
        if epoch != self._epoch:
            return
        self._initialized[gid] = initialized
        if got is None:
            self._versions[gid] = None
            return
        record, version = got
        try:
            g = ShareGroup.from_records(
                gid, record["meta"], record["members"], self.clock.time_ms(), self._config(gid)
            )
        except (ValueError, KeyError, TypeError) as e:
            log.warning("share group %s: its stored state cannot be read (%s)", gid, e)
            self._versions[gid] = version
            g = ShareGroup(gid)
        self._versions[gid] = version
        self.groups[gid] = g
        self._schedule(gid)

    async def _persist(self, g: ShareGroup) -> int | None:
        """Write the group's record (CAS); None, or the error to answer (the group is then
        unloaded)."""
        gid = g.group_id
        record = {
            "meta": g.meta_record(),
            "members": [g.member_record(m) for m in g.members.values()],
        }
        try:
            self._versions[gid] = await self.store.write_group(gid, record, self._versions.get(gid))
            return None
        except StoreError as e:
            log.warning("share group %s: writing its state failed (%s); unloading it", gid, e)
            if self.groups.get(gid) is g:
                self._unload(gid)
            else:
                self._versions.pop(gid, None)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE

    def _lock(self, gid: str) -> asyncio.Lock:
        lock = self._locks.get(gid)
        if lock is None:
            lock = self._locks[gid] = asyncio.Lock()
        return lock

    # -- initialization ---------------------------------------------------------------------
    async def _initialize(self, gid: str, topics: Iterable[str], epoch: int) -> None:
        """Create the share-partition state of every partition of ``topics`` that has none."""
        meta = self._topics()
        known = self._initialized.setdefault(gid, set())
        known_topics = {tid for tid, _ in known}
        wanted: dict[tuple[uuid.UUID, int], int] = {}
        for name in topics:
            tm = meta.get(name)
            if tm is None:
                continue
            tid, count = tm
            for p in range(count):
                if (tid, p) not in known:
                    wanted[(tid, p)] = 0 if tid in known_topics else -1
        if not wanted:
            return
        await self.store.initialize(gid, wanted, epoch)
        known.update(wanted)

    def _assignable(self, gid: str) -> dict[str, set[int]]:
        meta = self._topics()
        by_id = {tid: (name, count) for name, (tid, count) in meta.items()}
        out: dict[str, set[int]] = {}
        for tid, p in self._initialized.get(gid, ()):
            tm = by_id.get(tid)
            if tm is not None and p < tm[1]:
                out.setdefault(tm[0], set()).add(p)
        return out

    # -- the protocol -----------------------------------------------------------------------
    async def heartbeat(self, gid: str, req: HeartbeatRequest) -> dict:
        code = self.coordinator_error(gid)
        if code is not None:
            return heartbeat_error(code)
        if self._other_group(gid):
            return heartbeat_error(
                ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group."
            )
        try:
            await self._ensure_loaded(gid)
        except StoreError as e:
            log.info("share group %s: loading failed: %s", gid, e)
            return heartbeat_error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        async with self._lock(gid):
            g = self.groups.get(gid)
            if g is None:
                if req.member_epoch != 0:
                    return heartbeat_error(
                        ErrorCode.GROUP_ID_NOT_FOUND, f"Share group {gid} not found."
                    )
                g = ShareGroup(gid)
            config = self._config(gid)
            if req.member_epoch == LEAVE_EPOCH:
                try:
                    g.leave(req.member_id)
                except ShareGroupError as e:
                    return heartbeat_error(e.code, e.message)
                code = await self._persist(g)
                self._schedule(gid)
                if code is not None:
                    return heartbeat_error(code)
                return {
                    "error_code": ErrorCode.NONE,
                    "error_message": None,
                    "member_id": req.member_id,
                    "member_epoch": LEAVE_EPOCH,
                    "heartbeat_interval_ms": 0,
                    "assignment": None,
                }
            subscribed = set(g.subscribed_topics())
            if req.subscribed is not None:
                subscribed |= set(req.subscribed)
            try:
                await self._initialize(gid, subscribed, g.group_epoch + 1)
            except StoreError as e:
                log.info("share group %s: initializing share-partitions failed: %s", gid, e)
                return heartbeat_error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            before = _fingerprint(g)
            try:
                result = g.heartbeat(self.clock.time_ms(), req, self._assignable(gid), config)
            except ShareGroupError as e:
                return heartbeat_error(e.code, e.message)
            self.groups[gid] = g
            if _fingerprint(g) != before or self._versions.get(gid) is None:
                code = await self._persist(g)
                if code is not None:
                    return heartbeat_error(code)
            self._schedule(gid)
        meta = self._topics()
        assignment = None
        if result.assignment is not None:
            assignment = {
                "topic_partitions": [
                    {"topic_id": meta[t][0], "partitions": sorted(ps)}
                    for t, ps in sorted(result.assignment.items())
                    if t in meta
                ]
            }
        return {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "member_id": result.member_id,
            "member_epoch": result.member_epoch,
            "heartbeat_interval_ms": result.heartbeat_interval_ms,
            "assignment": assignment,
        }

    def _schedule(self, gid: str) -> None:
        t = self._timers.pop(gid, None)
        if t is not None:
            t.cancel()
        g = self.groups.get(gid)
        if g is None:
            return
        deadline = g.next_deadline()
        if deadline is None:
            return
        delay = max(deadline - self.clock.time_ms(), 0) / 1000.0
        self._timers[gid] = asyncio.get_running_loop().call_later(delay, self._on_timer, gid)

    def _on_timer(self, gid: str) -> None:
        self._timers.pop(gid, None)
        g = self.groups.get(gid)
        if g is None:
            return
        gone = g.tick(self.clock.time_ms())
        for mid in gone:
            log.info("share group %s: member %s fenced: its session expired", gid, mid)
        self._schedule(gid)
        if gone:
            task = asyncio.ensure_future(self._persist_locked(g))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _persist_locked(self, g: ShareGroup) -> None:
        async with self._lock(g.group_id):
            if self.groups.get(g.group_id) is g:
                await self._persist(g)

    # -- reading ----------------------------------------------------------------------------
    async def describe(self, gid: str) -> dict:
        """One ShareGroupDescribe entry."""
        code = self.coordinator_error(gid)
        if code is not None:
            return _described_error(gid, code)
        try:
            await self._ensure_loaded(gid)
        except StoreError:
            return _described_error(gid, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        g = self.groups.get(gid)
        if g is None or self._other_group(gid):
            message = (
                f"Group {gid} is not a share group."
                if self._other_group(gid)
                else f"Group {gid} not found."
            )
            return _described_error(gid, ErrorCode.GROUP_ID_NOT_FOUND, message)
        meta = self._topics()
        return {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "group_id": gid,
            "group_state": g.state.value,
            "group_epoch": g.group_epoch,
            "assignment_epoch": g.assignment_epoch,
            "assignor_name": "simple",
            "members": [
                {
                    "member_id": m.member_id,
                    "rack_id": m.rack_id,
                    "member_epoch": m.member_epoch,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "subscribed_topic_names": list(m.subscribed),
                    "assignment": {
                        "topic_partitions": [
                            {"topic_id": meta[t][0], "topic_name": t, "partitions": sorted(ps)}
                            for t, ps in sorted(m.assigned.items())
                            if t in meta
                        ]
                    },
                }
                for m in sorted(g.members.values(), key=lambda m: m.member_id)
            ],
        }

    async def list_groups(self) -> list[ShareGroup]:
        """The share groups this broker coordinates (loaded from the store as needed)."""
        self._check_term()
        try:
            ids = await self.store.groups()
        except StoreError:
            ids = []
        out = []
        for gid in ids:
            if self._coordinator_error(gid) is not None:
                continue
            try:
                await self._ensure_loaded(gid)
            except StoreError:
                continue
            g = self.groups.get(gid)
            if g is not None:
                out.append(g)
        return out

    def loaded(self, gid: str) -> ShareGroup | None:
        return self.groups.get(gid)

    async def group(self, gid: str) -> ShareGroup | None:
        """The share group (loaded as needed), None if there is none.  Raises StoreError."""
        await self._ensure_loaded(gid)
        return self.groups.get(gid)

    async def offsets(self, gid: str) -> list[OffsetInfo]:
        """The group's share-partitions' start offsets.  Raises StoreError."""
        meta = self._topics()
        by_id = {tid: name for name, (tid, _) in meta.items()}
        out = []
        for tid, p in await self.store.partitions(gid):
            name = by_id.get(tid)
            if name is None:
                continue
            try:
                got = await self.store.read(gid, tid, p)
            except ValueError:
                continue
            if got is None:
                continue
            st: PartitionState = got[0]
            out.append(OffsetInfo(name, tid, p, st.start_offset, st.leader_epoch,
                                  st.terminal_count()))  # fmt: skip
        return out

    # -- changing ---------------------------------------------------------------------------
    async def delete_group(self, gid: str) -> int:
        """DeleteGroups for a share group: NON_EMPTY_GROUP with members, else its state goes."""
        try:
            await self._ensure_loaded(gid)
        except StoreError:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        async with self._lock(gid):
            g = self.groups.get(gid)
            if g is None:
                return ErrorCode.GROUP_ID_NOT_FOUND
            if not g.is_empty:
                return ErrorCode.NON_EMPTY_GROUP
            try:
                await self.store.delete_group(gid, self._versions.get(gid))
            except StoreError as e:
                log.warning("share group %s: deleting failed: %s", gid, e)
                self._unload(gid)
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            self._unload(gid)
            self._versions[gid] = None
            self._initialized[gid] = set()
            return ErrorCode.NONE

    async def alter_offsets(
        self, gid: str, offsets: dict[tuple[uuid.UUID, int], int]
    ) -> int | None:
        """AlterShareGroupOffsets: new start offsets for an empty group (NON_EMPTY_GROUP
        otherwise); a group that does not exist yet is created empty, as Kafka does."""
        await self._ensure_loaded(gid)
        async with self._lock(gid):
            g = self.groups.get(gid)
            if g is not None and not g.is_empty:
                return ErrorCode.NON_EMPTY_GROUP
            if g is None:
                g = ShareGroup(gid)
                code = await self._persist(g)
                if code is not None:
                    return code
                self.groups[gid] = g
            await self.store.reset(gid, offsets, g.group_epoch + 1)
            self._initialized.setdefault(gid, set()).update(offsets)
            return None

    async def delete_offsets(self, gid: str, partitions: list[tuple[uuid.UUID, int]]) -> int | None:
        """DeleteShareGroupOffsets: the share-partition state of these partitions goes (an
        empty group only)."""
        await self._ensure_loaded(gid)
        async with self._lock(gid):
            g = self.groups.get(gid)
            if g is None:
                return ErrorCode.GROUP_ID_NOT_FOUND
            if not g.is_empty:
                return ErrorCode.NON_EMPTY_GROUP
            await self.store.delete_partitions(gid, partitions)
            self._initialized.setdefault(gid, set()).difference_update(partitions)
            return None

    async def stop(self) -> None:
        for t in self._timers.values():
            t.cancel()
        self._timers.clear()
        for task in list(self._background):
            task.cancel()


def _fingerprint(g: ShareGroup) -> tuple:
    return (
        g.group_epoch,
        g.assignment_epoch,
        tuple(sorted((mid, repr(g.member_record(m))) for mid, m in g.members.items())),
    )


def _described_error(gid: str, code: int, message: str | None = None) -> dict:
    return {
        "error_code": code,
        "error_message": message,
        "group_id": gid,
        "group_state": "Dead" if code == ErrorCode.GROUP_ID_NOT_FOUND else "",
        "group_epoch": 0,
        "assignment_epoch": 0,
        "assignor_name": "",
        "members": [],
    }


__all__ = ["OffsetInfo", "ShareGroupCoordinator", "ShareGroupState"]
_ = Any
