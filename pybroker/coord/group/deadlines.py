"""A min-heap of (deadline, key) with lazy deletion: the group coordinators' "what is due
next" without a scan of every member per request (issue 27, W24).  An entry is live while the
owner's ``live(deadline, key)`` says so (the key's current deadline equals it); stale entries
are dropped when they reach the top, and the heap is rebuilt from the owner's live entries
when stale ones outnumber them, so memory stays bounded.  The owner pushes after every change
that can move a deadline earlier (one writer)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable


class DeadlineHeap:
    __slots__ = ("_heap",)

    def __init__(self) -> None:
        self._heap: list[tuple[int, str]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def push(
        self,
        deadline: int,
        key: str,
        live_count: int,
        live: Callable[[], Iterable[tuple[int, str]]],
    ) -> None:
        """Add an entry; rebuild from ``live()`` when the heap holds more than twice the
        ``live_count`` live entries (plus 64)."""
        heap = self._heap
        heapq.heappush(heap, (deadline, key))
        if len(heap) > 2 * live_count + 64:
            heap[:] = list(live())
            heapq.heapify(heap)

    def first(self, is_live: Callable[[int, str], bool]) -> int | None:
        """The earliest live deadline (stale entries on top are dropped), or None."""
        heap = self._heap
        while heap and not is_live(*heap[0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None
