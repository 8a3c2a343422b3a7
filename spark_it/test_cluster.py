"""Spark against three pybroker processes on one ZooKeeper (pybroker/testing/cluster_harness.py), topics
with RF 3 and min.insync.replicas=2, and kill -9 of a partition leader:

- batch: reads before the kill, during a read (the kill lands while the job's tasks run),
  after the kill with the broker still down (records produced after the kill included), and
  after the restart: each read returns every record exactly once.
- streaming: readStream + checkpoint + trigger(processingTime) into a Parquet sink keeps
  running across the kill; records produced (acks=all) before the kill, right after it
  (during the election) and after the restart all land in the sink exactly once; a
  restarted availableNow run on the same checkpoint then reads nothing new.

The killed broker is restarted at the end and every ISR must be full again. No timing
assertions: waits are bounded, and the counts and the observed failover are printed.
"""

from __future__ import annotations

import threading
import time

import pytest

from pybroker.testing.cluster_harness import Cluster, wait_until
from pybroker.testing.zookeeper import ZooKeeperServer
from spark_it.conftest import SparkBrokerProcess
from spark_it.kafkadata import Rec, produce, unique_topic
from spark_it.pipelines import topic_to_files
from spark_it.sparkio import batch_read, comparable, idents, read_parquet_dir

pytestmark = pytest.mark.timeout(420)

PARTITIONS = 3
TOPIC_CONFIGS = {"min.insync.replicas": "2"}
WAIT_S = 150  # bound for every wait on the cluster or on Spark

# what Spark's clients get on the cluster: a consumer poll long enough to ride out an
# election (ZooKeeper session timeout 6 s + the controller's work), fresh metadata, and a
# shorter admin call timeout: a driver ListOffsets call already assigned to the killed
# leader waits for that node until default.api.timeout.ms ("Timed out waiting for a node
# assignment"), and Spark then retries with a new AdminClient (fetchOffset.numRetries)
SPARK_CLUSTER_OPTIONS = {
    "kafka.request.timeout.ms": "10000",
    "kafka.default.api.timeout.ms": "15000",
    "kafkaConsumer.pollTimeoutMs": "90000",
    "kafka.metadata.max.age.ms": "3000",
    "kafka.reconnect.backoff.max.ms": "1000",
}
# kafka-python producer: idempotent, acks=all (kafkadata.produce), retries through failover
PRODUCER_CONFIG = {
    "enable_idempotence": True,
    "retries": 2**31 - 1,
    "request_timeout_ms": 10000,
    "delivery_timeout_ms": 120000,
    "max_block_ms": 60000,
    "retry_backoff_ms": 100,
    "reconnect_backoff_max_ms": 1000,
    "metadata_max_age_ms": 3000,
}


@pytest.fixture
def cluster(request, tmp_path):
    """compat_tests' Cluster (private ZooKeeper, brokers 0-2) whose brokers are conftest's
    SparkBrokerProcess (INFO log), so their WARNING/ERROR lines are printed per test and their
    logs attached to a failure."""
    zk = ZooKeeperServer(tmp_path / "zookeeper")
    zk.start()
    c = Cluster(tmp_path, zk, size=3)
    for i, b in list(c.brokers.items()):
        c.brokers[i] = SparkBrokerProcess(
            b.workdir,
            zookeeper_connect=b.zookeeper_connect,
            overrides=b.overrides,
            broker_id=i,
            port=b.port,
            chroot=b.chroot,
            log_level="INFO",
        )
    request.node._spark_brokers = list(c.brokers.values())
    try:
        c.start()
        yield c
        problems = c.stop()
    finally:
        c.cleanup()
        zk.stop()
    if problems:
        pytest.fail("brokers did not stop cleanly: " + "; ".join(problems), pytrace=False)


def _records(n: int, start: int = 0, tag: str = "r") -> list[Rec]:
    return [
        Rec(b"%s-%d" % (tag.encode(), i), b"v-%d" % i, i % PARTITIONS)
        for i in range(start, start + n)
    ]


def _produce(cluster, topic: str, records: list[Rec]) -> list[Rec]:
    return produce(cluster.bootstrap, topic, records, **PRODUCER_CONFIG)


def _victim(cluster, topic: str) -> tuple[int, int]:
    """(partition, leader): a partition whose leader is not the controller (if any)."""
    md = cluster.metadata([topic])
    parts = sorted(md.topic(topic).items())
    for p, info in parts:
        if info.leader != md.controller_id:
            return p, info.leader
    return parts[0][0], parts[0][1].leader


def _check_exactly_once(label: str, got: list[Rec], sent: list[Rec]) -> None:
    dups = len(got) - len(set(idents(got)))
    print(f"{label}: {len(got)} records of {len(sent)} sent, {dups} duplicates")
    assert dups == 0, f"{label}: duplicates"
    assert comparable(got) == comparable(sent), f"{label}: records differ"


def _restart_and_wait(cluster, broker_id: int, topic: str) -> None:
    cluster.restart(broker_id)
    t0 = time.monotonic()
    md = cluster.wait_isr_full(topic, timeout=WAIT_S, partitions=PARTITIONS)
    leaders = {p: i.leader for p, i in sorted(md.topic(topic).items())}
    print(
        f"broker {broker_id} restarted; ISRs full after {time.monotonic() - t0:.1f}s, "
        f"leaders {leaders}"
    )


class KillDuringJob(threading.Thread):
    """kill -9 `broker_id` once a Spark job has completed some tasks and still runs more."""

    def __init__(self, spark, cluster, broker_id: int, after_tasks: int = 2):
        super().__init__(daemon=True, name="kill-during-job")
        self.tracker = spark.sparkContext.statusTracker()
        self.cluster, self.broker_id, self.after_tasks = cluster, broker_id, after_tasks
        self.armed = threading.Event()
        self.done = threading.Event()
        self.where = "not killed"
        self.deadline = time.monotonic() + WAIT_S

    def _progress(self) -> tuple[int, int] | None:
        """(completed, total) tasks of the running stage, or None."""
        for sid in self.tracker.getActiveStageIds():
            info = self.tracker.getStageInfo(sid)
            if info is not None:
                return info.numCompletedTasks, info.numTasks
        return None

    def run(self) -> None:
        try:
            self.armed.wait()
            seen_job = False
            while time.monotonic() < self.deadline and not self.done.is_set():
                prog = self._progress()
                if prog is not None:
                    seen_job = True
                    completed, total = prog
                    if completed >= self.after_tasks:
                        self.cluster.kill9(self.broker_id)
                        self.where = f"during the read, after {completed} of {total} tasks"
                        return
                time.sleep(0.02)
            # the job ended before the trigger point: kill now (between reads)
            self.cluster.kill9(self.broker_id)
            self.where = "after the read (it ended first)" if seen_job else "no job seen"
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.where = f"kill thread failed: {e!r}"


def test_batch_read_survives_leader_kill9(spark, cluster):
    t = unique_topic("spark-cluster-batch")
    cluster.create_topic(t, PARTITIONS, rf=3, configs=TOPIC_CONFIGS)
    bs = cluster.bootstrap
    sent = _produce(cluster, t, _records(240))
    print(f"\n{t}: RF 3, min.insync.replicas=2, {len(sent)} records produced (acks=all)")

    got = batch_read(spark, bs, subscribe=t, **SPARK_CLUSTER_OPTIONS)
    _check_exactly_once("read 1 (all brokers up)", got, sent)

    partition, leader = _victim(cluster, t)
    old = cluster.leader_of(t, partition)
    # many small tasks (minPartitions) run two at a time: the kill lands between them
    killer = KillDuringJob(spark, cluster, leader)
    killer.start()
    killer.armed.set()
    try:
        got = batch_read(spark, bs, subscribe=t, minPartitions=24, **SPARK_CLUSTER_OPTIONS)
    finally:
        killer.done.set()
        killer.join(WAIT_S)
    print(f"kill -9 broker {leader} (leader of partition {partition}): {killer.where}")
    assert leader not in cluster.running(), killer.where
    _check_exactly_once("read 2 (kill -9 of a leader during it)", got, sent)

    info = cluster.wait_new_leader(t, partition, leader, timeout=WAIT_S)
    print(
        f"partition {partition}: leader {old.leader} epoch {old.leader_epoch} -> "
        f"{info.leader} epoch {info.leader_epoch}, isr {info.isr}"
    )
    sent += _produce(cluster, t, _records(90, start=240, tag="after-kill"))
    got = batch_read(spark, bs, subscribe=t, **SPARK_CLUSTER_OPTIONS)
    _check_exactly_once(f"read 3 (broker {leader} down, 90 more records)", got, sent)

    _restart_and_wait(cluster, leader, t)
    got = batch_read(spark, bs, subscribe=t, **SPARK_CLUSTER_OPTIONS)
    _check_exactly_once("read 4 (after the restart)", got, sent)


def test_stream_survives_leader_kill9(spark, cluster, tmp_path):
    t = unique_topic("spark-cluster-stream")
    cluster.create_topic(t, PARTITIONS, rf=3, configs=TOPIC_CONFIGS)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    query = topic_to_files.start(
        spark,
        cluster.bootstrap,
        t,
        out,
        ckpt,
        extra_options=SPARK_CLUSTER_OPTIONS,
        trigger={"processingTime": "1 second"},
    )
    sent: list[Rec] = []

    def sink_reaches(n: int, label: str) -> None:
        def ready():
            if query.exception() is not None:
                raise AssertionError(f"query failed ({label}): {query.exception()}")
            assert query.isActive, f"query stopped ({label})"
            return len(read_parquet_dir(spark, out)) >= n

        wait_until(ready, WAIT_S, 1.0, f"{n} rows in the sink ({label})")
        got = read_parquet_dir(spark, out)
        _check_exactly_once(f"sink ({label})", got, sent)

    try:
        print(f"\n{t}: RF 3, min.insync.replicas=2, processingTime=1 s into {out}")
        sent += _produce(cluster, t, _records(90, tag="before"))
        sink_reaches(len(sent), "90 before the kill")

        partition, leader = _victim(cluster, t)
        cluster.kill9(leader)
        t_kill = time.monotonic()
        print(f"kill -9 broker {leader} (leader of partition {partition})")
        # produced right away: acks=all waits for the election on `partition`
        sent += _produce(cluster, t, _records(90, start=90, tag="after-kill"))
        info = cluster.leader_of(t, partition)
        print(
            f"90 records acknowledged {time.monotonic() - t_kill:.1f}s after the kill; "
            f"partition {partition} now led by {info.leader} (epoch {info.leader_epoch})"
        )
        sink_reaches(len(sent), "+90 after the kill")

        _restart_and_wait(cluster, leader, t)
        sent += _produce(cluster, t, _records(60, start=180, tag="after-restart"))
        sink_reaches(len(sent), "+60 after the restart")
        batches = query.lastProgress["batchId"] + 1 if query.lastProgress else 0
        print(f"query ran {batches} micro-batches")
    finally:
        query.stop()
    assert query.exception() is None, query.exception()

    # the checkpoint is consistent: a restarted (availableNow) run finds nothing new
    progress = topic_to_files.run(
        spark, cluster.bootstrap, t, out, ckpt, extra_options=SPARK_CLUSTER_OPTIONS
    )
    got = read_parquet_dir(spark, out)
    print(f"restart from the checkpoint: {sum(p['numInputRows'] for p in progress)} new rows")
    assert sum(p["numInputRows"] for p in progress) == 0
    _check_exactly_once("sink (final)", got, sent)
