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


def test_messages_reaching_flush_messages_during_a_flush_are_flushed_after_it() -> None:
    """flush.messages=1: a produce acknowledged while the previous one's flush is under way
    is flushed too, with no later produce (it stayed unflushed until the next append)."""

    class SlowLog(CountingLog):
        def __init__(self) -> None:
            super().__init__()
            self.release = threading.Event()

        def flush(self) -> int:
            self.release.wait(5)
            return super().flush()

    async def main() -> None:
        f = Flusher(lambda topic: (1, NEVER), ManualClock())
        log = SlowLog()
        f.appended("t", log, 1)  # its flush starts and waits
        f.appended("t", log, 1)  # due while that flush runs
        log.release.set()
        for _ in range(500):
            if log.flushes == 2:
                break
            await asyncio.sleep(0.01)
        assert log.flushes == 2

    asyncio.run(main(), debug=True)
