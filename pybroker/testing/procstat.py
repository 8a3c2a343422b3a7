"""What the broker processes use, read from /proc: resident memory and CPU time.

Both are summed over the given processes and their descendants (Kafka's JVM, pybroker's
Python process; W6's three brokers). CPU time is user + system time of every thread of each
process (``/proc/<pid>/stat`` utime + stime), so the log cleaner's and Kafka's I/O threads
count as well as the event loop.  :class:`Sampler` reads any such probe on a thread of its own
so that a run's timed part can be cut out of it afterwards (bench/commits.py, the profiler).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _status_kb(pid: int, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def descendants(pid: int) -> list[int]:
    """The process and every live process below it."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def rss_mib(pids: list[int], key: str = "VmRSS") -> float:
    """Sum of `key` (VmRSS now, or VmHWM: the peak) over the processes and their children."""
    return sum(_status_kb(p, key) for pid in pids for p in descendants(pid)) / 1024


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of one process (all its threads) so far; None once gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        # the command name (field 2) may hold spaces and parentheses: split after its last ')'
        fields = stat[stat.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime (14, 15)
    except (OSError, IndexError, ValueError):
        return None


def process_cpu_split(pid: int) -> tuple[float, float] | None:
    """(user, system) CPU seconds of one process (all its threads) so far; None once gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        fields = stat[stat.rindex(")") + 2 :].split()
        return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS
    except (OSError, IndexError, ValueError):
        return None


def cpu_split(pids: list[int]) -> tuple[float, float]:
    """(user, system) CPU seconds used so far by the processes and their descendants."""
    user = system = 0.0
    for pid in pids:
        for p in descendants(pid):
            u, s = process_cpu_split(p) or (0.0, 0.0)
            user, system = user + u, system + s
    return user, system


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds used so far by the processes and their descendants."""
    return sum(process_cpu_seconds(p) or 0.0 for pid in pids for p in descendants(pid))


def cmdline(pid: int) -> str:
    """The process's command line, arguments joined by spaces ("" once gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def machine_jiffies() -> tuple[int, int, int, int]:
    """(busy, iowait, steal, total) clock ticks of the whole machine so far (/proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    return user + nice + system + irq + softirq, iowait, steal, sum(v[:8])


class Sampler(Generic[T]):
    """``probe()`` every ``interval`` s on a thread of its own between ``__enter__`` and
    ``__exit__``, kept as (wall-clock time, value): wall clock, so that bounds another process
    took (a client's timed part) can cut it."""

    def __init__(self, probe: Callable[[], T], interval: float = 0.25) -> None:
        self.probe = probe
        self.interval = interval
        self.samples: list[tuple[float, T]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.samples.append((time.time(), self.probe()))
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> Sampler[T]:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def within(self, t0: float, t1: float) -> tuple[tuple[float, T], tuple[float, T]] | None:
        """The first and last samples taken between t0 and t1 (None: fewer than two)."""
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        return (inside[0], inside[-1]) if len(inside) >= 2 else None
