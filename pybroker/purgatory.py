"""Delayed work: requests parked until something happens to a key, or a deadline passes.

Long-poll fetches wait on the partitions they read; an append notifies its partition's key
and wakes exactly the waiters of that key (no timer loop).  acks=all waits will park on the
same mechanism once replication exists.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable

_EXPIRED = object()  # a wait's result when its timeout passed


def _expire(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(_EXPIRED)


class Purgatory:
    def __init__(self) -> None:
        # a key's waiter, or a set of them when more than one waits on it (a consumer's fetch
        # of many partitions registers on each: no set made per key while it waits alone)
        self._waiters: dict[Hashable, asyncio.Future | set[asyncio.Future]] = {}
        self._parked: set[asyncio.Task] = set()  # the tasks inside wait_any

    def notify(self, key: Hashable) -> None:
        waiters = self._waiters.pop(key, None)
        if waiters is None:
            return
        if type(waiters) is not set:
            if not waiters.done():
                waiters.set_result(key)
            return
        for fut in waiters:
            if not fut.done():
                fut.set_result(key)

    async def wait_any(self, keys: Iterable[Hashable], timeout: float) -> bool:
        """Wait until one of ``keys`` is notified (True) or ``timeout`` seconds pass (False)."""
        if timeout <= 0:
            return False
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        keys = list(keys)
        waiters = self._waiters
        for k in keys:
            w = waiters.get(k)
            if w is None:
                waiters[k] = fut
            elif type(w) is set:
                w.add(fut)
            elif w is not fut:
                waiters[k] = {w, fut}
        task = asyncio.current_task()
        if task is not None:
            self._parked.add(task)
        # a timer on the future itself: asyncio.wait_for wraps it in a second future with
        # its callbacks, a third of an empty long-poll fetch's cost in the profile
        timer = loop.call_later(timeout, _expire, fut)
        try:
            return (await fut) is not _EXPIRED
        finally:
            timer.cancel()
            self._parked.discard(task)  # type: ignore[arg-type]
            for k in keys:
                w = waiters.get(k)
                if w is fut:
                    del waiters[k]
                elif type(w) is set:
                    w.discard(fut)
                    if not w:
                        del waiters[k]

    def parked(self) -> int:
        """How many tasks wait in ``wait_any`` now."""
        return len(self._parked)

    def cancel_parked(self) -> int:
        """Cancel every task waiting in ``wait_any`` (the listeners' stop: the connections
        are closed, so a parked request's answer has nobody to go to, as in Kafka, whose
        purgatory's delayed operations are dropped at shutdown).  Returns how many."""
        parked = list(self._parked)
        for task in parked:
            task.cancel()
        return len(parked)

    def waiting(self) -> int:
        """Waits registered, one per (key, waiter)."""
        return sum(len(w) if type(w) is set else 1 for w in self._waiters.values())
