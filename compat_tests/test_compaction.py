"""Log compaction with real clients (issue 11): kafka-python or confluent-kafka (idempotent,
gzip) writes 100,000 records over 1,000 keys, with tombstones, to a compacted topic small
enough to be cleaned while it is written; consumers from offset 0 (kafka-python and
librdkafka) then see exactly the latest value of each live key, in offset order, with gaps,
and the producer carries on after the cleans."""

from __future__ import annotations

import random
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from pybroker.testing.client_helpers import (
    assign_consumer,
    poll_to_end,
    read_to_end,
    unique_topic,
)

KEYS = 1_000
RECORDS = 100_000


def consume_all(bootstrap: str, topic: str, settle_s: float = 1.0) -> list:
    consumer = assign_consumer(bootstrap, topic, [0], auto_offset_reset="earliest")
    try:
        consumer.seek_to_beginning()
        return read_to_end(consumer, settle_s)
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
            "enable.partition.eof": True,  # the end: no need to wait settle_s after it
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got = poll_to_end(consumer, settle_s, 0.3)
    finally:
        consumer.close()
    return [(msg.offset(), msg.key(), msg.value()) for msg in got]


class Writer:
    """One idempotent gzip producer, kafka-python's or librdkafka's, all to partition 0."""

    def __init__(self, kind: str, bootstrap: str, topic: str) -> None:
        self.kind, self.topic = kind, topic
        self.errors: list[str] = []
        if kind == "kafka-python":  # idempotent by default
            self.p = KafkaProducer(
                bootstrap_servers=bootstrap, compression_type="gzip", linger_ms=5, batch_size=4000
            )
        else:
            self.p = Producer(
                {
                    "bootstrap.servers": bootstrap,
                    "enable.idempotence": True,
                    "compression.type": "gzip",
                    "linger.ms": 5,
                    "batch.size": 4000,
                }
            )

    def _delivered(self, err, _msg) -> None:  # noqa: ANN001
        if err is not None:
            self.errors.append(str(err))

    def send(self, key: bytes, value: bytes | None) -> None:
        if self.kind == "kafka-python":
            self.p.send(self.topic, key=key, value=value, partition=0)
            return
        while True:
            try:
                self.p.produce(self.topic, value, key, partition=0, on_delivery=self._delivered)
                break
            except BufferError:
                self.p.poll(0.05)
        self.p.poll(0)

    def flush(self) -> None:
        if self.kind == "kafka-python":
            self.p.flush()
        else:
            assert self.p.flush(60) == 0
        assert not self.errors, self.errors[:3]

    def close(self) -> None:
        if self.kind == "kafka-python":
            self.p.close()


@pytest.mark.broker_overrides({"log.cleaner.backoff.ms": 100})
@pytest.mark.parametrize("writer", ["kafka-python", "confluent-kafka"])
def test_compacted_topic_written_by(broker, writer):
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
    keys = [b"key-%04d" % i for i in range(KEYS)]
    dead = set(rng.sample(keys, KEYS // 10))
    producer = Writer(writer, broker.bootstrap, topic)
    latest: dict[bytes, bytes | None] = {}
    sent = 0
    for i in range(RECORDS - 1 - len(dead) - (KEYS - len(dead))):
        key = rng.choice(keys)
        value = None if rng.random() < 0.05 else b"value-%d" % i
        producer.send(key, value)
        latest[key] = value
        sent += 1
    for key in sorted(dead):  # the dead keys end with a tombstone
        producer.send(key, None)
        latest[key] = None
        sent += 1
    for key in keys:  # a last pass over the live keys spans several segments
        if key not in dead:
            value = b"final-%s-%s" % (key, rng.randbytes(64).hex().encode())  # no gzip gain
            producer.send(key, value)
            latest[key] = value
            sent += 1
    producer.flush()
    # the active segment is never cleaned: once segment.ms passed, one more record rolls it,
    # so that everything written so far can be cleaned
    time.sleep(1.5)
    producer.send(b"roll", b"1")
    producer.flush()
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
    producer.send(b"after", b"clean")
    producer.flush()
    producer.close()
    after = consume_all(broker.bootstrap, topic)
    assert after[-1].key == b"after" and after[-1].offset == RECORDS


# one backend (CI time): the cleaner's recovery is the log's; a broker killed -9 mid-clean and
# restarted on ZooKeeper is test_cleaner_crash::test_kill9_of_the_broker_mid_clean[zookeeper]
@pytest.mark.parametrize("backend", ["embedded"], indirect=True)
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
    # the broker cleans in the background: wait for it (a deadline, not one look)
    deadline = time.monotonic() + 60
    while "cleaned " + topic not in broker.output(max_lines=100_000):
        assert time.monotonic() < deadline, broker.output()
        time.sleep(0.2)
