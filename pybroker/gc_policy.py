"""The cyclic garbage collector's policy for a broker process (Kafka's JVM rarely walks old
objects; this does the equivalent with ``gc.freeze()``): the survivors of start-up and of every
slow full collection are frozen, so are client connections opened by the thousand, and every
``unfreeze_interval_s`` they are given back, so cyclic garbage among them is reclaimed by the
next full collection.

Invariants: nothing reachable is freed; memory stays bounded (one interval plus one full
collection); process-wide, so installed only by a serving broker (Broker.serving).  Why and
figures: docs/internals.md ("The garbage collector"), docs/scale.md.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from dataclasses import dataclass

log = logging.getLogger("pybroker.gc")

FREEZE_AFTER_MS = 20.0  # a full collection this long walked ~50,000+ objects: freeze them
UNFREEZE_INTERVAL_S = 900.0  # cyclic garbage among frozen objects waits at most this long
# Net allocations (allocations minus frees of tracked objects) between young collections;
# CPython's default is 700.  With 20,000 a W18 run's broker (256 groups committing) made
# 89 young, 7 middle and 1 full collection and spent 0.17 s in them, against 385, 34, 3 and
# 0.92 s at 700 (issue 28; bench/results/2026-11-27-commits7.md): fewer young collections
# promote less to the older generations, so fewer full walks.  Cyclic garbage waits for that
# many net allocations more.
YOUNG_THRESHOLD = 20_000
# Open client connections above the count at the last such freeze (since the last unfreeze)
# that make the policy freeze once more, ``CONNECTIONS_FREEZE_DELAY_S`` later (their first
# requests answered by then): an idle connection is ~30 tracked objects that would otherwise
# wait, young, for the first full walk (W23: 45 ms at 10,000 connections, in a later storm).
CONNECTIONS_PER_FREEZE = 1_000
CONNECTIONS_FREEZE_DELAY_S = 1.0


@dataclass
class GcStats:
    full_collections: int = 0
    full_collection_ms: float = 0.0  # total
    longest_full_ms: float = 0.0
    freezes: int = 0
    unfreezes: int = 0
    connection_freezes: int = 0  # (counted in freezes too)


class GcPolicy:
    """Installs a ``gc.callbacks`` hook that freezes the survivors of slow full collections
    and a timer that unfreezes them every ``unfreeze_interval_s``."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        freeze_after_ms: float = FREEZE_AFTER_MS,
        unfreeze_interval_s: float = UNFREEZE_INTERVAL_S,
    ) -> None:
        self._loop = loop
        self.freeze_after_ms = freeze_after_ms
        self.unfreeze_interval_s = unfreeze_interval_s
        self.stats = GcStats()
        self._started = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._installed = False
        self._thresholds = gc.get_threshold()
        self._open = 0  # open client connections, as last told
        self._connections_frozen = 0  # the open connections' high-water mark at a freeze
        self._connection_freeze: asyncio.TimerHandle | None = None

    def install(self) -> None:
        if not self._installed:
            self._thresholds = gc.get_threshold()
            gc.set_threshold(YOUNG_THRESHOLD, *self._thresholds[1:])
            gc.callbacks.append(self._on_gc)
            self._installed = True
            self._timer = self._loop.call_later(self.unfreeze_interval_s, self._unfreeze)

    def uninstall(self) -> None:
        """Stop (at shutdown): logs what the collector cost this process."""
        st = self.stats
        log.info(
            "gc: %d full collections, %.0f ms in all, longest %.0f ms; %d freezes (%d after "
            "connections opened), %d unfreezes",
            st.full_collections,
            st.full_collection_ms,
            st.longest_full_ms,
            st.freezes,
            st.connection_freezes,
            st.unfreezes,
        )
        if self._installed:
            gc.callbacks.remove(self._on_gc)
            gc.set_threshold(*self._thresholds)
            self._installed = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._connection_freeze is not None:
            self._connection_freeze.cancel()
            self._connection_freeze = None

    def connections_open(self, count: int) -> None:
        """The listener's count of open client connections, at every new one (cheap: a
        comparison).  ``CONNECTIONS_PER_FREEZE`` more than at the last freeze since the last
        unfreeze schedules one freeze ``CONNECTIONS_FREEZE_DELAY_S`` later: the connections
        and whatever else is tracked then go to the permanent generation without a walk.  The
        mark only rises until the next unfreeze, so connections that come and go (churn) never
        freeze more than ``max.connections / CONNECTIONS_PER_FREEZE`` times an interval, and
        the cyclic garbage frozen with them waits at most one interval, as a slow walk's."""
        self._open = count
        if (
            count >= self._connections_frozen + CONNECTIONS_PER_FREEZE
            and self._connection_freeze is None
            and self._installed
        ):
            self._connection_freeze = self._loop.call_later(
                CONNECTIONS_FREEZE_DELAY_S, self._freeze_connections
            )

    def _freeze_connections(self) -> None:
        self._connection_freeze = None
        count = self._open
        self._connections_frozen = max(self._connections_frozen, count)
        gc.freeze()  # O(1): the generations' lists are moved, nothing is walked
        self.stats.freezes += 1
        self.stats.connection_freezes += 1
        log.debug("gc: frozen after %d open connections", count)

    def freeze_now(self) -> None:
        """One full collection, then freeze its survivors (after start-up)."""
        gc.collect()
        gc.freeze()
        self.stats.freezes += 1
        log.debug("gc: %d objects frozen after start-up", gc.get_freeze_count())

    def _on_gc(self, phase: str, info: dict) -> None:
        # Runs in whichever thread allocated, holding the GIL.
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
            return
        ms = (time.perf_counter() - self._started) * 1000.0
        st = self.stats
        st.full_collections += 1
        st.full_collection_ms += ms
        st.longest_full_ms = max(st.longest_full_ms, ms)
        if ms >= self.freeze_after_ms and self._installed:
            # Here, not queued on the loop: a start-up step that holds the loop for seconds
            # would otherwise see the walks grow meanwhile.  The collection is over ("stop"),
            # its lists consistent; freezing only moves them to the permanent generation.
            gc.freeze()
            st.freezes += 1

    def _unfreeze(self) -> None:
        self._timer = self._loop.call_later(self.unfreeze_interval_s, self._unfreeze)
        # the connections open now go back with the rest and are walked by the next full
        # collection (which freezes them again if slow): only more connections freeze again
        self._connections_frozen = self._open
        # (not gc.get_freeze_count(): it walks the permanent generation, 340,000 objects with
        # 10,000 connections frozen, ~20 ms on the loop; unfreeze is O(1) and harmless)
        if self.stats.freezes:
            gc.unfreeze()  # the next full collection walks them once and freezes again
            self.stats.unfreezes += 1
