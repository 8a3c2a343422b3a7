"""Group commit of independent writers' multis on one metadata store (BatchingStore): while
``max_in_flight`` multis are in flight, the next callers' operations queue and go out as ONE
multi when one finishes, in arrival order.

Invariant: all or nothing per caller, never across callers (a merged multi failing on one
caller's operation wrote nothing; that caller gets its error, the others go out again first).
A caller's own order is its business (it awaits each write before the next).  Details:
docs/internals.md ("The metadata store: group commit").
"""

from __future__ import annotations

import asyncio
import collections
import logging

from pybroker.coord.metadata.store import (
    MetadataStore,
    Op,
    SessionListener,
    Stat,
    StoreError,
    WatchCallback,
)

log = logging.getLogger(__name__)

DEFAULT_MAX_IN_FLIGHT = 2
DEFAULT_MAX_OPS = 1000  # ZooKeeper's jute.maxbuffer (1 MiB) bounds a request's bytes


class _Pending:
    __slots__ = ("ops", "done")

    def __init__(self, ops: list[Op], done: asyncio.Future[None]) -> None:
        self.ops = ops
        self.done = done


class BatchingStore(MetadataStore):
    """A MetadataStore whose ``multi`` merges concurrent callers (module docstring)."""

    def __init__(
        self,
        store: MetadataStore,
        *,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        max_ops: int = DEFAULT_MAX_OPS,
    ) -> None:
        if max_in_flight < 1 or max_ops < 1:
            raise ValueError("max_in_flight and max_ops must be at least 1")
        self.inner = store
        self.max_in_flight = max_in_flight
        self.max_ops = max_ops
        self._queue: collections.deque[_Pending] = collections.deque()
        self._in_flight = 0
        self._tasks: set[asyncio.Task[None]] = set()
        # counters for docs/performance.md and tests: multis sent, callers served
        self.round_trips = 0
        self.callers = 0
        self.largest = 0  # the most operations sent in one multi

    # ------------------------------------------------------------------ merged writes

    async def multi(self, ops: list[Op]) -> None:
        ops = list(ops)
        if not ops:
            return
        self.callers += 1
        if self._in_flight < self.max_in_flight and not self._queue:
            self._in_flight += 1
            self.round_trips += 1
            try:
                await self.inner.multi(ops)
            finally:
                self._in_flight -= 1
                self._kick()
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(ops, done))
        self._kick()
        await done

    def _kick(self) -> None:
        """Send what is queued while there is room in flight."""
        while self._in_flight < self.max_in_flight and self._queue:
            batch: list[_Pending] = []
            n = 0
            while self._queue:
                p = self._queue[0]
                if p.done.done():  # cancelled while queued: withdrawn
                    self._queue.popleft()
                    continue
                if batch and n + len(p.ops) > self.max_ops:
                    break
                batch.append(self._queue.popleft())
                n += len(p.ops)
            if not batch:
                return
            self._in_flight += 1
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[_Pending]) -> None:
        ops: list[Op] = []
        owners: list[int] = []
        for i, p in enumerate(batch):
            ops.extend(p.ops)
            owners.extend([i] * len(p.ops))
        self.round_trips += 1
        self.largest = max(self.largest, len(ops))
        try:
            await self.inner.multi(ops)
        except StoreError as e:
            if e.op_index is None or not 0 <= e.op_index < len(ops) or len(batch) == 1:
                _fail(batch, e)
            else:
                loser = batch[owners[e.op_index]]
                e.op_index -= sum(len(p.ops) for p in batch[: owners[e.op_index]])
                _fail([loser], e)
                # nothing was written: the others go again, first in line
                self._queue.extendleft(reversed([p for p in batch if p is not loser]))
        except BaseException as e:  # cancelled (the loop closing), or not a store error
            _fail(batch, e if isinstance(e, Exception) else StoreError("write abandoned"))
            if not isinstance(e, Exception):
                raise
        else:
            for p in batch:
                if not p.done.done():
                    p.done.set_result(None)
        finally:
            self._in_flight -= 1
            self._kick()

    # ------------------------------------------------------------------ the rest, as is

    async def start(self) -> None:
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()

    def log_counts(self) -> None:
        """One line at shutdown: how much the merging saved (docs/performance.md, W18)."""
        if self.round_trips:
            log.info(
                "group commit: %d callers' multis in %d round trips (largest %d operations)",
                self.callers,
                self.round_trips,
                self.largest,
            )

    @property
    def session_id(self) -> int:
        return self.inner.session_id

    def session_heard(self) -> tuple[float, int] | None:
        return self.inner.session_heard()

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        return await self.inner.create(
            path, data, ephemeral=ephemeral, sequence=sequence, makepath=makepath
        )

    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes, Stat]:
        return await self.inner.get(path, watch)

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        return await self.inner.set(path, data, version)

    async def set_many(self, writes: list[tuple[str, bytes, int]]) -> list[Stat | StoreError]:
        return await self.inner.set_many(writes)

    async def multi_many(self, batches: list[list[Op]]) -> list[StoreError | None]:
        return await self.inner.multi_many(batches)  # (independent: never merged)

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        await self.inner.delete(path, version, recursive=recursive)

    async def exists(self, path: str, watch: WatchCallback | None = None) -> Stat | None:
        return await self.inner.exists(path, watch)

    async def get_children(self, path: str, watch: WatchCallback | None = None) -> list[str]:
        return await self.inner.get_children(path, watch)

    async def ensure_path(self, path: str) -> None:
        await self.inner.ensure_path(path)

    def add_session_listener(self, cb: SessionListener) -> None:
        self.inner.add_session_listener(cb)

    def remove_session_listener(self, cb: SessionListener) -> None:
        self.inner.remove_session_listener(cb)


def _fail(batch: list[_Pending], error: BaseException) -> None:
    for p in batch:
        if not p.done.done():
            p.done.set_exception(error)
            p.done.exception()  # retrieved: a caller gone meanwhile leaves no warning
