"""The broker's shutdown steps: each part started registers its stop, and the stops run in
reverse (last started, first stopped), each bounded so that SIGTERM always ends the process.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("pybroker.broker")

STOP_STEP_S = 3.0  # the most one shutdown step may take (SIGTERM must end the process)


async def _bounded(what: str, step: Awaitable[Any], timeout: float = STOP_STEP_S) -> None:
    """Await one shutdown step for at most ``timeout`` seconds; a step that fails or takes
    longer is logged and left behind (its task is cancelled), and the shutdown goes on."""
    try:
        async with asyncio.timeout(timeout):
            await step
    except TimeoutError:
        log.warning("shutdown: %s did not stop within %.0f s; going on", what, timeout)
    except Exception as e:
        log.warning("shutdown: %s failed to stop: %r; going on", what, e)


class Stops:
    """The stops of the parts started so far, by name; ``run`` calls them last-pushed first.
    A bounded stop gets STOP_STEP_S (``_bounded``); an unbounded one (local disk, threads that
    must end before the logs close) is awaited to its end."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[Callable[[], Any], bool]] = {}

    def push(self, name: str, stop: Callable[[], Any], *, bounded: bool = True) -> None:
        self._entries.pop(name, None)
        self._entries[name] = (stop, bounded)

    def bump(self, name: str) -> None:
        """Move ``name``'s stop to the top: it now runs before the stops pushed since (a part
        that must stop before parts started after it, e.g. the listeners once they accept)."""
        self._entries[name] = self._entries.pop(name)

    @property
    def order(self) -> list[str]:
        """The names in the order ``run`` stops them."""
        return list(reversed(self._entries))

    async def run(self) -> None:
        while self._entries:
            name = next(reversed(self._entries))
            stop, bounded = self._entries.pop(name)
            result = stop()
            if inspect.isawaitable(result):
                if bounded:
                    await _bounded(name, result)
                else:
                    await result
