"""The partitions of an internal topic (__consumer_offsets, __transaction_state) that this
broker coordinates: Kafka's rule that the leader of partition p coordinates the keys of p,
shared by the offsets log (coord/group/offsets_log.py) and the transaction state log
(coord/txn/state_log.py).

When this broker becomes p's leader (``on_election``) it loads p in a task, retried while it
fails, and answers COORDINATOR_LOAD_IN_PROGRESS meanwhile (``load_error``); then it serves p
from memory until it stops leading p (``on_resignation``), which drops p.  Each load is a
term: ``term(p)`` changes with every election here and when the load completes, and only
then; ``epoch`` moves (and ``on_change`` is called) at each of those events.  A subclass says
what a partition's cache holds and how a load fills it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from pybroker.coord.metadata.internal_log import CoordinatorWriteError
from pybroker.coord.metadata.placement import partition_for
from pybroker.coord.metadata.store import StoreError
from pybroker.errors import ErrorCode

_serials = itertools.count(1)


async def load_once(
    loading: dict[str, asyncio.Future[None]], key: str, load: Callable[[], Awaitable[None]]
) -> None:
    """Await the one load of ``key`` in flight (``load()``, started when none is): callers
    that come meanwhile share it, and a caller's cancellation does not cancel it."""
    fut = loading.get(key)
    if fut is None:
        fut = asyncio.ensure_future(load())
        loading[key] = fut
        fut.add_done_callback(lambda _: loading.pop(key, None))
    await asyncio.shield(fut)


@dataclass
class LoadedPartition:
    """One partition led here: the leader epoch it was loaded in (every append names it)."""

    leader_epoch: int
    serial: int = field(default_factory=lambda: next(_serials))
    loaded: bool = False
    task: asyncio.Task[None] | None = None


P = TypeVar("P", bound=LoadedPartition)


class PartitionLoads(Generic[P]):
    """The partitions led here and their loads (module docstring)."""

    topic = ""  # the internal topic, for log lines
    task_prefix = ""  # the load tasks' names: f"{task_prefix}-{partition}"
    retry_on: tuple[type[Exception], ...] = (StoreError, OSError)  # a load failing so is retried

    def __init__(
        self,
        *,
        partitions: int,
        load_retry_s: float,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.partitions = partitions
        self.load_retry_s = load_retry_s
        self.on_change = on_change  # called after the epoch moved
        self._parts: dict[int, P] = {}
        self.epoch = 0  # moves at every election, resignation and finished load here
        self._logger = logging.getLogger(type(self).__module__)

    # -- what a subclass provides ----------------------------------------------------------
    def _new_partition(self, leader_epoch: int) -> P:
        raise NotImplementedError

    async def _fill(self, partition: int, st: P) -> None:
        """Load the partition into ``st`` (raises one of ``retry_on`` to be retried)."""
        raise NotImplementedError

    def _reset(self, st: P) -> None:
        """Forget what a failed load put into ``st``."""
        raise NotImplementedError

    def _loaded_what(self, st: P) -> str:
        """What a finished load holds, for the log line ("12 groups")."""
        raise NotImplementedError

    # -- ownership (the broker's leadership events) ----------------------------------------
    def partition_of(self, key: str) -> int:
        return partition_for(key, self.partitions)

    def on_election(self, partition: int, leader_epoch: int, continued: bool = False) -> None:
        """This broker leads ``partition`` in ``leader_epoch``: load it (again, if it led it
        in an earlier epoch: another leader may have written; not when it led it without
        interruption, ``continued``: only the epoch moves)."""
        old = self._parts.get(partition)
        if old is not None and (old.leader_epoch == leader_epoch or continued):
            old.leader_epoch = leader_epoch
            return
        self._drop(partition)
        st = self._new_partition(leader_epoch)
        self._parts[partition] = st
        st.task = asyncio.get_running_loop().create_task(
            self._load(partition, st), name=f"{self.task_prefix}-{partition}"
        )
        self._changed()

    def on_resignation(self, partition: int) -> None:
        """This broker no longer leads ``partition``: what it held of it is dropped."""
        if self._drop(partition):
            self._changed()

    def _changed(self) -> None:
        self.epoch += 1
        if self.on_change is not None:
            self.on_change()

    def _drop(self, partition: int) -> bool:
        st = self._parts.pop(partition, None)
        if st is None:
            return False
        if st.task is not None and not st.task.done():
            st.task.cancel()
        return True

    def owns(self, partition: int) -> bool:
        return partition in self._parts

    def term(self, partition: int) -> object:
        """This broker's load of the partition (None: not led here): it changes with every
        election here and when the load completes, and only then."""
        st = self._parts.get(partition)
        return None if st is None else (st.serial, st.loaded)

    def load_error(self, partition: int) -> int | None:
        """None when this broker serves the partition; else the error to answer."""
        st = self._parts.get(partition)
        if st is None:
            return ErrorCode.NOT_COORDINATOR
        if not st.loaded:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return None

    def _served(self, key: str) -> P:
        """The loaded partition of ``key``; CoordinatorWriteError(load_error) when this broker
        does not serve it."""
        p = self.partition_of(key)
        code = self.load_error(p)
        if code is not None:
            raise CoordinatorWriteError(code)
        return self._parts[p]

    async def stop(self) -> None:
        tasks = [st.task for st in self._parts.values() if st.task is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _load(self, partition: int, st: P) -> None:
        while True:
            try:
                await self._fill(partition, st)
            except asyncio.CancelledError:
                raise
            except self.retry_on as e:
                if self._parts.get(partition) is not st:
                    return
                self._logger.warning(
                    "%s-%d: loading failed (%s); retrying in %.1f s",
                    self.topic,
                    partition,
                    e,
                    self.load_retry_s,
                )
                self._reset(st)
                await asyncio.sleep(self.load_retry_s)
                continue
            if self._parts.get(partition) is st:
                st.loaded = True
                self._logger.info(
                    "%s-%d: loaded %s (leader epoch %d)",
                    self.topic,
                    partition,
                    self._loaded_what(st),
                    st.leader_epoch,
                )
                self._changed()  # the coordinator adopts what was loaded
            return


__all__ = ["LoadedPartition", "PartitionLoads"]
