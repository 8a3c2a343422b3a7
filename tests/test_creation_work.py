"""The work of creating a topic does not depend on how many partitions exist already (issue
27: W21's creation CPU per partition grew from 10,000 to 100,000 partitions because each
created topic scanned every cached partition state twice, for max.broker.partitions).  Counted,
not timed: the cached partition states a creation reads among the topics that exist."""

from __future__ import annotations

import asyncio
import dataclasses
import random

import pytest

from pybroker.coord.metadata.cluster import Cluster
from pybroker.coord.metadata.local import LocalStore
from pybroker.errors import ErrorCode, KafkaError


class CountingPartitions(dict):
    """A topic's partition states that count every state handed out by an iteration."""

    visits = 0

    def _count(self, it):
        for x in it:
            CountingPartitions.visits += 1
            yield x

    def __iter__(self):
        return self._count(super().__iter__())

    def keys(self):
        return self._count(super().keys())

    def values(self):
        return self._count(super().values())

    def items(self):
        return self._count(super().items())


def full_scan(c: Cluster) -> dict[int, int]:
    counts: dict[int, int] = {}
    for info in list(c.topics.values()):
        for st in dict.values(info.partitions):
            for b in st.replicas:
                counts[b] = counts.get(b, 0) + 1
    return counts


def watch_existing(c: Cluster) -> None:
    for name, info in list(c.topics.items()):
        c.topics[name] = dataclasses.replace(info, partitions=CountingPartitions(info.partitions))
    CountingPartitions.visits = 0


@pytest.mark.parametrize("existing", [5, 40])
def test_creating_a_topic_reads_none_of_the_existing_partition_states(tmp_path, existing):
    async def main():
        store = LocalStore(tmp_path)
        await store.start()
        c = Cluster(store, 1, [("PLAINTEXT", "127.0.0.1", 9092)], rng=random.Random(1))
        await c.start()
        try:
            for i in range(existing):
                await c.create_topic(f"old{i}", 20, 1)
            watch_existing(c)
            await c.create_topic("new", 20, 1)
            await c.create_partitions("new", 30)
            assert CountingPartitions.visits == 0
            assert c.replica_counts == full_scan(c) == {1: 20 * existing + 30}
        finally:
            await c.stop()
            await store.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_the_replica_tally_follows_deletions_and_still_enforces_the_limit(tmp_path):
    async def main():
        store = LocalStore(tmp_path)
        await store.start()
        c = Cluster(
            store,
            1,
            [("PLAINTEXT", "127.0.0.1", 9092)],
            rng=random.Random(1),
            max_broker_partitions=50,
        )
        await c.start()
        try:
            await c.create_topic("a", 30, 1)
            with pytest.raises(KafkaError) as ei:
                await c.create_topic("b", 21, 1)
            assert ei.value.code == ErrorCode.POLICY_VIOLATION
            await c.create_topic("b", 20, 1)
            assert c.replica_counts == full_scan(c) == {1: 50}
            await c.delete_topic("a")
            await asyncio.sleep(0.1)
            assert "a" not in c.topics
            assert c.replica_counts == full_scan(c) == {1: 20}
            await c.create_topic("c", 30, 1)  # room again after the deletion
            assert c.replica_counts == full_scan(c) == {1: 50}
        finally:
            await c.stop()
            await store.close()

    asyncio.run(asyncio.wait_for(main(), 60))
