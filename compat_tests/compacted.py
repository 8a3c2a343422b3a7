"""A small compacted, cleaned topic for the readers' tests (issue 11): kafka-python writes
records over a few keys, with tombstones, to a cleanup.policy=compact topic with tiny
segments, then waits until the broker's cleaner has left exactly the latest value of each
live key (tombstones gone too: delete.retention.ms=0), plus empty batches: the last batch
of short-lived producers whose records were superseded. The broker must run with a short
log.cleaner.backoff.ms (100).

    topic = build_cleaned_topic(broker.bootstrap, "name")
    topic.live     {key: value} of the live keys
    topic.records  [(offset, key, value)] as kafka-python reads them from offset 0
    topic.end      the log end offset (the number of records ever written)
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from kafka import KafkaProducer

from pybroker.testing.client_helpers import assign_consumer, create_topic, read_to_end


@dataclass
class CleanedTopic:
    name: str
    live: dict[bytes, bytes]
    records: list[tuple[int, bytes, bytes]]
    end: int


def read_from_start(bootstrap: str, topic: str, settle_s: float = 1.0) -> list:
    consumer = assign_consumer(bootstrap, topic, [0], auto_offset_reset="earliest")
    try:
        consumer.seek_to_beginning()
        return read_to_end(consumer, settle_s)
    finally:
        consumer.close()


def build_cleaned_topic(
    bootstrap: str, topic: str, keys: int = 60, records: int = 3000, seed: int = 11
) -> CleanedTopic:
    create_topic(
        bootstrap,
        topic,
        configs={
            "cleanup.policy": "compact",
            "segment.bytes": "4096",
            "segment.ms": "1000",
            "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "0",
        },
    )
    rng = random.Random(seed)
    names = [b"key-%03d" % i for i in range(keys)]
    latest: dict[bytes, bytes | None] = {}
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, batch_size=2000)
    try:
        for i in range(records - 1):
            key = rng.choice(names)
            if i % 100 == 50:  # written once: live records all along the cleaned log
                key = b"once-%04d" % i
            # every tenth key ends dead (a tombstone last); others get one now and then
            dead = key in names[::10] and i > records * 0.9
            value = None if dead or rng.random() < 0.05 else b"value-%d" % i
            producer.send(topic, key=key, value=value, partition=0)
            latest[key] = value
        producer.flush()
        # short-lived idempotent producers whose only batch is superseded next: a clean keeps
        # each one's last batch, empty (Kafka keeps producer state so), for readers to cross
        for n in range(4):
            other = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50)
            try:
                for key in names[n * 3 : n * 3 + 3]:
                    other.send(topic, key=key, value=b"superseded-%d" % n, partition=0)
                other.flush()
            finally:
                other.close()
            for key in names[n * 3 : n * 3 + 3]:
                value = b"after-%d" % n
                producer.send(topic, key=key, value=value, partition=0)
                latest[key] = value
            producer.flush()
        # the active segment is never cleaned: once segment.ms passed, one more record rolls it
        time.sleep(1.5)
        producer.send(topic, key=b"roll", value=b"last", partition=0).get(timeout=30)
        latest[b"roll"] = b"last"
    finally:
        producer.close()
    live = {k: v for k, v in latest.items() if v is not None}
    assert len(live) < len(latest), "no key ends with a tombstone"

    deadline = time.monotonic() + 90
    while True:
        got = read_from_start(bootstrap, topic)
        if len(got) == len(live) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    seen = [(r.offset, r.key, r.value) for r in got]
    offsets = [o for o, _, _ in seen]
    assert offsets == sorted(set(offsets)), "offsets out of order or repeated"
    assert {k: v for _, k, v in seen} == live and len(seen) == len(live), "not cleaned"
    end = records + 4 * 6  # every record written
    assert offsets[-1] == end - 1 and len(seen) < end  # gaps, offsets never moved
    return CleanedTopic(topic, live, seen, end)
