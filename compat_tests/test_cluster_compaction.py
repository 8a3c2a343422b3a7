"""Log compaction on a three-broker cluster (pybroker/testing/cluster_harness.py): a compacted topic with
RF 3 written with acks=all while every replica cleans on its own; the leader is killed with
kill -9 during the cleans, a new leader takes over, the old one restarts and catches up
(fetching a compacted leader's batches, gaps included).  Every replica ends with the same
log end offset and the same latest value per key, and a consumer from offset 0 reads exactly
the latest acknowledged value of each key."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kafka import KafkaProducer

from pybroker.testing.client_helpers import assign_consumer, read_to_end, unique_topic
from pybroker.testing.cluster_harness import running_cluster, wait_until
from pybroker.wire.record_walker import decode_records
from pybroker.wire.records import scan_batches

pytestmark = pytest.mark.timeout(300)

KEYS = [b"k%03d" % i for i in range(100)]


@pytest.fixture
def cluster(request, tmp_path):
    with running_cluster(tmp_path, overrides={"log.cleaner.backoff.ms": 50}) as c:
        request.node._pybrokers = list(c.brokers.values())  # stderr in failure reports
        yield c
    if c.stop_problems:
        pytest.fail("brokers did not stop cleanly: " + "; ".join(c.stop_problems))


def produce_round(bootstrap: str, topic: str, tag: str, latest: dict) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", batch_size=2000)
    try:
        for i in range(1500):
            key = KEYS[i % len(KEYS)]
            value = b"%s-%d" % (tag.encode(), i)
            producer.send(topic, key=key, value=value, partition=0)
            latest[key] = value
        producer.flush(timeout=60)  # every record acknowledged by the ISR
    finally:
        producer.close()


def replica_state(log_dir: Path, topic: str) -> tuple[int, dict[bytes, bytes | None]]:
    """(log end offset, latest value per key) of a stopped replica, from its segment files."""
    end, latest = 0, {}
    for seg in sorted((log_dir / f"{topic}-0").glob("*.log")):
        data = seg.read_bytes()
        for h in scan_batches(data):
            end = max(end, h.next_offset)
            for r in decode_records(data[h.position : h.position + h.size]):
                latest[r.key] = r.value
    return end, latest


def test_compacted_topic_survives_leader_kill9_during_cleaning(cluster):
    topic = unique_topic("ccompact")
    cluster.create_topic(
        topic,
        1,
        3,
        {
            "cleanup.policy": "compact",
            "segment.bytes": "4096",
            "min.cleanable.dirty.ratio": "0.01",
            "min.insync.replicas": "2",
        },
    )
    cluster.wait_isr_full(topic)
    latest: dict[bytes, bytes] = {}
    produce_round(cluster.bootstrap, topic, "a", latest)
    leader = cluster.leader_of(topic, 0).leader
    wait_until(
        lambda: f"cleaned {topic}-0" in cluster.brokers[leader].output(max_lines=100_000),
        60,
        0.1,
        "a clean on the leader",
    )
    produce_round(cluster.bootstrap, topic, "b", latest)  # cleans under way everywhere
    cluster.kill9(leader)
    cluster.wait_new_leader(topic, 0, leader)
    produce_round(cluster.bootstrap, topic, "c", latest)
    cluster.restart(leader)
    cluster.wait_isr_full(topic)
    produce_round(cluster.bootstrap, topic, "d", latest)
    time.sleep(1.0)  # the followers fetch the last round

    consumer = assign_consumer(cluster.bootstrap, topic, [0], auto_offset_reset="earliest")
    try:
        consumer.seek_to_beginning()
        got = read_to_end(consumer, settle_s=2.0)
    finally:
        consumer.close()
    offsets = [r.offset for r in got]
    assert offsets == sorted(set(offsets))
    assert {r.key: r.value for r in got} == latest
    assert len(got) < 6000  # the cleaners removed superseded records

    cluster.stop_problems = cluster.stop()
    states = {i: replica_state(Path(b.log_dir), topic) for i, b in cluster.brokers.items()}
    ends = {i: end for i, (end, _) in states.items()}
    assert len(set(ends.values())) == 1, ends
    for i, (_, values) in states.items():
        assert values == latest, f"replica {i}"
