"""KIP-848 consumer groups with real clients: Kafka's Java client 4.1 with
group.protocol=consumer (java/clients4/src/GroupConsumer.java), and confluent-kafka.

What a user sees: members split the partitions with the server-side assignor, a member that
joins gets partitions only once their owner revoked them (no record read twice), a crashed
member's partitions move after group.consumer.session.timeout.ms, a static member that restarts
keeps its partitions without disturbing the others, a broker-side regex subscription follows
new topics, and committed offsets hold across all of it.  The time five members take to reach a
stable assignment is measured against the classic protocol's and printed (not asserted).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from kafka import KafkaProducer

from pybroker.testing import java
from pybroker.testing.client_helpers import create_topic

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not java.java_available(), reason="java not found (OpenJDK 17 expected)"),
    pytest.mark.broker_overrides(
        {
            "group.consumer.session.timeout.ms": "6000",
            "group.consumer.heartbeat.interval.ms": "500",
            "group.initial.rebalance.delay.ms": "0",
            "group.min.session.timeout.ms": "1000",
        }
    ),
    # tests share a broker per backend and storage: each uses topics and groups of its own
    pytest.mark.shared_broker,
]


@pytest.fixture(scope="module")
def consumer_cp(tmp_path_factory) -> str:
    with java.deps_or_fail():
        return java.compile_app(
            "GroupConsumer.java", tmp_path_factory.mktemp("classes"), clients4=True
        )


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(bootstrap: str, topic: str, partitions: int, n: int, prefix: str = "v") -> list[str]:
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    values = [f"{prefix}{i}" for i in range(n)]
    for i, v in enumerate(values):
        p.send(topic, v.encode(), partition=i % partitions)
    p.flush()
    p.close()
    return values


class Member:
    """One GroupConsumer process and its events."""

    def __init__(self, cp, workdir: Path, bootstrap, group, sub, name, *props, idle_ms=0):
        self.name = name
        self.proc = java.start_main(
            "GroupConsumer",
            [bootstrap, group, sub, str(idle_ms), "0", *props],
            workdir=workdir,
            name=name,
            cp=cp,
            log4j=None,
        )

    def events(self) -> list[dict]:
        return self.proc.events()

    def owned(self) -> set[str]:
        """The partitions it owns now, from its assigned/revoked/lost events."""
        owned: set[str] = set()
        for e in self.events():
            if e["event"] == "assigned":
                owned |= set(e["partitions"])
            elif e["event"] in ("revoked", "lost"):
                owned -= set(e["partitions"])
        return owned

    def values(self) -> list[str]:
        return [e["value"] for e in self.events() if e["event"] == "record"]

    def describe(self) -> str:
        r = self.proc.result()
        return f"{self.name}: rc={r.returncode}\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}"


def wait_for(what: str, cond, members: list[Member], timeout: float = 90.0) -> float:
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            pytest.fail(f"{what} not reached:\n" + "\n".join(m.describe() for m in members))
        time.sleep(0.1)
    return time.monotonic() - start


def split(members: list[Member], partitions: set[str]) -> bool:
    """Every partition owned by exactly one member, every member owning some."""
    owned = [m.owned() for m in members]
    union = set().union(*owned)
    return union == partitions and sum(map(len, owned)) == len(partitions) and all(owned)


def test_two_members_split_the_partitions_and_read_every_record_once(broker, consumer_cp, tmp_path):
    topic, group = unique("kip848"), unique("g")
    create_topic(broker.bootstrap, topic, partitions=6)
    values = produce(broker.bootstrap, topic, 6, 600)
    parts = {f"{topic}-{p}" for p in range(6)}
    a = Member(consumer_cp, tmp_path, broker.bootstrap, group, topic, "a")
    b = Member(consumer_cp, tmp_path, broker.bootstrap, group, topic, "b")
    try:
        wait_for("a 3/3 split", lambda: split([a, b], parts), [a, b])
        wait_for("every record read", lambda: len(a.values()) + len(b.values()) >= 600, [a, b])
        assert sorted(a.values() + b.values()) == sorted(values)  # none twice
        assert len(a.owned()) == len(b.owned()) == 3
        # a record produced now goes to whichever member owns its partition
        more = produce(broker.bootstrap, topic, 6, 6, prefix="late")
        wait_for("the late records", lambda: len(a.values()) + len(b.values()) >= 606, [a, b])
        assert sorted(a.values() + b.values()) == sorted(values + more)
    finally:
        for m in (a, b):
            m.proc.stop()


def test_five_members_a_crash_and_a_clean_leave(broker, consumer_cp, tmp_path):
    topic, group = unique("kip848"), unique("g")
    create_topic(broker.bootstrap, topic, partitions=10)
    parts = {f"{topic}-{p}" for p in range(10)}
    members = [
        Member(consumer_cp, tmp_path, broker.bootstrap, group, topic, f"m{i}") for i in range(5)
    ]
    try:
        # KIP-848 converges member by member (a partition is revoked before it is assigned
        # elsewhere): a split with every member owning some may still be on its way to 2 each
        took = wait_for(
            "a 2-2-2-2-2 split",
            lambda: split(members, parts) and all(len(m.owned()) == 2 for m in members),
            members,
        )
        print(f"\nKIP-848: five members stable {took:.2f} s after starting")
        # kill -9: its partitions go to the others once its session times out (6 s)
        members[0].proc.proc.kill()
        wait_for(
            "the crashed member's partitions taken over", lambda: split(members[1:], parts), members
        )
        # a clean leave (SIGTERM: close() leaves the group) hands over at once
        members[1].proc.stop()
        wait_for("after a clean leave", lambda: split(members[2:], parts), members)
        assert sorted(len(m.owned()) for m in members[2:]) == [3, 3, 4]
    finally:
        for m in members:
            if m.proc.is_running():
                m.proc.stop()


def test_five_classic_members_for_comparison(broker, consumer_cp, tmp_path):
    """The same five Java 4.1 members with group.protocol=classic (JoinGroup/SyncGroup):
    the time to a stable assignment is printed beside KIP-848's above."""
    topic, group = unique("classic"), unique("g")
    create_topic(broker.bootstrap, topic, partitions=10)
    parts = {f"{topic}-{p}" for p in range(10)}
    members = [
        Member(
            consumer_cp, tmp_path, broker.bootstrap, group, topic, f"c{i}", "group.protocol=classic"
        )
        for i in range(5)
    ]
    try:
        took = wait_for("a 2-2-2-2-2 split", lambda: split(members, parts), members)
        print(f"\nclassic: five members stable {took:.2f} s after starting")
        assert all(len(m.owned()) == 2 for m in members)
    finally:
        for m in members:
            m.proc.stop()


def test_a_static_member_restarts_without_moving_anyones_partitions(broker, consumer_cp, tmp_path):
    topic, group = unique("kip848"), unique("g")
    create_topic(broker.bootstrap, topic, partitions=4)
    parts = {f"{topic}-{p}" for p in range(4)}
    a = Member(consumer_cp, tmp_path, broker.bootstrap, group, topic, "a1", "group.instance.id=a")
    b = Member(consumer_cp, tmp_path, broker.bootstrap, group, topic, "b1", "group.instance.id=b")
    members = [a, b]
    try:
        wait_for("a 2/2 split", lambda: split([a, b], parts), [a, b])
        before_a, b_events = a.owned(), len(b.events())
        a.proc.stop()  # a static member's close leaves with epoch -2: its partitions wait for it
        a2 = Member(
            consumer_cp, tmp_path, broker.bootstrap, group, topic, "a2", "group.instance.id=a"
        )
        members.append(a2)  # (a failed assertion below left a2's JVM running for good)
        wait_for("the restarted member's partitions", lambda: a2.owned() == before_a, [a2, b])
        time.sleep(2.0)  # nothing may happen to b meanwhile (a few heartbeats)
        moved = [e for e in b.events()[b_events:] if e["event"] in ("revoked", "lost")]
        assert not moved, moved
        a2.proc.stop()
    finally:
        for m in members:
            if m.proc.is_running():
                m.proc.stop()


def test_a_regex_subscription_follows_new_topics(broker, consumer_cp, tmp_path):
    prefix = unique("rx")
    t1, t2, other = f"{prefix}-one", f"{prefix}-two", unique("other")
    for t in (t1, t2, other):
        create_topic(broker.bootstrap, t, partitions=2)
    v1 = produce(broker.bootstrap, t1, 2, 10, "one")
    produce(broker.bootstrap, other, 2, 10, "other")
    m = Member(consumer_cp, tmp_path, broker.bootstrap, unique("g"), f"regex:{prefix}-.*", "rx")
    try:
        wanted = {f"{t}-{p}" for t in (t1, t2) for p in range(2)}
        wait_for("the regex's topics", lambda: m.owned() == wanted, [m])
        wait_for("their records", lambda: len(m.values()) >= 10, [m])
        assert sorted(m.values()) == sorted(v1)
        t3 = f"{prefix}-three"
        create_topic(broker.bootstrap, t3, partitions=1)
        wait_for("a new matching topic", lambda: f"{t3}-0" in m.owned(), [m])
        v3 = produce(broker.bootstrap, t3, 1, 5, "three")
        wait_for("the new topic's records", lambda: len(m.values()) >= 15, [m])
        assert sorted(m.values()) == sorted(v1 + v3)
    finally:
        m.proc.stop()


def _commit_through_epoch_bumps(ck, consumer, msg) -> None:
    """A synchronous commit racing the heartbeat that bumps the member epoch gets
    STALE_MEMBER_EPOCH from Kafka too (ConsumerGroup.validateOffsetCommit: an epoch below the
    member's); Kafka's Java consumer retries it with the new epoch, a librdkafka user does
    the same a moment later: the commit is retried while the partition is still this member's."""
    for _ in range(50):
        try:
            consumer.commit(msg, asynchronous=False)
            return
        except ck.KafkaException as e:
            if e.args[0].code() != ck.KafkaError.STALE_MEMBER_EPOCH:
                raise
            time.sleep(0.05)  # librdkafka's heartbeat (its own thread) brings the new epoch
            if not any(
                tp.topic == msg.topic() and tp.partition == msg.partition()
                for tp in consumer.assignment()
            ):
                return  # revoked meanwhile: its new owner reads it from the last commit
    raise AssertionError(f"commit of {msg.topic()}-{msg.partition()} stale for 2.5 s")


def test_confluent_kafka_with_group_protocol_consumer(broker, storage):
    ck = pytest.importorskip("confluent_kafka")
    topic, group = unique("kip848-ck"), unique("g")
    create_topic(broker.bootstrap, topic, partitions=4)
    values = produce(broker.bootstrap, topic, 4, 200)
    conf = {
        "bootstrap.servers": broker.bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    consumers = [ck.Consumer(conf), ck.Consumer(conf)]
    got: list[list[str]] = [[], []]
    try:
        for c in consumers:
            c.subscribe([topic])
        deadline = time.monotonic() + 90
        while sum(map(len, got)) < 200 and time.monotonic() < deadline:
            for i, c in enumerate(consumers):
                msg = c.poll(0.1)
                if msg is not None and msg.error() is None:
                    got[i].append(msg.value().decode())
                    _commit_through_epoch_bumps(ck, c, msg)
        # at least once: a partition that moved before its commit is read again from there
        assert set(got[0] + got[1]) == set(values)
        # both members took part once the group settled
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(c.assignment() for c in consumers):
            for c in consumers:
                c.poll(0.1)
        assert all(c.assignment() for c in consumers)
        assert sum(len(c.assignment()) for c in consumers) == 4
    finally:
        for c in consumers:
            c.close()


def test_online_migration_classic_and_consumer_members_in_one_group(broker, consumer_cp, tmp_path):
    """Kafka 4.0's online migration with real Java consumers: two classic members (JoinGroup/
    SyncGroup, the default eager range assignor) hold a group; two members with
    group.protocol=consumer join it (the group becomes a consumer group, the classic members
    rejoin it through JoinGroup/SyncGroup), the four share the partitions; then the
    consumer-protocol members leave (the group becomes classic again) and the classic members
    share everything once more.  Every record is read and committed offsets hold throughout."""
    topic, group = unique("migrate"), unique("g")
    create_topic(broker.bootstrap, topic, partitions=8)
    parts = {f"{topic}-{p}" for p in range(8)}
    values = produce(broker.bootstrap, topic, 8, 400)
    classic = [
        Member(
            consumer_cp, tmp_path, broker.bootstrap, group, topic, f"c{i}", "group.protocol=classic"
        )
        for i in range(2)
    ]
    modern: list[Member] = []
    try:
        wait_for("the classic members' split", lambda: split(classic, parts), classic)
        wait_for("every record", lambda: sum(len(m.values()) for m in classic) >= 400, classic)
        modern = [
            Member(consumer_cp, tmp_path, broker.bootstrap, group, topic, f"k{i}") for i in range(2)
        ]
        everyone = classic + modern
        wait_for("a 2-2-2-2 split of classic and consumer members", lambda: split(everyone, parts)
                 and all(len(m.owned()) == 2 for m in everyone), everyone)  # fmt: skip
        d = describe_group(broker.bootstrap, group)
        assert d["type"] == "consumer", d
        more = produce(broker.bootstrap, topic, 8, 80, prefix="mixed")
        wait_for(
            "the records produced while mixed",
            lambda: set(more) <= {v for m in everyone for v in m.values()},
            everyone,
        )
        for m in modern:
            m.proc.stop()
        wait_for("the classic members alone again", lambda: split(classic, parts), everyone)
        assert describe_group(broker.bootstrap, group)["type"] == "classic"
        last = produce(broker.bootstrap, topic, 8, 80, prefix="after")
        wait_for(
            "every record",
            lambda: set(values + more + last) <= {v for m in everyone for v in m.values()},
            everyone,
        )
    finally:
        for m in classic + modern:
            if m.proc.is_running():
                m.proc.stop()


def describe_group(bootstrap: str, group: str) -> dict:
    """The group's type and state as its coordinator's ListGroups v5 answers them."""
    from pybroker.cli.client import Client

    client = Client(bootstrap)
    try:
        conn = client.node(client.coordinator_id(group))
        _, listed = conn.request(16, {"states_filter": [], "types_filter": []}, version=5)
        (g,) = [g for g in listed["groups"] if g["group_id"] == group]
        return {"type": g["group_type"], "state": g["group_state"]}
    finally:
        client.close()


@pytest.mark.parametrize("storage", ["zookeeper", "kafka"])
def test_the_group_carries_on_when_its_coordinator_is_killed(consumer_cp, tmp_path, storage):
    """3 brokers on ZooKeeper: kill -9 the group's coordinator.  The group's state is durable,
    so the new coordinator knows the members at their epochs: they keep their partitions (no
    member sees a partition revoked or lost, no commit fails), heartbeat and commit on, and
    read every record produced afterwards."""
    from pybroker.testing.client_helpers import storage_overrides
    from pybroker.testing.cluster_harness import running_cluster

    overrides = {
        "group.consumer.session.timeout.ms": "6000",
        "group.consumer.heartbeat.interval.ms": "500",
        **storage_overrides(storage, 3),
    }
    with running_cluster(tmp_path / "cluster", 3, overrides) as cluster:
        topic, group = unique("kip848-move"), unique("g")
        cluster.create_topic(topic, partitions=4, rf=3)
        parts = {f"{topic}-{p}" for p in range(4)}
        values = produce(cluster.bootstrap, topic, 4, 400)
        members = [
            Member(consumer_cp, tmp_path, cluster.bootstrap, group, topic, f"mv{i}")
            for i in range(2)
        ]
        try:
            wait_for("a 2/2 split", lambda: split(members, parts), members)
            wait_for("every record", lambda: sum(len(m.values()) for m in members) >= 400, members)
            err, coordinator = cluster.find_coordinator(group)
            assert err == 0
            before = [(m.owned(), len(m.events())) for m in members]
            cluster.kill9(coordinator)
            more = produce(cluster.bootstrap, topic, 4, 40, prefix="after")
            everything = set(values + more)
            wait_for(
                "every record after the coordinator died",
                lambda: everything <= {v for m in members for v in m.values()},
                members,
                timeout=120,
            )
            err, moved_to = cluster.find_coordinator(group)
            assert err == 0 and moved_to != coordinator
            for m, (owned, seen) in zip(members, before, strict=True):
                after = [e for e in m.events()[seen:] if e["event"] != "record"]
                assert m.owned() == owned, m.describe()
                assert not [e for e in after if e["event"] in ("revoked", "lost")], after
                assert not [e for e in after if e["event"] == "commit_failed"], after
        finally:
            for m in members:
                m.proc.stop()
