"""Kafka's flush policy (flush.messages / flush.ms): fsyncs happen when due, off by default,
run by the log manager's LogFlusher (one flush of a log at a time)."""

from __future__ import annotations

import asyncio
import threading

from pybroker.clock import ManualClock
from pybroker.flusher import NEVER, Flusher
from pybroker.log.log_flusher import LogFlusher


class CountingLog:
    """Stands in for PartitionLog.flush only to count calls (flush runs in a thread)."""

    closed = False

    def __init__(self) -> None:
        self.flushes = 0
        self.lock = threading.Lock()

    def flush(self, upto: int | None = None) -> int:
        with self.lock:
            self.flushes += 1
        return 0


def _log_flusher() -> LogFlusher:
    def fail(plog: object, error: OSError) -> None:
        raise AssertionError(f"flush failed: {error}")

    return LogFlusher(fail)


async def _settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0.01)


def test_flush_after_flush_messages() -> None:
    async def main() -> None:
        f = Flusher(lambda topic: (3, NEVER), ManualClock(), _log_flusher().flush)
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
        f = Flusher(lambda topic: (NEVER, 1000), clock, _log_flusher().flush)
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
        f = Flusher(lambda topic: (NEVER, NEVER), ManualClock(), _log_flusher().flush)
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

        def flush(self, upto: int | None = None) -> int:
            self.release.wait(5)
            return super().flush(upto)

    async def main() -> None:
        f = Flusher(lambda topic: (1, NEVER), ManualClock(), _log_flusher().flush)
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


def test_a_roll_flush_and_a_policy_flush_of_one_log_never_run_at_once() -> None:
    """The LogFlusher is the one owner of a log's flushes: a roll's flush (up to the new
    segment's base) and the flush policy's (up to the log end) asked while another runs wait
    for it and run as one flush, to the log end; other logs are flushed meanwhile."""

    class RecordingLog(CountingLog):
        def __init__(self) -> None:
            super().__init__()
            self.release = threading.Event()
            self.running = 0
            self.most_at_once = 0
            self.targets: list[int | None] = []

        def flush(self, upto: int | None = None) -> int:
            with self.lock:
                self.running += 1
                self.most_at_once = max(self.most_at_once, self.running)
                self.targets.append(upto)
            self.release.wait(5)
            with self.lock:
                self.running -= 1
            return super().flush(upto)

    flusher = _log_flusher()
    log, other = RecordingLog(), CountingLog()
    first = flusher.flush(log, 5)  # a roll's
    flusher.rolled(log, 7)  # (PartitionLog.on_roll)
    later = [flusher.flush(log), flusher.flush(log, 3)]
    assert flusher.flush(other).result(timeout=5) == 0  # not held up by the first log
    log.release.set()
    first.result(timeout=5)
    for f in later:
        f.result(timeout=5)
    assert log.targets == [5, None] and log.most_at_once == 1
    flusher.stop()
    assert flusher.flush(log).cancelled()  # stopped: a clean shutdown's close flushes
