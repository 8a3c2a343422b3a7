"""The controller's pushes (Kafka's ControllerChannelManager, ZooKeeper mode): after each batch
of partition states it wrote, the controller hands the new states to every other live broker,
as Kafka's controller sends LeaderAndIsr to the replicas and UpdateMetadata to all brokers,
so they learn its elections without waiting for the read-back of every changed state znode
(at 100,000 replicas that read-back took ~16 s under load after a controlled shutdown's
elections were written in 1.5 s).  The channel is the metadata store: one ephemeral
sequential node per batch and broker under ``paths.leader_and_isr(broker)``, read and deleted
by that broker (coord/metadata/pushed_states.py).  A push carries states that were written
(each with the state znode's version after the write), so applying it can only move a cache
to a state the znode really had; a lost push (a broker not yet watching, the controller's
session ended) loses nothing: the read-back of the watched state znodes remains.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from pybroker.coord.metadata import paths
from pybroker.coord.metadata.store import Create, MetadataStore, StoreError

log = logging.getLogger(__name__)

# the states of one pushed node (a controller's multi writes up to 499): ~60 bytes each, far
# below ZooKeeper's 1 MB jute.maxbuffer
MAX_STATES_PER_PUSH = 2000


class StatePushes:
    """Fire-and-forget pushes of written states to the other live brokers."""

    def __init__(self, store: MetadataStore, broker_id: int, epoch: int) -> None:
        self.store = store
        self.broker_id = broker_id
        self.epoch = epoch
        self._tasks: set[asyncio.Task[None]] = set()
        self.pushed = 0  # nodes created (tests, diagnostics)
        self._watching: set[int] = set()  # brokers whose parent node exists

    async def watching(self, brokers: Iterable[int]) -> list[int]:
        """Those of ``brokers`` (but this one) that read pushes: their parent node exists
        (created by the broker once its cache is loaded, never deleted; checked once)."""
        out = []
        for b in sorted(set(brokers) - {self.broker_id}):
            if b not in self._watching:
                if await self.store.exists(paths.leader_and_isr(b)) is None:
                    continue
                self._watching.add(b)
            out.append(b)
        return out

    def forget(self) -> None:
        """A push in a multi found a parent missing: check them all again."""
        self._watching.clear()

    def creates(self, states: list[paths.PushedState], brokers: list[int]) -> list[Create]:
        """The push of ``states`` to ``brokers`` as operations of the multi that writes them
        (the states and their push land together: the brokers' watch on the pushed nodes
        fires with the states' own)."""
        if not states:
            return []
        data = paths.encode_leader_and_isr(self.epoch, states)
        return [
            Create(paths.leader_and_isr(b) + "/n-", data, ephemeral=True, sequence=True)
            for b in brokers
        ]

    def push(self, states: list[paths.PushedState], brokers: Iterable[int]) -> None:
        """Hand ``states`` to each of ``brokers`` but this one (which applied them itself)."""
        targets = sorted(b for b in brokers if b != self.broker_id)
        if not states or not targets:
            return
        for i in range(0, len(states), MAX_STATES_PER_PUSH):
            data = paths.encode_leader_and_isr(self.epoch, states[i : i + MAX_STATES_PER_PUSH])
            for broker in targets:
                task = asyncio.ensure_future(self._create(broker, data))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _create(self, broker: int, data: bytes) -> None:
        try:
            await self.store.create(
                paths.leader_and_isr(broker) + "/n-", data, ephemeral=True, sequence=True
            )
            self.pushed += 1
        except StoreError as e:  # (no parent: the broker does not watch yet; it reads back)
            log.debug("push of %d bytes to broker %d not made: %s", len(data), broker, e)

    def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
