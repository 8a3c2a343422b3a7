"""Delayed work: requests parked until something happens to a key, or a deadline passes.

Long-poll fetches wait on the partitions they read; an append notifies its partition's key
and wakes exactly the waiters of that key (no timer loop).  acks=all waits will park on the
same mechanism once replication exists.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable


class Purgatory:
    def __init__(self) -> None:
        self._waiters: dict[Hashable, set[asyncio.Future]] = {}

    def notify(self, key: Hashable) -> None:
        waiters = self._waiters.pop(key, None)
        if not waiters:
            return
        for fut in waiters:
            if not fut.done():
                fut.set_result(key)

    async def wait_any(self, keys: Iterable[Hashable], timeout: float) -> bool:
        """Wait until one of ``keys`` is notified (True) or ``timeout`` seconds pass (False)."""
        if timeout <= 0:
            return False
        fut = asyncio.get_running_loop().create_future()
        keys = list(keys)
        for k in keys:
            self._waiters.setdefault(k, set()).add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            for k in keys:
                s = self._waiters.get(k)
                if s is not None:
                    s.discard(fut)
                    if not s:
                        del self._waiters[k]

    def waiting(self) -> int:
        return sum(len(s) for s in self._waiters.values())
