"""confluent-kafka (librdkafka, bundled in the wheel) against a pybroker process.

No consumer-group APIs are needed: the consumer uses assign() with explicit offsets and
enable.auto.commit=False (librdkafka still wants group.id in its config).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from pybroker.testing.client_helpers import create_topic, unique_topic

# tests share a broker per backend: each uses topics of its own (conftest.py)
pytestmark = [pytest.mark.timeout(120), pytest.mark.shared_broker]


def _produce(bootstrap, topic, partitions, n, **extra):
    conf = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "linger.ms": 5,
        "message.timeout.ms": 30000,
    }
    conf.update(extra)
    producer = Producer(conf)
    acked, errors = [], []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    sent = []
    for i in range(n):
        p = i % partitions
        key, value = f"k{i}".encode(), f"v{i}-".encode() + b"y" * (i % 40)
        producer.produce(
            topic,
            key=key,
            value=value,
            partition=p,
            headers=[("i", str(i).encode())],
            on_delivery=on_delivery,
        )
        sent.append((p, key, value, i))
        producer.poll(0)
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} messages not delivered"
    assert not errors, errors[:5]
    assert len(acked) == n
    return sent, acked


def _consume(bootstrap, topic, partitions, n, timeout=30.0):
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "compat-unused-group",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    got = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            got.append(msg)
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_idempotent_producer_and_assign_consumer(broker, compression):
    topic = unique_topic("ck")
    partitions = 3
    create_topic(broker.bootstrap, topic, partitions)
    n = 300
    sent, acked = _produce(
        broker.bootstrap, topic, partitions, n, **{"compression.type": compression}
    )
    print(f"[{broker.backend}/{compression}] confluent-kafka produced {len(acked)} acknowledged")
    for p in range(partitions):
        offsets = sorted(o for (pp, o, _, _) in acked if pp == p)
        assert offsets == list(range(len(offsets)))
    got = _consume(broker.bootstrap, topic, partitions, n)
    print(f"[{broker.backend}/{compression}] confluent-kafka consumed {len(got)}")
    assert len(got) == n
    for p in range(partitions):
        expected = [(k, v, i) for (pp, k, v, i) in sent if pp == p]
        msgs = [m for m in got if m.partition() == p]
        assert [m.offset() for m in msgs] == list(range(len(expected)))
        assert [(m.key(), m.value()) for m in msgs] == [(k, v) for k, v, _ in expected]
        assert [m.headers() for m in msgs] == [[("i", str(i).encode())] for _, _, i in expected]


@pytest.mark.multicore
def test_list_topics_metadata(broker):
    topic = unique_topic("meta")
    create_topic(broker.bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    md = producer.list_topics(timeout=10)
    assert md.cluster_id, "cluster_id must be set"
    ids = broker.broker_ids  # [0], or a multi-core node's brokers
    assert md.controller_id in ids
    assert sorted(md.brokers) == ids
    for k, i in enumerate(ids):
        assert md.brokers[i].host == "127.0.0.1" and md.brokers[i].port == broker.port + k
    t = md.topics[topic]
    assert t.error is None
    assert sorted(t.partitions) == [0, 1]
    for p in t.partitions.values():
        assert p.leader in ids and p.replicas == [p.leader] and p.isrs == [p.leader]
    one = producer.list_topics(topic, timeout=10)
    assert topic in one.topics
    print(f"[{broker.backend}] list_topics: {len(md.topics)} topics, {topic} has 2 partitions")


def test_log_append_time_topic(broker):
    """message.timestamp.type=LogAppendTime: librdkafka reports TIMESTAMP_LOG_APPEND_TIME with
    the broker's append time, both in the delivery report and on the consumed message."""
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = unique_topic("cklat")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    fut = admin.create_topics(
        [NewTopic(topic, 1, 1, config={"message.timestamp.type": "LogAppendTime"})]
    )[topic]
    fut.result(30)
    old = 1_000_000
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    reports = []
    start = int(time.time() * 1000)
    for i in range(3):
        producer.produce(
            topic, value=b"v%d" % i, timestamp=old, on_delivery=lambda e, m: reports.append((e, m))
        )
    assert producer.flush(30) == 0
    assert [e for e, _ in reports] == [None] * 3
    kinds = {m.timestamp()[0] for _, m in reports}
    assert kinds == {TIMESTAMP_LOG_APPEND_TIME}
    got = _consume(broker.bootstrap, topic, 1, 3)
    assert [m.value() for m in got] == [b"v0", b"v1", b"v2"]
    for m in got:
        kind, ts = m.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME
        assert ts >= start - 5000 and ts != old


@pytest.mark.parametrize("topic_codec", ["gzip", "uncompressed"])
def test_topic_compression_type(broker, topic_codec):
    """compression.type on the topic: a confluent-kafka producer writing lz4 still reads back
    every record (the broker stored them in the topic's codec), checked by DescribeConfigs."""
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    topic = unique_topic("ckcodec")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"compression.type": topic_codec})])[
        topic
    ].result(30)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([res])[res].result(30)
    assert configs["compression.type"].value == topic_codec
    sent, acked = _produce(broker.bootstrap, topic, 1, 50, **{"compression.type": "lz4"})
    got = _consume(broker.bootstrap, topic, 1, 50)
    assert [(m.key(), m.value()) for m in got] == [(k, v) for _, k, v, _ in sent]
    assert [m.offset() for m in got] == list(range(50))
