"""Real consumers use incremental fetch sessions (KIP-227) against pybroker, seen on the wire.

A recording proxy (compat_tests/wire_tap.py) sits between the client and the broker, which
advertises the proxy's port.  The clients are the Java consumer of Kafka 3.9 (Fetch v17, topic
ids) and kafka-python 3 (Fetch v12, names).  Over a 40-partition topic where new records land
on one partition only, after the first full fetch the client's requests are incremental (a
session id, epochs 1, 2, ... in order) and the broker's answers carry only the partition with
news, while every record is consumed exactly once.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer

from compat_tests.wire_tap import WireTap, tapped_broker
from pybroker.testing import java
from pybroker.testing.client_helpers import create_topic

FETCH = 1
PARTITIONS = 40
HOT = 7  # the only partition that gets records once consumers are polling
LATE = 12


@pytest.fixture
def tapped(tmp_path):
    with tapped_broker(tmp_path / "broker") as pair:
        yield pair


def fill_then_trickle(bootstrap: str, topic: str, started: threading.Event) -> threading.Thread:
    """One record per partition now; LATE more on partition HOT once ``started`` is set."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for p in range(PARTITIONS):
        producer.send(topic, value=f"first-{p}".encode(), partition=p)
    producer.flush()

    def trickle() -> None:
        try:
            started.wait(60)
            for i in range(LATE):
                time.sleep(0.3)
                producer.send(topic, value=f"late-{i}".encode(), partition=HOT).get(30)
        finally:
            producer.close()

    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    return t


def _set_when_fetching(tap: WireTap, started: threading.Event) -> None:
    """Set ``started`` once a client (not a follower) has fetched, or after 90 s."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not any(
        e.request.get("replica_id", -1) < 0 for e in tap.exchanges(FETCH)
    ):
        time.sleep(0.05)
    started.set()


def check_sessions(tap: WireTap, topic_key) -> None:
    fetches = [e for e in tap.exchanges(FETCH) if e.request.get("replica_id", -1) < 0]
    sessions = [e for e in fetches if e.request["session_epoch"] >= 1]
    assert len(sessions) >= LATE // 2, [(e.request["session_epoch"]) for e in fetches]
    by_session: dict[int, list[int]] = {}
    for e in sessions:
        first = e.request["session_id"] not in by_session
        by_session.setdefault(e.request["session_id"], []).append(e.request["session_epoch"])
        assert e.response["error_code"] == 0, e.response["error_code"]
        assert e.response["session_id"] == e.request["session_id"]
        # only what changed is sent (the first incremental request moves every offset the
        # full answer advanced) and answered: never the whole topic again
        sent = sum(len(t["partitions"]) for t in e.request["topics"])
        answered = [
            (topic_key(t), p["partition_index"])
            for t in e.response["responses"]
            for p in t["partitions"]
        ]
        assert (first or sent <= 2) and len(answered) <= 2, (sent, answered)
    for epochs in by_session.values():
        assert epochs == list(range(epochs[0], epochs[0] + len(epochs)))
    answered_hot = [
        e
        for e in sessions
        for t in e.response["responses"]
        for p in t["partitions"]
        if p["partition_index"] == HOT and p["records"]
    ]
    assert answered_hot, "no incremental answer carried the new records"


def test_kafka_python_consumer_fetches_incrementally(tapped):
    broker, tap = tapped
    topic = f"sessions-{uuid.uuid4().hex[:8]}"
    create_topic(tap.bootstrap, topic, partitions=PARTITIONS)
    started = threading.Event()
    producer = fill_then_trickle(tap.bootstrap, topic, started)
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=tap.bootstrap,
        group_id=f"g-{uuid.uuid4().hex[:6]}",
        auto_offset_reset="earliest",
        fetch_max_wait_ms=200,
        consumer_timeout_ms=20000,
    )
    got = []
    try:
        for m in consumer:
            got.append((m.partition, m.value))
            if len(got) == PARTITIONS:
                started.set()
            if len(got) == PARTITIONS + LATE:
                break
    finally:
        started.set()
        consumer.close()
        producer.join(60)
    assert sorted(got) == sorted(
        [(p, f"first-{p}".encode()) for p in range(PARTITIONS)]
        + [(HOT, f"late-{i}".encode()) for i in range(LATE)]
    )
    check_sessions(tap, lambda t: t["topic"])


@pytest.mark.skipif(not java.java_available(), reason="java not found (OpenJDK 17 expected)")
def test_java_consumer_fetches_incrementally_by_topic_id(tapped):
    broker, tap = tapped
    with java.deps_or_fail():
        java.classpath()
    topic = f"sessions-java-{uuid.uuid4().hex[:8]}"
    create_topic(tap.bootstrap, topic, partitions=PARTITIONS)
    started = threading.Event()
    producer = fill_then_trickle(tap.bootstrap, topic, started)
    # the JVM starts slowly (seconds under load): trickle once the consumer fetches, so the
    # late records come while it polls and make incremental fetches (with a trickle started
    # at once, a slow start found every record there and made too few: 1 run in 3 under load)
    threading.Thread(target=_set_when_fetching, args=(tap, started), daemon=True).start()
    args = ["--bootstrap-server", tap.bootstrap, "--topic", topic, "--from-beginning"]
    args += ["--max-messages", str(PARTITIONS + LATE), "--timeout-ms", "30000"]
    args += ["--consumer-property", "fetch.max.wait.ms=200"]
    try:
        r = java.run_main("org.apache.kafka.tools.consumer.ConsoleConsumer", args, timeout=120)
    finally:
        producer.join(60)
    assert r.ok, r.describe()
    lines = sorted(r.stdout.split())
    assert lines == sorted(
        [f"first-{p}" for p in range(PARTITIONS)] + [f"late-{i}" for i in range(LATE)]
    )
    versions = {e.version for e in tap.exchanges(FETCH)}
    assert versions == {17}, versions
    topic_id = tap.exchanges(FETCH)[0].request["topics"][0]["topic_id"]
    check_sessions(tap, lambda t: t["topic_id"])
    assert all(
        t["topic_id"] == topic_id for e in tap.exchanges(FETCH) for t in e.response["responses"]
    )
