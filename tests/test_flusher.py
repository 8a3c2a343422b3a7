"""Kafka's flush policy (flush.messages / flush.ms): fsyncs happen when due, off by default."""

from __future__ import annotations

import asyncio
import threading

from pybroker.clock import ManualClock
from pybroker.flusher import NEVER, Flusher


class CountingLog:
    """Stands in for PartitionLog.flush only to count calls (flush runs in a thread)."""

    def __init__(self) -> None:
        self.flushes = 0
        self.lock = threading.Lock()

    def flush(self) -> int:
        with self.lock:
            self.flushes += 1
        return 0


async def _settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0.01)


def test_flush_after_flush_messages() -> None:
    async def main() -> None:
        f = Flusher(lambda topic: (3, NEVER), ManualClock())
        log = CountingLog()
        f.appended("t", log, 2)
        await _settle()
        assert log.flushes == 0
        f.appended("t", log, 1)
        await _settle()
        assert log.flushes == 1

    asyncio.run(main(), debug=True)


def test_flush_after_flush_ms() -> None:
    async def main() -> None:
        clock = ManualClock()
        f = Flusher(lambda topic: (NEVER, 1000), clock)
        f.start()
        log = CountingLog()
        f.appended("t", log, 1)
        await _settle()
        assert log.flushes == 0
        clock.advance(1000)
        await asyncio.sleep(0.3)
        assert log.flushes == 1
        await f.stop()

    asyncio.run(main(), debug=True)


def test_off_by_default() -> None:
    async def main() -> None:
        f = Flusher(lambda topic: (NEVER, NEVER), ManualClock())
        log = CountingLog()
        for _ in range(1000):
            f.appended("t", log, 100)
        await _settle()
        assert log.flushes == 0

    asyncio.run(main(), debug=True)
