"""Consumer offsets committed inside a transaction (TxnOffsetCommit), until it ends.  Kafka writes
them to __consumer_offsets as transactional records; pybroker keeps them beside the committed
offsets in the metadata store::

    /transaction-offsets/<producer id>/<group component>
        {"producer_epoch": E, "offsets": [[topic, partition, offset, leader_epoch, metadata,
                                           commit_timestamp], ...]}

The transaction's marker for the group's offsets partition commits (COMMIT) or drops (ABORT)
them; until then OffsetFetch shows the previous offsets (require_stable:
UNSTABLE_OFFSET_COMMIT).  Details: docs/internals.md ("pybroker/coord/group/txn_offsets.py").
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

from pybroker.coord.group.offsets import CommittedOffset, Offsets
from pybroker.coord.metadata.model import TopicPartition
from pybroker.coord.metadata.paths import component_to_name, name_to_component
from pybroker.coord.metadata.placement import partition_for
from pybroker.coord.metadata.store import (
    Create,
    Delete,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SetData,
)

log = logging.getLogger(__name__)

ROOT = "/transaction-offsets"


def _path(pid: int, group: str | None = None) -> str:
    base = f"{ROOT}/{pid}"
    return base if group is None else f"{base}/{name_to_component(group)}"


def _encode(epoch: int, offsets: Offsets) -> bytes:
    rows = [
        [t, p, c.offset, c.leader_epoch, c.metadata, c.commit_timestamp]
        for (t, p), c in sorted(offsets.items())
    ]
    return json.dumps({"producer_epoch": epoch, "offsets": rows}, separators=(",", ":")).encode()


def decode_pending(data: bytes) -> tuple[int, Offsets]:
    d = json.loads(data)
    offsets = {
        (str(t), int(p)): CommittedOffset(int(o), int(e), str(m), int(ts), None)
        for t, p, o, e, m, ts in d["offsets"]
    }
    return int(d["producer_epoch"]), offsets


class PendingTxnOffsets:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        # group -> producer id -> (producer epoch, offsets); None: not read since invalidate
        self._index: dict[str, dict[int, tuple[int, Offsets]]] | None = None

    def invalidate(self) -> None:
        """Coordination may have moved: read the store again before answering."""
        self._index = None

    async def _loaded(self) -> dict[str, dict[int, tuple[int, Offsets]]]:
        if self._index is not None:
            return self._index
        index: dict[str, dict[int, tuple[int, Offsets]]] = {}
        await self.store.ensure_path(ROOT)
        for pid_name in await self.store.get_children(ROOT):
            try:
                pid = int(pid_name)
                children = await self.store.get_children(_path(pid))
            except (ValueError, NoNodeError):
                continue
            for child in children:
                try:
                    data, _ = await self.store.get(f"{_path(pid)}/{child}")
                except NoNodeError:
                    continue
                index.setdefault(component_to_name(child), {})[pid] = decode_pending(data)
        self._index = index
        return index

    async def pending_partitions(self, group: str) -> set[TopicPartition]:
        """Partitions of ``group`` with an offset pending in an open transaction."""
        index = await self._loaded()
        return {tp for _, offsets in index.get(group, {}).values() for tp in offsets}

    async def add(self, group: str, pid: int, epoch: int, offsets: Offsets) -> bool:
        """Record (merged with earlier ones of the transaction); False when ``epoch`` is
        older than the producer's pending offsets for the group (a fenced producer)."""
        index = await self._loaded()
        prev = index.get(group, {}).get(pid)
        if prev is not None and prev[0] > epoch:
            return False
        merged = dict(prev[1]) if prev is not None and prev[0] == epoch else {}
        merged.update(offsets)
        data = _encode(epoch, merged)
        path = _path(pid, group)
        if prev is not None:
            ops: list[Op] = [SetData(path, data)]
        else:  # one round trip: the producer's node too unless the index knows it exists
            parent_known = any(pid in by_pid for by_pid in index.values())
            ops = ([] if parent_known else [Create(_path(pid))]) + [Create(path, data)]
        try:
            await self.store.multi(ops)
        except (NoNodeError, NodeExistsError):  # the index was behind the store: the long way
            try:
                await self.store.set(path, data)
            except NoNodeError:
                await self.store.ensure_path(_path(pid))
                try:
                    await self.store.create(path, data)
                except NodeExistsError:
                    await self.store.set(path, data)
        index.setdefault(group, {})[pid] = (epoch, merged)
        return True

    async def complete(
        self,
        pid: int,
        committed: bool,
        partition: int,
        commit: Callable[[str, Offsets], Awaitable[None]],
    ) -> int:
        """The marker of ``pid``'s transaction for offsets partition ``partition``: ``commit``
        the pending offsets of its groups (COMMIT) or drop them, and delete the nodes (the
        groups concurrently: with a BatchingStore one round trip for the commits and one for
        the deletions).  Returns how many groups had pending offsets."""
        index = await self._loaded()
        groups = [
            (g, by_pid[pid][1])
            for g, by_pid in index.items()
            if pid in by_pid and partition_for(g) == partition
        ]

        async def finish(group: str, offsets: Offsets) -> None:
            if committed and offsets:
                await commit(group, offsets)
            try:
                await self.store.multi([Delete(_path(pid, group))])
            except NoNodeError:
                pass
            by_pid = index.get(group, {})
            by_pid.pop(pid, None)
            if not by_pid:
                index.pop(group, None)

        await asyncio.gather(*(finish(g, offsets) for g, offsets in groups))
        if groups and not any(pid in by_pid for by_pid in index.values()):
            try:
                await self.store.multi([Delete(_path(pid))])
            except (NoNodeError, NotEmptyError):
                pass  # other groups' offsets of this producer are still pending
        return len(groups)


__all__ = ["ROOT", "PendingTxnOffsets", "decode_pending"]
