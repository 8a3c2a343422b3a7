"""The broker's side of the controller's pushes (coord/controller/channel.py; Kafka's
LeaderAndIsr and UpdateMetadata handling in ZooKeeper mode): the states the controller wrote
arrive as children of ``paths.leader_and_isr(<our id>)``; one task reads them (one watch on
the children at a time), puts each state into the metadata cache and deletes the node.

A pushed state enters the cache only where it is newer than the cached one (its znode version,
Kafka's partition epoch, above the cached version; the cache's ``put_partition_states`` keeps
that rule for every writer) and only for the topic it was written for (the same topic id), so
the push and the read-back of the watched state znodes converge on the newest state whichever
comes first, and neither puts an older one back.  The read-back stays: a push that never
arrives loses nothing.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from pybroker.coord.metadata import paths
from pybroker.coord.metadata.model import PartitionState, TopicInfo
from pybroker.coord.metadata.store import (
    LOST,
    ConnectionLossError,
    Delete,
    MetadataStore,
    NoNodeError,
    WatchedEvent,
)

log = logging.getLogger(__name__)


class StateCache(Protocol):
    topics: dict[str, TopicInfo]

    def put_partition_states(self, name: str, states: dict[int, PartitionState]) -> None: ...


def apply_pushed(cache: StateCache, controller_epoch: int, states: list[paths.PushedState]) -> int:
    """Put ``states`` (written by the controller of ``controller_epoch``) into ``cache`` where
    each is newer than the cached state of the same topic (by topic id); returns how many
    were newer."""
    by_topic: dict[str, dict[int, PartitionState]] = {}
    newer = 0
    for name, topic_id, p, leader, leader_epoch, isr, zk_version in states:
        info = cache.topics.get(name)
        cached = None if info is None else info.partitions.get(p)
        if cached is None or str(info.topic_id) != topic_id:  # type: ignore[union-attr]
            continue  # unknown here yet (the read-back brings it), or another topic's
        if zk_version <= cached.zk_version:
            continue  # the cache holds this state or a newer one
        newer += 1
        by_topic.setdefault(name, {})[p] = PartitionState(
            leader, leader_epoch, list(cached.replicas), list(isr), controller_epoch, zk_version,
        )  # fmt: skip
    for name, put in by_topic.items():
        cache.put_partition_states(name, put)
    return newer


class PushedStates:
    """Reads, applies and deletes the states pushed to ``broker_id`` (module docstring)."""

    def __init__(self, store: MetadataStore, broker_id: int, cache: StateCache) -> None:
        self.store = store
        self.parent = paths.leader_and_isr(broker_id)
        self.cache = cache
        self._wake = asyncio.Event()
        self._watch_pending = False
        self._task: asyncio.Task[None] | None = None
        self.applied = 0  # states that were newer than the cache's (tests, diagnostics)

    def start(self) -> None:
        self.store.add_session_listener(self._on_session_state)
        self._wake.set()
        self._task = asyncio.create_task(self._run(), name=f"pushed-states-{self.parent}")

    async def stop(self) -> None:
        self.store.remove_session_listener(self._on_session_state)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def _on_session_state(self, state: str) -> None:
        if state == LOST:
            self._watch_pending = False  # the session's watches went with it
        self._wake.set()  # (on a reconnect: read again, and watch again if needed)

    def _fired(self, event: WatchedEvent) -> None:
        self._watch_pending = False
        self._wake.set()

    async def _run(self) -> None:
        backoff = 0.05
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._take()
                backoff = 0.05
            except asyncio.CancelledError:
                raise
            except ConnectionLossError as e:
                log.info("pushed states deferred: %s", e)
                self._wake.set()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
            except Exception:
                log.exception("pushed states failed")
                self._wake.set()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    async def _take(self) -> None:
        """Read every pushed node (the children watched, unless a watch is pending), apply
        them in their order and delete them."""
        if not self._watch_pending:
            await self.store.ensure_path(self.parent)
        watch = None if self._watch_pending else self._fired
        self._watch_pending = True
        try:
            children = await self.store.get_children(self.parent, watch=watch)
        except BaseException:
            if watch is not None:
                self._watch_pending = False
            raise
        if not children:
            return
        nodes = [f"{self.parent}/{c}" for c in children]
        reads = await self.store.get_many(nodes)
        for node, got in zip(nodes, reads, strict=True):
            if got is None:
                continue
            try:
                epoch, states = paths.decode_leader_and_isr(got[0])
            except (ValueError, KeyError, TypeError) as e:
                log.warning("unreadable pushed states %s: %s", node, e)
                continue
            newer = apply_pushed(self.cache, epoch, states)
            self.applied += newer
            log.info(
                "pushed states %s (controller epoch %d): %d of %d newer than the cache's",
                node.rsplit("/", 1)[-1],
                epoch,
                newer,
                len(states),
            )
        # deleted together; one gone already (a delete whose answer was lost) fails the
        # multi, so then each alone (applying a push again would change nothing anyway)
        try:
            await self.store.multi([Delete(n) for n in nodes])
        except NoNodeError:
            for node in nodes:
                try:
                    await self.store.delete(node)
                except NoNodeError:
                    pass
