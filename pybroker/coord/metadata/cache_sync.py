"""The metadata cache's watch machinery (the base of coord/metadata/cache.py): every watch
callback only marks a key dirty (``("brokers",)``, ``("topic", name)``, ``("partition", name,
p)`` ...); one task (``_sync_loop``) owns the cache and re-reads dirty keys, re-setting their
watches (one-shot).  A key has at most one pending watch at a time (``_watching``), so watches
do not pile up.  A read that fails sets no watch (``_watched`` frees the key), and one that
fails with a lost connection is retried with backoff, so the retry sets the watch again.

Listeners (``add_listener``) get a :class:`ClusterEvent` on the loop (``_notify``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from pybroker.clock import Clock
from pybroker.coord.metadata.model import ClusterEvent, Listener
from pybroker.coord.metadata.store import ConnectionLossError, MetadataStore, WatchedEvent

log = logging.getLogger(__name__)

# partition states whose watches fired, re-read together
PARTITION_BATCH = 5000


class WatchedCache:
    """Dirty keys re-read by one task, and the listeners told of what changed; the subclasses
    say how a key is re-read (``_refresh``, ``_refresh_partitions``)."""

    def __init__(self, store: MetadataStore, broker_id: int, clock: Clock) -> None:
        self.store = store
        self.broker_id = broker_id
        self.clock = clock
        self._listeners: list[Listener] = []
        self._changed_pending: set[str | None] = set()  # TOPIC_CHANGED not yet delivered
        # keys to re-read, oldest first (OrderedDict: taking the first is O(1) however many
        # were taken before, unlike a dict's first key)
        self._dirty: OrderedDict[tuple, None] = OrderedDict()
        self._wake = asyncio.Event()
        self._watching: set[tuple] = set()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def add_listener(self, cb: Listener) -> None:
        self._listeners.append(cb)

    def remove_listener(self, cb: Listener) -> None:
        if cb in self._listeners:
            self._listeners.remove(cb)

    # ------------------------------------------------------------------ the sync loop

    def _start_sync(self) -> None:
        self._task = asyncio.create_task(self._sync_loop(), name=f"cluster-sync-{self.broker_id}")

    async def _stop_sync(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def _watch(self, key: tuple) -> Callable[[WatchedEvent], None] | None:
        """A watch callback for key, or None if one is already pending for it."""
        if key in self._watching:
            return None
        self._watching.add(key)
        return functools.partial(self._on_watch, key)

    def _unwatch(self, key: tuple, watch: Callable | None) -> None:
        """The read that was to set this watch failed: no watch is pending."""
        if watch is not None:
            self._watching.discard(key)

    async def _watched(self, key: tuple, call: Callable[..., Any], path: str) -> Any:
        """``call(path, watch=...)`` with key's watch; a call that raises sets no watch, so the
        key is free to be watched again by the retry (a lost connection must not leave the
        key marked as watched forever)."""
        watch = self._watch(key)
        try:
            return await call(path, watch=watch)
        except BaseException:
            self._unwatch(key, watch)
            raise

    def _on_watch(self, key: tuple, event: WatchedEvent) -> None:
        self._watching.discard(key)
        self._mark(key)

    def awaiting_read_back(self, name: str, p: int) -> bool:
        """Partition ``p``'s state znode changed (its watch fired) and the cache has not read
        it again yet: the cached state is older than the store's."""
        return ("partition", name, p) in self._dirty

    def _mark(self, key: tuple) -> None:
        self._dirty[key] = None
        self._wake.set()

    async def _sync_loop(self) -> None:
        backoff = 0.05
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._dirty:
                key = self._dirty.popitem(last=False)[0]
                keys = [key]
                if key[0] == "partition":  # every partition marked so far, read together
                    keys += self._take_dirty_partitions(PARTITION_BATCH - 1)
                try:
                    if len(keys) > 1 or key[0] == "partition":
                        await self._refresh_partitions(keys)
                    else:
                        await self._refresh(key)
                    backoff = 0.05
                except ConnectionLossError as e:
                    log.info("metadata refresh of %s deferred: %s", key, e)
                    for k in keys:
                        self._dirty[k] = None
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("metadata refresh of %s failed", key)

    async def _refresh_pending(
        self, skip: frozenset[str], partitions: Callable[[tuple], bool] | None = None
    ) -> None:
        """Re-read every key marked so far (but the kinds in ``skip``, and the partition
        keys ``partitions`` refuses, left to the sync loop) now, partition states together; a
        failure marks them all again and raises."""
        keys = [
            k
            for k in self._dirty
            if k[0] not in skip and (partitions is None or k[0] != "partition" or partitions(k))
        ]
        for k in keys:
            del self._dirty[k]
        parts = [k for k in keys if k[0] == "partition"]
        try:
            for k in keys:
                if k[0] != "partition":
                    await self._refresh(k)
            for i in range(0, len(parts), PARTITION_BATCH):
                await self._refresh_partitions(parts[i : i + PARTITION_BATCH])
        except BaseException:
            for k in keys:
                self._dirty[k] = None
            raise

    def _take_dirty_partitions(self, limit: int) -> list[tuple]:
        taken = []
        for k in self._dirty:
            if k[0] == "partition":
                taken.append(k)
                if len(taken) >= limit:
                    break
        for k in taken:
            del self._dirty[k]
        return taken

    async def _get_many_watched(
        self, keys: list[tuple], node_paths: list[str]
    ) -> list[tuple[bytes, Any] | None]:
        """``store.get_many`` with each key's watch (none for a key already watched); a key
        whose node is missing has no watch pending afterwards (the caller decides)."""
        watches = [self._watch(k) for k in keys]
        try:
            results = await self.store.get_many(node_paths, watches)
        except BaseException:
            for k, w in zip(keys, watches, strict=True):
                self._unwatch(k, w)
            raise
        for k, w, r in zip(keys, watches, results, strict=True):
            if r is None:
                self._unwatch(k, w)
        return results

    async def _refresh(self, key: tuple) -> None:
        """Re-read what ``key`` names (and set its watch again)."""
        raise NotImplementedError

    async def _refresh_partitions(self, keys: list[tuple]) -> None:
        """Re-read the partition states ``keys`` name, together."""
        raise NotImplementedError

    def _notify(self, event: ClusterEvent) -> None:
        """Announce ``event`` on the loop.  A TOPIC_CHANGED of a topic whose TOPIC_CHANGED is
        still undelivered is dropped: listeners read the topic as it is when they run, so one
        delivery covers every change before it (each partition state write, e.g. 600 ISR
        shrinks of one topic, cost each listener a look at the whole topic: O(P) per
        partition).  Any other event of the topic is delivered after the pending one, and a
        later change is announced again after it."""
        if self._loop is None:
            return
        if event.kind == "TOPIC_CHANGED":
            if event.topic in self._changed_pending:
                return
            self._changed_pending.add(event.topic)
        elif event.topic is not None:
            self._changed_pending.discard(event.topic)
        self._loop.call_soon(self._deliver, event, list(self._listeners))

    def _deliver(self, event: ClusterEvent, listeners: list[Listener]) -> None:
        if event.kind == "TOPIC_CHANGED":
            self._changed_pending.discard(event.topic)
        for cb in listeners:
            self._call_listener(cb, event)

    @staticmethod
    def _call_listener(cb: Listener, event: ClusterEvent) -> None:
        try:
            cb(event)
        except Exception:
            log.exception("cluster listener %r failed on %s", cb, event)
