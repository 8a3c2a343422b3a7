"""The scale scenarios of bench/scale/ (issue 27, docs/scale.md) at about 1/20 of their
benchmark size, asserting what a user sees instead of timing it: no timings here.

- W21, one broker (embedded store) with many partitions: every partition answers ListOffsets;
  every record a producer wrote round-robin to all of them is read back by a consumer group;
  the broker's descriptors stay under its RLIMIT_NOFILE and its RSS under a bound linear in
  the partition count; after kill -9 the restarted broker serves every partition with every
  record; a clean shutdown exits 0 (the fixture's stop).
- W22, three brokers on ZooKeeper (RF 3): after kill -9 of the controller every partition gets
  a live leader and accepts a produce; the killed broker comes back into every ISR; a
  controlled shutdown (SIGTERM) of another broker leaves every partition led by the others.
- W23, hundreds of idle connections and a storm of connects: each is answered and the broker
  keeps answering a producer meanwhile; the descriptors come back when they close.
- W24, a group of 50 members, classic (cooperative-sticky) and KIP-848: every member is
  assigned, every partition assigned exactly once, again after one member leaves.

The shared pieces (protocol client, topic creation, the group members) are
pybroker/testing/scale.py and scale_groups.py, which the benchmark uses too.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from pathlib import Path

import pytest

from pybroker.testing.cluster import LocalCluster
from pybroker.testing.procstat import rss_mib
from pybroker.testing.scale import (
    PER_TOPIC,
    UNREACHABLE,
    Clients,
    ClusterMetadata,
    Conn,
    create_topics,
    metadata,
    open_fds,
    produce_everywhere,
    topic_names,
    unanswered,
    wait_all_answer,
)
from pybroker.testing.scale_groups import run_group
from pybroker.testing.zookeeper import zookeeper_available

pytestmark = pytest.mark.timeout(300)

EMBEDDED = pytest.mark.parametrize("backend", ["embedded"], indirect=True)

# RSS bound: a broker at rest measured 52 MiB at 1,000 partitions and 71 MiB at 10,000
# (docs/scale.md); the bound leaves room for the interpreter and the requests in flight.
RSS_BASE_MIB = 120
RSS_PER_PARTITION_KIB = 64


def nofile_limit(pid: int) -> int:
    """The process's soft RLIMIT_NOFILE (/proc/<pid>/limits)."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError(f"no 'Max open files' in /proc/{pid}/limits")


def latest_offsets(address: tuple[str, int], md: ClusterMetadata) -> dict[tuple[str, int], int]:
    """ListOffsets (latest) of every partition of ``md`` at its leader."""
    out: dict[tuple[str, int], int] = {}
    by_leader: dict[int, dict[str, list[int]]] = {}
    for t, p, info in md.partitions():
        by_leader.setdefault(info.leader, {}).setdefault(t, []).append(p)
    for leader, topics in by_leader.items():
        with Conn(*md.brokers.get(leader, address)) as c:
            body = {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {"name": t, "partitions": [{"partition_index": p, "timestamp": -1} for p in ps]}
                    for t, ps in topics.items()
                ],
                "timeout_ms": 30000,
            }
            _, ans = c.request(2, body)
            for t in ans["topics"]:
                for p in t["partitions"]:
                    if p["error_code"] == 0:
                        out[(t["name"], p["partition_index"])] = p["offset"]
    return out


# ------------------------------------------------------------------------------------------
# W21
# ------------------------------------------------------------------------------------------

W21_PARTITIONS = 500  # 1/20 of W21's 10,000
W21_RECORDS_PER_PARTITION = 10


def _produce_round_robin(bootstrap: str, parts: list[tuple[str, int]], rng: random.Random) -> set:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 20, "enable.idempotence": False}
    )
    failures: list[object] = []

    def delivered(err, _msg) -> None:
        if err is not None:
            failures.append(err)

    written = set()
    for i in range(len(parts) * W21_RECORDS_PER_PARTITION):
        t, p = parts[i % len(parts)]
        value = b"%d-%s-%d-%08x" % (i, t.encode(), p, rng.getrandbits(32))
        written.add((t, p, value))
        producer.produce(t, value, partition=p, on_delivery=delivered)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0, "records still unacknowledged after 120 s"
    assert not failures, f"{len(failures)} deliveries failed, first: {failures[0]}"
    return written


def _consume_group(bootstrap: str, topics: list[str], want: int) -> set:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"w21-{random.getrandbits(32):08x}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(topics)
    got = set()
    deadline = time.monotonic() + 180
    try:
        while len(got) < want and time.monotonic() < deadline:
            for m in consumer.consume(5000, 1.0):
                assert m.error() is None or m.error().code() < 0, m.error()
                if m.error() is None:
                    got.add((m.topic(), m.partition(), m.value()))
    finally:
        consumer.close()
    return got


@EMBEDDED
def test_w21_one_broker_many_partitions(start_broker):
    rng = random.Random(21)
    b = start_broker(**{"group.initial.rebalance.delay.ms": 0})
    address = (b.host, b.port)
    names = topic_names(W21_PARTITIONS)
    create_topics(address, names, PER_TOPIC, 1, 120)
    wait_all_answer(address, names, PER_TOPIC, 180, poll_s=0.5)

    pid = b.pid
    assert pid is not None
    fds, limit = open_fds(pid), nofile_limit(pid)
    assert 0 < fds < limit, f"{fds} descriptors open, RLIMIT_NOFILE {limit}"
    rss = rss_mib([pid])
    bound = RSS_BASE_MIB + W21_PARTITIONS * RSS_PER_PARTITION_KIB / 1024
    assert rss < bound, f"RSS {rss:.1f} MiB at {W21_PARTITIONS} partitions (bound {bound} MiB)"

    parts = [(t, p) for t in names for p in range(PER_TOPIC)]
    written = _produce_round_robin(b.bootstrap, parts, rng)
    read = _consume_group(b.bootstrap, names, len(written))
    assert read == written, (
        f"{len(written - read)} records written not read, {len(read - written)} read not written"
    )
    fds = open_fds(pid)
    assert 0 < fds < limit, f"{fds} descriptors open after produce/consume, limit {limit}"

    b.kill9()
    b.restart(timeout=180)
    wait_all_answer(address, names, PER_TOPIC, 180, poll_s=0.5)
    with Conn(*address) as c:
        md = metadata(c, names)
    assert unanswered(md.brokers, md) == 0
    offsets = latest_offsets(address, md)
    short = {tp: o for tp, o in offsets.items() if o != W21_RECORDS_PER_PARTITION}
    assert len(offsets) == W21_PARTITIONS and not short, (
        f"after kill -9: {W21_PARTITIONS - len(offsets)} partitions unanswered, "
        f"log end offsets not {W21_RECORDS_PER_PARTITION}: {list(short.items())[:5]}"
    )
    # (the fixture stops the broker with SIGTERM and asserts exit code 0)


# ------------------------------------------------------------------------------------------
# W22
# ------------------------------------------------------------------------------------------

W22_TOPICS = 2  # x 100 partitions x RF 3 = 600 replicas
W22_TIMEOUT = 120


@pytest.fixture
def zk_cluster(tmp_path):
    if not zookeeper_available():
        pytest.fail("ZooKeeper not installed: run scripts/install-test-deps", pytrace=False)
    cluster = LocalCluster(tmp_path, size=3, overrides={"replica.lag.time.max.ms": 10000})
    try:
        cluster.start(timeout=120)
        yield cluster
    finally:
        cluster.cleanup()


def _metadata_via(cluster: LocalCluster, ids: list[int], names: list[str]) -> ClusterMetadata:
    last: Exception | None = None
    for i in ids:
        b = cluster.brokers[i]
        try:
            with Conn(b.host, b.port, timeout_s=30) as c:
                return metadata(c, names)
        except UNREACHABLE as e:
            last = e
    raise AssertionError(f"no broker of {ids} answered Metadata: {last}")


def _wait(what: str, check, timeout: float = W22_TIMEOUT, poll: float = 0.25):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except UNREACHABLE as e:
            last = e
        if last is True:
            return
        time.sleep(poll)
    raise AssertionError(f"{what} not within {timeout}s; last: {last}")


def _leaderless(md: ClusterMetadata, live: set[int]) -> list[tuple[str, int, int]]:
    return [(t, p, i.leader) for t, p, i in md.partitions() if i.leader not in live]


def test_w22_controller_failover_and_controlled_shutdown(zk_cluster):
    cluster = zk_cluster
    ids = sorted(cluster.brokers)
    first = cluster.brokers[0]
    names = topic_names(W22_TOPICS * PER_TOPIC, prefix="w22-")
    create_topics((first.host, first.port), names, PER_TOPIC, 3, W22_TIMEOUT)
    wait_all_answer((first.host, first.port), names, PER_TOPIC, W22_TIMEOUT, poll_s=0.5)

    def isrs_full(via: list[int]) -> bool | str:
        md = _metadata_via(cluster, via, names)
        short = [(t, p, i.isr) for t, p, i in md.partitions() if sorted(i.isr) != ids]
        return True if not short else f"{len(short)} short ISRs, e.g. {short[:3]}"

    _wait("every ISR full", lambda: isrs_full(ids))

    # -- kill -9 of the controller: every partition gets a live leader and takes a produce
    ctrl = _metadata_via(cluster, ids, []).controller
    cluster.brokers[ctrl].kill9()
    survivors = [i for i in ids if i != ctrl]

    def led_and_writable() -> bool | str:
        md = _metadata_via(cluster, survivors, names)
        n = sum(1 for _ in md.partitions())
        down = _leaderless(md, set(survivors))
        if n != len(names) * PER_TOPIC or down:
            return f"{n} partitions, {len(down)} without a live leader, e.g. {down[:3]}"
        failed = produce_everywhere((first.host, first.port), md)
        return True if failed == 0 else f"{failed} partitions refused a produce"

    _wait("every partition led by a survivor and writable", led_and_writable)

    # -- the killed broker comes back into every ISR
    cluster.brokers[ctrl].restart(timeout=W22_TIMEOUT)
    _wait("the restarted broker back in every ISR", lambda: isrs_full(ids))

    # -- controlled shutdown of a broker that is not the controller and leads partitions
    md = _metadata_via(cluster, ids, names)
    led = {i: 0 for i in ids if i != md.controller}
    for _, _, info in md.partitions():
        if info.leader in led:
            led[info.leader] += 1
    victim = max(led, key=lambda i: led[i])
    assert led[victim] > 0, f"no partition led by a non-controller broker: {led}"
    others = [i for i in ids if i != victim]
    proc = cluster.brokers[victim].proc
    assert proc is not None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=W22_TIMEOUT) == 0, cluster.brokers[victim].output()
    for i in others:  # each remaining broker: every partition led by one of the two
        md = _metadata_via(cluster, [i], names)
        down = _leaderless(md, set(others))
        assert not down, (
            f"broker {i} right after broker {victim}'s controlled shutdown: {len(down)} of "
            f"{sum(1 for _ in md.partitions())} partitions not led by {others}, e.g. {down[:5]}"
        )
    md = _metadata_via(cluster, others, names)
    assert produce_everywhere((first.host, first.port), md) == 0
    for i in others:
        assert cluster.brokers[i].traceback_excerpt() == "", cluster.brokers[i].traceback_excerpt()


# ------------------------------------------------------------------------------------------
# W23
# ------------------------------------------------------------------------------------------

W23_IDLE = 500  # 1/20 of W23's 10,000
W23_STORM = 200


@EMBEDDED
def test_w23_many_connections_and_a_storm(start_broker):
    b = start_broker(**{"max.connections.per.ip": 100_000})
    address = (b.host, b.port)
    create_topics(address, ["w23"], 1, 1, 60)
    wait_all_answer(address, ["w23"], 1, 60, poll_s=0.2)
    pid = b.pid
    assert pid is not None
    fds0 = open_fds(pid)

    idle = Clients(address)
    storm = Clients(address)
    try:
        idle.open(W23_IDLE)
        assert (idle.answered, idle.failed) == (W23_IDLE, 0)
        assert open_fds(pid) >= W23_IDLE  # (one descriptor per connection held open)
        assert open_fds(pid) < nofile_limit(pid)
        for _ in range(3):  # each connection sends one more small request
            idle.tick()
            deadline = time.monotonic() + 60
            while any(n > 0 for n in idle.pending.values()) and time.monotonic() < deadline:
                idle.poll(0.05)
        assert idle.failed == 0 and idle.answered == 4 * W23_IDLE

        storm.open(W23_STORM, spread_s=1.0)
        assert (storm.answered, storm.failed) == (W23_STORM, 0)
        # the broker still answers a producer and Metadata with all of them open
        with Conn(*address) as c:
            md = metadata(c, ["w23"])
        assert produce_everywhere(address, md) == 0
    finally:
        idle.close()
        storm.close()

    def released() -> bool | str:
        n = open_fds(pid)
        return True if n <= fds0 + 10 else f"{n} descriptors open (before: {fds0})"

    _wait("the descriptors released", released, timeout=60)


# ------------------------------------------------------------------------------------------
# W24
# ------------------------------------------------------------------------------------------

W24_MEMBERS = 50  # 1/20 of W24's 1,000


@EMBEDDED
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_w24_large_group_every_member_assigned(start_broker, protocol):
    b = start_broker(
        **{
            "group.coordinator.rebalance.protocols": "classic,consumer",
            "group.initial.rebalance.delay.ms": 0,
        }
    )
    address = (b.host, b.port)
    topic = f"w24-{protocol}"
    partitions = 2 * W24_MEMBERS
    create_topics(address, [topic], partitions, 1, 60)
    wait_all_answer(address, [topic], partitions, 60, poll_s=0.2)
    with Conn(*address) as c:
        _, ans = c.request(3, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    topic_id = ans["topics"][0]["topic_id"]
    # run_group waits until every member owns floor(P/n) or ceil(P/n) partitions and every
    # partition is owned exactly once, then one member leaves and it waits for that again
    # among the others; it raises TimeoutError when either never happens.
    run = asyncio.run(
        run_group(
            b.host, b.port, protocol, W24_MEMBERS, topic, topic_id, partitions, lambda: 0.0, 240
        )
    )
    members = run.owned
    assert len(members) == W24_MEMBERS - 1, f"{len(members)} members after one left"
    assert all(members.values()), [k for k, ps in members.items() if not ps]
    every = [p for ps in members.values() for p in ps]
    assert sorted(every) == list(range(partitions)), "a partition unassigned or assigned twice"
