"""Share groups' durable state in the metadata store (KIP-932).

Kafka keeps a share group's membership in __consumer_offsets and each share-partition's state
(start offset, state epoch, the in-flight batches that are not plain Available) in
__share_group_state, written by the share coordinator for the partition's leader.  pybroker
keeps both as znodes (why: docs/internals.md, "Share groups")::

    /pybroker/share_groups/<group>                    the group: {"meta": ..., "members": [...]}
    /pybroker/share_state/<group>/<topic id>:<p>      one share-partition's state (below)

(group ids escaped as the offsets' znodes are: ``offsets.name_to_component``; the topic id in
Kafka's base64url form).  A share-partition znode holds, as compact JSON::

    {"version": 1, "state_epoch": E, "leader_epoch": L, "start_offset": S,
     "batches": [[first, last, state, delivery_count], ...]}

``start_offset`` -1: not resolved yet (the leader applies share.auto.offset.reset at its first
load, as Kafka's SharePartition does for a state initialized with -1).  ``state`` is Kafka's
RecordState id (0 Available, 2 Acknowledged, 4 Archived); offsets at or above the start offset
that no batch names are Available with delivery count 0.  Every write is a compare-and-set on
the znode version the writer read or last wrote: a leader whose write fails reloads (another
leader, or an operator's AlterShareGroupOffsets/DeleteShareGroupOffsets, wrote meanwhile).  A
new leader writes its leader epoch at load, so a deposed leader's next write fails.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

from pybroker.coord.metadata import paths
from pybroker.coord.metadata.paths import component_to_name, name_to_component
from pybroker.coord.metadata.store import (
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    StoreError,
    set_or_create,
)

SHARE_GROUPS = "/pybroker/share_groups"
SHARE_STATE = "/pybroker/share_state"
STATE_VERSION = 1
GROUP_VERSION = 1

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def group_path(group_id: str) -> str:
    return f"{SHARE_GROUPS}/{name_to_component(group_id)}"


def state_group_path(group_id: str) -> str:
    return f"{SHARE_STATE}/{name_to_component(group_id)}"


def state_path(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    return f"{state_group_path(group_id)}/{paths.kafka_uuid_str(topic_id)}:{partition}"


def _parse_child(child: str) -> tuple[uuid.UUID, int] | None:
    tid, sep, p = child.rpartition(":")
    if not sep or not p.isdigit():
        return None
    try:
        return paths.parse_kafka_uuid(tid), int(p)
    except ValueError:
        return None


@dataclass
class PartitionState:
    """One share-partition's durable state (see the module docstring)."""

    state_epoch: int
    start_offset: int
    leader_epoch: int = -1
    batches: list[tuple[int, int, int, int]] = field(default_factory=list)

    def encode(self) -> bytes:
        return _dumps(
            {
                "version": STATE_VERSION,
                "state_epoch": self.state_epoch,
                "leader_epoch": self.leader_epoch,
                "start_offset": self.start_offset,
                "batches": [list(b) for b in self.batches],
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> PartitionState:
        """ValueError when ``data`` is not a state record."""
        try:
            obj = json.loads(data)
            if obj.get("version") != STATE_VERSION:
                raise ValueError(f"unknown share state version {obj.get('version')!r}")
            batches = [(int(a), int(b), int(s), int(d)) for a, b, s, d in obj.get("batches", [])]
            return cls(
                int(obj["state_epoch"]),
                int(obj["start_offset"]),
                int(obj.get("leader_epoch", -1)),
                batches,
            )
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"not a share state record: {e}") from e

    def terminal_count(self) -> int:
        """Records at or above the start offset that are Acknowledged or Archived (Kafka's
        deliveryCompleteCount, for the lag)."""
        n = 0
        for first, last, state, _ in self.batches:
            if state in (ACKNOWLEDGED, ARCHIVED) and last >= self.start_offset:
                n += last - max(first, self.start_offset) + 1
        return n


class ShareStateStore:
    """Reads and writes share groups' znodes; every call may raise StoreError."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    # -- share-partition state -------------------------------------------------------------
    async def read(
        self, group_id: str, topic_id: uuid.UUID, partition: int
    ) -> tuple[PartitionState, int] | None:
        """(state, znode version), or None when the partition has no state (never
        initialized, or deleted).  ValueError for a znode that is not a state record."""
        try:
            data, stat = await self.store.get(state_path(group_id, topic_id, partition))
        except NoNodeError:
            return None
        return PartitionState.decode(data), stat.version

    async def write(
        self,
        group_id: str,
        topic_id: uuid.UUID,
        partition: int,
        state: PartitionState,
        version: int,
    ) -> int:
        """Compare-and-set: the new znode version.  BadVersionError / NoNodeError when
        another writer came first."""
        stat = await self.store.set(
            state_path(group_id, topic_id, partition), state.encode(), version
        )
        return stat.version

    async def initialize(
        self, group_id: str, partitions: dict[tuple[uuid.UUID, int], int], state_epoch: int
    ) -> None:
        """Create the state of each (topic id, partition) -> start offset that has none yet
        (an existing state is kept: a second coordinator racing us changes nothing)."""
        for (tid, p), start in partitions.items():
            try:
                await self.store.create(
                    state_path(group_id, tid, p),
                    PartitionState(state_epoch, start).encode(),
                    makepath=True,
                )
            except NodeExistsError:
                pass

    async def reset(
        self, group_id: str, partitions: dict[tuple[uuid.UUID, int], int], state_epoch: int
    ) -> None:
        """AlterShareGroupOffsets: a fresh state at each new start offset (any leader holding
        the old one fails its next write and reloads)."""
        for (tid, p), start in partitions.items():
            path = state_path(group_id, tid, p)
            data = PartitionState(state_epoch, start).encode()
            await set_or_create(self.store, path, data)

    async def partitions(self, group_id: str) -> list[tuple[uuid.UUID, int]]:
        """The (topic id, partition)s with state in the group."""
        try:
            children = await self.store.get_children(state_group_path(group_id))
        except NoNodeError:
            return []
        return sorted(
            (tp for tp in map(_parse_child, children) if tp is not None),
            key=lambda tp: (str(tp[0]), tp[1]),
        )

    async def delete_partitions(
        self, group_id: str, partitions: list[tuple[uuid.UUID, int]]
    ) -> None:
        for tid, p in partitions:
            try:
                await self.store.delete(state_path(group_id, tid, p))
            except NoNodeError:
                pass

    # -- the group --------------------------------------------------------------------------
    async def groups(self) -> list[str]:
        """The ids of the share groups with stored membership (an Empty group keeps its znode,
        so ListGroups shows it, as Kafka keeps an empty share group)."""
        try:
            return [component_to_name(c) for c in await self.store.get_children(SHARE_GROUPS)]
        except NoNodeError:
            return []

    async def load_group(self, group_id: str) -> tuple[dict, int] | None:
        """({"meta": ..., "members": [...]}, version) or None."""
        try:
            data, stat = await self.store.get(group_path(group_id))
        except NoNodeError:
            return None
        obj = json.loads(data)
        if obj.get("version") != GROUP_VERSION:
            raise ValueError(f"unknown share group record version {obj.get('version')!r}")
        return obj, stat.version

    async def write_group(self, group_id: str, record: dict, version: int | None) -> int:
        """Compare-and-set the group's znode (``version`` None: create it); the new version.
        Raises BadVersionError / NoNodeError / NodeExistsError when another writer came
        first."""
        data = _dumps({"version": GROUP_VERSION, **record})
        path = group_path(group_id)
        if version is None:
            await self.store.create(path, data, makepath=True)
            return 0
        return (await self.store.set(path, data, version)).version

    async def delete_group(self, group_id: str, version: int | None) -> None:
        """The group's znode and every share-partition state of it."""
        if version is not None:
            try:
                await self.store.delete(group_path(group_id), version)
            except NoNodeError:
                pass
        try:
            await self.store.delete(state_group_path(group_id), recursive=True)
        except NoNodeError:
            pass


__all__ = [
    "ACKNOWLEDGED",
    "ACQUIRED",
    "ARCHIVED",
    "AVAILABLE",
    "PartitionState",
    "ShareStateStore",
    "StoreError",
]
