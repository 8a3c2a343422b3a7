"""Injected time.  log/ and coord/ take a Clock so timeouts and retention are tested without
sleeping; ``ManualClock`` is the test double (real code, not a mock: it is just settable)."""

from __future__ import annotations

import time


class Clock:
    def time_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (timestamps, retention)."""
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        """Seconds on a monotonic clock (timeouts)."""
        return time.monotonic()


class ManualClock(Clock):
    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def time_ms(self) -> int:
        return self.now_ms

    def monotonic(self) -> float:
        return self.now_ms / 1000.0

    def advance(self, ms: int) -> None:
        self.now_ms += ms


SYSTEM_CLOCK = Clock()
