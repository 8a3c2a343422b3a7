"""The two storages of committed offsets and transaction state (offsets.storage,
transaction.state.storage), seen from outside (issue 28).

* With ``kafka``: __consumer_offsets and __transaction_state hold Kafka's records, so Kafka's
  own tools read them: kafka-console-consumer 3.9 with Kafka's formatters
  (GroupMetadataManager$OffsetsMessageFormatter, TransactionLog$TransactionLogMessageFormatter)
  prints the group's commits and the transaction as Kafka would; Metadata lists both topics as
  internal, and a client cannot produce to them (INVALID_TOPIC_EXCEPTION).
* Switching a broker's storage, with restarts (zookeeper -> kafka -> zookeeper), keeps every
  committed offset: each storage takes over what the other one holds (docs/operations.md).
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from pybroker.testing import java
from pybroker.testing.client_helpers import create_topic, storage_overrides, unique_topic

pytestmark = pytest.mark.timeout(300)

CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
OFFSETS_FORMATTER = "kafka.coordinator.group.GroupMetadataManager$OffsetsMessageFormatter"
TXN_FORMATTER = "kafka.coordinator.transaction.TransactionLog$TransactionLogMessageFormatter"


def _commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], tuple[int, str]]) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = [TopicPartition(t, p, o, metadata=m) for (t, p), (o, m) in offsets.items()]
        c.commit(offsets=tps, asynchronous=False)
    finally:
        c.close()


def _committed(bootstrap: str, group: str, tps: list[tuple[str, int]]) -> dict:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(t, p) for t, p in tps], timeout=30)
    finally:
        c.close()
    return {(tp.topic, tp.partition): tp.offset for tp in got}


def _console(bootstrap: str, topic: str, formatter: str) -> list[str]:
    """The records of the internal topic, formatted by Kafka.  On this fresh broker one
    partition holds records (the one group's commits, the one transaction); the tool reads
    it alone (assigned: it joins no group, so it writes nothing to __consumer_offsets itself)
    and exits once it printed as many records as the partition held when asked (every record
    the assertions look for was written before: the commits, the transaction's Ongoing and
    PrepareCommit); --timeout-ms ends it only when fewer come."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        c.topics()  # (every topic's metadata, the internal ones included)
        tps = [KafkaTopicPartition(topic, p) for p in c.partitions_for_topic(topic) or ()]
        held = {tp.partition: end for tp, end in c.end_offsets(tps).items() if end > 0}
    finally:
        c.close()
    assert len(held) == 1, held
    ((partition, end),) = held.items()
    args = ["--bootstrap-server", bootstrap, "--topic", topic, "--partition", str(partition)]
    args += ["--offset", "earliest", "--max-messages", str(end)]
    args += ["--formatter", formatter, "--timeout-ms", "8000"]
    args += ["--consumer-property", "exclude.internal.topics=false"]
    result = java.run_main(CONSOLE_CONSUMER, args, timeout=120)
    assert not result.timed_out, result.stderr[-2000:]
    return result.stdout.splitlines()


@pytest.mark.skipif(not java.java_available(), reason="java not found (OpenJDK 17 expected)")
@pytest.mark.broker_overrides(storage_overrides("kafka"))
def test_kafkas_formatters_read_the_internal_topics(broker):
    with java.deps_or_fail():
        java.classpath()
    topic = unique_topic("fmt")
    create_topic(broker.bootstrap, topic, 2)
    group, tid = f"fmt-{uuid.uuid4().hex[:6]}", f"fmt-tx-{uuid.uuid4().hex[:6]}"
    _commit(broker.bootstrap, group, {(topic, 0): (42, "hello"), (topic, 1): (7, "")})
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"v", partition=0)
    p.commit_transaction(30)

    lines = _console(broker.bootstrap, "__consumer_offsets", OFFSETS_FORMATTER)
    ours = [line for line in lines if line.startswith(f"[{group},")]
    assert any(
        line.startswith(f"[{group},{topic},0]::OffsetAndMetadata(offset=42,")
        and "metadata=hello" in line
        for line in ours
    ), lines
    assert any(
        line.startswith(f"[{group},{topic},1]::OffsetAndMetadata(offset=7,") for line in ours
    )

    lines = _console(broker.bootstrap, "__transaction_state", TXN_FORMATTER)
    ours = [line for line in lines if line.startswith(f"{tid}::")]
    assert any("state=Ongoing" in line for line in ours), lines
    assert any("state=PrepareCommit" in line for line in ours), lines

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        described = admin.describe_topics(["__consumer_offsets", "__transaction_state", topic])
    finally:
        admin.close()
    internal = {d.get("topic", d.get("name")): d["is_internal"] for d in described}
    assert internal == {"__consumer_offsets": True, "__transaction_state": True, topic: False}

    errors = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 20000})
    producer.produce(
        "__consumer_offsets", b"x", partition=0, on_delivery=lambda e, m: errors.append(e)
    )
    producer.flush(30)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_EXCEPTION], errors


def test_switching_the_storage_keeps_every_committed_offset(start_broker):
    """zookeeper -> kafka -> zookeeper on one broker, a restart each time: the offsets of a
    group committed with one storage are the group's with the next, and commits made with the
    second storage win over the older ones the first still had."""
    b = start_broker()
    topic = unique_topic("switch")
    create_topic(b.bootstrap, topic, 3)
    tps = [(topic, p) for p in range(3)]
    g1, g2 = f"sw1-{uuid.uuid4().hex[:6]}", f"sw2-{uuid.uuid4().hex[:6]}"
    _commit(b.bootstrap, g1, {(topic, p): (10 + p, "z") for p in range(3)})
    _commit(b.bootstrap, g2, {(topic, 0): (5, "")})

    b.overrides.update({k: str(v) for k, v in storage_overrides("kafka").items()})
    b.restart()
    assert _committed(b.bootstrap, g1, tps) == {(topic, p): 10 + p for p in range(3)}
    assert _committed(b.bootstrap, g2, tps)[(topic, 0)] == 5
    _commit(b.bootstrap, g1, {(topic, 1): (111, "k")})

    for key in storage_overrides("kafka"):
        b.overrides.pop(key)
    b.restart()
    assert _committed(b.bootstrap, g1, tps) == {(topic, 0): 10, (topic, 1): 111, (topic, 2): 12}
    assert _committed(b.bootstrap, g2, tps)[(topic, 0)] == 5
    _commit(b.bootstrap, g2, {(topic, 0): (6, "")})

    b.overrides.update({k: str(v) for k, v in storage_overrides("kafka").items()})
    b.restart()
    assert _committed(b.bootstrap, g1, tps) == {(topic, 0): 10, (topic, 1): 111, (topic, 2): 12}
    assert _committed(b.bootstrap, g2, tps)[(topic, 0)] == 6
