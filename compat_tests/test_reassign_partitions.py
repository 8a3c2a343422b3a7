"""Partition reassignment with Kafka's own tools on a pybroker cluster on ZooKeeper (issue 15).

- A 6-partition topic with replication factor 2 on brokers 0-2, under an idempotent acks=all
  producer (kafka-python); a broker 3 is added; kafka-reassign-partitions --generate proposes
  an assignment over 0-3, --execute starts it, --verify is run until every partition is
  complete.  Then every acknowledged record is in the log exactly once (read back and
  compared), the producer saw no error it did not retry, broker 3 holds replicas of some
  partitions (and no log of the partitions it does not hold), the brokers that lost a replica
  deleted its log, and after kafka-leader-election --election-type preferred broker 3 leads
  some.  Printed: the time the reassignment took, the records written meanwhile, lost and
  duplicated counts.
- --cancel: a reassignment onto a broker that is stopped (so it cannot complete) is cancelled
  and the partition is back on its original replicas, with nothing left in progress.
- Changing the replication factor 2 -> 3 with --execute, then --verify.
- --throttle sets the topic's throttled-replicas configs and the brokers' throttled rates
  (dynamic broker configs); --verify clears them once done.
- Throttled replicas and rates hold a catching-up replica back until they are removed.
- A replica removed while its broker is down is deleted when the broker returns.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from pybroker.testing import java
from pybroker.testing.client_helpers import unique_topic
from pybroker.testing.cluster_harness import (
    KafkaPythonLoad,
    check_records,
    read_topic,
    running_cluster,
)
from pybroker.testing.cluster_harness import wait_until as poll

pytestmark = pytest.mark.timeout(300)

REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
LEADER_ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"
CONFIGS = "kafka.admin.ConfigCommand"


@pytest.fixture
def cluster(request, tmp_path):
    overrides = {"auto.leader.rebalance.enable": "false"}
    with running_cluster(tmp_path, overrides=overrides) as c:
        request.node._pybrokers = list(c.brokers.values())
        yield c
    if c.stop_problems:
        pytest.fail("brokers did not stop cleanly: " + "; ".join(c.stop_problems))


def tool(main: str, args: list[str], *, ok: bool = True, timeout: float = 120):
    r = java.run_main(main, args, timeout=timeout)
    if ok:
        assert r.returncode == 0 and not r.timed_out, f"{args}\n{r.stdout}\n{r.stderr}"
    return r


def reassign(cluster, *args: str, ok: bool = True):
    """The tool, bootstrapped from the brokers that are not paused."""
    running = ",".join(cluster.brokers[i].bootstrap for i in cluster.running())
    return tool(REASSIGN, ["--bootstrap-server", running, *args], ok=ok)


def plan_file(tmp_path: Path, name: str, partitions: dict[tuple[str, int], list[int]]) -> Path:
    path = tmp_path / name
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
                    for (t, p), r in sorted(partitions.items())
                ],
            }
        )
    )
    return path


def verify_until_done(cluster, plan: Path, timeout: float = 120, *, preserve: bool = False) -> str:
    """--verify until it reports every partition complete (which, without ``preserve``
    (--preserve-throttles), also clears every throttle: the topics' and the brokers' rates,
    through IncrementalAlterConfigs); its last output."""
    last = ""
    extra = ["--preserve-throttles"] if preserve else []

    def done() -> bool:
        nonlocal last
        r = reassign(cluster, "--verify", "--reassignment-json-file", str(plan), *extra, ok=False)
        last = r.stdout + r.stderr
        return r.returncode == 0 and "is still in progress" not in r.stdout

    try:
        poll(done, timeout, 0.5, "--verify to report completion")
    except AssertionError as e:
        raise AssertionError(f"{e}; its last output:\n{last}") from None
    return last


def replicas_of(cluster, topic: str) -> dict[int, list[int]]:
    return {p: list(i.replicas) for p, i in cluster.metadata([topic]).topic(topic).items()}


def has_log(cluster, broker_id: int, topic: str, p: int) -> bool:
    return (cluster.brokers[broker_id].log_dir / f"{topic}-{p}").is_dir()


def test_generate_execute_verify_onto_a_new_broker_under_load(cluster, tmp_path):
    topic = unique_topic("reassign")
    cluster.create_topic(topic, 6, 2)
    before = replicas_of(cluster, topic)
    load = KafkaPythonLoad("kafka-python", cluster.bootstrap, topic, 6, 0.003)
    load.start()
    try:
        poll(lambda: len(load.stats.acked) >= 300, 60, 0.1, "load")
        new = cluster.add_broker()
        assert new == 3
        move = tmp_path / "topics-to-move.json"
        move.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
        r = reassign(
            cluster,
            "--generate",
            "--topics-to-move-json-file",
            str(move),
            "--broker-list",
            "0,1,2,3",
        )
        proposed_json = r.stdout.split("Proposed partition reassignment configuration")[1]
        proposed = json.loads(proposed_json.strip().splitlines()[0])
        target = {(e["topic"], e["partition"]): e["replicas"] for e in proposed["partitions"]}
        assert len(target) == 6 and any(new in rs for rs in target.values()), target
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps(proposed))
        acked_before = len(load.stats.acked)
        t0 = time.monotonic()
        r = reassign(cluster, "--execute", "--reassignment-json-file", str(plan))
        assert "Successfully started partition reassignments" in r.stdout, r.stdout
        out = verify_until_done(cluster, plan)
        elapsed = time.monotonic() - t0
        for p in range(6):
            assert f"Reassignment of partition {topic}-{p} is completed" in out, out
        during = len(load.stats.acked) - acked_before
        time.sleep(1.0)
    finally:
        stats = load.stop()
    now = replicas_of(cluster, topic)
    assert now == {p: target[(topic, p)] for p in range(6)}, now
    # the replicas moved away are stopped and their logs deleted; the new ones hold data
    for p in range(6):
        for b in cluster.ids:
            if b in now[p]:
                assert has_log(cluster, b, topic, p), (b, p)
            elif b in before[p]:
                poll(lambda b=b, p=p: not has_log(cluster, b, topic, p), 30, 0.2, f"{b}:{p} gone")
    cluster.wait_isr_full(topic)

    print(f"\nreassignment of {topic} (6 partitions, RF 2) onto broker {new}: {elapsed:.1f} s")
    print(f"  {stats.summary()}; {during} acknowledged while it ran")
    assert not stats.failed, f"errors not retried: {dict(stats.failed)}"
    read = read_topic(cluster.bootstrap, topic, 6)
    result = check_records(read, [stats])
    values = [v for recs in read.values() for _, v in recs]
    acked = {stats.payload(a.seq) for a in stats.acked}
    lost = len(acked - set(values))
    duplicated = len(values) - len(set(values))
    print(f"  check: {result.summary()}; lost {lost}, duplicated {duplicated}")
    assert lost == 0 and duplicated == 0
    assert not result.problems, "\n".join(result.problems)

    r = tool(
        LEADER_ELECTION,
        ["--bootstrap-server", cluster.bootstrap, "--election-type", "preferred",
         "--all-topic-partitions"],
        ok=False,
    )  # fmt: skip
    assert r.returncode == 0 or "ELECTION_NOT_NEEDED" in r.stdout + r.stderr, r.stdout + r.stderr
    leaders = {p: i.leader for p, i in cluster.metadata([topic]).topic(topic).items()}
    assert all(leaders[p] == now[p][0] for p in range(6)), (leaders, now)
    assert new in leaders.values(), leaders


def test_cancel_returns_to_the_original_replicas(cluster, tmp_path):
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = unique_topic("cancel")
    # the replicas: the controller and one more; the spare is paused (never the controller,
    # which serves the tool)
    controller = cluster.metadata([]).controller_id
    spare = next(b for b in cluster.ids if b != controller)
    original = [controller, next(b for b in cluster.ids if b not in (controller, spare))]
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, replica_assignments={0: original})])
    finally:
        admin.close()
    cluster.wait_isr_full(topic)
    assert replicas_of(cluster, topic)[0] == original
    # Kafka 3.9's --cancel treats a reassignment as active only when it removes a replica (or
    # adds none): this one replaces the second replica by the spare
    # the added replica cannot catch up while its broker is paused: the reassignment stays
    plan = plan_file(tmp_path, "plan.json", {(topic, 0): [original[0], spare]})
    cluster.pause(spare)
    try:
        reassign(cluster, "--execute", "--reassignment-json-file", str(plan))
        r = reassign(cluster, "--verify", "--reassignment-json-file", str(plan), ok=False)
        assert f"Reassignment of partition {topic}-0 is still in progress" in r.stdout, r.stdout
        assert set(replicas_of(cluster, topic)[0]) == set(original) | {spare}
        # (--preserve-throttles: clearing the brokers' throttles sends each broker, the
        # paused one too, an IncrementalAlterConfigs)
        r = reassign(
            cluster, "--cancel", "--reassignment-json-file", str(plan), "--preserve-throttles"
        )
        assert f"Successfully cancelled partition reassignment for: {topic}-0" in r.stdout, r.stdout
    finally:
        cluster.resume(spare)
    poll(lambda: replicas_of(cluster, topic)[0] == original, 30, 0.2, "original replicas")
    r = reassign(cluster, "--list")
    assert "No partition reassignments found." in r.stdout, r.stdout
    poll(lambda: not has_log(cluster, spare, topic, 0), 30, 0.2, "the cancelled replica's log")


def test_replication_factor_two_to_three(cluster, tmp_path):
    topic = unique_topic("grow")
    cluster.create_topic(topic, 2, 2)
    before = replicas_of(cluster, topic)
    grown = {(topic, p): rs + [b for b in cluster.ids if b not in rs] for p, rs in before.items()}
    plan = plan_file(tmp_path, "grow.json", grown)
    reassign(cluster, "--execute", "--reassignment-json-file", str(plan))
    verify_until_done(cluster, plan)
    after = replicas_of(cluster, topic)
    assert after == {p: grown[(topic, p)] for p in before}
    cluster.wait_isr_full(topic)
    assert all(len(rs) == 3 for rs in after.values())


def test_execute_with_throttle(cluster, tmp_path):
    topic = unique_topic("throttle")
    cluster.create_topic(topic, 1, 2)
    original = replicas_of(cluster, topic)[0]
    spare = next(b for b in cluster.ids if b not in original)
    plan = plan_file(tmp_path, "plan.json", {(topic, 0): [spare, original[0]]})
    r = reassign(
        cluster, "--execute", "--reassignment-json-file", str(plan), "--throttle", "1000000"
    )
    assert "The inter-broker throttle limit was set to 1000000 B/s" in r.stdout, r.stdout
    described = tool(
        CONFIGS,
        ["--bootstrap-server", cluster.bootstrap, "--describe", "--entity-type", "topics",
         "--entity-name", topic],
    ).stdout  # fmt: skip
    assert "leader.replication.throttled.replicas=" in described, described
    assert "follower.replication.throttled.replicas=" in described, described
    verify_until_done(cluster, plan)  # and the throttles are cleared
    assert replicas_of(cluster, topic)[0] == [spare, original[0]]
    described = tool(
        CONFIGS,
        ["--bootstrap-server", cluster.bootstrap, "--describe", "--entity-type", "topics",
         "--entity-name", topic],
    ).stdout  # fmt: skip
    assert "throttled.replicas" not in described, described


def test_throttled_replicas_hold_back_a_catching_up_replica(cluster, tmp_path):
    """Throttled replicas (the topic configs) and rates (the brokers' dynamic default):
    3 MB at 50 kB/s take a minute to copy, so seconds after --execute the new replica is still
    catching up (a lower bound only: a slower machine makes it slower); the producer, whose
    followers are in the ISR, is not held back; once the throttled-replicas configs are
    deleted the reassignment completes and every record is there."""
    from kafka import KafkaProducer

    topic = unique_topic("throttled")
    cluster.create_topic(topic, 1, 2)
    original = replicas_of(cluster, topic)[0]
    spare = next(b for b in cluster.ids if b not in original)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=20)
    payload = b"x" * 3000
    for _ in range(1000):
        producer.send(topic, payload)
    producer.flush(60)
    producer.close()
    tool(
        CONFIGS,
        ["--bootstrap-server", cluster.bootstrap, "--alter", "--entity-type", "brokers",
         "--entity-default", "--add-config",
         "leader.replication.throttled.rate=50000,follower.replication.throttled.rate=50000"],
    )  # fmt: skip
    tool(
        CONFIGS,
        ["--bootstrap-server", cluster.bootstrap, "--alter", "--entity-type", "topics",
         "--entity-name", topic, "--add-config",
         "leader.replication.throttled.replicas=*,follower.replication.throttled.replicas=*"],
    )  # fmt: skip
    plan = plan_file(tmp_path, "plan.json", {(topic, 0): [*original, spare]})
    reassign(cluster, "--execute", "--reassignment-json-file", str(plan))
    time.sleep(3.0)
    r = reassign(cluster, "--list")
    assert f"{topic}-0: replicas: " in r.stdout and f"adding: {spare}." in r.stdout, r.stdout
    copied = sum(
        f.stat().st_size for f in (cluster.brokers[spare].log_dir / f"{topic}-0").glob("*.log")
    )
    assert copied < 2_000_000, f"{copied} bytes copied in 3 s at 50 kB/s"
    tool(
        CONFIGS,
        ["--bootstrap-server", cluster.bootstrap, "--alter", "--entity-type", "topics",
         "--entity-name", topic, "--delete-config",
         "leader.replication.throttled.replicas,follower.replication.throttled.replicas"],
    )  # fmt: skip
    verify_until_done(cluster, plan)
    assert replicas_of(cluster, topic)[0] == [*original, spare]
    read = read_topic(cluster.bootstrap, topic, 1)
    assert len(read[0]) == 1000 and all(v == payload for _, v in read[0])


def test_a_replica_removed_while_its_broker_is_down_is_deleted_when_it_returns(cluster, tmp_path):
    topic = unique_topic("away")
    cluster.create_topic(topic, 1, 2)
    original = replicas_of(cluster, topic)[0]
    gone, kept = original[1], original[0]
    spare = next(b for b in cluster.ids if b not in original)
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    producer.send(topic, b"v").get(30)  # acknowledged: both replicas hold it
    producer.close()
    poll(lambda: has_log(cluster, gone, topic, 0), 30, 0.1, "the replica's log")
    cluster.stop_broker(gone)
    plan = plan_file(tmp_path, "plan.json", {(topic, 0): [kept, spare]})
    reassign(cluster, "--execute", "--reassignment-json-file", str(plan))
    verify_until_done(cluster, plan)
    assert has_log(cluster, gone, topic, 0)  # it was down: nobody could delete it
    cluster.restart(gone)
    poll(lambda: not has_log(cluster, gone, topic, 0), 30, 0.2, "the stray log deleted")
    assert replicas_of(cluster, topic)[0] == [kept, spare]
