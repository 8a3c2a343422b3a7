"""Log compaction with a real client (issue 11): kafka-python writes 20,000 records over 500
keys, with tombstones, to a compacted topic small enough to be cleaned while it is written;
a consumer from offset 0 then sees exactly the latest value of each live key, in offset
order, with gaps."""

from __future__ import annotations

import random
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from compat_tests.helpers import assign_consumer, unique_topic

KEYS = 500
RECORDS = 20_000


def consume_all(bootstrap: str, topic: str, settle_s: float = 1.0) -> list:
    consumer = assign_consumer(bootstrap, topic, [0], auto_offset_reset="earliest")
    try:
        consumer.seek_to_beginning()
        got, idle_since = [], time.monotonic()
        while time.monotonic() - idle_since < settle_s:
            batch = consumer.poll(timeout_ms=300)
            for records in batch.values():
                got.extend(records)
                idle_since = time.monotonic()
        return got
    finally:
        consumer.close()


def consume_all_librdkafka(bootstrap: str, topic: str, settle_s: float = 1.5) -> list:
    """librdkafka (confluent-kafka) from offset 0: (offset, key, value) of every record."""
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
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < settle_s:
            msg = consumer.poll(0.3)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            got.append((msg.offset(), msg.key(), msg.value()))
            idle_since = time.monotonic()
    finally:
        consumer.close()
    return got


@pytest.mark.broker_overrides({"log.cleaner.backoff.ms": 100})
def test_kafka_python_compacted_topic(broker):
    topic = unique_topic("compact")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="compat-admin")
    try:
        admin.create_topics(
            [
                NewTopic(
                    topic,
                    1,
                    1,
                    topic_configs={
                        "cleanup.policy": "compact",
                        "segment.bytes": "8192",
                        "segment.ms": "1000",
                        "min.cleanable.dirty.ratio": "0.01",
                        "delete.retention.ms": "0",
                    },
                )
            ]
        )
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        text = repr(described)
        assert "cleanup.policy" in text and "compact" in text
    finally:
        admin.close()

    rng = random.Random(11)
    keys = [b"key-%03d" % i for i in range(KEYS)]
    dead = set(rng.sample(keys, KEYS // 10))
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, compression_type="gzip", linger_ms=5, batch_size=4000
    )  # idempotent by default
    latest: dict[bytes, bytes | None] = {}
    sent = 0
    for i in range(RECORDS - 1 - len(dead) - (KEYS - len(dead))):
        key = rng.choice(keys)
        value = None if rng.random() < 0.05 else b"value-%d" % i
        producer.send(topic, key=key, value=value, partition=0)
        latest[key] = value
        sent += 1
    for key in sorted(dead):  # the dead keys end with a tombstone
        producer.send(topic, key=key, value=None, partition=0)
        latest[key] = None
        sent += 1
    for key in keys:  # a last pass over the live keys spans several segments
        if key not in dead:
            value = b"final-%s-%s" % (key, rng.randbytes(64).hex().encode())  # no gzip gain
            producer.send(topic, key=key, value=value, partition=0)
            latest[key] = value
            sent += 1
    producer.flush()
    # the active segment is never cleaned: once segment.ms passed, one more record rolls it,
    # so that everything written so far can be cleaned
    time.sleep(1.5)
    producer.send(topic, key=b"roll", value=b"1", partition=0).get(timeout=30)
    latest[b"roll"] = b"1"
    sent += 1
    assert sent == RECORDS
    live = {k: v for k, v in latest.items() if v is not None}

    deadline = time.monotonic() + 90
    while True:
        got = consume_all(broker.bootstrap, topic)
        if len(got) == len(live) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    offsets = [r.offset for r in got]
    assert offsets == sorted(set(offsets))  # offset order, nothing twice
    assert {r.key: r.value for r in got} == live
    assert len(got) == len(live)
    assert offsets[0] > 0 and offsets[-1] == RECORDS - 1  # gaps; offsets never moved
    # librdkafka reads the same (gaps, rewritten and empty batches included)
    assert consume_all_librdkafka(broker.bootstrap, topic) == [
        (r.offset, r.key, r.value) for r in got
    ]

    # the idempotent producer carries on after the cleans (its state survived them)
    producer.send(topic, key=b"after", value=b"clean", partition=0).get(timeout=30)
    producer.close()
    after = consume_all(broker.bootstrap, topic)
    assert after[-1].key == b"after" and after[-1].offset == RECORDS


@pytest.mark.broker_overrides({"log.cleaner.backoff.ms": 20})
def test_kill9_while_cleaning_keeps_the_latest_values(broker):
    """kill -9 while the cleaner works on a topic being written: after each restart every
    acknowledged latest value is there, once, and offsets only ascend."""
    topic = unique_topic("kill")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="compat-admin")
    try:
        admin.create_topics(
            [
                NewTopic(
                    topic,
                    1,
                    1,
                    topic_configs={
                        "cleanup.policy": "compact",
                        "segment.bytes": "4096",
                        "min.cleanable.dirty.ratio": "0.01",
                    },
                )
            ]
        )
    finally:
        admin.close()
    keys = [b"k%03d" % i for i in range(200)]
    latest: dict[bytes, bytes] = {}
    for round_ in range(3):
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, batch_size=2000)
        for i in range(3000):
            key = keys[i % len(keys)]
            value = b"r%d-%d" % (round_, i)
            producer.send(topic, key=key, value=value, partition=0)
            latest[key] = value
        producer.flush()  # every record acknowledged (acks=all)
        producer.close()
        broker.kill9()  # the cleaner is busy with what was just written
        broker.restart()
        got = consume_all(broker.bootstrap, topic)
        offsets = [r.offset for r in got]
        assert offsets == sorted(set(offsets))
        final: dict[bytes, bytes] = {}
        for r in got:
            final[r.key] = r.value
        assert final == latest
    assert "cleaned " + topic in broker.output(max_lines=100_000)
