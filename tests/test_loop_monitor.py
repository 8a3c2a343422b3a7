"""The event-loop lag monitor (pybroker/loop_monitor.py)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from pybroker.broker import Broker
from pybroker.config import ConfigError, build_config
from pybroker.loop_monitor import LoopMonitor


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
