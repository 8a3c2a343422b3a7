"""KIP-848 consumer groups' durable state in the metadata store: the records Kafka writes to
__consumer_offsets (group metadata, member metadata, target and current assignment), as
znodes, so a coordinator that takes the group over carries on with its members' epochs::

    /pybroker/consumer_groups/<group>            ConsumerGroup.meta_record() as JSON
    /pybroker/consumer_groups/<group>/<member>   ConsumerGroup.member_record(m) as JSON

Writes are compare-and-set in one ``multi`` per change, unchanged records cost nothing, and
the plans of one group run in the order they were made.  Writing and failures:
docs/internals.md ("pybroker/coord/group/consumer_store.py").
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from pybroker.coord.group.consumer import ConsumerGroup
from pybroker.coord.metadata import paths
from pybroker.coord.metadata.paths import component_to_name, name_to_component
from pybroker.coord.metadata.store import (
    Create,
    Delete,
    MetadataStore,
    NoNodeError,
    Op,
    SetData,
    StoreError,
)

ROOT = paths.CONSUMER_GROUPS


def _dumps(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def group_path(group_id: str) -> str:
    return f"{ROOT}/{name_to_component(group_id)}"


@dataclass
class _Known:
    """What the store holds for one group, as far as this broker knows."""

    meta: tuple[bytes, int] | None = None  # (data, version); None: no group znode
    members: dict[str, tuple[bytes, int]] = field(default_factory=dict)  # member id ->
    generation: int = 0  # bumped when a write fails: older plans are void


@dataclass
class Plan:
    group_id: str
    ops: list[Op]
    generation: int


class StalePlanError(StoreError):
    """A plan made before an earlier write of its group failed."""


@dataclass
class Stored:
    meta: dict
    members: list[dict]


class ConsumerGroupStore:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._known: dict[str, _Known] = {}
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # lock, its users
        self._generation = 0

    # -- reading ---------------------------------------------------------------------------
    async def groups(self) -> list[str]:
        """The ids of the groups with stored state."""
        try:
            return [component_to_name(c) for c in await self.store.get_children(ROOT)]
        except NoNodeError:
            return []

    async def load(self, group_id: str) -> Stored | None:
        """The group's stored records (None: none), remembered as the base of later plans.
        Raises StoreError; ValueError when a znode does not hold a record."""
        path = group_path(group_id)
        try:
            data, stat = await self.store.get(path)
            children = await self.store.get_children(path)
        except NoNodeError:
            self._known[group_id] = self._fresh(None, {})
            return None

        async def read(child: str) -> tuple[str, bytes, int] | None:
            try:
                d, s = await self.store.get(f"{path}/{child}")
            except NoNodeError:
                return None
            return component_to_name(child), d, s.version

        members = [r for r in await asyncio.gather(*(read(c) for c in children)) if r]
        self._known[group_id] = self._fresh(
            (data, stat.version), {mid: (d, v) for mid, d, v in members}
        )
        return Stored(json.loads(data), [json.loads(d) for _, d, _ in members])

    def _fresh(self, meta: tuple[bytes, int] | None, members: dict) -> _Known:
        self._generation += 1
        return _Known(meta, members, self._generation)

    def forget(self, group_id: str) -> None:
        self._known.pop(group_id, None)

    def forget_all(self) -> None:
        self._known.clear()

    # -- writing ---------------------------------------------------------------------------
    def plan(self, g: ConsumerGroup, member_ids: Iterable[str] | None = None) -> Plan | None:
        """The operations that store ``g``'s state; ``member_ids`` limits the members compared
        to those (the others are known unchanged; a removed member's record is deleted only
        if its id is among them, so that a heartbeat costs no scan of every stored member).
        None when nothing changed.  Must follow a ``load`` of the group in this coordination
        term (KeyError otherwise)."""
        known = self._known[g.group_id]
        path = group_path(g.group_id)
        ops: list[Op] = []
        if not g.members:
            return self.plan_delete(g.group_id)
        meta = _dumps(g.meta_record())
        if known.meta is None:
            ops.append(Create(path, meta))
            known.meta = (meta, 0)
        elif known.meta[0] != meta:
            ops.append(SetData(path, meta, known.meta[1]))
            known.meta = (meta, known.meta[1] + 1)
        compare = g.members.keys() if member_ids is None else member_ids
        for mid in compare:
            m = g.members.get(mid)
            if m is None:
                if mid in known.members:
                    ops.append(
                        Delete(f"{path}/{name_to_component(mid)}", known.members.pop(mid)[1])
                    )
                continue
            data = _dumps(g.member_record(m))
            mpath = f"{path}/{name_to_component(mid)}"
            old = known.members.get(mid)
            if old is None:
                ops.append(Create(mpath, data))
                known.members[mid] = (data, 0)
            elif old[0] != data:
                ops.append(SetData(mpath, data, old[1]))
                known.members[mid] = (data, old[1] + 1)
        if member_ids is None:
            for mid in [mid for mid in known.members if mid not in g.members]:
                ops.append(Delete(f"{path}/{name_to_component(mid)}", known.members.pop(mid)[1]))
        return Plan(g.group_id, ops, known.generation) if ops else None

    def plan_delete(self, group_id: str) -> Plan | None:
        """The operations that delete the group's stored state (None: nothing stored)."""
        known = self._known[group_id]
        if known.meta is None:
            return None
        path = group_path(group_id)
        ops: list[Op] = [
            Delete(f"{path}/{name_to_component(mid)}", v) for mid, (_, v) in known.members.items()
        ]
        ops.append(Delete(path, known.meta[1]))
        known.meta, known.members = None, {}
        return Plan(group_id, ops, known.generation)

    async def apply(self, plan: Plan) -> None:
        """Run ``plan`` (after the group's earlier plans).  Raises StoreError (StalePlanError
        when an earlier write of the group failed); the group's cache is then dropped."""
        lock, users = self._locks.get(plan.group_id) or (asyncio.Lock(), 0)
        self._locks[plan.group_id] = (lock, users + 1)
        try:
            async with lock:
                known = self._known.get(plan.group_id)
                if known is None or known.generation != plan.generation:
                    raise StalePlanError(f"an earlier write of group {plan.group_id} failed")
                try:
                    await self.store.multi(plan.ops)
                except StoreError:
                    self._known.pop(plan.group_id, None)
                    raise
        finally:
            lock, users = self._locks[plan.group_id]
            if users == 1:
                del self._locks[plan.group_id]
            else:
                self._locks[plan.group_id] = (lock, users - 1)
