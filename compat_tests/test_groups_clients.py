"""Consumer groups with confluent-kafka (librdkafka) and aiokafka members.

A group of two shares a 4-partition topic 2+2 (disjoint) and consumes every record exactly
once; records are produced only after both members hold their final assignment, and each
batch is committed synchronously.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest

from compat_tests.group_member import (
    GROUP_BROKER_OVERRIDES,
    HEARTBEAT_INTERVAL_MS,
    SESSION_TIMEOUT_MS,
    duplicates,
    produce,
    wait_until,
)
from pybroker.testing.client_helpers import create_topic, unique_topic

# tests share a broker per backend and storage: each uses topics and groups of its own
pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.broker_overrides(GROUP_BROKER_OVERRIDES),
    pytest.mark.shared_broker,
]

PARTITIONS = 4
JOIN_TIMEOUT = 60.0


def _group(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _two_way_split(sets) -> bool:
    return (
        len(sets) == 2
        and [len(s) for s in sets] == [2, 2]
        and set().union(*sets) == set(range(PARTITIONS))
    )


def _report(label, sent, per_member, assignments):
    keys = [(p, o) for recs in per_member for p, o, _ in recs]
    dup = duplicates(keys)
    missing = set(sent) - set(keys)
    print(
        f"[{label}] assignments {[sorted(a) for a in assignments]}; sent {len(sent)}, "
        f"delivered {len(keys)} (per member {[len(r) for r in per_member]}, "
        f"duplicates {len(dup)}, missing {len(missing)})"
    )
    assert not missing, f"{len(missing)} records never delivered: {sorted(missing)[:5]}"
    assert set(keys) <= set(sent)
    assert not dup, f"records delivered twice in a stable group: {sorted(dup.items())[:5]}"
    for recs, parts in zip(per_member, assignments, strict=True):
        assert {p for p, _, _ in recs} <= set(parts)
        for p, o, v in recs:
            assert v == sent[(p, o)]


# ------------------------------------------------------------------------------------------
# confluent-kafka
# ------------------------------------------------------------------------------------------
class _ConfluentMember:
    def __init__(self, bootstrap, topic, group, name, instance_id=None):
        from confluent_kafka import Consumer

        self.name = name
        self.lock = threading.Lock()
        self.records: list[tuple[int, int, str]] = []
        self.assignment: frozenset[int] = frozenset()
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.rebalance_events: list[str] = []  # "assign" / "revoke" callbacks, in order
        conf = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
        }
        if instance_id is not None:
            conf["group.instance.id"] = instance_id
        self.consumer = Consumer(conf)
        self.consumer.subscribe(
            [topic],
            on_assign=lambda c, ps: self.rebalance_events.append("assign"),
            on_revoke=lambda c, ps: self.rebalance_events.append("revoke"),
        )
        self.topic = topic
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        from confluent_kafka import KafkaException, TopicPartition

        c = self.consumer
        try:
            while not self.stop.is_set():
                msgs = c.consume(num_messages=100, timeout=0.1)
                got, last = [], {}
                for m in msgs:
                    if m.error():
                        with self.lock:
                            self.errors.append(str(m.error()))
                        continue
                    got.append((m.partition(), m.offset(), m.value().decode()))
                    last[m.partition()] = m.offset()
                parts = frozenset(tp.partition for tp in c.assignment())
                with self.lock:
                    self.records.extend(got)
                    self.assignment = parts
                if last:
                    offsets = [TopicPartition(self.topic, p, o + 1) for p, o in last.items()]
                    try:
                        c.commit(offsets=offsets, asynchronous=False)
                    except KafkaException as e:
                        with self.lock:
                            self.errors.append(f"commit: {e}")
        finally:
            c.close()

    def snapshot(self):
        with self.lock:
            return self.assignment, list(self.records)

    def close(self):
        self.stop.set()
        self.thread.join(30)


def test_confluent_kafka_static_leader_restart_no_rebalance(broker):
    """librdkafka's test 0102: the leader, a static member, restarts within its session
    timeout; the other member sees no rebalance and the restarted one gets its partitions."""
    topic, group = unique_topic("static"), _group("ckstatic")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    leader = _ConfluentMember(broker.bootstrap, topic, group, "ck-a", instance_id="a")
    wait_until(lambda: len(leader.snapshot()[0]) == PARTITIONS, JOIN_TIMEOUT, what="a alone")
    other = _ConfluentMember(broker.bootstrap, topic, group, "ck-b", instance_id="b")
    members = [leader, other]
    try:
        wait_until(
            lambda: _two_way_split([m.snapshot()[0] for m in members]),
            JOIN_TIMEOUT,
            what="static members split 2+2",
        )
        before = other.snapshot()[0]
        events = list(other.rebalance_events)
        leader.close()  # a static member does not leave the group on close
        restarted = _ConfluentMember(broker.bootstrap, topic, group, "ck-a2", instance_id="a")
        members = [restarted, other]
        wait_until(
            lambda: _two_way_split([m.snapshot()[0] for m in members]),
            JOIN_TIMEOUT,
            what="the restarted member holds its partitions again",
        )
        sent = produce(broker.bootstrap, topic, PARTITIONS, 40, "static")
        wait_until(
            lambda: set(sent) <= {(p, o) for m in members for p, o, _ in m.snapshot()[1]},
            60,
            what="all records consumed after the restart",
        )
        assert other.snapshot()[0] == before
        assert other.rebalance_events == events, "the other member saw a rebalance"
        for m in members:
            assert not m.errors, f"{m.name}: {m.errors[:5]}"
    finally:
        for m in members:
            m.close()


@pytest.mark.multicore
def test_confluent_kafka_group_of_two(broker, storage):
    topic, group = unique_topic("grp"), _group("ck")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    members = [_ConfluentMember(broker.bootstrap, topic, group, f"ck{i}") for i in range(2)]
    try:
        wait_until(
            lambda: _two_way_split([m.snapshot()[0] for m in members]),
            JOIN_TIMEOUT,
            what="confluent-kafka members split 2+2",
        )
        assignments = [m.snapshot()[0] for m in members]
        sent = produce(broker.bootstrap, topic, PARTITIONS, 400, "ck")
        wait_until(
            lambda: set(sent) <= {(p, o) for m in members for p, o, _ in m.snapshot()[1]},
            60,
            what="all records consumed by the confluent-kafka group",
        )
        time.sleep(1.0)  # grace: late duplicates show up (not an assertion)
        assert [m.snapshot()[0] for m in members] == assignments, "group rebalanced"
        _report(
            f"{broker.backend} confluent-kafka",
            sent,
            [m.snapshot()[1] for m in members],
            assignments,
        )
        for m in members:
            assert not m.errors, f"{m.name}: {m.errors[:5]}"
    finally:
        for m in members:
            m.close()


# ------------------------------------------------------------------------------------------
# aiokafka
# ------------------------------------------------------------------------------------------
async def _aiokafka_group(bootstrap, topic, group, n):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumers = [
        AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id=f"aio{i}",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        )
        for i in range(2)
    ]
    records: list[list[tuple[int, int, str]]] = [[], []]
    stop = asyncio.Event()

    async def run(i, c):
        while not stop.is_set():
            batches = await c.getmany(timeout_ms=100)
            offsets = {}
            for tp, recs in batches.items():
                records[i].extend((r.partition, r.offset, r.value.decode()) for r in recs)
                if recs:
                    offsets[TopicPartition(tp.topic, tp.partition)] = recs[-1].offset + 1
            if offsets:
                await c.commit(offsets)

    async def wait(cond, timeout, what):
        deadline = time.monotonic() + timeout
        while not cond():
            for t in tasks:
                if t.done() and t.exception():
                    raise t.exception()
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            await asyncio.sleep(0.05)

    for c in consumers:
        await c.start()
    tasks = [asyncio.create_task(run(i, c)) for i, c in enumerate(consumers)]
    try:

        def parts():
            return [frozenset(tp.partition for tp in c.assignment()) for c in consumers]

        await wait(lambda: _two_way_split(parts()), JOIN_TIMEOUT, "aiokafka members split 2+2")
        assignments = parts()
        sent = await asyncio.to_thread(produce, bootstrap, topic, PARTITIONS, n, "aio")
        await wait(
            lambda: set(sent) <= {(p, o) for recs in records for p, o, _ in recs},
            60,
            "all records consumed by the aiokafka group",
        )
        await asyncio.sleep(1.0)  # grace: late duplicates show up
        assert parts() == assignments, "group rebalanced"
        return sent, records, assignments
    finally:
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for c in consumers:
            await c.stop()


def test_aiokafka_group_of_two(broker):
    topic, group = unique_topic("grp"), _group("aio")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    sent, records, assignments = asyncio.run(_aiokafka_group(broker.bootstrap, topic, group, 400))
    _report(f"{broker.backend} aiokafka", sent, records, assignments)
