"""The controller's view of broker liveness (Kafka's ControllerContext: live brokers, shutting
down brokers, replicas on offline log dirs), read from the store at every pass.

* Live brokers: the children of /brokers/ids, read afresh each time.
* Controlled shutdown: a broker stopping on SIGTERM creates the ephemeral
  ``/pybroker/controlled_shutdown/<id>`` (replication/controlled_shutdown.py).
* Log dir failure: a broker whose log dir failed creates an ephemeral
  ``/pybroker/offline_replicas/<id>-<seq>`` naming the partitions it lost (log/manager.py,
  ``fail_dir``); the children are immutable, each is read once.

Both children lists are read with one watch each (at most one pending); its firing calls
``on_change`` (the controller runs a full pass), and while it is pending the last read is
answered without a store round trip.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from pybroker.coord.metadata import paths
from pybroker.coord.metadata.model import TopicPartition
from pybroker.coord.metadata.store import MetadataStore, NoNodeError

log = logging.getLogger(__name__)


class LiveBrokers:
    def __init__(self, store: MetadataStore, epoch: int, on_change: Callable[[], None]) -> None:
        """``epoch``: the controller's, for its log lines."""
        self.store = store
        self.epoch = epoch
        self._on_change = on_change
        # brokers in controlled shutdown (children of paths.CONTROLLED_SHUTDOWN), read with a
        # watch at every pass; at most one watch pending
        self.shutting_down: set[int] = set()
        self._cs_watch_pending = False
        self._cs_dirty = True
        self._cs_ids: set[int] = set()  # the children as last read
        # replicas offline after a log dir failure: {child name: (broker, partitions)}
        # (children are immutable: each is read once), watch as for controlled shutdown
        self._offline_nodes: dict[str, tuple[int, frozenset[TopicPartition]]] = {}
        self._or_watch_pending = False
        self._or_dirty = True

    async def read_live(self) -> set[int]:
        """The live brokers, read from /brokers/ids (never from the possibly lagging cache)."""
        live: set[int] = set()
        for child in await self.store.get_children(paths.BROKER_IDS):
            try:
                live.add(int(child))
            except ValueError:
                continue
        return live

    async def read_shutting_down(self, live: set[int]) -> set[int]:
        """The live brokers in controlled shutdown, read from the store; sets one watch on the
        children, whose firing calls ``on_change``.  While that watch is pending nothing changed
        there, and the last read is answered without a store round trip."""
        if self._cs_watch_pending and not self._cs_dirty:
            self.shutting_down = self._cs_ids & live
            return set(self.shutting_down)
        watch = None
        if not self._cs_watch_pending:
            self._cs_watch_pending = True
            watch = self._on_shutting_down_changed
        try:
            children = await self.store.get_children(paths.CONTROLLED_SHUTDOWN, watch=watch)
        except BaseException as e:
            if watch is not None:
                self._cs_watch_pending = False  # no watch was set
            if not isinstance(e, NoNodeError):
                raise
            children = []
        self._cs_dirty = False
        ids = set()
        for child in children:
            try:
                ids.add(int(child))
            except ValueError:
                continue
        self._cs_ids = ids
        shutting = ids & live
        for b in sorted(shutting - self.shutting_down):
            log.info("controller (epoch %d): broker %d is in controlled shutdown", self.epoch, b)
        self.shutting_down = shutting
        return shutting

    async def read_offline_replicas(self, live: set[int]) -> dict[TopicPartition, set[int]]:
        """{partition: live brokers whose replica of it is offline (log dir failure)}."""
        if not (self._or_watch_pending and not self._or_dirty):
            watch = None
            if not self._or_watch_pending:
                self._or_watch_pending = True
                watch = self._on_offline_changed
            try:
                children = await self.store.get_children(paths.OFFLINE_REPLICAS, watch=watch)
            except BaseException as e:
                if watch is not None:
                    self._or_watch_pending = False
                if not isinstance(e, NoNodeError):
                    raise
                children = []
            self._or_dirty = False
            nodes = {}
            for child in children:
                known = self._offline_nodes.get(child)
                if known is None:
                    try:
                        data, _ = await self.store.get(f"{paths.OFFLINE_REPLICAS}/{child}")
                        doc = json.loads(data)
                        known = (
                            int(doc["broker"]),
                            frozenset((str(t), int(p)) for t, p in doc["partitions"]),
                        )
                    except NoNodeError:
                        continue
                    except (ValueError, KeyError, TypeError):
                        log.warning("unreadable offline replicas node %s", child)
                        continue
                    log.info(
                        "controller (epoch %d): broker %d lost %d replica(s) to a log dir failure",
                        self.epoch,
                        known[0],
                        len(known[1]),
                    )
                nodes[child] = known
            self._offline_nodes = nodes
        out: dict[TopicPartition, set[int]] = {}
        for broker, tps in self._offline_nodes.values():
            if broker in live:
                for tp in tps:
                    out.setdefault(tp, set()).add(broker)
        return out

    def _on_offline_changed(self, event: object) -> None:
        self._or_watch_pending = False
        self._or_dirty = True
        self._on_change()

    def _on_shutting_down_changed(self, event: object) -> None:
        self._cs_watch_pending = False
        self._cs_dirty = True
        self._on_change()
