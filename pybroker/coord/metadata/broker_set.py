"""The broker set of the metadata cache (a base of coord/metadata/cache.py): the live brokers
(/brokers/ids) and the membership epoch, the departed brokers cached partition states still name
as leader, and the dynamic broker configs this broker applies (/config/changes)."""

from __future__ import annotations

import logging

from pybroker.clock import Clock
from pybroker.coord.metadata import config_changes, paths
from pybroker.coord.metadata.cache_sync import WatchedCache
from pybroker.coord.metadata.model import BrokerInfo, ClusterEvent, TopicInfo
from pybroker.coord.metadata.store import MetadataStore, NoNodeError

log = logging.getLogger(__name__)


class BrokerSet(WatchedCache):
    # the partition-state table (MetadataCache): read for the departed brokers' leaderships
    topics: dict[str, TopicInfo]

    def __init__(self, store: MetadataStore, broker_id: int, clock: Clock) -> None:
        super().__init__(store, broker_id, clock)
        self.brokers: dict[int, BrokerInfo] = {}
        # brokers gone from /brokers/ids that cached partition states still name as leader,
        # with how many they lead; ``metadata_brokers`` is ``brokers`` plus these (see
        # metadata_brokers)
        self._departed: dict[int, BrokerInfo] = {}
        self._departed_leads: dict[int, int] = {}
        self.metadata_brokers: dict[int, BrokerInfo] = {}
        # dynamic broker configs (KIP-226) this broker applies: "<default>" and str(broker_id)
        # -> the entity's stored configs, kept current through /config/changes
        self.broker_configs: dict[str, dict[str, str]] = {}
        self._changes = config_changes.ChangeCursor()
        # bumped whenever the live broker set may have changed since we last looked: a change
        # of /brokers/ids seen by its cversion (so a broker that left and came back between
        # two reads counts too) and the loss of our own session (see membership_epoch)
        self._membership_epoch = 0
        self._brokers_cversion = -1

    @property
    def membership_epoch(self) -> int:
        """A counter that moves whenever the set of live brokers may have changed behind what
        ``brokers`` showed before: /brokers/ids gained or lost a child (its cversion moved, even
        if the set read back is the same) or our session was lost (others may have acted on
        our absence).  State derived from "which broker owns what" (group coordination) is
        valid only for the epoch it was derived in."""
        return self._membership_epoch

    async def _refresh_brokers(self) -> None:
        # cversion first: a change after it is read shows up in the next refresh as well
        stat = await self.store.exists(paths.BROKER_IDS)
        cversion = stat.cversion if stat is not None else -1
        ids = await self._watched(("brokers",), self.store.get_children, paths.BROKER_IDS)
        brokers: dict[int, BrokerInfo] = {}
        for child in ids:
            try:
                bid = int(child)
            except ValueError:
                continue
            try:
                data, _ = await self._watched(("broker", bid), self.store.get, paths.broker(bid))
            except NoNodeError:
                continue
            try:
                reg = paths.decode_broker(data)
            except (ValueError, KeyError, TypeError):
                log.warning("unreadable registration of broker %d: %r", bid, data)
                continue
            first = reg["endpoints"][0] if reg["endpoints"] else ("", reg["host"] or "", -1)
            brokers[bid] = BrokerInfo(bid, first[1], first[2], reg["rack"], reg["endpoints"])
        moved = cversion != self._brokers_cversion
        self._brokers_cversion = cversion
        if brokers != self.brokers or moved:
            gone = {b: i for b, i in self.brokers.items() if b not in brokers}
            self.brokers = brokers
            self._note_departed(gone)
            self._membership_epoch += 1
            self._notify(ClusterEvent("BROKERS_CHANGED"))

    # ------------------------------------------------------------------ departed leaders
    # Kafka ZooKeeper mode: only the controller watches /brokers/ids; the other brokers learn
    # of a broker's loss from the controller's UpdateMetadata, together with the new leaders
    # of its partitions, so clients see the old leader until the new one.  Here every broker
    # watches /brokers/ids and would answer leader -1 (LEADER_NOT_AVAILABLE) between the loss
    # and the controller's writes reaching its cache; so a departed broker stays in
    # ``metadata_brokers`` while a cached partition state still names it as leader.

    def _note_departed(self, gone: dict[int, BrokerInfo]) -> None:
        departed = {b: i for b, i in self._departed.items() if b not in self.brokers}
        departed.update(gone)
        leads: dict[int, int] = {}
        if departed:
            for info in self.topics.values():
                for st in info.partitions.values():
                    if st.leader in departed:
                        leads[st.leader] = leads.get(st.leader, 0) + 1
        self._departed = {b: i for b, i in departed.items() if b in leads}
        self._departed_leads = leads
        self.metadata_brokers = {**self._departed, **self.brokers}

    def _count_departed_leads(self, old: TopicInfo | None, new: TopicInfo | None) -> None:
        """A topic changed (or went): the departed brokers' leaderships, counted again."""
        leads = self._departed_leads
        for info, sign in ((old, -1), (new, 1)):
            if info is not None:
                for st in info.partitions.values():
                    if st.leader in leads:
                        leads[st.leader] += sign
        if any(n <= 0 for n in leads.values()):
            self._note_departed({})

    # ------------------------------------------------------------------ entity configs

    def _broker_entities(self) -> tuple[str, str]:
        return (paths.DEFAULT_ENTITY, str(self.broker_id))

    async def _load_broker_configs(self) -> None:
        """At start and after a new session: every notification so far counts as seen, the
        entities are read whole (Kafka's DynamicConfigManager.startup)."""
        self._changes = config_changes.ChangeCursor()
        children = await self._watched(("changes",), self.store.get_children, paths.CONFIG_CHANGES)
        if children:
            self._changes.last = max(config_changes.sequence_of(c) for c in children)
        await self._note_ctimes(children)
        for entity in self._broker_entities():
            await self._refresh_broker_config(entity)

    async def _note_ctimes(self, children: list[str]) -> None:
        for child in children:
            if child in self._changes.ctimes:
                continue
            stat = await self.store.exists(f"{paths.CONFIG_CHANGES}/{child}")
            if stat is not None:
                self._changes.ctimes[child] = stat.ctime

    async def _refresh_changes(self) -> None:
        """ZkNodeChangeNotificationListener.processNotifications: each notification after the
        last processed one names an entity to read again; then the expired ones are purged."""
        children = await self._watched(("changes",), self.store.get_children, paths.CONFIG_CHANGES)
        for child in self._changes.unseen(children):
            try:
                data, stat = await self.store.get(f"{paths.CONFIG_CHANGES}/{child}")
            except NoNodeError:
                continue  # purged meanwhile
            self._changes.last = max(self._changes.last, config_changes.sequence_of(child))
            self._changes.ctimes[child] = stat.ctime
            entity_path = paths.decode_config_change(data)
            if entity_path is None:
                log.warning("ignoring config change notification %s: %r", child, data)
                continue
            kind, _, name = entity_path.partition("/")
            if kind == "brokers":
                if name in self._broker_entities():
                    self._mark(("broker_config", name))
            elif kind == "topics":
                if name in self.topics:
                    self._mark(("config", name))
            else:
                self._notify(ClusterEvent("ENTITY_CONFIG_CHANGED", entity_path))
        self._changes.forget_missing(children)
        await self._note_ctimes(children)
        for child in self._changes.expired(self.clock.time_ms()):
            try:
                await self.store.delete(f"{paths.CONFIG_CHANGES}/{child}")
            except NoNodeError:
                pass
            self._changes.ctimes.pop(child, None)

    async def _refresh_broker_config(self, entity: str) -> None:
        try:
            data, _ = await self.store.get(paths.broker_config(entity))
            configs = paths.decode_topic_config(data)
        except NoNodeError:
            configs = {}
        except ValueError:
            log.error("unreadable dynamic broker configs at %s", paths.broker_config(entity))
            return
        self._set_broker_config(entity, configs)

    def _set_broker_config(self, entity: str, configs: dict[str, str]) -> None:
        if self.broker_configs.get(entity) != configs:
            self.broker_configs[entity] = dict(configs)
            self._notify(ClusterEvent("BROKER_CONFIG_CHANGED", entity))
