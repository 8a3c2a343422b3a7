"""Lag over time: a bounded ring buffer of (time, total lag) samples per consumer group, taken
every ``console.lag.sample.interval.ms`` while the console runs, and its inline SVG chart.

Memory is bounded: ``CAPACITY`` samples per group (two int64 each, in an ``array``), at most
``MAX_GROUPS`` groups (the groups this broker coordinates; samples of a group it no longer
coordinates are dropped at the next sampling).  A sample is the sum over the group's committed
partitions of high watermark minus committed offset (state.lag_rows), over the partitions
this broker holds a replica of.
"""

from __future__ import annotations

import asyncio
import logging
import time
from array import array
from typing import TYPE_CHECKING

from pybroker.console.html import esc, num
from pybroker.console.state import lag_rows, total_lag

if TYPE_CHECKING:
    from pybroker.services import BrokerServices

CAPACITY = 360
MAX_GROUPS = 2000
log = logging.getLogger("pybroker.console")


class Ring:
    """The last CAPACITY (time ms, lag) pairs."""

    __slots__ = ("_data", "_next", "_count")

    def __init__(self) -> None:
        self._data = array("q", bytes(16 * CAPACITY))
        self._next = 0
        self._count = 0

    def add(self, t_ms: int, lag: int) -> None:
        i = 2 * self._next
        self._data[i], self._data[i + 1] = t_ms, lag
        self._next = (self._next + 1) % CAPACITY
        self._count = min(self._count + 1, CAPACITY)

    def samples(self) -> list[tuple[int, int]]:
        first = (self._next - self._count) % CAPACITY
        out = []
        for k in range(self._count):
            i = 2 * ((first + k) % CAPACITY)
            out.append((self._data[i], self._data[i + 1]))
        return out


class LagHistory:
    def __init__(self, broker: BrokerServices, interval_s: float) -> None:
        self.broker = broker
        self.interval_s = interval_s
        self.rings: dict[str, Ring] = {}
        self._task: asyncio.Task | None = None

    def series(self, group_id: str) -> list[tuple[int, int]]:
        ring = self.rings.get(group_id)
        return ring.samples() if ring is not None else []

    async def sample(self) -> None:
        groups = self.broker.groups
        if groups is None:
            return
        now = int(time.time() * 1000)
        seen = set()
        for g in groups.list_groups()[:MAX_GROUPS]:
            gid = g.group_id
            seen.add(gid)
            try:
                lag = total_lag(await lag_rows(self.broker, gid))
            except Exception:  # the store is unreachable now: no sample
                continue
            if lag is None:
                continue
            ring = self.rings.get(gid)
            if ring is None:
                ring = self.rings[gid] = Ring()
            ring.add(now, lag)
        for gid in [g for g in self.rings if g not in seen]:
            del self.rings[gid]

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="console-lag")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.sample()
            except Exception:
                log.exception("console: sampling consumer lag failed")
            await asyncio.sleep(self.interval_s)


W, H, PAD = 640, 180, 44


def chart(samples: list[tuple[int, int]], interval_s: float) -> str:
    """An inline SVG line chart of the samples (safe markup)."""
    if len(samples) < 2:
        return (
            f'<p class="note">Collecting lag samples (one every {interval_s:g} s); the chart '
            "appears after two.</p>"
        )
    t0, t1 = samples[0][0], samples[-1][0]
    top = max(1, max(lag for _, lag in samples))
    span = max(1, t1 - t0)

    def xy(t: int, lag: int) -> str:
        x = PAD + (W - 2 * PAD) * (t - t0) / span
        y = H - PAD + (2 * PAD - H) * lag / top
        return f"{x:.1f},{y:.1f}"

    points = " ".join(xy(t, lag) for t, lag in samples)
    last = samples[-1][1]
    minutes = span / 60000
    return (
        f'<svg class="lag-chart" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
        f'aria-label="total lag over time">'
        f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="#999"/>'
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" stroke="#999"/>'
        f'<text x="{PAD - 4}" y="{PAD + 4}" text-anchor="end" font-size="11">{esc(num(top))}</text>'
        f'<text x="{PAD - 4}" y="{H - PAD + 4}" text-anchor="end" font-size="11">0</text>'
        f'<text x="{W - PAD}" y="{H - PAD + 16}" text-anchor="end" font-size="11">now</text>'
        f'<text x="{PAD}" y="{H - PAD + 16}" font-size="11">-{minutes:.1f} min</text>'
        f'<polyline fill="none" stroke="#2563eb" stroke-width="2" points="{points}"/>'
        f'<text x="{W - PAD}" y="{PAD - 8}" text-anchor="end" font-size="12">'
        f"{len(samples)} samples, latest lag {esc(num(last))}</text></svg>"
    )
