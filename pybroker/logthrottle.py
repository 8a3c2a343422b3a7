"""Rate-limiting of repeated identical log lines.

A broker under a resource fault (EMFILE on accept, a disk that refuses writes) can hit the same
error thousands of times a second; logging each one, with its traceback, fills the disk and
buries the first occurrence.  :class:`RepeatFilter`, installed on the broker's log handlers by
``pybroker serve``, lets the first line of a kind through and holds back identical ones
(same logger, level and message text, same exception type) for ``interval_s``; the first
identical line after that says how many were held back.  Only WARNING and above are
considered: informational lines are never dropped.  At most ``max_keys`` kinds are
remembered (the oldest are forgotten), so the filter's memory is bounded too.

A line logged with ``extra=EVERY_LINE`` is never held back: each is an event of its own whose
text only happens to repeat.  The loop monitor's stall lines are such (loop_monitor.py): two
300 ms stalls on an idle machine often read the same to the millisecond, and holding the second
back hid it from operators and from the protocol fuzzer, whose replays of a stalling frame then
saw no stall (tests/fuzz, 2026-11-27).  They need no throttle: a stall line needs the loop held
up for ``loop.stall.warn.ms``, so there are at most 1000 / that many a second.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable

DEFAULT_INTERVAL_S = 60.0
DEFAULT_MAX_KEYS = 1024
EVERY_LINE = {"every_line": True}  # logging's extra= for a line never held back


class RepeatFilter(logging.Filter):
    def __init__(
        self,
        interval_s: float = DEFAULT_INTERVAL_S,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = DEFAULT_MAX_KEYS,
    ) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.clock = clock
        self.max_keys = max_keys
        # key -> [time the last line of this kind was let through, lines held back since]
        self._seen: OrderedDict[tuple, list] = OrderedDict()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or getattr(record, "every_line", False):
            return True
        exc = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else None
        try:
            text = record.getMessage()
        except Exception:  # a bad format string: let logging report it as usual
            return True
        key = (record.name, record.levelno, text, exc)
        now = self.clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.interval_s:
            seen[1] += 1
            return False
        if seen is not None and seen[1]:
            record.msg = (
                f"{text} (the same line {seen[1]} more times in the last {now - seen[0]:.0f}s)"
            )
            record.args = None
        self._seen[key] = [now, 0]
        self._seen.move_to_end(key)
        while len(self._seen) > self.max_keys:
            self._seen.popitem(last=False)
        return True


def install(logger: logging.Logger | None = None, interval_s: float = DEFAULT_INTERVAL_S) -> None:
    """Add one RepeatFilter to every handler of ``logger`` (default: the root logger)."""
    for h in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RepeatFilter) for f in h.filters):
            h.addFilter(RepeatFilter(interval_s))
