"""Share groups (KIP-932) with Kafka's Java KafkaShareConsumer (kafka-clients 4.4.0,
java/kafka4/src/ShareConsumerTool.java) against a pybroker process.

What a user sees: four consumers on one partition all receive records and together every
record; implicit and explicit acknowledgement; a released record comes back with delivery
count 2; a rejected one never comes back; a consumer killed while holding records (kill -9:
its connection closes) or frozen (SIGSTOP: its locks run out) loses them to the others; a
record released share.delivery.count.limit times is archived; share.auto.offset.reset
earliest and latest; a classic consumer group and a share group reading one topic at once.
"""

from __future__ import annotations

import signal
import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer

from compat_tests.share_clients import (
    SHARE_OVERRIDES,
    JavaShareConsumer,
    set_group_config,
    share_tool_cp,
    wait_members,
)
from pybroker.testing import java
from pybroker.testing.client_helpers import create_topic

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(not java.java_available(), reason="java not found (OpenJDK 17 expected)"),
    pytest.mark.broker_overrides(
        {
            **SHARE_OVERRIDES,
            "group.initial.rebalance.delay.ms": "0",
        }
    ),
    # tests share a broker per backend: each uses topics and groups of its own (conftest.py)
    pytest.mark.shared_broker,
]


@pytest.fixture(scope="module")
def cp(tmp_path_factory) -> str:
    return share_tool_cp(tmp_path_factory)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(bootstrap: str, topic: str, values: list[str], partitions: int = 1) -> None:
    """In record batches of at most 10 (a queue fed by many small writes): records are
    acquired log batch by log batch, so one huge batch would go to one consumer."""
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    for i, v in enumerate(values):
        p.send(topic, v.encode(), partition=i % partitions)
        if i % 10 == 9:
            p.flush()
    p.flush()
    p.close()


def earliest_group(bootstrap: str) -> str:
    group = unique("sg")
    set_group_config(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    return group


def test_four_consumers_on_one_partition_split_every_record(broker, cp, tmp_path):
    topic, n = unique("queue"), 2000
    create_topic(broker.bootstrap, topic, 1)
    group = earliest_group(broker.bootstrap)
    consumers = [
        JavaShareConsumer(
            cp, tmp_path, broker.bootstrap, group, topic, "implicit", "max.poll.records=50",
            name=f"c{i}",
        )
        for i in range(4)
    ]  # fmt: skip
    try:
        wait_members(broker.bootstrap, group, 4)
        produce(broker.bootstrap, topic, [f"v{i}" for i in range(n)])

        def every_record() -> bool:
            return {r["value"] for c in consumers for r in c.records()} >= {
                f"v{i}" for i in range(n)
            }

        consumers[0].wait_for("every record received by the group", every_record)
        got = [r for c in consumers for r in c.records()]
        assert all(c.records() for c in consumers), [len(c.records()) for c in consumers]
        # implicit acknowledgement: nothing came back (no lock ran out, nothing released)
        offsets = [r["offset"] for r in got]
        assert len(offsets) == len(set(offsets)) == n
        assert {r["delivery"] for r in got} == {1}
    finally:
        for c in consumers:
            c.stop()


def test_explicit_release_comes_back_with_delivery_count_2(broker, cp, tmp_path):
    topic = unique("rel")
    create_topic(broker.bootstrap, topic, 1)
    group = earliest_group(broker.bootstrap)
    produce(broker.bootstrap, topic, [f"r{i}" for i in range(50)])
    c = JavaShareConsumer(cp, tmp_path, broker.bootstrap, group, topic, "release-first")
    try:
        c.wait_for("each record twice", lambda: len(c.records()) >= 100)
        by_offset: dict[int, list[int]] = {}
        for r in c.records():
            by_offset.setdefault(r["offset"], []).append(r["delivery"])
        assert sorted(by_offset) == list(range(50))
        assert all(d[:2] == [1, 2] for d in by_offset.values()), by_offset
        c.wait_for("acknowledgements confirmed", lambda: any(a["offsets"] for a in c.acks()))
        assert all(a["error"] is None for a in c.acks()), c.acks()
    finally:
        c.stop()
    # accepted at the second delivery: a new consumer of the group gets nothing
    later = JavaShareConsumer(
        cp, tmp_path, broker.bootstrap, group, topic, "accept", "idle-ms=6000", name="later"
    )
    later.wait_for("the later consumer to finish", later.done, timeout=180)
    assert later.records() == []


def test_reject_is_never_redelivered(broker, cp, tmp_path):
    topic = unique("rej")
    create_topic(broker.bootstrap, topic, 1)
    group = earliest_group(broker.bootstrap)
    values = [f"bad{i}" if i % 5 == 0 else f"ok{i}" for i in range(60)]
    produce(broker.bootstrap, topic, values)
    a = JavaShareConsumer(cp, tmp_path, broker.bootstrap, group, topic, "reject:bad", "count=60")
    a.wait_for("60 records", a.done)
    assert sorted(r["value"] for r in a.records()) == sorted(values)
    # a second consumer, past the lock duration: nothing comes back, rejected or accepted
    b = JavaShareConsumer(
        cp, tmp_path, broker.bootstrap, group, topic, "accept", "idle-ms=8000", name="b"
    )
    b.wait_for("the second consumer to finish", b.done, timeout=180)
    assert b.records() == []


@pytest.mark.parametrize("how", ["kill", "freeze"])
def test_records_held_by_a_lost_consumer_come_back(broker, cp, tmp_path, how):
    """kill -9: the connection closes and the records are released at once (the group's lock
    duration is the longest allowed, 60 s, so they come back with delivery count 2: delivered
    once before); SIGSTOP: the connection stays, the records come back when their acquisition
    locks (4 s) run out, delivered once or more before (the frozen client's fetcher may have
    taken them again before it stopped)."""
    topic = unique("hold")
    create_topic(broker.bootstrap, topic, 1)
    group = earliest_group(broker.bootstrap)
    if how == "kill":
        set_group_config(broker.bootstrap, group, {"share.record.lock.duration.ms": "60000"})
    produce(broker.bootstrap, topic, [f"h{i}" for i in range(30)])
    holder = JavaShareConsumer(cp, tmp_path, broker.bootstrap, group, topic, "hold", name="holder")
    other = None
    try:
        holder.wait_for("records held", lambda: len(holder.records()) > 0)
        held = {r["offset"] for r in holder.records()}
        holder.kill(signal.SIGKILL if how == "kill" else signal.SIGSTOP)
        other = JavaShareConsumer(
            cp, tmp_path, broker.bootstrap, group, topic, "accept", name="other"
        )
        other.wait_for(
            "the held records redelivered",
            lambda: held <= {r["offset"] for r in other.records()},
            timeout=180,
        )
        again = [r for r in other.records() if r["offset"] in held]
        if how == "kill":
            assert {r["delivery"] for r in again} == {2}, again
        else:
            assert min(r["delivery"] for r in again) >= 2, again
        other.wait_for("every record", lambda: len({r["offset"] for r in other.records()}) == 30)
    finally:
        holder.kill(signal.SIGKILL)
        if other is not None:
            other.stop()


def test_delivery_count_limit_archives_the_record(broker, cp, tmp_path):
    """group.share.delivery.count.limit=3 here: a record released at every delivery is
    delivered three times, then archived."""
    topic = unique("limit")
    create_topic(broker.bootstrap, topic, 1)
    group = earliest_group(broker.bootstrap)
    produce(broker.bootstrap, topic, [f"x{i}" for i in range(10)])
    c = JavaShareConsumer(
        cp, tmp_path, broker.bootstrap, group, topic, "release-all", "idle-ms=8000"
    )
    c.wait_for("the consumer to go idle", c.done, timeout=180)
    deliveries: dict[int, list[int]] = {}
    for r in c.records():
        deliveries.setdefault(r["offset"], []).append(r["delivery"])
    assert deliveries == {o: [1, 2, 3] for o in range(10)}


def test_share_auto_offset_reset_earliest_and_latest(broker, cp, tmp_path):
    topic = unique("reset")
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [f"old{i}" for i in range(20)])
    early = earliest_group(broker.bootstrap)
    late = unique("late")  # share.auto.offset.reset's default: latest
    e = JavaShareConsumer(cp, tmp_path, broker.bootstrap, early, topic, "implicit", name="e")
    la = JavaShareConsumer(cp, tmp_path, broker.bootstrap, late, topic, "implicit", name="l")
    try:
        wait_members(broker.bootstrap, early, 1)
        wait_members(broker.bootstrap, late, 1)
        e.wait_for("the old records", lambda: len(e.records()) >= 20)
        # the late group's start offset is set at its first fetch: wait for that, then produce
        time.sleep(3)
        produce(broker.bootstrap, topic, [f"new{i}" for i in range(10)])
        la.wait_for("the new records", lambda: len(la.records()) >= 10)
        e.wait_for("all records", lambda: len(e.records()) >= 30)
        assert {r["value"] for r in la.records()} == {f"new{i}" for i in range(10)}
        assert {r["value"] for r in e.records()} == {f"old{i}" for i in range(20)} | {
            f"new{i}" for i in range(10)
        }
    finally:
        e.stop()
        la.stop()


def test_classic_group_and_share_group_read_one_topic_at_once(broker, cp, tmp_path):
    topic = unique("both")
    create_topic(broker.bootstrap, topic, 2)
    group = earliest_group(broker.bootstrap)
    values = [f"b{i}" for i in range(200)]
    s = JavaShareConsumer(cp, tmp_path, broker.bootstrap, group, topic, "accept", "count=200")
    classic = KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id=unique("classic"),
        auto_offset_reset="earliest",
        consumer_timeout_ms=1000,
    )
    try:
        produce(broker.bootstrap, topic, values, partitions=2)
        got: list[str] = []
        deadline = time.monotonic() + 120
        while len(got) < 200 and time.monotonic() < deadline:
            for m in classic:
                got.append(m.value.decode())
        s.wait_for("the share group's 200 records", s.done)
        assert sorted(got) == sorted(values)
        assert sorted(r["value"] for r in s.records()) == sorted(values)
    finally:
        classic.close()
        s.stop()
