"""Acknowledged records survive kill -9; offsets continue densely after restart."""

from __future__ import annotations

from collections import Counter

import pytest
from kafka import KafkaProducer

from compat_tests.helpers import create_topic, read_all, unique_topic

pytestmark = pytest.mark.timeout(240)


def _produce(bootstrap, topic, partitions, start, n):
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2)
    futs = []
    for i in range(start, start + n):
        futs.append(
            (
                i,
                producer.send(
                    topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % partitions
                ),
            )
        )
    producer.flush(timeout=60)
    acked = {}
    for i, f in futs:
        if f.succeeded():
            meta = f.value
            acked[f"v{i}".encode()] = (meta.partition, meta.offset)
    producer.close(timeout=10)
    return acked


@pytest.mark.multicore
def test_acked_records_survive_kill9(broker):
    topic = unique_topic("dur")
    partitions = 2
    create_topic(broker.bootstrap, topic, partitions)
    n = 3000
    acked = _produce(broker.bootstrap, topic, partitions, 0, n)
    print(f"[{broker.backend}] acknowledged {len(acked)}/{n} before kill -9")
    assert len(acked) == n

    broker.kill9()
    broker.restart()

    got = read_all(broker.bootstrap, topic, list(range(partitions)), n, timeout=60)
    values = Counter(r.value for recs in got.values() for r in recs)
    print(f"[{broker.backend}] read back {sum(values.values())} records after restart")
    missing = [v for v in acked if values[v] == 0]
    dupes = [v for v, c in values.items() if c > 1]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"
    assert not dupes, f"{len(dupes)} records duplicated, e.g. {dupes[:5]}"
    ends = {}
    for p, recs in got.items():
        offsets = [r.offset for r in recs]
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets not dense"
        for r in recs:
            assert acked[r.value] == (p, r.offset), "record moved after restart"
        ends[p] = len(offsets)

    more = _produce(broker.bootstrap, topic, partitions, n, 200)
    assert len(more) == 200
    for p in range(partitions):
        new_offsets = sorted(o for (pp, o) in more.values() if pp == p)
        assert new_offsets == list(range(ends[p], ends[p] + len(new_offsets))), (
            f"partition {p}: new offsets {new_offsets[:3]}... do not continue at {ends[p]}"
        )
    got2 = read_all(broker.bootstrap, topic, list(range(partitions)), n + 200, timeout=60)
    total = sum(len(v) for v in got2.values())
    print(f"[{broker.backend}] produced 200 more; read back {total} in all")
    assert total == n + 200
    for recs in got2.values():
        assert [r.offset for r in recs] == list(range(len(recs)))
