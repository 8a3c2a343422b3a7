"""Polling a condition from a coroutine, for the tests that drive stores, clusters and
controllers on an event loop (the loop keeps running while it waits)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def wait_until(
    pred: Callable[[], object], timeout: float = 20.0, what: str = "", interval: float = 0.01
) -> None:
    """Return once ``pred()`` is truthy; AssertionError (naming ``what``) after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached in time{': ' + what if what else ''}")
        await asyncio.sleep(interval)
