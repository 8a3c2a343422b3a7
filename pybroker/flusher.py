"""Kafka's flush policy: fsync a partition's log after flush.messages appended records or when
its oldest unflushed append is flush.ms old (topic configs; broker defaults
log.flush.interval.messages / log.flush.interval.ms).  Both are off by default, as in Kafka:
replication, not fsync, is the durability mechanism, and the page cache survives a process
crash.  This decides when; the flush itself is the log manager's LogFlusher
(pybroker/log/log_flusher.py, which also runs the roll's flush and reports an I/O error), one
at a time per partition, and advances the partition's recovery point.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
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
        flush: Callable[[PartitionLog], concurrent.futures.Future],
    ) -> None:
        """``policy(topic) -> (flush.messages, flush.ms)``; NEVER (or below 1) disables one.
        ``flush(log)``: LogFlusher.flush, a future of the recovery point reached."""
        self.policy = policy
        self.flush = flush
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
        task = asyncio.wrap_future(self.flush(plog))
        task.add_done_callback(lambda t, p=plog: self._done(p, t))

    def _done(self, plog: PartitionLog, task: asyncio.Future) -> None:
        self._running.discard(plog)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.error("flush failed: %s", error)  # (LogFlusher took its dir offline)
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
