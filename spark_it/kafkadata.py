"""Test data in and out of a broker with kafka-python (an independent client, not Spark).

create_topic(bootstrap, "t", partitions=3)
sent = produce(bootstrap, "t", [Rec(b"k", b"v", partition=0, timestamp_ms=..., headers=[...])])
sent[0].offset, sent[0].partition           # what the broker acknowledged
got = read_all(bootstrap, "t")              # [Rec...] with offsets, by (partition, offset)
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition


def unique_topic(prefix: str = "spark") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@dataclass
class Rec:
    key: bytes | None
    value: bytes | None
    partition: int | None = None
    timestamp_ms: int | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    offset: int | None = None
    topic: str | None = None
    timestamp_type: int | None = None  # 0 CreateTime, 1 LogAppendTime (Spark's timestampType)

    def ident(self) -> tuple:
        return (self.topic, self.partition, self.offset)


def create_topic(bootstrap: str, name: str, partitions: int = 1, **configs: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="spark-it-admin")
    try:
        from kafka.admin import NewTopic

        admin.create_topics(
            [
                NewTopic(
                    name,
                    num_partitions=partitions,
                    replication_factor=1,
                    topic_configs={k.replace("_", "."): str(v) for k, v in configs.items()},
                )
            ]
        )
    finally:
        admin.close()
    wait_for_topic(bootstrap, name, partitions)


def wait_for_topic(bootstrap: str, name: str, partitions: int, timeout: float = 20.0) -> None:
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, client_id="spark-it-meta")
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            parts = c.partitions_for_topic(name)
            if parts and len(parts) == partitions:
                return
            time.sleep(0.1)
        raise TimeoutError(f"topic {name} not visible with {partitions} partitions")
    finally:
        c.close()


def produce(
    bootstrap: str, topic: str, records: list[Rec], *, batch_per_record: bool = False, **config
) -> list[Rec]:
    """Send every record (acks=all, idempotent) and fill in topic/partition/offset.

    batch_per_record: flush after each send, so each record is a batch of its own (segment
    rolls and retention then work at record granularity).
    """
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, **config)
    try:
        futures = []
        for r in records:
            futures.append(
                p.send(
                    topic,
                    key=r.key,
                    value=r.value,
                    partition=r.partition,
                    timestamp_ms=r.timestamp_ms,
                    headers=list(r.headers) or None,
                )
            )
            if batch_per_record:
                p.flush()
        p.flush()
        out = []
        for r, f in zip(records, futures, strict=True):
            md = f.get(timeout=30)
            out.append(
                Rec(
                    r.key,
                    r.value,
                    md.partition,
                    md.timestamp if r.timestamp_ms is None else r.timestamp_ms,
                    list(r.headers),
                    md.offset,
                    topic,
                )
            )
        return out
    finally:
        p.close()


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """{partition: (log start offset, end offset)}."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, client_id="spark-it-offsets")
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        begin = c.beginning_offsets(tps)
        end = c.end_offsets(tps)
        return {tp.partition: (begin[tp], end[tp]) for tp in tps}
    finally:
        c.close()


def read_all(bootstrap: str, topic: str, timeout: float = 30.0) -> list[Rec]:
    """Every record of every partition, from the log start to the current end."""
    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        client_id="spark-it-reader",
    )
    try:
        parts = c.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        c.assign(tps)
        c.seek_to_beginning()
        ends = c.end_offsets(tps)
        got: list[Rec] = []
        deadline = time.monotonic() + timeout
        while any(c.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                for r in recs:
                    got.append(
                        Rec(
                            r.key,
                            r.value,
                            r.partition,
                            r.timestamp,
                            list(r.headers),
                            r.offset,
                            r.topic,
                        )
                    )
        return sorted(got, key=lambda r: (r.partition, r.offset))
    finally:
        c.close()
