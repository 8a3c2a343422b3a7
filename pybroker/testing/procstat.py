"""What the broker processes use, read from /proc: resident memory and CPU time.

Both are summed over the given processes and their descendants (Kafka's JVM, pybroker's
Python process; W6's three brokers). CPU time is user + system time of every thread of each
process (``/proc/<pid>/stat`` utime + stime), so the log cleaner's and Kafka's I/O threads
count as well as the event loop.
"""

from __future__ import annotations

import os

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


def _cpu_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return 0
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds used so far by the processes and their descendants."""
    return sum(_cpu_ticks(p) for pid in pids for p in descendants(pid)) / CLOCK_TICKS
