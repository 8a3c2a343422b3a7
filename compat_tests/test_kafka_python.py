"""kafka-python 3.0 (producer, consumer with assign, admin) against a pybroker process."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import InvalidTopicError, TopicAlreadyExistsError

from pybroker.testing.client_helpers import (
    assign_consumer,
    create_topic,
    drain,
    read_all,
    unique_topic,
)
from pybroker.testing.cluster_harness import wait_for_partitions_everywhere

# tests share a broker per backend and overrides: each uses topics of its own (conftest.py)
pytestmark = [pytest.mark.timeout(120), pytest.mark.shared_broker]


@pytest.mark.parametrize("compression", [None, "gzip", "snappy", "lz4", "zstd"])
def test_producer_defaults_roundtrip(broker, compression):
    """Idempotent acks=all producer (the defaults); keys, values, headers, timestamps exact."""
    topic = unique_topic("kp")
    partitions = 3
    create_topic(broker.bootstrap, topic, partitions)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, compression_type=compression, linger_ms=5
    )
    assert producer.config["enable_idempotence"] and producer.config["acks"] in ("all", -1)
    base_ts = int(time.time() * 1000) - 60_000
    sent = []
    n = 600
    for i in range(n):
        key = None if i % 7 == 0 else f"key-{i}".encode()
        value = (f"value-{i}-" + "x" * (i % 50)).encode()
        if i % 11 == 5 and key is not None:
            value = None
        headers = [("h1", f"{i}".encode()), ("empty", b"")] if i % 3 else []
        p = i % partitions
        fut = producer.send(
            topic, key=key, value=value, headers=headers, partition=p, timestamp_ms=base_ts + i
        )
        sent.append((p, key, value, headers, base_ts + i, fut))
    producer.flush(timeout=30)
    metas = [s[-1].get(timeout=30) for s in sent]
    producer.close()
    print(f"[{broker.backend}/{compression}] produced and acknowledged {len(metas)} records")

    # offsets per partition dense from 0, in send order
    for p in range(partitions):
        offsets = [m.offset for s, m in zip(sent, metas, strict=True) if s[0] == p]
        assert offsets == list(range(len(offsets))), f"partition {p} offsets not dense"

    got = read_all(broker.bootstrap, topic, list(range(partitions)), n)
    total = sum(len(v) for v in got.values())
    print(f"[{broker.backend}/{compression}] consumed {total} records")
    assert total == n
    for p in range(partitions):
        expected = [s for s in sent if s[0] == p]
        records = got[p]
        assert [r.offset for r in records] == list(range(len(expected)))
        for (_, key, value, headers, ts, _), r in zip(expected, records, strict=True):
            assert r.key == key
            assert r.value == value
            assert list(r.headers) == headers
            assert r.timestamp == ts
            assert r.timestamp_type == 0  # CreateTime


@pytest.mark.multicore
def test_consumer_positioning(broker):
    """assign, seek, seek_to_beginning/end, position, beginning/end_offsets, offsets_for_times."""
    topic = unique_topic("pos")
    create_topic(broker.bootstrap, topic, 1)
    tp = TopicPartition(topic, 0)
    base_ts = int(time.time() * 1000) - 3_600_000
    n = 50
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=50)
    futs = [
        producer.send(topic, value=f"v{i}".encode(), partition=0, timestamp_ms=base_ts + 10 * i)
        for i in range(n)
    ]
    producer.flush(timeout=30)
    assert [f.get(timeout=10).offset for f in futs] == list(range(n))
    producer.close()

    consumer = assign_consumer(broker.bootstrap, topic, [0])
    try:
        assert consumer.assignment() == {tp}
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: n}

        consumer.seek(tp, 20)
        assert consumer.position(tp) == 20
        records = drain(consumer, n - 20)
        assert [r.offset for r in records] == list(range(20, n))
        assert [r.value for r in records] == [f"v{i}".encode() for i in range(20, n)]
        assert consumer.position(tp) == n

        consumer.seek_to_beginning(tp)
        assert consumer.position(tp) == 0
        consumer.seek_to_end(tp)
        assert consumer.position(tp) == n

        # offsets_for_times: the first record whose timestamp >= the query (Kafka's rule)
        found = consumer.offsets_for_times({tp: base_ts + 105})[tp]
        assert found is not None and (found.offset, found.timestamp) == (11, base_ts + 110)
        first = consumer.offsets_for_times({tp: 0})[tp]
        assert (first.offset, first.timestamp) == (0, base_ts)
        assert consumer.offsets_for_times({tp: base_ts + 10 * n + 1})[tp] is None
        print(f"[{broker.backend}] produced {n}, consumed {len(records)} after seek(20)")
    finally:
        consumer.close()


@pytest.mark.broker_overrides({"num.partitions": 3})
def test_auto_create_topic_uses_num_partitions(broker):
    topic = unique_topic("auto")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    meta = producer.send(topic, value=b"first").get(timeout=30)
    assert meta.topic == topic and meta.offset == 0
    assert producer.partitions_for(topic) == {0, 1, 2}
    for p in range(3):
        producer.send(topic, value=f"p{p}".encode(), partition=p)
    producer.flush(timeout=30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
    try:
        assert consumer.partitions_for_topic(topic) == {0, 1, 2}
    finally:
        consumer.close()
    got = read_all(broker.bootstrap, topic, [0, 1, 2], 4)
    print(f"[{broker.backend}] auto-created {topic} with 3 partitions; read back 4 records")
    assert sum(len(v) for v in got.values()) == 4


@pytest.mark.multicore
def test_create_topics_admin(broker):
    topic = unique_topic("admin")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics(
            {topic: {"num_partitions": 4, "replication_factor": 1}}, wait_for_metadata=True
        )
        # wait_for_metadata saw the topic at one broker; the others learn it a few ms later
        # (as in Kafka, whose own tests wait for every broker: waitForAllPartitionsMetadata)
        wait_for_partitions_everywhere(broker.host, broker.ports, topic, 4)
        assert topic in admin.list_topics()
        described = admin.describe_topics([topic])
        assert len(described[0]["partitions"]) == 4
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics({topic: {"num_partitions": 4, "replication_factor": 1}})
        with pytest.raises(InvalidTopicError):
            admin.create_topics({"bad topic name!": {"num_partitions": 1, "replication_factor": 1}})
        assert "bad topic name!" not in admin.list_topics()
    finally:
        admin.close()
    # the topic works
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for p in range(4):
        producer.send(topic, value=b"x", partition=p).get(timeout=30)
    producer.close()
