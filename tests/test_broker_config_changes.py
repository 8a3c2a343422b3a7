"""Dynamic broker configs between brokers (coord/metadata/cache.py + config_changes.py): a change
written through one broker's Cluster reaches the others through /config/changes, on the
embedded store (two Clusters sharing it) and on ZooKeeper (two sessions); expired
notifications are purged; topic config changes write notifications too."""

from __future__ import annotations

import asyncio

from async_wait import wait_until

from pybroker.clock import ManualClock
from pybroker.coord.metadata import config_changes, paths
from pybroker.coord.metadata.cluster import Cluster
from pybroker.coord.metadata.local import LocalStore
from pybroker.coord.metadata.model import ClusterEvent
from pybroker.coord.metadata.zk import ZooKeeperStore


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60), debug=True)


def endpoints(port: int) -> list[tuple[str, str, int]]:
    return [("PLAINTEXT", "127.0.0.1", port)]


async def exchange(store1, store2, clock=None) -> None:
    kw = {"clock": clock} if clock else {}
    c1 = Cluster(store1, 1, endpoints(9091), **kw)
    c2 = Cluster(store2, 2, endpoints(9092), **kw)
    await c1.start()
    await c2.start()
    events: list[ClusterEvent] = []
    c2.add_listener(events.append)
    try:
        await c1.alter_broker_configs("<default>", lambda c: {**c, "message.max.bytes": "7"})
        await c1.alter_broker_configs("2", lambda c: {**c, "log.retention.ms": "5"})
        await c1.alter_broker_configs("1", lambda c: {**c, "log.retention.ms": "6"})
        await wait_until(lambda: c2.broker_configs.get("2") == {"log.retention.ms": "5"})
        await wait_until(lambda: c2.broker_configs.get("<default>") == {"message.max.bytes": "7"})
        assert "1" not in c2.broker_configs  # another broker's entity is not ours
        assert c1.broker_configs["1"] == {"log.retention.ms": "6"}
        await wait_until(lambda: ClusterEvent("BROKER_CONFIG_CHANGED", "2") in events)
        # deleting a value: the entity's new set reaches the other broker as well
        await c1.alter_broker_configs("<default>", lambda c: {})
        await wait_until(lambda: c2.broker_configs.get("<default>") == {})
        # another entity type reaches listeners by its path
        await c1.store.create(
            paths.config_change(), paths.encode_config_change("clients/app"), sequence=True
        )
        await wait_until(lambda: ClusterEvent("ENTITY_CONFIG_CHANGED", "clients/app") in events)
        # a broker started later reads the entities whole
        c3 = Cluster(store2, 3, endpoints(9093), **kw)
        await c1.alter_broker_configs("3", lambda c: {"min.insync.replicas": "2"})
        await c3.start()
        try:
            assert c3.broker_configs["3"] == {"min.insync.replicas": "2"}
        finally:
            await c3.stop()
    finally:
        await c2.stop()
        await c1.stop()


def test_changes_reach_other_brokers_embedded(tmp_path):
    async def main():
        store = LocalStore(tmp_path)
        await store.start()
        try:
            await exchange(store, store)
        finally:
            await store.close()

    run(main())


def test_changes_reach_other_brokers_zookeeper(zk_connect):
    async def main():
        s1 = ZooKeeperStore(zk_connect, 6000, connect_timeout_s=10)
        s2 = ZooKeeperStore(zk_connect, 6000, connect_timeout_s=10)
        await s1.start()
        await s2.start()
        try:
            await exchange(s1, s2)
            data, _ = await s1.get("/config/brokers/<default>")
            assert data == b'{"version":1,"config":{}}'
        finally:
            await s2.close()
            await s1.close()

    run(main())


def test_expired_notifications_are_purged_and_topic_changes_notify(tmp_path):
    async def main():
        clock = ManualClock()
        store = LocalStore(tmp_path, clock=clock)
        await store.start()
        c = Cluster(store, 1, endpoints(9091), clock)
        await c.start()
        try:
            await c.create_topic("t", 1, 1, {})
            await c.alter_topic_configs("t", {"retention.ms": "1000"})
            notes = await store.get_children(paths.CONFIG_CHANGES)
            data, _ = await store.get(f"{paths.CONFIG_CHANGES}/{notes[-1]}")
            assert paths.decode_config_change(data) == "topics/t"
            clock.advance(config_changes.CHANGE_EXPIRATION_MS + 1)
            await c.alter_broker_configs("<default>", lambda cur: {"message.max.bytes": "9"})
            await wait_until(lambda: len(c._changes.ctimes) == 1)
            left = await store.get_children(paths.CONFIG_CHANGES)
            assert len(left) == 1 and left[0] not in notes
        finally:
            await c.stop()
            await store.close()

    run(main())
