"""Apache Kafka's TransactionalMessageCopier (kafka-tools 3.9, the program Kafka's own system
tests use for exactly-once) against a 3-broker pybroker cluster on ZooKeeper (RF 3,
min.insync.replicas 2): it copies an input topic of known unique records to an output topic,
consuming read_committed and producing in transactions that carry the consumed offsets
(sendOffsetsToTransaction with the group's metadata), with random aborts.  The copier is killed
-9 mid-way and a new one with the same transactional id and group takes over; then the
transaction coordinator is killed -9 mid-way and restarted, then the leader of an output
partition.  At the end a read_committed
consumer of the output sees every input record exactly once."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition

from pybroker.testing import java
from pybroker.testing.client_helpers import poll_to_end, unique_topic
from pybroker.testing.cluster_harness import running_cluster

pytestmark = [
    pytest.mark.timeout(420),
    pytest.mark.skipif(not java.java_available(), reason="java not found (OpenJDK 17 expected)"),
]

COPIER = "org.apache.kafka.tools.TransactionalMessageCopier"
RECORDS = 20000
PARTITIONS = 4


def read_committed(bootstrap: str, topic: str, quiet_s: float = 4.0) -> list[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_topic("reader"),
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    try:
        c.assign([CTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        return [msg.value() for msg in poll_to_end(c, quiet_s)]  # to the end, or quiet_s
    finally:
        c.close()


def processed(copier: java.JavaProcess) -> int:
    """The copier's latest totalProcessed (records it committed since it started)."""
    total = 0
    for line in copier.stdout_text().splitlines():
        if line.startswith("{") and "totalProcessed" in line:
            try:
                total = json.loads(line)["totalProcessed"]
            except ValueError:
                pass
    return total


def wait_processed(copier: java.JavaProcess, at_least: int, timeout: float = 120.0) -> int:
    deadline = time.monotonic() + timeout
    while (n := processed(copier)) < at_least:
        assert copier.is_running(), copier.result().describe()
        assert time.monotonic() < deadline, copier.result().describe()
        time.sleep(0.3)
    return n


def kill9(copier: java.JavaProcess) -> None:
    try:
        os.killpg(copier.proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    copier.proc.wait(timeout=10)


def test_transactional_message_copier_exactly_once_through_kills(tmp_path):
    with running_cluster(tmp_path, 3, {"min.insync.replicas": 2}) as cluster:
        source, sink = unique_topic("copier-in"), unique_topic("copier-out")
        cluster.create_topic(source, partitions=PARTITIONS, rf=3)
        cluster.create_topic(sink, partitions=PARTITIONS, rf=3)
        bootstrap = cluster.bootstrap
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
        values = [f"value-{i:06d}".encode() for i in range(RECORDS)]
        for i, v in enumerate(values):
            producer.produce(source, key=f"k{i}".encode(), value=v, partition=i % PARTITIONS)
            if i % 1000 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0
        del producer

        tid, group = unique_topic("copier-tid"), unique_topic("copier-group")

        def start(n: int) -> java.JavaProcess:
            return java.start_main(
                COPIER,
                [
                    "--broker-list", bootstrap,
                    "--input-topic", source,
                    "--input-partition", "0",  # ignored in group mode
                    "--output-topic", sink,
                    "--transactional-id", tid,
                    "--consumer-group", group,
                    "--group-mode",
                    "--use-group-metadata",
                    "--enable-random-aborts",
                    "--transaction-size", "100",
                    "--transaction-timeout", "20000",
                ],
                workdir=tmp_path,
                name=f"copier{n}",
            )  # fmt: skip

        runs: list[str] = []
        copier = start(0)
        try:
            n = wait_processed(copier, 3000)
            kill9(copier)
            runs.append(f"copier0 killed -9 after committing {n}")
            copier = start(1)
            n = wait_processed(copier, 3000)
            err, coordinator = cluster.find_coordinator(tid, key_type=1)
            assert err == 0
            cluster.kill9(coordinator)
            runs.append(f"copier1 at {n}: transaction coordinator {coordinator} killed -9")
            time.sleep(3)
            cluster.restart(coordinator)
            cluster.wait_isr_full(sink)
            n = wait_processed(copier, 9000)
            leader = cluster.leader_of(sink, 1).leader
            cluster.kill9(leader)
            runs.append(f"copier1 at {n}: leader {leader} of {sink}-1 killed -9")
            time.sleep(3)
            cluster.restart(leader)
            result = copier.wait(timeout=180)
            runs.append(f"copier1 exit {result.returncode}, committed {processed(copier)}")
            assert result.ok, result.describe()
        finally:
            if copier.is_running():
                kill9(copier)
        print("; ".join(runs))

        seen = read_committed(bootstrap, sink)
        counts = Counter(seen)
        duplicates = {v: c for v, c in counts.items() if c > 1}
        missing = set(values) - set(counts)
        print(
            f"input {RECORDS} records, read_committed output {len(seen)} records, "
            f"{len(counts)} distinct, {len(duplicates)} duplicated, {len(missing)} missing"
        )
        assert not duplicates, sorted(duplicates.items())[:10]
        assert not missing, sorted(missing)[:10]
        assert set(counts) == set(values) and len(seen) == RECORDS
