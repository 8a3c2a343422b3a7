"""The metadata cache: brokers, topics with their partitions' states and configs, the
controller's id and epoch, and the dynamic broker configs this broker applies, kept current by
watches on the metadata store.  This module holds the partition-state table (topics, their
partition states and configs) and its updates; the broker set, the departed leaders and the
dynamic broker configs are its base (broker_set.py), the watches and the one task that re-reads
what they mark dirty the base of that (cache_sync.py).

Listeners (``add_listener``) get a :class:`ClusterEvent` on the loop whenever the broker set,
the controller or a topic changes; the broker uses it to create the partition logs it leads.
``PartitionState.zk_version`` is the state znode's version last seen, and the cache never goes
back to an older version than a local write put there (the writer interface below).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from typing import Any

from pybroker.clock import Clock
from pybroker.coord.metadata import paths
from pybroker.coord.metadata.broker_set import BrokerSet
from pybroker.coord.metadata.cache_sync import PARTITION_BATCH
from pybroker.coord.metadata.model import ClusterEvent, PartitionState, TopicInfo
from pybroker.coord.metadata.store import MetadataStore, NoNodeError

log = logging.getLogger(__name__)

# topics read together at start (their znodes, then all their partition states, then configs)
TOPIC_BATCH = 200

__all__ = ["PARTITION_BATCH", "TOPIC_BATCH", "MetadataCache"]


def _zk_versions(info: TopicInfo | None) -> dict[int, int] | None:
    return None if info is None else {p: s.zk_version for p, s in info.partitions.items()}


class MetadataCache(BrokerSet):
    def __init__(self, store: MetadataStore, broker_id: int, clock: Clock) -> None:
        super().__init__(store, broker_id, clock)
        self.cluster_id: str = ""
        self.controller_id: int = -1
        self.controller_epoch: int = 0
        self.topics: dict[str, TopicInfo] = {}
        # partition replicas per broker id over every cached topic, kept in step with
        # ``topics`` by _set_topic and _forget_topic (ClusterAdmin's max.broker.partitions
        # checks read it per created topic: a scan of every partition there made the creation
        # of n partitions cost O(n^2), docs/scale.md)
        self.replica_counts: dict[int, int] = {}
        self._local_gen = 0  # bumped by local topic writes (see _refresh_topics)
        self._locally_written: dict[str, int] = {}

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
        self._count_replicas(old, info)
        if self._departed_leads:
            self._count_departed_leads(old, info)
        self._notify(ClusterEvent("TOPIC_CHANGED", info.name))

    def _forget_topic(self, name: str) -> None:
        old = self.topics.pop(name)
        self._count_replicas(old, None)
        if self._departed_leads:
            self._count_departed_leads(old, None)

    def _count_replicas(self, old: TopicInfo | None, new: TopicInfo | None) -> None:
        """``replica_counts`` after a topic changed or went: O(its partitions), not O(all)."""
        counts = self.replica_counts
        for info, sign in ((old, -1), (new, 1)):
            if info is not None:
                for st in info.partitions.values():
                    for b in st.replicas:
                        counts[b] = counts.get(b, 0) + sign
        for b in [b for b, n in counts.items() if n <= 0]:
            del counts[b]
