"""The controller pushes the states it writes to the other live brokers (coord/controller/
channel.py, coord/metadata/pushed_states.py; Kafka's LeaderAndIsr/UpdateMetadata): a broker
learns the controller's elections from the push, without the read-back of the changed state
znodes, and a pushed state never replaces a newer cached one."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

from async_wait import wait_until

from pybroker.coord.controller.controller import Controller
from pybroker.coord.metadata import paths
from pybroker.coord.metadata.cluster import Cluster
from pybroker.coord.metadata.local import LocalStore
from pybroker.coord.metadata.model import PartitionState, TopicInfo
from pybroker.coord.metadata.pushed_states import apply_pushed
from pybroker.coord.metadata.zk import ZooKeeperStore

TOPIC_ID = uuid.UUID(int=7)


class _Cache:
    def __init__(self, states: dict[int, PartitionState]) -> None:
        self.topics = {"t": TopicInfo("t", TOPIC_ID, dict(states), {})}

    def put_partition_states(self, name: str, states: dict[int, PartitionState]) -> None:
        info = self.topics[name]
        self.topics[name] = TopicInfo(name, info.topic_id, {**info.partitions, **states}, {})


def _pushed(p: int, leader: int, isr: list[int], zk_version: int, topic_id=TOPIC_ID):
    return ("t", str(topic_id), p, leader, 5, isr, zk_version)


@contextlib.asynccontextmanager
async def _three_brokers(tmp_path) -> AsyncIterator[tuple[LocalStore, dict[int, Cluster]]]:
    """Brokers 1, 2 and 3 on one embedded store, each seeing the others; 1 the controller."""
    store = LocalStore(tmp_path / "meta")
    await store.start()
    clusters: dict[int, Cluster] = {}
    try:
        for bid in (1, 2, 3):
            endpoints = [("PLAINTEXT", "127.0.0.1", 9090 + bid)]
            clusters[bid] = Cluster(store, bid, endpoints, controller=Controller)
            await clusters[bid].start()
        await wait_until(lambda: set(clusters[1].brokers) == {1, 2, 3}, what="brokers seen")
        yield store, clusters
    finally:
        for c in clusters.values():
            await c.stop()
        await store.close()


async def _created_at_version_zero(c: Cluster, n: int) -> None:
    await c.create_topic("t", n, 3, assignments={p: [2, 3, 1] for p in range(n)})
    await wait_until(
        lambda: (
            "t" in c.topics and all(s.zk_version == 0 for s in c.topics["t"].partitions.values())
        ),
        what="created",
    )


def _count_multis(store: LocalStore) -> list[list[str]]:
    """Record the partition-state paths of every multi ``store`` sends from now on."""
    multis: list[list[str]] = []
    real_multi = store.multi

    async def counting_multi(ops):
        states = [op.path for op in ops if "/partitions/" in op.path]
        if states:
            multis.append(states)
        return await real_multi(ops)

    store.multi = counting_multi
    return multis


async def _wait_led_by(store: LocalStore, n: int, leader: int) -> None:
    for p in range(n):
        for _ in range(400):
            data, _ = await store.get(paths.partition_state("t", p))
            if paths.decode_partition_state(data)["leader"] == leader:
                break
            await asyncio.sleep(0.05)
        assert paths.decode_partition_state(data)["leader"] == leader, p


async def _shut_down_2_counting_multis(store: LocalStore, n: int) -> list[list[str]]:
    """Broker 2's controlled shutdown; once broker 3 leads all ``n`` partitions, the
    partition-state paths of each multi sent meanwhile."""
    multis = _count_multis(store)
    try:
        await store.create(paths.controlled_shutdown(2), b"{}", ephemeral=True, makepath=True)
        await _wait_led_by(store, n, 3)
    finally:
        del store.multi
    return multis


def test_a_pushed_state_older_than_the_cached_one_is_ignored():
    cached = PartitionState(2, 4, [1, 2, 3], [2, 3], 1, zk_version=9)
    cache = _Cache({0: cached, 1: cached, 2: cached, 3: cached})
    states = [
        _pushed(0, 1, [1], 8),  # older than the cache's (the read-back was first)
        _pushed(1, 1, [1], 9),  # the state the cache holds
        _pushed(2, 1, [1], 12, topic_id=uuid.UUID(int=8)),  # a deleted namesake's
        _pushed(3, 3, [3, 2], 10),  # newer: taken
        _pushed(4, 3, [3], 10),  # a partition this cache does not know (yet)
    ]
    assert apply_pushed(cache, 6, states) == 1
    parts = cache.topics["t"].partitions
    assert [parts[p] for p in (0, 1, 2)] == [cached] * 3
    assert [parts[p].zk_version for p in (0, 1, 2)] == [9, 9, 9]
    assert parts[3] == PartitionState(3, 5, [1, 2, 3], [3, 2], 6)  # replicas: the cache's
    assert parts[3].zk_version == 10
    assert 4 not in parts


def test_brokers_learn_a_controlled_shutdowns_elections_from_the_push(zk_server):
    """Brokers 2 and 3 read back no partition state: broker 2's controlled shutdown still
    shows in both caches (every leadership moved, 2 in no ISR, at the znodes' versions), from
    the controller's pushes, which are deleted once read; a stale push changes nothing."""

    async def main():
        connect = f"{zk_server.connect}/t-{uuid.uuid4().hex[:12]}"
        stores, clusters = {}, {}
        try:
            for bid in (1, 2, 3):
                stores[bid] = ZooKeeperStore(connect, 6000, connect_timeout_s=10)
                await stores[bid].start()
                endpoints = [("PLAINTEXT", "127.0.0.1", 9090 + bid)]
                clusters[bid] = Cluster(stores[bid], bid, endpoints, controller=Controller)
                await clusters[bid].start()
            c1, c2, c3 = clusters[1], clusters[2], clusters[3]
            for c in clusters.values():
                await wait_until(lambda c=c: set(c.brokers) == {1, 2, 3}, what="brokers seen")
            assert c1.is_controller
            n = 60
            rotate = {p: [1 + (p + i) % 3 for i in range(3)] for p in range(n)}
            await c1.create_topic("t", n, 3, assignments=rotate)

            def settled(c: Cluster, pred) -> bool:
                info = c.topics.get("t")
                return (
                    info is not None
                    and len(info.partitions) == n
                    and all(pred(st) for st in info.partitions.values())
                )

            for c in clusters.values():
                await wait_until(
                    lambda c=c: settled(c, lambda s: s.leader == s.replicas[0]), what="created"
                )

            async def no_read_back(keys):
                return None

            for c in (c2, c3):
                c._refresh_partitions = no_read_back
            await stores[2].create(
                paths.controlled_shutdown(2), b"{}", ephemeral=True, makepath=True
            )

            def handed_over(s: PartitionState) -> bool:
                return s.leader in (1, 3) and 2 not in s.isr

            for c in clusters.values():
                await wait_until(lambda c=c: settled(c, handed_over), what=f"{c.broker_id}")
            assert c2.pushed_states.applied and c3.pushed_states.applied
            for p, st in c3.topics["t"].partitions.items():
                data, stat = await stores[1].get(paths.partition_state("t", p))
                stored = paths.decode_partition_state(data)
                assert (st.leader, st.leader_epoch, st.isr) == (
                    stored["leader"],
                    stored["leader_epoch"],
                    stored["isr"],
                )
                assert st.zk_version == stat.version
            assert c1.controller.pushes.pushed
            await wait_until(lambda: not c1.controller.pushes._tasks, what="pushes made")
            for bid in (2, 3):  # every push read is deleted
                for _ in range(200):
                    if not await stores[1].get_children(paths.leader_and_isr(bid)):
                        break
                    await asyncio.sleep(0.05)
                assert await stores[1].get_children(paths.leader_and_isr(bid)) == []
            # a push of the states before the hand-over (older versions) changes nothing
            before = dict(c3.topics["t"].partitions)
            topic_id = str(c3.topics["t"].topic_id)
            stale = [("t", topic_id, p, 2, 0, [2, 1, 3], 0) for p in range(n)]
            assert apply_pushed(c3, 1, stale) == 0
            assert c3.topics["t"].partitions == before
        finally:
            for bid, c in clusters.items():
                await c.stop()
                await stores[bid].close()

    asyncio.run(asyncio.wait_for(main(), 90))


def test_a_push_to_a_broker_not_watching_does_not_stop_the_election(tmp_path):
    """The controller believes broker 9 reads pushes (its parent node is gone): the
    election's multi fails on that push, is sent again without the pushes, and lands."""

    async def main():
        async with _three_brokers(tmp_path) as (store, clusters):
            c1 = clusters[1]
            await c1.create_topic("t", 4, 3, assignments={p: [2, 3, 1] for p in range(4)})
            await wait_until(
                lambda: len(c1.topics.get("t", TopicInfo("t", TOPIC_ID, {}, {})).partitions) == 4
            )
            pushes = c1.controller.pushes
            await pushes.watching([2, 3])
            pushes._watching.add(9)
            real = c1.controller.pushes.watching

            async def also_nine(brokers):
                return sorted(
                    {*await real(brokers), 9} if pushes._watching else await real(brokers)
                )

            pushes.watching = also_nine
            await store.create(paths.controlled_shutdown(2), b"{}", ephemeral=True, makepath=True)
            await wait_until(
                lambda: all(s.leader == 3 for s in c1.topics["t"].partitions.values()),
                what="moved",
            )
            await _wait_led_by(store, 4, 3)
            assert 9 not in pushes._watching  # forgotten: checked again next time

    asyncio.run(asyncio.wait_for(main(), 60))


def test_elections_on_a_lagging_cache_cost_no_round_trip_per_stale_state(tmp_path):
    """The controller's cache lags behind 30 ISR writes (its read-back held back): the
    elections of a controlled shutdown fail their compare-and-set on those states, and the
    controller reads the rest of the multi's versions once rather than sending the multi again
    once per stale state (a round trip each); every election lands."""

    async def main():
        async with _three_brokers(tmp_path) as (store, clusters):
            c1, n = clusters[1], 60
            await _created_at_version_zero(c1, n)

            async def no_read_back(keys):
                return None

            async def no_read_back_of(*args):
                return None

            await asyncio.sleep(0.5)  # (the topic's read-back after its creation)
            c1._refresh_partitions, c1._refresh_partition = no_read_back, no_read_back_of
            c1._refresh_topic = no_read_back_of
            for p in range(0, n, 2):  # the leader's ISR writes, unseen by the controller
                path = paths.partition_state("t", p)
                await store.set(path, paths.encode_partition_state(2, 0, [2, 3, 1], 1), 0)
            multis = await _shut_down_2_counting_multis(store, n)
            # the first multi, once more without the stale states, then the stale ones read
            # and decided again: not one multi per stale state
            assert len(multis[0]) == n and len(multis) <= 4, [len(m) for m in multis]

    asyncio.run(asyncio.wait_for(main(), 60))


def test_states_whose_read_back_is_pending_are_read_before_the_elections(tmp_path):
    """The controller's cache knows 30 of its states are older than the store's (their
    watches fired, the read-back has not run): a controlled shutdown's elections read those
    first and land in one multi, none losing its compare-and-set."""

    async def main():
        async with _three_brokers(tmp_path) as (store, clusters):
            c1, n = clusters[1], 60
            await _created_at_version_zero(c1, n)
            await asyncio.sleep(0.5)  # (the topic's read-back after its creation)
            await c1._stop_sync()  # marked states stay marked
            for p in range(0, n, 2):  # the leader's ISR writes, not read back yet
                path = paths.partition_state("t", p)
                await store.set(path, paths.encode_partition_state(2, 0, [2, 3, 1], 1), 0)
            await wait_until(lambda: c1.awaiting_read_back("t", n - 2), what="watch fired")
            multis = await _shut_down_2_counting_multis(store, n)
            assert [len(m) for m in multis] == [n]

    asyncio.run(asyncio.wait_for(main(), 60))
