"""Client-side helpers shared by the compat tests (kafka-python based)."""

from __future__ import annotations

import time
import uuid

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition


def unique_topic(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="compat-admin")
    try:
        admin.create_topics(
            {name: {"num_partitions": partitions, "replication_factor": 1}},
            wait_for_metadata=True,
        )
    finally:
        admin.close()


def assign_consumer(bootstrap: str, topic: str, partitions: list[int], **config) -> KafkaConsumer:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        client_id="compat-consumer",
        **config,
    )
    consumer.assign([TopicPartition(topic, p) for p in partitions])
    return consumer


def drain(consumer: KafkaConsumer, expected: int, timeout: float = 30.0) -> list:
    """Poll until `expected` records arrived (or timeout); returns them in arrival order."""
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got.extend(records)
    # a short extra poll catches duplicates beyond the expected count
    for records in consumer.poll(timeout_ms=300).values():
        got.extend(records)
    return got


def read_all(bootstrap: str, topic: str, partitions: list[int], expected: int, timeout=30.0):
    """All records of `partitions` from the beginning, by partition, in offset order."""
    consumer = assign_consumer(bootstrap, topic, partitions)
    try:
        consumer.seek_to_beginning()
        records = drain(consumer, expected, timeout)
    finally:
        consumer.close()
    by_partition: dict[int, list] = {p: [] for p in partitions}
    for r in records:
        by_partition[r.partition].append(r)
    return by_partition


ALL_STORAGES = ["zookeeper", "kafka"]


def storage_overrides(storage: str, brokers: int = 1) -> dict[str, object]:
    """A broker's settings for ``storage``: on fewer than three brokers the internal topics
    get as many replicas as there are brokers (Kafka's defaults, 3 and min ISR 2, otherwise)."""
    if storage == "zookeeper":
        return {}
    out: dict[str, object] = {"offsets.storage": "kafka", "transaction.state.storage": "kafka"}
    if brokers < 3:
        out["offsets.topic.replication.factor"] = brokers
        out["transaction.state.log.replication.factor"] = brokers
        out["transaction.state.log.min.isr"] = 1
    return out
