"""The event-loop lag monitor (pybroker/loop_monitor.py)."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time

import pytest

from pybroker.broker import Broker
from pybroker.config import ConfigError, build_config
from pybroker.logthrottle import RepeatFilter
from pybroker.loop_monitor import SCHEDSTAT, LoopMonitor


def test_blocking_the_loop_is_logged_as_a_stall(caplog):
    async def main() -> LoopMonitor:
        m = LoopMonitor(threshold_ms=100, interval_ms=10)
        m.start()
        await asyncio.sleep(0.05)
        time.sleep(0.3)  # a handler that blocks the loop
        await asyncio.sleep(0.05)
        await m.stop()
        return m

    with caplog.at_level(logging.WARNING, logger="pybroker.loop_monitor"):
        m = asyncio.run(main())
    assert m.stalls == 1
    assert m.worst_ms >= 200
    (rec,) = [r for r in caplog.records if r.name == "pybroker.loop_monitor"]
    assert rec.levelno == logging.WARNING
    assert rec.getMessage().startswith("event loop stalled ")
    assert int(rec.getMessage().split()[3]) >= 200


def _stall_line(caplog, block) -> str:  # type: ignore[no-untyped-def]
    async def main() -> None:
        m = LoopMonitor(threshold_ms=100, interval_ms=10)
        m.start()
        await asyncio.sleep(0.05)
        block()
        await asyncio.sleep(0.05)
        await m.stop()

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pybroker.loop_monitor"):
        asyncio.run(main())
    (rec,) = [r for r in caplog.records if r.name == "pybroker.loop_monitor"]
    return rec.getMessage()


def _figures(line: str) -> tuple[int, int | None]:
    """(ms on CPU, ms waiting for a CPU) of a stall line."""
    m = re.search(r"on CPU (\d+) ms(?:, waiting for a CPU (\d+) ms)?", line)
    assert m, line
    return int(m.group(1)), None if m.group(2) is None else int(m.group(2))


def test_a_stall_says_whether_the_loop_was_busy(caplog):
    """The stall line gives the loop thread's time on CPU (and, from schedstat, waiting for a
    CPU) over the late wake-up's window: a handler that computes 300 ms shows them on CPU
    however loaded the machine, one that sleeps 300 ms (a blocking call) does not."""

    def busy() -> None:  # 300 ms of this thread's CPU time, however long that takes
        end = time.thread_time() + 0.3
        while time.thread_time() < end:
            pass

    cpu, waited = _figures(_stall_line(caplog, busy))
    assert cpu >= 250
    assert waited is not None or not os.path.exists(SCHEDSTAT)
    cpu, _ = _figures(_stall_line(caplog, lambda: time.sleep(0.3)))
    assert cpu < 100


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_every_stall_is_logged_however_alike_its_figures():
    """Behind the repeat filter ``pybroker serve`` puts on its log handlers (logthrottle.py),
    two stalls whose figures read the same (two 300 ms handlers on an idle machine, often) are
    two lines: the second is a stall of its own, not a repeat to hold back for a minute."""
    lines = _Lines()
    lines.addFilter(RepeatFilter())
    logger = logging.getLogger("pybroker.loop_monitor")
    logger.addHandler(lines)
    try:
        m = LoopMonitor(threshold_ms=100)
        for _ in range(3):
            m.observe(293.0, 300.0, 1.0)
        m.observe(150.0)
        m.observe(150.0)
    finally:
        logger.removeHandler(lines)
    assert m.stalls == 5
    same = "event loop stalled 293 ms (loop thread on CPU 300 ms, waiting for a CPU 1 ms)"
    assert lines.lines == [same] * 3 + ["event loop stalled 150 ms"] * 2


def test_short_wakeup_delays_are_not_stalls(caplog):
    m = LoopMonitor(threshold_ms=100)
    with caplog.at_level(logging.WARNING, logger="pybroker.loop_monitor"):
        m.observe(3.0)
        m.observe(100.0)
    assert m.stalls == 0 and m.worst_ms == 100.0
    assert not caplog.records


def test_config_key_turns_it_on_and_off(tmp_path):
    base = {"log.dirs": str(tmp_path)}
    assert Broker(build_config(base)).loop_monitor.threshold_ms == 100
    on = Broker(build_config({**base, "loop.stall.warn.ms": "250"}))
    assert on.loop_monitor.threshold_ms == 250
    assert Broker(build_config({**base, "loop.stall.warn.ms": "0"})).loop_monitor.threshold_ms == 0
    with pytest.raises(ConfigError, match="loop.stall.warn.ms"):
        build_config({**base, "loop.stall.warn.ms": "-1"})
