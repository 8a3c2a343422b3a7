"""Client-side helpers over kafka-python (a test dependency): unique topic names, create,
assign, drain, read all or to the end; the compat tests' storage parameters."""

from __future__ import annotations

import time
import uuid

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition


def unique_topic(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(
    bootstrap: str, name: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> None:
    """Create the topic (replication factor 1, ``configs`` set) and wait until it has leaders."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="compat-admin")
    try:
        options: dict = {"num_partitions": partitions, "replication_factor": 1}
        if configs:
            options["configs"] = configs
        admin.create_topics({name: options}, wait_for_metadata=True)
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


def read_to_end(consumer: KafkaConsumer, settle_s: float = 1.0, poll_ms: int = 300) -> list:
    """Every record from the consumer's positions on, in arrival order, until each assigned
    partition's position reached its end offset (ListOffsets latest, asked again once reached)
    or, failing that, until nothing came for settle_s."""
    tps = list(consumer.assignment())
    ends = consumer.end_offsets(tps)
    got: list = []
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < settle_s:
        for records in consumer.poll(timeout_ms=poll_ms).values():
            got.extend(records)
            idle_since = time.monotonic()
        if all(consumer.position(tp) >= ends[tp] for tp in tps):
            ends = consumer.end_offsets(tps)  # the end now, not when we started
            if all(consumer.position(tp) >= ends[tp] for tp in tps):
                break
    return got


def poll_to_end(consumer, quiet_s: float = 3.0, poll_s: float = 0.2) -> list:
    """A confluent-kafka Consumer made with ``enable.partition.eof`` and assigned: its
    messages in arrival order, until every assigned partition reported the end and its
    position (past control records too) reached the high watermark asked then, or, failing
    that, until nothing came for quiet_s.  An error other than the end raises."""
    from confluent_kafka import KafkaError, KafkaException

    tps = consumer.assignment()
    at_end: set[tuple[str, int]] = set()
    got: list = []
    last = time.monotonic()
    while time.monotonic() - last < quiet_s:
        msg = consumer.poll(poll_s)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() != KafkaError._PARTITION_EOF:
                raise KafkaException(msg.error())
            at_end.add((msg.topic(), msg.partition()))
            if len(at_end) == len(tps) and all(
                p.offset >= consumer.get_watermark_offsets(p, cached=False)[1]
                for p in consumer.position(tps)
            ):
                break
            continue
        at_end.discard((msg.topic(), msg.partition()))
        got.append(msg)
        last = time.monotonic()
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
