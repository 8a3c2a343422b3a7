"""The metadata cache: brokers, topics with their partitions' states and configs, the
controller's id and epoch, and the dynamic broker configs this broker applies, kept current by
watches on the metadata store.

Watches and refreshes: every watch callback only marks a key dirty (``("brokers",)``,
``("topic", name)``, ``("partition", name, p)`` ...); one task (``_sync_loop``) owns the cache
and re-reads dirty keys, re-setting their watches (one-shot).  A key has at most one pending
watch at a time (``_watching``), so watches do not pile up.  A read that fails sets no watch
(``_watched`` frees the key), and one that fails with a lost connection is retried with
backoff, so the retry sets the watch again.

Listeners (``add_listener``) get a :class:`ClusterEvent` on the loop whenever the broker set,
the controller or a topic changes; the broker uses it to create the partition logs it leads.
``PartitionState.zk_version`` is the state znode's version last seen, and the cache never goes
back to an older version than a local write put there (the writer interface below).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from pybroker.clock import Clock
from pybroker.coord.metadata import config_changes, paths
from pybroker.coord.metadata.model import (
    BrokerInfo,
    ClusterEvent,
    Listener,
    PartitionState,
    TopicInfo,
)
from pybroker.coord.metadata.store import (
    ConnectionLossError,
    MetadataStore,
    NoNodeError,
    WatchedEvent,
)

log = logging.getLogger(__name__)

# topics read together at start (their znodes, then all their partition states, then configs)
TOPIC_BATCH = 200
# partition states whose watches fired, re-read together
PARTITION_BATCH = 5000


def _zk_versions(info: TopicInfo | None) -> dict[int, int] | None:
    return None if info is None else {p: s.zk_version for p, s in info.partitions.items()}


class MetadataCache:
    def __init__(self, store: MetadataStore, broker_id: int, clock: Clock) -> None:
        self.store = store
        self.broker_id = broker_id
        self.clock = clock
        self.cluster_id: str = ""
        self.controller_id: int = -1
        self.controller_epoch: int = 0
        self.brokers: dict[int, BrokerInfo] = {}
        # brokers gone from /brokers/ids that cached partition states still name as leader,
        # with how many they lead; ``metadata_brokers`` is ``brokers`` plus these (see
        # metadata_brokers)
        self._departed: dict[int, BrokerInfo] = {}
        self._departed_leads: dict[int, int] = {}
        self.metadata_brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        # dynamic broker configs (KIP-226) this broker applies: "<default>" and str(broker_id)
        # -> the entity's stored configs, kept current through /config/changes
        self.broker_configs: dict[str, dict[str, str]] = {}
        self._changes = config_changes.ChangeCursor()
        self._listeners: list[Listener] = []
        self._changed_pending: set[str | None] = set()  # TOPIC_CHANGED not yet delivered
        # keys to re-read, oldest first (OrderedDict: taking the first is O(1) however many
        # were taken before, unlike a dict's first key)
        self._dirty: OrderedDict[tuple, None] = OrderedDict()
        self._wake = asyncio.Event()
        self._watching: set[tuple] = set()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._local_gen = 0  # bumped by local topic writes (see _refresh_topics)
        self._locally_written: dict[str, int] = {}
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

    def add_listener(self, cb: Listener) -> None:
        self._listeners.append(cb)

    def remove_listener(self, cb: Listener) -> None:
        if cb in self._listeners:
            self._listeners.remove(cb)

    # ------------------------------------------------------------------ the sync loop

    def _start_sync(self) -> None:
        self._task = asyncio.create_task(self._sync_loop(), name=f"cluster-sync-{self.broker_id}")

    async def _stop_sync(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def _watch(self, key: tuple) -> Callable[[WatchedEvent], None] | None:
        """A watch callback for key, or None if one is already pending for it."""
        if key in self._watching:
            return None
        self._watching.add(key)
        return functools.partial(self._on_watch, key)

    def _unwatch(self, key: tuple, watch: Callable | None) -> None:
        """The read that was to set this watch failed: no watch is pending."""
        if watch is not None:
            self._watching.discard(key)

    async def _watched(self, key: tuple, call: Callable[..., Any], path: str) -> Any:
        """``call(path, watch=...)`` with key's watch; a call that raises sets no watch, so the
        key is free to be watched again by the retry (a lost connection must not leave the
        key marked as watched forever)."""
        watch = self._watch(key)
        try:
            return await call(path, watch=watch)
        except BaseException:
            self._unwatch(key, watch)
            raise

    def _on_watch(self, key: tuple, event: WatchedEvent) -> None:
        self._watching.discard(key)
        self._mark(key)

    def _mark(self, key: tuple) -> None:
        self._dirty[key] = None
        self._wake.set()

    async def _sync_loop(self) -> None:
        backoff = 0.05
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._dirty:
                key = self._dirty.popitem(last=False)[0]
                keys = [key]
                if key[0] == "partition":  # every partition marked so far, read together
                    keys += self._take_dirty_partitions(PARTITION_BATCH - 1)
                try:
                    if len(keys) > 1 or key[0] == "partition":
                        await self._refresh_partitions(keys)
                    else:
                        await self._refresh(key)
                    backoff = 0.05
                except ConnectionLossError as e:
                    log.info("metadata refresh of %s deferred: %s", key, e)
                    for k in keys:
                        self._dirty[k] = None
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("metadata refresh of %s failed", key)

    async def _refresh_pending(self, skip: frozenset[str]) -> None:
        """Re-read every key marked so far (but the kinds in ``skip``) now, partition states
        together; a failure marks them all again and raises."""
        keys = [k for k in self._dirty if k[0] not in skip]
        for k in keys:
            del self._dirty[k]
        parts = [k for k in keys if k[0] == "partition"]
        try:
            for k in keys:
                if k[0] != "partition":
                    await self._refresh(k)
            for i in range(0, len(parts), PARTITION_BATCH):
                await self._refresh_partitions(parts[i : i + PARTITION_BATCH])
        except BaseException:
            for k in keys:
                self._dirty[k] = None
            raise

    def _take_dirty_partitions(self, limit: int) -> list[tuple]:
        taken = []
        for k in self._dirty:
            if k[0] == "partition":
                taken.append(k)
                if len(taken) >= limit:
                    break
        for k in taken:
            del self._dirty[k]
        return taken

    async def _refresh(self, key: tuple) -> None:
        """Re-read what ``key`` names (and set its watch again)."""
        kind = key[0]
        if kind == "brokers" or kind == "broker":
            await self._refresh_brokers()
        elif kind == "topics":
            await self._refresh_topics()
        elif kind == "topic":
            await self._refresh_topic(key[1])
        elif kind == "partition":
            await self._refresh_partition(key[1], key[2])
        elif kind == "config":
            await self._refresh_config(key[1])
        elif kind == "changes":
            await self._refresh_changes()
        elif kind == "broker_config":
            await self._refresh_broker_config(key[1])

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

    async def _refresh_topics(self, *, load_all: bool = False) -> None:
        gen = self._local_gen
        names = await self._watched(("topics",), self.store.get_children, paths.TOPICS)
        await self._load_topics([n for n in names if load_all or n not in self.topics])
        present = set(names)
        for name in list(self.topics):
            if name not in present and self._locally_written.get(name, -1) <= gen:
                self._forget_topic(name)
                self._notify(ClusterEvent("TOPIC_DELETED", name))

    async def _refresh_topic(self, name: str) -> None:
        await self._load_topics([name])

    async def _get_many_watched(
        self, keys: list[tuple], node_paths: list[str]
    ) -> list[tuple[bytes, Any] | None]:
        """``store.get_many`` with each key's watch (none for a key already watched); a key
        whose node is missing has no watch pending afterwards (the caller decides)."""
        watches = [self._watch(k) for k in keys]
        try:
            results = await self.store.get_many(node_paths, watches)
        except BaseException:
            for k, w in zip(keys, watches, strict=True):
                self._unwatch(k, w)
            raise
        for k, w, r in zip(keys, watches, results, strict=True):
            if r is None:
                self._unwatch(k, w)
        return results

    async def _load_topics(self, names: list[str]) -> None:
        """Read topics (znode, every partition state, config) together, TOPIC_BATCH topics
        at a time: a few pipelined rounds instead of one round trip per partition (33,000
        state znodes read one by one took minutes at start and after every failover)."""
        for start in range(0, len(names), TOPIC_BATCH):
            await self._load_topic_batch(names[start : start + TOPIC_BATCH])
            await asyncio.sleep(0)

    async def _load_topic_batch(self, names: list[str]) -> None:
        gen = self._local_gen
        topic_reads = await self._get_many_watched(
            [("topic", n) for n in names], [paths.topic(n) for n in names]
        )
        found: list[tuple[str, Any, Any, dict[int, list[int]], tuple[dict, dict]]] = []
        for name, got in zip(names, topic_reads, strict=True):
            if got is None:
                if name in self.topics and self._locally_written.get(name, -1) <= gen:
                    self._forget_topic(name)
                    self._notify(ClusterEvent("TOPIC_DELETED", name))
                continue
            data, topic_stat = got
            topic_id, assignment = paths.decode_topic(data)
            found.append(
                (name, topic_id, topic_stat, assignment, paths.decode_topic_reassignment(data))
            )
        keys = [("partition", n, p) for n, _, _, a, _ in found for p in sorted(a)]
        state_reads = await self._get_many_watched(
            keys, [paths.partition_state(n, p) for _, n, p in keys]
        )
        config_reads = await self._get_many_watched(
            [("config", n) for n, *_ in found], [paths.topic_config(n) for n, *_ in found]
        )
        states = dict(zip(keys, state_reads, strict=True))
        for (name, topic_id, topic_stat, assignment, (adding, removing)), conf in zip(
            found, config_reads, strict=True
        ):
            partitions = {}
            for k, (p, replicas) in enumerate(sorted(assignment.items())):
                if k % 1000 == 999:
                    await asyncio.sleep(0)  # (a topic of many partitions: let others run)
                got = states[("partition", name, p)]
                if got is None:  # (watch for its creation: the controller, a slow creator)
                    st = await self._read_partition(name, p, replicas)
                else:
                    st = self._decode_state(got, replicas)
                partitions[p] = dataclasses.replace(
                    st,
                    adding_replicas=tuple(adding.get(p, ())),
                    removing_replicas=tuple(removing.get(p, ())),
                )
            configs = (
                paths.decode_topic_config(conf[0])
                if conf is not None
                else await self._read_config(name)
            )
            self._merge_topic(name, topic_id, topic_stat.version, partitions, configs)

    def _merge_topic(
        self,
        name: str,
        topic_id: uuid.UUID | None,
        version: int,
        partitions: dict[int, PartitionState],
        configs: dict[str, str],
    ) -> None:
        """A topic as read from the store, merged with what local writes put in the cache
        meanwhile (see the writer interface)."""
        old = self.topics.get(name)
        if old is not None and (topic_id is None or topic_id == old.topic_id):
            stale_assignment = version < old.assignment_version
            if stale_assignment:
                # read before a local write of the topic znode (a reassignment step, new
                # partitions) landed in the cache: its assignment stays (its watch brings any
                # later change)
                version = old.assignment_version
                for p, cached in old.partitions.items():
                    partitions.setdefault(p, cached)
            for p, st in list(partitions.items()):
                cached = old.partitions.get(p)
                if cached is None:
                    continue
                if stale_assignment:
                    st = partitions[p] = dataclasses.replace(
                        st,
                        replicas=list(cached.replicas),
                        adding_replicas=cached.adding_replicas,
                        removing_replicas=cached.removing_replicas,
                    )
                if 0 <= st.zk_version < cached.zk_version:
                    # read before a newer local write (update_isr, the controller) landed
                    # in the cache: keep the newer one (the watch brings any later change)
                    partitions[p] = dataclasses.replace(
                        cached,
                        replicas=st.replicas,
                        adding_replicas=st.adding_replicas,
                        removing_replicas=st.removing_replicas,
                    )
        info = TopicInfo(
            name,
            topic_id or (old.topic_id if old else uuid.UUID(int=0)),
            partitions,
            configs,
            version,
        )
        self._update_topic(info)

    @staticmethod
    def _decode_state(got: tuple[bytes, Any], replicas: list[int]) -> PartitionState:
        data, stat = got
        st = paths.decode_partition_state(data)
        return PartitionState(
            st["leader"],
            st["leader_epoch"],
            list(replicas),
            st["isr"],
            st["controller_epoch"],
            stat.version,
        )

    async def _read_partition(self, name: str, p: int, replicas: list[int]) -> PartitionState:
        key = ("partition", name, p)
        path = paths.partition_state(name, p)
        try:
            data, stat = await self._watched(key, self.store.get, path)
        except NoNodeError:
            # watch for its creation (by the controller, or a slow creator)
            if await self._watched(key, self.store.exists, path) is not None:
                return await self._read_partition(name, p, replicas)
            return PartitionState(-1, -1, list(replicas), [], -1)
        return self._decode_state((data, stat), replicas)

    async def _read_config(self, name: str) -> dict[str, str]:
        key = ("config", name)
        try:
            data, _ = await self._watched(key, self.store.get, paths.topic_config(name))
        except NoNodeError:
            if await self._watched(key, self.store.exists, paths.topic_config(name)) is not None:
                return await self._read_config(name)
            return {}
        return paths.decode_topic_config(data)

    async def _refresh_partition(self, name: str, p: int) -> None:
        info = self.topics.get(name)
        if info is None or p not in info.partitions:
            await self._refresh_topic(name)
            return
        state = await self._read_partition(name, p, info.partitions[p].replicas)
        self.put_partition_state(name, p, state)

    async def _refresh_partitions(self, keys: list[tuple]) -> None:
        """Partition states whose watches fired, read together (store.get_many) and put in
        the cache one topic at a time (one TOPIC_CHANGED per topic, not per partition)."""
        known: list[tuple] = []
        for key in keys:
            info = self.topics.get(key[1])
            if info is None or key[2] not in info.partitions:
                await self._refresh_partition(key[1], key[2])  # (reads the topic)
            else:
                known.append(key)
        reads = await self._get_many_watched(
            known, [paths.partition_state(k[1], k[2]) for k in known]
        )
        by_topic: dict[str, dict[int, PartitionState]] = {}
        for key, got in zip(known, reads, strict=True):
            _, name, p = key
            info = self.topics.get(name)
            if info is None or p not in info.partitions:
                continue
            if got is None:
                await self._refresh_partition(name, p)  # (watches for its creation)
                continue
            try:
                state = self._decode_state(got, info.partitions[p].replicas)
            except (ValueError, KeyError, TypeError):
                log.warning("unreadable partition state %s-%d: %r", name, p, got[0])
                continue
            by_topic.setdefault(name, {})[p] = state
        for name, states in by_topic.items():
            self.put_partition_states(name, states)

    async def _refresh_config(self, name: str) -> None:
        configs = await self._read_config(name)
        info = self.topics.get(name)
        if info is not None:
            self._update_topic(dataclasses.replace(info, configs=configs))

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

    # ------------------------------------------------------------------ the writer interface
    # Local writes (admin.py, isr.py, the controller) put what they wrote into the cache at
    # once; the watches confirm it later, and a read that started before a write never puts
    # the older state back.

    def put_partition_state(self, name: str, p: int, state: PartitionState) -> None:
        """Put one partition's state into the cache (from a watch's re-read or a local write),
        unless the cache already holds a newer znode version.  Only leader, epochs and ISR are
        taken: the assignment (replicas, adding and removing replicas) is the topic znode's,
        cached by _refresh_topic and put_assignment."""
        self.put_partition_states(name, {p: state})

    def put_partition_states(self, name: str, states: dict[int, PartitionState]) -> None:
        """put_partition_state for several partitions of one topic: the topic is rebuilt
        and announced once (per partition, a topic of P partitions cost O(P) each)."""
        info = self.topics.get(name)
        if info is None:
            return
        partitions: dict[int, PartitionState] | None = None
        for p, state in states.items():
            cached = info.partitions.get(p)
            if cached is None or 0 <= state.zk_version < cached.zk_version:
                continue  # unknown, or an older read than what a local write put there
            new = dataclasses.replace(
                state,
                replicas=list(cached.replicas),
                adding_replicas=cached.adding_replicas,
                removing_replicas=cached.removing_replicas,
            )
            if new == cached and new.zk_version == cached.zk_version:
                continue
            if partitions is None:
                partitions = dict(info.partitions)
            partitions[p] = new
        if partitions is not None:
            # (changed: no comparison of the whole topic, which was O(partitions) per write)
            self._set_topic(dataclasses.replace(info, partitions=partitions))

    def put_topic(self, info: TopicInfo) -> None:
        """This broker created the topic or added partitions: cached at once, then read back
        once (which sets the watches on its znodes)."""
        self._local_gen += 1
        self._locally_written[info.name] = self._local_gen
        self._update_topic(info)
        self._mark(("topic", info.name))

    def drop_topic(self, name: str) -> None:
        """This broker deleted the topic."""
        self._local_gen += 1
        self._locally_written[name] = self._local_gen
        if name in self.topics:
            self._forget_topic(name)
            self._notify(ClusterEvent("TOPIC_DELETED", name))

    def put_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """This broker wrote the topic's config overrides: cached, then read back (which keeps
        its watch set)."""
        info = self.topics.get(name)
        if info is not None:
            self._update_topic(dataclasses.replace(info, configs=configs))
        self._mark(("config", name))

    def put_broker_configs(self, entity: str, configs: dict[str, str]) -> None:
        """This broker wrote the dynamic configs of ``entity``: applied at once when they are
        ones it applies ("<default>" or its own id)."""
        if entity in self._broker_entities():
            self._set_broker_config(entity, configs)

    def put_assignment(self, name: str, p: int, state: PartitionState, topic_version: int) -> None:
        """The controller wrote the topic znode (partition ``p``'s replicas, adding and removing
        replicas) at ``topic_version`` together with p's ``state``: both cached."""
        info = self.topics.get(name)
        if info is None or p not in info.partitions:
            return
        self._update_topic(
            dataclasses.replace(
                info,
                partitions={**info.partitions, p: state},
                assignment_version=max(topic_version, info.assignment_version),
            )
        )

    def _update_topic(self, info: TopicInfo) -> None:
        old = self.topics.get(info.name)
        if old != info or _zk_versions(old) != _zk_versions(info):
            self._set_topic(info)

    def _set_topic(self, info: TopicInfo) -> None:
        """``info`` differs from the cached topic: cached and announced."""
        old = self.topics.get(info.name)
        self.topics[info.name] = info
        if self._departed_leads:
            self._count_departed_leads(old, info)
        self._notify(ClusterEvent("TOPIC_CHANGED", info.name))

    def _forget_topic(self, name: str) -> None:
        old = self.topics.pop(name)
        if self._departed_leads:
            self._count_departed_leads(old, None)

    def _notify(self, event: ClusterEvent) -> None:
        """Announce ``event`` on the loop.  A TOPIC_CHANGED of a topic whose TOPIC_CHANGED is
        still undelivered is dropped: listeners read the topic as it is when they run, so one
        delivery covers every change before it (each partition state write, e.g. 600 ISR
        shrinks of one topic, cost each listener a look at the whole topic: O(P) per
        partition).  Any other event of the topic is delivered after the pending one, and a
        later change is announced again after it."""
        if self._loop is None:
            return
        if event.kind == "TOPIC_CHANGED":
            if event.topic in self._changed_pending:
                return
            self._changed_pending.add(event.topic)
        elif event.topic is not None:
            self._changed_pending.discard(event.topic)
        self._loop.call_soon(self._deliver, event, list(self._listeners))

    def _deliver(self, event: ClusterEvent, listeners: list[Listener]) -> None:
        if event.kind == "TOPIC_CHANGED":
            self._changed_pending.discard(event.topic)
        for cb in listeners:
            self._call_listener(cb, event)

    @staticmethod
    def _call_listener(cb: Listener, event: ClusterEvent) -> None:
        try:
            cb(event)
        except Exception:
            log.exception("cluster listener %r failed on %s", cb, event)
