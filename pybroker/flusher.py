"""Kafka's flush policy: fsync a partition's log after flush.messages appended records or when
its oldest unflushed append is flush.ms old (topic configs; broker defaults
log.flush.interval.messages / log.flush.interval.ms).  Both are off by default, as in Kafka:
replication, not fsync, is the durability mechanism, and the page cache survives a process
crash.  Flushes run in a worker thread, one at a time per partition, and advance the
partition's recovery point.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pybroker.clock import Clock
    from pybroker.log import PartitionLog

log = logging.getLogger("pybroker.flusher")

NEVER = 2**63 - 1


class Flusher:
    def __init__(
        self,
        policy: Callable[[str], tuple[int, int]],
        clock: Clock,
        on_io_error: Callable[[PartitionLog, OSError], None] | None = None,
    ) -> None:
        """``policy(topic) -> (flush.messages, flush.ms)``; NEVER (or below 1) disables one.
        ``on_io_error(log, error)``: a flush failed with an OSError (the broker takes the log
        dir offline)."""
        self.policy = policy
        self.on_io_error = on_io_error
        self.clock = clock
        self._pending: dict[PartitionLog, list] = {}  # log -> [messages, first unflushed ms, topic]
        self._running: set[PartitionLog] = set()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._timer_loop(), name="flush-timer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=5.0)

    def appended(self, topic: str, plog: PartitionLog, records: int) -> None:
        messages, ms = self.policy(topic)
        if messages >= NEVER and ms >= NEVER:
            return
        entry = self._pending.setdefault(plog, [0, self.clock.time_ms(), topic])
        entry[0] += records
        if 0 < messages <= entry[0]:
            self._flush(plog)

    def _flush(self, plog: PartitionLog) -> None:
        if plog in self._running:
            return  # (still pending: _done flushes again if it is due)
        self._pending.pop(plog, None)
        self._running.add(plog)
        task = asyncio.ensure_future(asyncio.to_thread(plog.flush))
        task.add_done_callback(lambda t, p=plog: self._done(p, t))

    def _done(self, plog: PartitionLog, task: asyncio.Future) -> None:
        self._running.discard(plog)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.error("flush failed: %s", error)
            if isinstance(error, OSError) and self.on_io_error is not None:
                self.on_io_error(plog, error)
            return
        entry = self._pending.get(plog)
        if entry is not None and 0 < self.policy(entry[2])[0] <= entry[0]:
            self._flush(plog)  # flush.messages reached during that flush (flush.ms: the timer)

    async def _timer_loop(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            now = self.clock.time_ms()
            for plog, (_, first, topic) in list(self._pending.items()):
                _, ms = self.policy(topic)
                if ms < NEVER and now - first >= ms:
                    self._flush(plog)
