"""Switching offsets.storage from kafka back to zookeeper: __consumer_offsets drained into the
metadata store (OffsetsDrain).

With ``offsets.storage=zookeeper`` and a __consumer_offsets topic in the cluster (left by the
``kafka`` storage), the leader of each partition p of the topic replays p (as the ``kafka``
storage loads it, offsets_log.py), writes the committed offsets of p's groups into the
metadata store (the newer commit by commit timestamp winning over what the store holds), then
appends tombstones for them to p and marks p drained (``/pybroker/offsets_drained/<p>``).
Until p is marked, every broker answers the groups of p COORDINATOR_LOAD_IN_PROGRESS
(``blocked``), so no coordinator answers from the store before the log's offsets are in it.
The ``kafka`` storage deletes the mark when it loads p again (a later switch drains again).

Offsets committed in a transaction still open at the switch stay in the log (switch with the
transactional producers stopped: docs/operations.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from pybroker.clock import Clock
from pybroker.coord.group.offsets import OffsetStore
from pybroker.coord.group.offsets_log import PartitionCache, apply_batch, offset_record
from pybroker.coord.metadata import paths
from pybroker.coord.metadata.internal_log import InternalLog
from pybroker.coord.metadata.store import MetadataStore, NodeExistsError, NoNodeError, StoreError
from pybroker.wire import coordinator_records as cr
from pybroker.wire.primitives import DecodeError

log = logging.getLogger(__name__)

POLL_S = 0.5
RETRY_S = 1.0


class OffsetsDrain:
    def __init__(
        self,
        log_: InternalLog,
        offsets: OffsetStore,
        clock: Clock,
        *,
        topic_exists: Callable[[], bool],
        poll_s: float = POLL_S,
    ) -> None:
        self.log = log_
        self.offsets = offsets
        self.store: MetadataStore = offsets.store
        self.clock = clock
        self.topic_exists = topic_exists
        self.poll_s = poll_s
        self.drained: set[int] = set()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._poller: asyncio.Task[None] | None = None

    # -- the gate --------------------------------------------------------------------------
    def blocked(self, partition: int) -> bool:
        """True while the log may hold offsets of ``partition``'s groups the store has not."""
        if not self.topic_exists() or partition in self.drained:
            return False
        self._poll()
        return True

    def _poll(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(
                self._read_marks(), name="offsets-drained-poll"
            )

    async def _read_marks(self) -> None:
        """Re-read the marks until none is missing (other brokers drain their partitions)."""
        while self.topic_exists():
            try:
                self.drained = await self._marks()
            except StoreError as e:
                log.info("reading the drained offsets partitions: %s", e)
            await asyncio.sleep(self.poll_s)

    async def _marks(self) -> set[int]:
        """The partitions marked drained in the store."""
        try:
            children = await self.store.get_children(paths.OFFSETS_DRAINED)
        except NoNodeError:
            return set()
        return {int(c) for c in children if c.isdigit()}

    async def start(self) -> None:
        if self.topic_exists():
            self.drained = await self._marks()

    async def stop(self) -> None:
        tasks = [*self._tasks.values(), *([self._poller] if self._poller else [])]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- the leader of a partition drains it -----------------------------------------------
    def on_election(self, partition: int, leader_epoch: int, continued: bool = False) -> None:
        old = self._tasks.get(partition)
        if old is not None and not old.done():
            old.cancel()
        self._tasks[partition] = asyncio.get_running_loop().create_task(
            self._drain(partition, leader_epoch), name=f"offsets-drain-{partition}"
        )

    def on_resignation(self, partition: int) -> None:
        task = self._tasks.pop(partition, None)
        if task is not None:
            task.cancel()

    async def _drain(self, partition: int, leader_epoch: int) -> None:
        mark = f"{paths.OFFSETS_DRAINED}/{partition}"
        while True:
            try:
                if await self.store.exists(mark) is not None:
                    self.drained.add(partition)
                    return
                st = PartitionCache(leader_epoch)
                async for batch in self.log.replay(partition, leader_epoch):
                    apply_batch(st, batch)
                moved = 0
                for group, g in sorted(st.groups.items()):
                    stored = await self.offsets.load(group)
                    newer = {
                        tp: co
                        for tp, co in g.offsets.items()
                        if tp not in stored or stored[tp].commit_timestamp < co.commit_timestamp
                    }
                    if newer:
                        await self.offsets.commit(group, newer)
                        moved += len(newer)
                    records = [offset_record(group, tp, None) for tp in g.offsets]
                    if g.metadata is not None:
                        records.append((cr.group_metadata_key(group), None))
                    if records:
                        await self.log.append(partition, records, leader_epoch=leader_epoch)
                await self.store.ensure_path(paths.OFFSETS_DRAINED)
                try:
                    await self.store.create(mark)
                except NodeExistsError:
                    pass
                self.drained.add(partition)
                log.info(
                    "__consumer_offsets-%d drained into the metadata store: %d groups, %d "
                    "committed offsets newer than the store's",
                    partition,
                    len(st.groups),
                    moved,
                )
                return
            except asyncio.CancelledError:
                raise
            except (StoreError, DecodeError, OSError) as e:
                log.warning(
                    "__consumer_offsets-%d: draining into the metadata store failed (%s); retrying",
                    partition,
                    e,
                )
                await asyncio.sleep(RETRY_S)


__all__ = ["OffsetsDrain"]
