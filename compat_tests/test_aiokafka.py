"""aiokafka 0.14 producer and consumer (assign) against a pybroker process."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from pybroker.testing.client_helpers import create_topic, unique_topic

# tests share a broker per backend: each uses a topic of its own (conftest.py)
pytestmark = [pytest.mark.timeout(120), pytest.mark.shared_broker]


async def _roundtrip(bootstrap: str, topic: str, partitions: int, n: int, compression):
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", compression_type=compression, linger_ms=5
    )
    await producer.start()
    try:
        futs = []
        for i in range(n):
            futs.append(
                await producer.send(
                    topic,
                    key=f"k{i}".encode(),
                    value=f"v{i}".encode(),
                    partition=i % partitions,
                    headers=[("n", str(i).encode())],
                )
            )
        metas = await asyncio.gather(*futs)
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False
    )
    await consumer.start()
    got = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        await consumer.seek_to_beginning()
        end = await consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
        assert sum(end.values()) == n

        async def collect():
            while len(got) < n:
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    got.extend(records)

        await asyncio.wait_for(collect(), timeout=30)
    finally:
        await consumer.stop()
    return metas, got


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_aiokafka_roundtrip(broker, compression):
    topic = unique_topic("aio")
    partitions = 2
    create_topic(broker.bootstrap, topic, partitions)
    n = 200
    metas, got = asyncio.run(_roundtrip(broker.bootstrap, topic, partitions, n, compression))
    print(f"[{broker.backend}/{compression}] aiokafka produced {len(metas)}, consumed {len(got)}")
    assert len(metas) == n and len(got) == n
    for p in range(partitions):
        recs = [r for r in got if r.partition == p]
        idx = [i for i in range(n) if i % partitions == p]
        assert [r.offset for r in recs] == list(range(len(idx)))
        assert [(r.key, r.value) for r in recs] == [
            (f"k{i}".encode(), f"v{i}".encode()) for i in idx
        ]
        assert [list(r.headers) for r in recs] == [[("n", str(i).encode())] for i in idx]
