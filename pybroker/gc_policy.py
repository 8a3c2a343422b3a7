"""The cyclic garbage collector's policy for a broker process.

CPython's full collection walks every tracked object, and a broker's long-lived state (its
partitions' logs, replicas, caches) grows with the partition count: at 20,000 partitions a
broker holds about a million tracked objects and each full collection held the event loop
for 0.4-1.1 s, several times a minute under load, and a restart spent a fifth to half of its
CPU in them (docs/scale.md, "The garbage collector").  Kafka's JVM has the same problem and
solves it with generational collection that rarely revisits old objects; this module does
the equivalent with ``gc.freeze()``:

- after start-up (logs recovered, coordinators loaded), one full collection, then every
  survivor is frozen (moved to the permanent generation, which no collection walks);
- after a full collection that took ``freeze_after_ms`` or more, the survivors are frozen
  too, so the next full collections walk only what was allocated since;
- every ``unfreeze_interval_s`` the permanent generation is given back to the collector, so
  cyclic garbage among objects that were alive at a freeze (a closed connection's cycles, a
  deleted topic's) is reclaimed by the next full collection, which then freezes again:
  memory stays bounded, and the full walk happens once per interval instead of whenever the
  heap grew by a quarter.

Objects without cycles are freed by reference counting whether frozen or not.  The policy is
process-wide, so only the broker's own process installs it (``pybroker serve`` and a node's
worker), never a test process that embeds a Broker.
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
# Allocations between young collections (CPython's default 700).  A request allocates some
# hundred containers, nearly all freed by reference counting, so at 700 a young collection
# (and this module's callback, twice) ran every few requests; at 20,000 one every ~100-200
# (issue 28, W18: gc_collect_main was 1-2% of the broker's CPU).  Cyclic garbage waits for at
# most that many allocations more.
YOUNG_THRESHOLD = 20_000


@dataclass
class GcStats:
    full_collections: int = 0
    full_collection_ms: float = 0.0  # total
    longest_full_ms: float = 0.0
    freezes: int = 0
    unfreezes: int = 0


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
            "gc: %d full collections, %.0f ms in all, longest %.0f ms; %d freezes, %d unfreezes",
            st.full_collections,
            st.full_collection_ms,
            st.longest_full_ms,
            st.freezes,
            st.unfreezes,
        )
        if self._installed:
            gc.callbacks.remove(self._on_gc)
            gc.set_threshold(*self._thresholds)
            self._installed = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

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
        if gc.get_freeze_count():
            gc.unfreeze()  # the next full collection walks them once and freezes again
            self.stats.unfreezes += 1
