"""Event-loop lag monitor: one task that notices when the loop was blocked.

Every ``interval`` (20 ms) the task sleeps and measures how late it woke up.  A wake-up later
than ``loop.stall.warn.ms`` (default 100 ms) means something ran on the loop for that long
without yielding -- a handler decompressing a whole batch, a blocking file or ZooKeeper call --
and every other client waited.  It is logged as a WARNING, every one however alike its
figures (the repeat filter holds none back, logthrottle.py)::

    event loop stalled 153 ms (loop thread on CPU 148 ms, waiting for a CPU 2 ms)

The two figures in brackets say where the loop thread's time went between the previous wake-up
and this one (the interval plus the lateness), from Linux's per-thread scheduler statistics
(``/proc/thread-self/schedstat``, read in the loop thread at each wake-up, about 1 us): on
CPU, the loop was busy (a handler that does not yield); waiting for a CPU, it was runnable but
the machine ran something else (a loaded machine, a noisy neighbour); the rest of the late time
it was blocked (a blocking system call, the GIL held by another thread).  The protocol fuzzer
(tests/fuzz) tells its own stalls from the machine's by them.  Without schedstat only the CPU
figure is given (``time.thread_time``).

The broker always runs it; ``loop.stall.warn.ms`` (0 = no warnings) sets the logging threshold.
Listeners (``add_listener``) hear of every late wake-up, and ``blocked_ms()`` says how late
the pending one already is: the ZooKeeper session lease (coord/metadata/cluster.py) uses
both, because a loop held up for longer than a third of the session (SIGSTOP, a swapped-out process) may
have lost the session and with it leadership, before ZooKeeper's client thread can say so.
The cost is one timer wake-up per interval: measured at about 0.1 % of one core (see
docs/testing.md).  The protocol fuzzer (tests/fuzz) fails when the log holds any such line.

The monitor cannot say what blocked the loop, only that it was blocked and for how long;
``PYTHONASYNCIODEBUG=1`` (asyncio's slow-callback report) names the callback.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable

from pybroker.logthrottle import EVERY_LINE

log = logging.getLogger("pybroker.loop_monitor")

DEFAULT_INTERVAL_MS = 20
STALL_MESSAGE = "event loop stalled %d ms"
SCHEDSTAT = "/proc/thread-self/schedstat"  # ns on CPU, ns waiting on a run queue, slices


class ThreadTimes:
    """The calling thread's time on CPU and waiting for a CPU (ms) since the last call; the
    file is opened in the thread measured (the loop thread) and read again at each call."""

    def __init__(self) -> None:
        try:
            self._fd: int | None = os.open(SCHEDSTAT, os.O_RDONLY)
        except OSError:
            self._fd = None
        self._last = self._read()

    def _read(self) -> tuple[float, float | None]:
        if self._fd is not None:
            try:
                on_cpu, waiting = os.pread(self._fd, 64, 0).split()[:2]
                return int(on_cpu) / 1e6, int(waiting) / 1e6
            except (OSError, ValueError):
                os.close(self._fd)
                self._fd = None
        return time.thread_time() * 1000.0, None

    def since_last(self) -> tuple[float, float | None]:
        """(ms on CPU, ms waiting for a CPU or None when unknown) since the previous call."""
        now = self._read()
        cpu = now[0] - self._last[0]
        waited = None if now[1] is None or self._last[1] is None else now[1] - self._last[1]
        self._last = now
        return max(0.0, cpu), None if waited is None else max(0.0, waited)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class LoopMonitor:
    """Counts and logs event-loop stalls longer than ``threshold_ms``."""

    def __init__(self, threshold_ms: int, interval_ms: int = DEFAULT_INTERVAL_MS) -> None:
        if threshold_ms < 0:
            raise ValueError("threshold_ms must be >= 0 (0: no warnings)")
        self.threshold_ms = threshold_ms
        self._listeners: list[Callable[[float], None]] = []
        self.interval_s = interval_ms / 1000.0
        self.stalls = 0  # wake-ups later than the threshold
        self.worst_ms = 0.0  # the latest wake-up seen, in ms past its due time
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._times: ThreadTimes | None = None

    def start(self) -> None:
        """Start on the running loop.  A bare timer callback that re-arms itself, not a task:
        no future or task step per wake-up, which keeps the cost at a third of a sleeping
        task's (docs/testing.md)."""
        self._loop = asyncio.get_running_loop()
        self._times = ThreadTimes()  # opened here: on the loop thread
        self._arm()

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._times is not None:
            self._times.close()
            self._times = None
        self._loop = None

    def add_listener(self, fn: Callable[[float], None]) -> None:
        """``fn(late_ms)`` after every wake-up, on the loop (keep it cheap)."""
        self._listeners.append(fn)

    def blocked_ms(self) -> float:
        """How late the pending wake-up already is (0 when it is not due yet): after the loop
        was held up, callbacks that run before the monitor's own wake-up see it here."""
        if self._loop is None:
            return 0.0
        return max(0.0, (self._loop.time() - self._due) * 1000.0)

    def _arm(self) -> None:
        self._due = self._loop.time() + self.interval_s
        self._timer = self._loop.call_at(self._due, self._wake)

    def _wake(self) -> None:
        late_ms = (self._loop.time() - self._due) * 1000.0
        cpu_ms, waited_ms = self._times.since_last() if self._times else (None, None)
        self.observe(late_ms, cpu_ms, waited_ms)
        self._arm()

    def observe(
        self, late_ms: float, cpu_ms: float | None = None, waited_ms: float | None = None
    ) -> None:
        """Record one wake-up that came ``late_ms`` after its due time; ``cpu_ms`` and
        ``waited_ms``: the loop thread's time on CPU and waiting for a CPU meanwhile."""
        if late_ms > self.worst_ms:
            self.worst_ms = late_ms
        if self.threshold_ms and late_ms > self.threshold_ms:
            self.stalls += 1
            # every stall is a line of its own, however alike their figures (logthrottle.py)
            if cpu_ms is None:
                log.warning(STALL_MESSAGE, late_ms, extra=EVERY_LINE)
            elif waited_ms is None:
                log.warning(
                    STALL_MESSAGE + " (loop thread on CPU %d ms)", late_ms, cpu_ms, extra=EVERY_LINE
                )
            else:
                log.warning(
                    STALL_MESSAGE + " (loop thread on CPU %d ms, waiting for a CPU %d ms)",
                    late_ms,
                    cpu_ms,
                    waited_ms,
                    extra=EVERY_LINE,
                )
        for fn in self._listeners:
            fn(late_ms)
