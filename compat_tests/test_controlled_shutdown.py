"""Controlled shutdown and preferred leaders on a 3-broker cluster on ZooKeeper (issue 15).

- A rolling restart (SIGTERM each broker in turn, restart it, wait for full ISRs) under two
  idempotent acks=all producers (kafka-python, confluent-kafka) and a consumer group: every
  acknowledged record is in the log exactly once, the producers saw no error they did not
  retry, and the group consumed every acknowledged record.  Each broker handed its leaderships
  over before it exited (its log says the controlled shutdown succeeded, the controller's log
  names each move).  Printed, not asserted: per stop, how long each partition the broker led
  was without a usable leader as Metadata showed it, and the producers' longest pause between
  acknowledgements on those partitions.
- Then Kafka's kafka-leader-election --election-type preferred --all-topic-partitions moves
  every leadership back to the preferred replica.
- With a short leader.imbalance.check.interval.seconds, the controller does it by itself after
  a broker's restart.
"""

from __future__ import annotations

import threading
import time

import pytest

from pybroker.testing import java
from pybroker.testing.client_helpers import unique_topic
from pybroker.testing.cluster_harness import (
    ConfluentLoad,
    KafkaPythonLoad,
    check_records,
    read_topic,
    running_cluster,
    wait_until,
)

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 3
TOPIC_CONFIGS = {"min.insync.replicas": "2"}
SEND_INTERVAL = 0.004


class LeaderWatch(threading.Thread):
    """Polls Metadata (from the brokers other than ``victim``) and records, per partition, the
    time without a usable leader: led by nobody, or by the victim after it stopped serving."""

    def __init__(self, cluster, topic: str, victim: int) -> None:
        super().__init__(daemon=True)
        self.cluster, self.topic, self.victim = cluster, topic, victim
        self.halt = threading.Event()
        self.samples: list[tuple[float, dict[int, int]]] = []  # (monotonic, {p: leader})

    def run(self) -> None:
        others = [i for i in self.cluster.ids if i != self.victim]
        while not self.halt.is_set():
            try:
                md = self.cluster.metadata([self.topic], via=others, timeout=1.0)
                leaders = {p: i.leader for (_, p), i in md.partitions.items()}
                self.samples.append((time.monotonic(), leaders))
            except OSError:
                pass
            time.sleep(0.01)

    def handover(self, partition: int, t0: float) -> float | None:
        """Seconds from t0 to the first sample showing another live broker leading."""
        for t, leaders in self.samples:
            if t >= t0 and leaders.get(partition, -1) not in (-1, self.victim):
                return t - t0
        return None

    def leaderless(self, partition: int) -> float:
        """Total seconds between samples that showed leader -1."""
        total = 0.0
        for (t, leaders), (t_next, _) in zip(self.samples, self.samples[1:], strict=False):
            if leaders.get(partition, -1) == -1:
                total += t_next - t
        return total


class GroupConsumer(threading.Thread):
    """A kafka-python consumer in a group, recording every value it is given."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.halt = threading.Event()
        self.values: list[bytes] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        from kafka import KafkaConsumer

        try:
            consumer = KafkaConsumer(
                bootstrap_servers=self.bootstrap,
                group_id=self.group,
                client_id="rolling-group",
                auto_offset_reset="earliest",
                enable_auto_commit=True,
                auto_commit_interval_ms=500,
                session_timeout_ms=10000,
                heartbeat_interval_ms=1000,
                metadata_max_age_ms=5000,
                request_timeout_ms=15000,
                reconnect_backoff_max_ms=1000,
            )
            try:
                # the topic's partitions known before the first join: a group leader that
                # joins without them assigns nothing (kafka-python: "No partition metadata")
                deadline = time.monotonic() + 30
                while not consumer.partitions_for_topic(self.topic):
                    if time.monotonic() > deadline:
                        raise AssertionError(f"no metadata for {self.topic}")
                    time.sleep(0.1)
                consumer.subscribe([self.topic])
                while not self.halt.is_set():
                    for records in consumer.poll(timeout_ms=200).values():
                        self.values.extend(r.value for r in records)
            finally:
                consumer.close()
        except BaseException as e:  # noqa: BLE001
            self.error = e


def _ack_gap(loads, partition: int, t0: float, t1: float) -> float:
    """The longest pause between acknowledgements on ``partition`` in [t0, t1], any load."""
    times = sorted(
        a.t for ld in loads for a in list(ld.stats.acked) if a.partition == partition and a.t >= t0
    )
    times = [t for t in times if t <= t1] or [t1]
    points = [t0, *times]
    return max(b - a for a, b in zip(points, points[1:], strict=False)) if len(points) > 1 else 0.0


@pytest.fixture
def cluster(request, tmp_path):
    overrides = getattr(request, "param", {})
    with running_cluster(tmp_path, overrides=overrides) as c:
        request.node._pybrokers = list(c.brokers.values())
        yield c
    if c.stop_problems:
        pytest.fail("brokers did not stop cleanly: " + "; ".join(c.stop_problems))


def _preferred_everywhere(cluster, topic: str) -> bool:
    try:
        parts = cluster.metadata([topic]).topic(topic)
    except OSError:
        return False
    return len(parts) == PARTITIONS and all(i.leader == i.replicas[0] for i in parts.values())


@pytest.mark.parametrize("cluster", [{"auto.leader.rebalance.enable": "false"}], indirect=True)
def test_rolling_restart_under_load_then_preferred_election(cluster):
    topic = unique_topic("rolling")
    cluster.create_topic(topic, PARTITIONS, 3, TOPIC_CONFIGS)
    group = GroupConsumer(cluster.bootstrap, topic, unique_topic("group"))
    group.start()
    loads = [
        KafkaPythonLoad("kafka-python", cluster.bootstrap, topic, PARTITIONS, SEND_INTERVAL),
        ConfluentLoad("confluent", cluster.bootstrap, topic, PARTITIONS, SEND_INTERVAL),
    ]
    for ld in loads:
        ld.start()
    try:
        wait_until(lambda: all(len(ld.stats.acked) >= 200 for ld in loads), 60, 0.1, "load")
        wait_until(lambda: group.values or group.error, 60, 0.1, "the group consuming")
        report = []
        for victim in cluster.ids:
            cluster.wait_isr_full(topic)
            led = sorted(p for (_, p), i in cluster.metadata([topic]).partitions.items()
                         if i.leader == victim)  # fmt: skip
            watch = LeaderWatch(cluster, topic, victim)
            watch.start()
            time.sleep(0.2)
            t0 = time.monotonic()
            cluster.stop_broker(victim)  # SIGTERM; exit 0 within 20 s asserted
            t_exit = time.monotonic()
            time.sleep(0.5)
            watch.halt.set()
            watch.join()
            out = cluster.brokers[victim].output(max_lines=5000)
            assert "controlled shutdown succeeded" in out, out[-3000:]
            controller_logs = "\n".join(
                b.output(max_lines=20000) for i, b in cluster.brokers.items()
            )
            for p in led:
                assert f"{topic}-{p} controlled shutdown: leader {victim} -> " in controller_logs
                assert watch.handover(p, t0) is not None, f"{topic}-{p}: no new leader seen"
            report.append(
                f"broker {victim}: SIGTERM -> exit {t_exit - t0:.2f} s; "
                + (
                    "; ".join(
                        f"p{p}: new leader in Metadata after {watch.handover(p, t0):.3f} s, "
                        f"leader -1 for {watch.leaderless(p):.3f} s, longest ack pause "
                        f"{_ack_gap(loads, p, t0, t_exit + 0.5):.3f} s"
                        for p in led
                    )
                    or "led nothing"
                )
            )
            cluster.restart(victim)
        cluster.wait_isr_full(topic)
        time.sleep(1.0)
    finally:
        stats = [ld.stop() for ld in loads]
    print("\nrolling restart (controlled shutdown):\n  " + "\n  ".join(report))
    for s in stats:
        print(f"  {s.summary()}")
        assert not s.failed, f"{s.name}: errors not retried: {dict(s.failed)}"
    read = read_topic(cluster.bootstrap, topic, PARTITIONS)
    result = check_records(read, stats)
    print(f"  check: {result.summary()}")
    assert not result.problems, "\n".join(result.problems)
    acked = {s.payload(a.seq) for s in stats for a in s.acked}
    try:
        wait_until(lambda: acked <= set(group.values) or group.error, 60, 0.2, "group caught up")
    except AssertionError as e:
        raise AssertionError(
            f"{e}: {len(acked - set(group.values))} of {len(acked)} missing"
        ) from None
    group.halt.set()
    group.join(30)
    assert group.error is None, repr(group.error)
    missing = acked - set(group.values)
    print(
        f"  consumer group: {len(group.values)} records delivered, {len(set(group.values))} "
        f"distinct, every one of the {len(acked)} acknowledged: {not missing}"
    )
    assert not missing, f"{len(missing)} acknowledged records never reached the group"

    # Leadership after the rolling restart: the last broker restarted leads nothing.
    assert not _preferred_everywhere(cluster, topic)
    result = java.run_main(
        "org.apache.kafka.tools.LeaderElectionCommand",
        ["--bootstrap-server", cluster.bootstrap, "--election-type", "preferred",
         "--all-topic-partitions"],
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    print(f"  kafka-leader-election: {result.stdout.strip()}")
    assert "Successfully completed leader election (PREFERRED)" in result.stdout
    assert _preferred_everywhere(cluster, topic), cluster.metadata([topic]).topic(topic)


@pytest.mark.parametrize("cluster", [{"leader.imbalance.check.interval.seconds": 2}], indirect=True)
def test_auto_leader_rebalance_moves_leaders_back(cluster):
    topic = unique_topic("rebalance")
    cluster.create_topic(topic, PARTITIONS, 3, TOPIC_CONFIGS)
    wait_until(lambda: _preferred_everywhere(cluster, topic), 30, 0.1, "preferred leaders")
    preferred = {p: i.replicas[0] for (_, p), i in cluster.metadata([topic]).partitions.items()}
    victim = preferred[0]
    cluster.stop_broker(victim)  # controlled shutdown: its partitions move away
    parts = cluster.metadata([topic]).topic(topic)
    assert all(i.leader != victim for i in parts.values()), parts
    t0 = time.monotonic()
    cluster.restart(victim)
    wait_until(lambda: _preferred_everywhere(cluster, topic), 60, 0.1, "leaders moved back")
    print(f"\nauto leader rebalance: preferred leaders back {time.monotonic() - t0:.1f} s after "
          "the restart")  # fmt: skip
    logs = "\n".join(b.output(max_lines=20000) for b in cluster.brokers.values())
    assert f"leader imbalance ratio for broker {victim}" in logs


NOT_LEADER_OR_FOLLOWER = 6


def _read_last(cluster, topic: str, partition: int, leader: int, n: int) -> str | None:
    """A reader of "the last n records" as librdkafka (kcat -o -n) is one: ListOffsets(latest)
    to the partition's leader (librdkafka hands OFFSET_NOT_AVAILABLE to the application:
    "Leader high watermark is not caught up"; NOT_LEADER_OR_FOLLOWER it retries after a
    metadata refresh: the broker Metadata named may learn of its leadership a few ms after the
    broker that answered Metadata, on Kafka too), then the records below that offset.  None,
    or what went wrong."""
    from kafka import KafkaConsumer, TopicPartition

    from pybroker.testing.client import Connection

    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": partition, "current_leader_epoch": -1, "timestamp": -1}]}],
    }  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        b = cluster.brokers[leader]
        with Connection(b.host, b.port, timeout=10.0) as conn:
            _, answer = conn.request(2, body, version=7)
        p = answer["topics"][0]["partitions"][0]
        if p["error_code"] != NOT_LEADER_OR_FOLLOWER or time.monotonic() > deadline:
            break
        time.sleep(0.1)  # librdkafka's retry.backoff.ms, then the leader Metadata names now
        named = cluster.metadata([topic], timeout=1.0).partitions[(topic, partition)].leader
        leader = named if named in cluster.running() else leader
    if p["error_code"] != 0:
        return f"ListOffsets to broker {leader}: error {p['error_code']}"
    end = p["offset"]
    tp = TopicPartition(topic, partition)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False)
    try:
        consumer.assign([tp])
        consumer.seek(tp, end - n)
        got: list[int] = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [r.offset for r in records]
    finally:
        consumer.close()
    if got[:n] != list(range(end - n, end)):
        return f"records below {end}: {got[:n]}"
    return None


# No automatic preferred election: the controller's first imbalance check runs 5 s after it
# takes over (as Kafka's), and one that moved the leader just as the test killed the old one
# left the dead broker in the new leader's ISR until its session expired (OFFSET_NOT_AVAILABLE
# until then, on Kafka too): a race of the test, not the window it measures.
@pytest.mark.parametrize("cluster", [{"auto.leader.rebalance.enable": "false"}], indirect=True)
def test_readers_right_after_a_leader_change_get_their_records(cluster):
    """Right after a partition's leadership moved (controlled shutdown, then kill -9) while a
    producer writes, a reader asks the new leader for the end offset: the new leader's high
    watermark reaches its epoch start with its followers' next fetch, as on Kafka, so the
    reader gets the end offset and the last records, not OFFSET_NOT_AVAILABLE."""
    topic = unique_topic("readers")
    cluster.create_topic(topic, PARTITIONS, 3, TOPIC_CONFIGS)
    load = KafkaPythonLoad("kafka-python", cluster.bootstrap, topic, PARTITIONS, 0.002)
    load.start()
    problems: list[str] = []
    try:
        wait_until(lambda: len(load.stats.acked) >= 300, 60, 0.1, "load")
        for how in ("controlled shutdown", "kill -9") * 2:
            cluster.wait_isr_full(topic)
            time.sleep(0.5)
            victim = cluster.leader_of(topic, 0).leader
            others = [i for i in cluster.ids if i != victim]
            act = cluster.stop_broker if how == "controlled shutdown" else cluster.kill9
            stopping = threading.Thread(target=act, args=(victim,))
            stopping.start()

            def new_leader(v=victim, o=others):
                leader = cluster.metadata([topic], via=o, timeout=1.0).partitions[(topic, 0)].leader
                return [leader] if leader not in (v, -1) else None  # (broker 0 is falsy)

            # the moment Metadata names the new leader, the reader asks it for the end offset
            (leader,) = wait_until(new_leader, 60, 0.005, "a new leader")
            problem = _read_last(cluster, topic, 0, leader, 3)
            if problem is not None:
                problems.append(f"{how} of broker {victim}: {problem}")
            stopping.join()
            cluster.restart(victim)
    finally:
        stats = load.stop()
    assert not stats.failed, dict(stats.failed)
    assert not problems, "\n".join(problems)


MANY = 300  # partitions (x3 replicas)


def test_controlled_shutdown_of_hundreds_of_partitions_leaves_each_led(cluster):
    """SIGTERM to the broker (not the controller) leading the most of 300 partitions: it
    hands every leadership over before it exits (its log says so), the other brokers' Metadata
    names a running leader for every partition as soon as it has exited (the controller pushes
    its elections to them: their logs show the pushed states), and a produce to each partition
    succeeds."""
    from kafka import KafkaProducer

    topic = unique_topic("many")
    cluster.create_topic(topic, MANY, 3, TOPIC_CONFIGS)
    md = cluster.wait_isr_full(topic, timeout=120, partitions=MANY)
    led = {b: 0 for b in cluster.ids if b != md.controller_id}
    for info in md.topic(topic).values():
        if info.leader in led:
            led[info.leader] += 1
    victim = max(led, key=lambda b: led[b])
    others = [b for b in cluster.ids if b != victim]
    cluster.stop_broker(victim)
    assert "controlled shutdown succeeded" in cluster.brokers[victim].output(max_lines=20000)
    for via in others:
        parts = cluster.metadata([topic], via=[via]).topic(topic)
        unled = {p: i.leader for p, i in parts.items() if i.leader not in others}
        assert len(parts) == MANY and not unled, (via, unled)
    logs = "\n".join(cluster.brokers[b].output(max_lines=20000) for b in others)
    assert "pushed states" in logs
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", retries=5)
    try:
        sent = [producer.send(topic, b"after", partition=p) for p in range(MANY)]
        offsets = [f.get(timeout=60).partition for f in sent]
    finally:
        producer.close()
    assert offsets == list(range(MANY))
