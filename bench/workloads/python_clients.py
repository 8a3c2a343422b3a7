"""W5: kafka-python's producer and consumer, 1 KiB records."""

from __future__ import annotations

import os
import time
import uuid

from bench.clients import WorkloadError, create_topics
from bench.targets import Target
from bench.workloads.base import MIB

# W5 ---------------------------------------------------------------------------------------
W5_SIZE = 1024


def w5_run(target: Target, st: dict, i: int) -> dict[str, float]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    n = st["sizes"]["w5_records"]
    topic = f"w5-{i}-{uuid.uuid4().hex[:6]}"
    create_topics(target, [topic], 6)
    value = os.urandom(W5_SIZE)
    producer = KafkaProducer(bootstrap_servers=target.bootstrap, acks=1)
    try:
        producer.send(topic, value).get(timeout=30)  # metadata + connections before the clock
        t0 = time.perf_counter()
        for _ in range(n):
            producer.send(topic, value)
        producer.flush(timeout=600)
        produce_s = time.perf_counter() - t0
    finally:
        producer.close()
    total = n + 1
    consumer = KafkaConsumer(
        bootstrap_servers=target.bootstrap, enable_auto_commit=False, group_id=None
    )
    try:
        tps = [TopicPartition(topic, p) for p in range(6)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        if sum(end.values()) != total:
            raise WorkloadError(f"kafka-python: end offsets {end}, expected {total} records")
        got = 0
        t0 = time.perf_counter()
        deadline = time.monotonic() + 600
        while got < total:
            if time.monotonic() > deadline:
                raise WorkloadError(f"kafka-python consumer read {got} of {total}")
            for recs in consumer.poll(timeout_ms=500).values():
                got += len(recs)
        consume_s = time.perf_counter() - t0
    finally:
        consumer.close()
    return {
        "produce MB/s": n * W5_SIZE / MIB / produce_s,
        "consume MB/s": total * W5_SIZE / MIB / consume_s,
        "_bytes": (n + total) * W5_SIZE,
    }


def w5_cmds(sizes: dict) -> list[str]:
    return [
        f"kafka-python: KafkaProducer(acks=1) sends {sizes['w5_records']} x {W5_SIZE}-byte "
        "values (no key) to a fresh 6-partition topic, flush(); timed after one warm-up send",
        "kafka-python: KafkaConsumer(group_id=None) assign + seek_to_beginning, poll() until "
        "all records are read",
    ]
