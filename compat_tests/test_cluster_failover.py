"""Three pybroker processes on one private ZooKeeper (pybroker/testing/cluster_harness.py): failover.

- leader kill -9 under acks=all idempotent load (kafka-python and confluent-kafka at once):
  a new leader with a higher leader epoch, every acknowledged record read back exactly once
  at its acknowledged offset, per-partition order = send order; the killed broker restarts
  and rejoins every ISR; the replicas' logs agree below the high watermark.
- controller kill -9: another live broker becomes controller, elects leaders for what the
  dead one led, and serves CreateTopics.
- ZooKeeper stopped and restarted under load: the cluster recovers and nothing acknowledged
  is lost.

No timing assertions: failover times are measured and printed (run with -s to see them).
"""

from __future__ import annotations

import time

import pytest

from pybroker.testing.client_helpers import unique_topic
from pybroker.testing.cluster_harness import (
    ConfluentLoad,
    KafkaPythonLoad,
    check_records,
    compare_replicas,
    read_topic,
    running_cluster,
    wait_until,
)

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 3
TOPIC_CONFIGS = {"min.insync.replicas": "2"}
SEND_INTERVAL = 0.002  # seconds between sends, per producer


@pytest.fixture
def cluster(request, tmp_path):
    with running_cluster(tmp_path) as c:
        request.node._pybrokers = list(c.brokers.values())  # stderr in failure reports
        yield c
    if c.stop_problems:
        pytest.fail("brokers did not stop cleanly: " + "; ".join(c.stop_problems))


def _start_loads(cluster, topic: str) -> list:
    loads = [
        KafkaPythonLoad("kafka-python", cluster.bootstrap, topic, PARTITIONS, SEND_INTERVAL),
        ConfluentLoad("confluent", cluster.bootstrap, topic, PARTITIONS, SEND_INTERVAL),
    ]
    for load in loads:
        load.start()
    wait_until(lambda: all(len(ld.stats.acked) >= 200 for ld in loads), 60, 0.1, "load running")
    return loads


def _acks_since(loads, t: float, partition: int, timeout: float = 90.0) -> dict[str, float]:
    """Seconds from t to each load's first acknowledgement on `partition` after t."""

    def done():
        firsts = {ld.stats.name: ld.stats.first_ack_after(t, partition) for ld in loads}
        return firsts if all(v is not None for v in firsts.values()) else None

    firsts = wait_until(done, timeout, 0.05, f"acks on partition {partition}")
    return {name: round(v - t, 3) for name, v in firsts.items()}


def _finish(cluster, topic: str, loads, *, compare_disk: bool = True) -> None:
    stats = [ld.stop() for ld in loads]
    for s in stats:
        print(f"  {s.summary()}")
    read = read_topic(cluster.bootstrap, topic, PARTITIONS)
    result = check_records(read, stats)
    print(f"  check: {result.summary()}")
    assert not result.problems, "\n".join(result.problems)
    if compare_disk:
        cluster.stop_problems = cluster.stop()
        for p in range(PARTITIONS):
            rc = compare_replicas(cluster, topic, p)
            print(
                f"  {topic}-{p}: replicas identical below HW {rc.compared_below} "
                f"({rc.batches_compared} batches), HWs {rc.high_watermarks}"
            )
            assert not rc.problems, "\n".join(rc.problems)


def test_leader_kill9_acks_all_idempotent_exactly_once(cluster):
    topic = unique_topic("failover")
    cluster.create_topic(topic, PARTITIONS, 3, TOPIC_CONFIGS)
    loads = _start_loads(cluster, topic)

    md = cluster.metadata([topic])
    # a partition whose leader is not the controller: a pure leader failover
    part = next((p for p, i in sorted(md.topic(topic).items()) if i.leader != md.controller_id), 0)
    before = md.partitions[(topic, part)]
    victim = before.leader
    time.sleep(1.0)
    acked_before = {ld.stats.name: len(ld.stats.acked) for ld in loads}

    t_kill = cluster.kill9(victim)
    after = cluster.wait_new_leader(topic, part, victim)
    t_md = time.monotonic() - t_kill
    first_acks = _acks_since(loads, t_kill, part)
    print(
        f"\nleader failover {topic}-{part}: broker {victim} killed (controller "
        f"{md.controller_id}); Metadata shows leader {after.leader} epoch "
        f"{before.leader_epoch}->{after.leader_epoch} ISR {after.isr} after {t_md:.2f} s; "
        f"first acks=all success on the partition after {first_acks} s"
    )
    assert after.leader_epoch > before.leader_epoch
    assert victim not in after.isr

    time.sleep(2.0)
    t_restart = time.monotonic()
    cluster.restart(victim)
    md_full = cluster.wait_isr_full(topic)
    print(
        f"broker {victim} restarted: every ISR full {time.monotonic() - t_restart:.2f} s "
        f"after the restart began; leaders "
        f"{ {p: (i.leader, i.leader_epoch) for p, i in sorted(md_full.topic(topic).items())} }"
    )
    time.sleep(2.0)
    for ld in loads:
        assert len(ld.stats.acked) > acked_before[ld.stats.name], f"{ld.name} made no progress"
    _finish(cluster, topic, loads)


def test_controller_kill9_new_controller_serves_create_topics(cluster):
    topic = unique_topic("ctl")
    cluster.create_topic(topic, PARTITIONS, 3, TOPIC_CONFIGS)
    md = cluster.metadata([topic])
    old = md.controller_id
    led = sorted(p for p, i in md.topic(topic).items() if i.leader == old)

    t_kill = cluster.kill9(old)

    def new_controller():
        try:
            m = cluster.metadata([topic])
        except OSError:
            return None
        return m if m.controller_id != old and m.controller_id in cluster.running() else None

    md2 = wait_until(new_controller, 60, 0.02, "a new controller")
    t_ctrl = time.monotonic() - t_kill

    def leaders_moved():
        m = cluster.metadata([topic])
        return m if all(i.leader in cluster.running() for i in m.topic(topic).values()) else None

    md3 = wait_until(leaders_moved, 60, 0.05, "leaders on live brokers")
    t_leaders = time.monotonic() - t_kill

    # CreateTopics while the old controller is dead: replication factor 2 fits the live brokers
    t0 = time.monotonic()
    topic2 = unique_topic("ctl-new")
    cluster.create_topic(topic2, 2, 2, {"min.insync.replicas": "2"})
    t_create = time.monotonic() - t0
    print(
        f"\ncontroller failover: broker {old} killed; controller {md2.controller_id} "
        f"(Metadata via broker {md2.via}) after {t_ctrl:.2f} s; partitions it led {led} on "
        f"live leaders after {t_leaders:.2f} s "
        f"{ {p: (i.leader, i.leader_epoch) for p, i in sorted(md3.topic(topic).items())} }; "
        f"CreateTopics {topic2} (RF 2) served in {t_create:.2f} s"
    )
    assert md2.controller_id != old
    # a produce + read on the new topic proves its leaders work
    load = KafkaPythonLoad("after-failover", cluster.bootstrap, topic2, 2, SEND_INTERVAL)
    load.start()
    wait_until(lambda: len(load.stats.acked) >= 100, 60, 0.1, "acks on the new topic")
    stats = load.stop()
    result = check_records(read_topic(cluster.bootstrap, topic2, 2), [stats])
    assert not result.problems, "\n".join(result.problems)

    cluster.restart(old)
    cluster.wait_isr_full(topic)
    topic3 = unique_topic("ctl-rf3")
    cluster.create_topic(topic3, PARTITIONS, 3, TOPIC_CONFIGS)
    final = cluster.metadata([])
    print(f"broker {old} back: ISRs full, CreateTopics RF 3 ok, controller {final.controller_id}")
    assert final.controller_id in cluster.running()


def test_lost_broker_partitions_never_shown_leaderless_at_the_others(cluster):
    """A non-controller broker stops (SIGSTOP) until its ZooKeeper session expires: a client
    asking the third broker sees each partition the lost broker led with the lost broker as
    leader until it sees the new leader, never leader -1 (Kafka ZooKeeper mode: the brokers
    learn of the loss and the new leaders together, from the controller's UpdateMetadata).
    Before, the third broker answered leader -1 from the moment it saw the loss until the
    controller's writes reached it."""
    topic = unique_topic("loss")
    n = 60
    cluster.create_topic(topic, n, 3)
    cluster.wait_isr_full(topic)
    md = cluster.metadata([topic])
    victim = next(i for i in cluster.ids if i != md.controller_id)
    watcher = next(i for i in cluster.ids if i not in (victim, md.controller_id))
    led = sorted(p for p, info in md.topic(topic).items() if info.leader == victim)
    assert led
    wait_until(
        lambda: len(cluster.metadata([topic], via=[watcher]).topic(topic)) == n,
        60,
        0.1,
        "the watcher knows every partition",
    )
    leaderless: dict[int, int] = {}  # partition -> samples that showed it with leader -1
    samples = 0
    cluster.pause(victim)
    try:

        def moved():
            nonlocal samples
            try:
                parts = cluster.metadata([topic], via=[watcher]).topic(topic)
            except OSError:
                return None
            samples += 1
            for p in led:
                if parts[p].leader == -1:
                    leaderless[p] = leaderless.get(p, 0) + 1
            return all(parts[p].leader not in (-1, victim) for p in led) or None

        wait_until(moved, 90, 0.01, "the lost broker's partitions on other leaders")
    finally:
        cluster.resume(victim)
    print(f"\n{len(led)} partitions moved from broker {victim}; {samples} Metadata samples")
    assert not leaderless, f"partitions shown with leader -1 (samples): {leaderless}"


def test_zookeeper_restart_under_load(cluster):
    topic = unique_topic("zk")
    cluster.create_topic(topic, PARTITIONS, 3, TOPIC_CONFIGS)
    loads = _start_loads(cluster, topic)
    time.sleep(1.0)
    outage = 8.0  # longer than zookeeper.session.timeout.ms (6 s)
    acked_at_stop = {ld.stats.name: len(ld.stats.acked) for ld in loads}
    cluster.note("ZooKeeper stop")
    cluster.zookeeper.stop()
    t_stop = time.monotonic()
    time.sleep(outage)
    acked_during = {
        ld.stats.name: len(ld.stats.acked) - acked_at_stop[ld.stats.name] for ld in loads
    }
    cluster.note("ZooKeeper start")
    cluster.zookeeper.start()
    t_start = time.monotonic()
    firsts = {p: _acks_since(loads, t_start, p) for p in range(PARTITIONS)}
    md = cluster.wait_isr_full(topic, timeout=90)
    t_full = time.monotonic() - t_start
    print(
        f"\nZooKeeper down {t_start - t_stop:.1f} s: acknowledgements during the outage "
        f"{acked_during}; after the restart first acks per partition {firsts} s; ISRs full "
        f"after {t_full:.2f} s; controller {md.controller_id}; leaders "
        f"{ {p: (i.leader, i.leader_epoch) for p, i in sorted(md.topic(topic).items())} }"
    )
    time.sleep(2.0)
    _finish(cluster, topic, loads)


def _produce_one_by_one(bootstrap: str, topic: str, n: int, tag: str, acks) -> None:
    """n records, one batch each (send().get() one at a time)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=acks, linger_ms=0, retries=5)
    try:
        for i in range(n):
            producer.send(topic, f"{tag}-{i:04d}-".encode() + b"x" * 60, partition=0).get(30)
    finally:
        producer.close()


def test_follower_truncates_divergent_tail_and_rejoins_isr(cluster):
    """Deterministic follower truncation: broker A is killed; the leader L and follower B
    take 120 more single-record batches; L and B are killed; A restarts and becomes leader by
    unclean election (enabled on the topic) without those batches; B restarts and must
    truncate its divergent tail (OffsetForLeaderEpoch) and rejoin the ISR.  The tail spans
    several offset-index entries (index.interval.bytes 4096), as any real tail does."""
    topic = unique_topic("trunc")
    cluster.create_topic(
        topic, 1, 3, {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}
    )
    _produce_one_by_one(cluster.bootstrap, topic, 120, "common", "all")
    info = cluster.leader_of(topic, 0)
    leader = info.leader
    a, b = [r for r in info.replicas if r != leader]
    cluster.kill9(a)
    wait_until(lambda: a not in cluster.leader_of(topic, 0).isr, 60, 0.1, f"{a} out of the ISR")
    _produce_one_by_one(cluster.bootstrap, topic, 120, "tail", "all")
    cluster.kill9(leader)
    cluster.kill9(b)
    cluster.restart(a)
    new = wait_until(
        lambda: (lambda i: i if i.leader == a else None)(cluster.leader_of(topic, 0)),
        60,
        0.1,
        f"unclean election of {a}",
    )
    cluster.restart(b)
    cluster.restart(leader)
    t0 = time.monotonic()
    md = cluster.wait_isr_full(topic, timeout=25)
    print(
        f"\nunclean leader {a} (epoch {new.leader_epoch}); brokers {b} and {leader} truncated "
        f"and rejoined the ISR {md.topic(topic)[0].isr} in {time.monotonic() - t0:.2f} s"
    )
    read = read_topic(cluster.bootstrap, topic, 1)
    values = [v for _, v in read[0]]
    assert len(values) == 120 and all(v.startswith(b"common-") for v in values)
