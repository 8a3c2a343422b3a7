"""Several log dirs (JBOD) on real broker processes, driven with kafka-python.

- partitions spread over the dirs; AlterReplicaLogDirs moves every replica to the other dir
  under an idempotent acks=all producer: nothing acknowledged is lost or duplicated, and the
  data is then in the other dir;
- a log dir replaced by a regular file (every open below it fails, for root too) takes only
  its partitions offline: the other dir's partitions keep serving, the broker keeps running;
  with every dir failed the broker halts with status 1, as Kafka does;
- on a three-broker ZooKeeper cluster, the partitions whose replica was in the failed dir lose
  that broker from their ISR and their leadership moves to another broker; the others keep it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pybroker.testing import rawkafka
from pybroker.testing.client_helpers import unique_topic
from pybroker.testing.cluster_harness import (
    Cluster,
    KafkaPythonLoad,
    check_records,
    read_topic,
    wait_until,
)
from pybroker.testing.debug_process import BrokerProcess
from pybroker.testing.procutil import free_port
from pybroker.testing.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.timeout(240)
KAFKA_STORAGE_ERROR = 56


def admin(bootstrap: str):
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, client_id="log-dirs-test")


def placement(adm, topic: str) -> dict[str, tuple[int, dict[int, bool]]]:
    """{log dir: (error code, {partition of topic: is_future})} of the first broker."""
    (broker,) = adm.describe_log_dirs()
    out = {}
    for d in broker["log_dirs"]:
        parts = {
            p["partition_index"]: p["is_future_key"]
            for t in d["topics"]
            if t["name"] == topic
            for p in t["partitions"]
        }
        out[d["log_dir"]] = (d["error_code"], parts)
    return out


def fail(path: Path) -> None:
    """The disk under a log dir is gone: the dir is a regular file from now on.  The dir is
    renamed away first, at once: removing it in place raced the running broker, whose file
    created meanwhile (a checkpoint, a segment) left it not empty (OSError 39, seen once in
    CI); the renamed copy is then removed."""
    gone = path.with_name(path.name + ".gone")
    path.rename(gone)
    path.write_text("this log dir failed")
    shutil.rmtree(gone, ignore_errors=True)


def test_partitions_spread_and_moves_under_load_lose_nothing(start_broker, tmp_path):
    from kafka.admin import NewTopic
    from kafka.errors import NoError
    from kafka.structs import TopicPartitionReplica

    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    b = start_broker(**{"log.dirs": f"{d1},{d2}"})
    topic = unique_topic("jbod-move")
    adm = admin(b.bootstrap)
    try:
        adm.create_topics([NewTopic(topic, 4, 1)])
        wait_until(lambda: sum(len(p) for _, p in placement(adm, topic).values()) == 4, 30)
        before = placement(adm, topic)
        assert sorted(len(parts) for _, parts in before.values()) == [2, 2]  # fewest first
        load = KafkaPythonLoad("kp", b.bootstrap, topic, 4, 0.002)
        load.start()
        wait_until(lambda: len(load.stats.acked) >= 300, 60, what="load running")
        moves = {
            TopicPartitionReplica(topic, p, b.broker_id): str(d2 if d == str(d1) else d1)
            for d, (_, parts) in before.items()
            for p in parts
        }
        assert set(adm.alter_replica_log_dirs(moves).values()) == {NoError}

        def moved():
            now = placement(adm, topic)
            return all(
                now[target][1].get(r.partition) is False for r, target in moves.items()
            ) and not any(True in parts.values() for _, parts in now.values())

        wait_until(moved, 60, what="every replica in its new dir")
        acked_at_move = len(load.stats.acked)
        wait_until(lambda: len(load.stats.acked) >= acked_at_move + 300, 60, what="more load")
        stats = load.stop()
    finally:
        adm.close()
    result = check_records(read_topic(b.bootstrap, topic, 4), [stats])
    assert result.problems == [], result.problems
    for r, target in moves.items():
        assert (Path(target) / f"{topic}-{r.partition}").is_dir()
        source = d1 if Path(target) == d2 else d2
        assert not (source / f"{topic}-{r.partition}").exists()
    print(f"\n{len(stats.acked)} records acknowledged, all read back once")


def _produce(
    bootstrap: str, topic: str, partition: int, value: bytes, timeout: float = 10, retries=0
):
    """One record, acks=all, acknowledged within ``timeout`` (``retries``: None, the client's
    default, retries a retriable error such as NOT_LEADER_OR_FOLLOWER until then)."""
    from kafka import KafkaProducer

    extra = {} if retries is None else {"retries": retries}
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", max_block_ms=5000, **extra)
    try:
        return producer.send(topic, value, partition=partition).get(timeout=timeout)
    finally:
        producer.close(timeout=5)


def test_a_failed_dir_takes_only_its_partitions_offline(start_broker, tmp_path):
    from kafka.admin import NewTopic

    # the first dir also holds the embedded metadata store: it stays healthy here
    meta, d1, d2 = tmp_path / "meta", tmp_path / "d1", tmp_path / "d2"
    metrics_port = free_port()
    b = start_broker(
        **{
            "log.dirs": f"{meta},{d1},{d2}",
            "log.flush.offset.checkpoint.interval.ms": 200,
            "metrics.listener": f"http://127.0.0.1:{metrics_port}",
        }
    )
    topic = unique_topic("jbod-fail")
    adm = admin(b.bootstrap)
    try:
        adm.create_topics([NewTopic(topic, 6, 1)])
        wait_until(lambda: sum(len(p) for _, p in placement(adm, topic).values()) == 6, 30)
        for p in range(6):
            _produce(b.bootstrap, topic, p, b"before")
        lost = sorted(placement(adm, topic)[str(d2)][1])
        kept = sorted(set(range(6)) - set(lost))
        assert len(lost) == 2
        fail(d2)
        wait_until(
            lambda: placement(adm, topic)[str(d2)][0] == KAFKA_STORAGE_ERROR, 30, what="d2 offline"
        )
    finally:
        adm.close()
    for p in kept:
        _produce(b.bootstrap, topic, p, b"after")
    with rawkafka.Conn(b.host, b.port) as conn:  # what the broker answers, client aside
        for p in lost:
            _, body = conn.roundtrip(
                rawkafka.produce_v3(p, topic, p, rawkafka.record_batch_v2([(None, b"lost")]))
            )
            assert rawkafka.parse_produce_v3(body) == [(topic, p, KAFKA_STORAGE_ERROR, -1)]
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in kept]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got: dict[int, list[bytes]] = {p: [] for p in kept}

        def all_read():
            for recs in consumer.poll(timeout_ms=500).values():
                for r in recs:
                    got[r.partition].append(r.value)
            return all(len(v) == 2 for v in got.values())

        wait_until(all_read, 30, 0, "the healthy partitions read back")
    finally:
        consumer.close()
    assert got == {p: [b"before", b"after"] for p in kept}
    assert b.is_running()
    assert f"log dir {d2} is offline" in b.output()
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        samples = {
            (s.name, tuple(s.labels.values())): s.value
            for f in text_string_to_metric_families(r.read().decode())
            for s in f.samples
        }
    assert samples[("kafka_log_logmanager_offlinelogdirectorycount", ())] == 1
    assert samples[("kafka_server_replicamanager_offlinereplicacount", ())] == 2
    assert samples[("kafka_log_logmanager_logdirectoryoffline", (str(d2),))] == 1
    assert samples[("kafka_log_logmanager_logdirectoryoffline", (str(d1),))] == 0


def test_every_dir_failed_halts_the_broker(zookeeper, tmp_path):
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    b = BrokerProcess(
        tmp_path / "broker",
        zookeeper_connect=zookeeper.connect,
        overrides={"log.dirs": f"{d1},{d2}", "log.flush.offset.checkpoint.interval.ms": 200},
    )
    b.start()
    try:
        fail(d1)
        assert b.is_running()
        fail(d2)
        assert b.proc.wait(timeout=30) == 1
        assert "Shutdown broker because all log dirs in" in b.output()
    finally:
        if b.is_running():
            b.stop()
        b.cleanup()


@contextlib.contextmanager
def jbod_cluster(tmp_path: Path):
    """Three brokers on a private ZooKeeper, each with log dirs d1 and d2 in its workdir."""
    zk = ZooKeeperServer(tmp_path / "zookeeper")
    zk.start()
    cluster = Cluster(tmp_path, zk, 3, {"log.flush.offset.checkpoint.interval.ms": 200})
    for br in cluster.brokers.values():
        br.overrides["log.dirs"] = f"{br.workdir / 'd1'},{br.workdir / 'd2'}"
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.cleanup()
        zk.stop()


def test_moving_leader_and_follower_replicas_on_a_cluster_loses_nothing(tmp_path):
    from kafka.errors import NoError
    from kafka.structs import TopicPartitionReplica

    with jbod_cluster(tmp_path) as cluster:
        topic = unique_topic("jbod-cluster-move")
        cluster.create_topic(topic, partitions=4, rf=3, configs={"min.insync.replicas": "2"})
        mover = 1  # leads some of the partitions, follows the others
        work = cluster.brokers[mover].workdir
        # where broker 1 made each replica (metadata names the replicas before their logs exist)
        here = {p: dirs[mover] for p, dirs in cluster.wait_replicas_on_disk(topic, 4).items()}
        load = KafkaPythonLoad("kp", cluster.bootstrap, topic, 4, 0.002)
        load.start()
        wait_until(lambda: len(load.stats.acked) >= 300, 60, what="load running")
        moves = {
            TopicPartitionReplica(topic, p, mover): str(work / ("d2" if d.name == "d1" else "d1"))
            for p, d in here.items()
        }
        adm = admin(cluster.bootstrap)
        try:
            assert set(adm.alter_replica_log_dirs(moves).values()) == {NoError}
        finally:
            adm.close()

        def moved():
            return all(
                (Path(t) / f"{topic}-{r.partition}").is_dir()
                and not (here[r.partition] / f"{topic}-{r.partition}").exists()
                for r, t in moves.items()
            ) and not any(n.endswith("-future") for d in ("d1", "d2") for n in os.listdir(work / d))

        wait_until(moved, 60, what="every replica of broker 1 in its other dir")
        acked = len(load.stats.acked)
        wait_until(lambda: len(load.stats.acked) >= acked + 300, 60, what="more load")
        stats = load.stop()
        cluster.wait_isr_full(topic, partitions=4)
        result = check_records(read_topic(cluster.bootstrap, topic, 4), [stats])
        assert result.problems == [], result.problems
        problems = cluster.stop()
        assert problems == [], problems


def test_a_failed_dir_moves_leadership_on_a_zookeeper_cluster(tmp_path):
    with jbod_cluster(tmp_path) as cluster:
        topic = unique_topic("jbod-cluster")
        cluster.create_topic(topic, partitions=6, rf=3, configs={"min.insync.replicas": "2"})
        # metadata names the leaders before the brokers made their logs: look at the disk
        # once every replica is there (a replica not made yet is not one in the other dir)
        on_disk = cluster.wait_replicas_on_disk(topic, partitions=6)
        for i in cluster.ids:  # the fewest logs first: three replicas per dir on each broker
            assert sorted(Counter(dirs[i].name for dirs in on_disk.values()).items()) == [
                ("d1", 3),
                ("d2", 3),
            ], (i, on_disk)
        victim = cluster.metadata([topic]).topic(topic)[0].leader
        failed = on_disk[0][victim]
        lost = sorted(p for p, dirs in on_disk.items() if dirs[victim] == failed)
        kept = sorted(set(range(6)) - set(lost))
        assert 0 in lost and len(lost) == 3
        fail(failed)

        def moved():
            parts = cluster.metadata([topic]).topic(topic)
            return all(
                parts[p].leader not in (victim, -1) and victim not in parts[p].isr for p in lost
            ) and all(victim in parts[p].isr for p in kept)

        wait_until(moved, 60, what="leadership off the failed replicas")
        # acks=all still works everywhere (two in-sync replicas left); a new leader named by
        # metadata may not have taken the leadership yet: NOT_LEADER_OR_FOLLOWER is retried,
        # as every Kafka client does
        for p in range(6):
            _produce(cluster.bootstrap, topic, p, b"after-failure", timeout=20, retries=None)
        # AlterReplicaLogDirs to a broker that holds no replica of the partition
        from kafka.admin import NewTopic
        from kafka.errors import ReplicaNotAvailableError
        from kafka.structs import TopicPartitionReplica

        single = unique_topic("jbod-single")
        adm = admin(cluster.bootstrap)
        try:
            other = next(i for i in cluster.ids if i != victim)  # both its dirs are online
            adm.create_topics([NewTopic(single, -1, -1, replica_assignments={0: [victim]})])
            # Kafka answers REPLICA_NOT_AVAILABLE only once the broker's own metadata has the
            # partition (UNKNOWN_TOPIC_OR_PARTITION before): wait on that broker, not any broker.
            wait_until(lambda: cluster.metadata([single], via=[other]).topic(single), 30)
            elsewhere = TopicPartitionReplica(single, 0, other)
            target = str(cluster.brokers[other].workdir / "d1")
            assert adm.alter_replica_log_dirs({elsewhere: target}) == {
                elsewhere: ReplicaNotAvailableError
            }
        finally:
            adm.close()
        assert cluster.brokers[victim].is_running()
        problems = cluster.stop()
        assert problems == [], problems


def test_kafka_log_dirs_tool_describes_both_dirs(start_broker, tmp_path):
    """Kafka 3.9's kafka-log-dirs --describe (LogDirsCommand) against a two-dir broker."""
    import json

    from kafka.admin import NewTopic

    from pybroker.testing import java

    with java.deps_or_fail():
        java.classpath()
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    b = start_broker(**{"log.dirs": f"{d1},{d2}"})
    topic = unique_topic("jbod-tool")
    adm = admin(b.bootstrap)
    try:
        adm.create_topics([NewTopic(topic, 4, 1)])
        wait_until(lambda: sum(len(p) for _, p in placement(adm, topic).values()) == 4, 30)
    finally:
        adm.close()
    r = java.run_main(
        "org.apache.kafka.tools.LogDirsCommand",
        ["--bootstrap-server", b.bootstrap, "--describe", "--topic-list", topic],
        timeout=120,
    )
    assert r.ok, r.stdout + r.stderr
    (line,) = [x for x in r.stdout.splitlines() if x.startswith('{"brokers"')]
    (broker,) = json.loads(line)["brokers"]
    dirs = {d["logDir"]: d for d in broker["logDirs"]}
    assert set(dirs) == {str(d1), str(d2)}
    for d in dirs.values():
        assert d["error"] is None
        assert len(d["partitions"]) == 2
        for p in d["partitions"]:
            assert p["partition"].startswith(f"{topic}-") and p["isFuture"] is False
