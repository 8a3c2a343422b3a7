"""Exactly-once with Apache Kafka's own EOS test program, TransactionalMessageCopier (what
Kafka's system tests run): one copier per input partition reads with read_committed,
writes transactionally and commits its consumed offsets in the transaction (KIP-447's group
metadata), with random aborts, on a 3-broker ZooKeeper cluster (RF 3).  Mid-way a copier is
killed -9 and started again with the same transactional id (the old one fenced, the new one
resuming from the committed offsets), and a broker is killed -9 and restarted.  A
read_committed consumer then reads every input record exactly once from the output."""

from __future__ import annotations

import json
import signal
import time

import pytest

from compat_tests import java
from compat_tests.cluster import running_cluster, wait_until
from compat_tests.helpers import unique_topic

pytestmark = [
    pytest.mark.timeout(420),
    pytest.mark.skipif(not java.java_available(), reason="java not found"),
]
COPIER = "org.apache.kafka.tools.TransactionalMessageCopier"
PER_PARTITION = 3000


def _progress(proc: java.JavaProcess) -> int:
    """Messages the copier reports consumed (its last JSON progress line)."""
    consumed = 0
    for line in proc.stdout_text().splitlines():
        if line.startswith("{"):
            try:
                consumed = max(consumed, int(json.loads(line).get("consumed", 0)))
            except ValueError:
                continue
    return consumed


def test_transactional_message_copier_exactly_once_across_kill9(tmp_path):
    from kafka import KafkaConsumer, KafkaProducer

    with running_cluster(tmp_path, 3, {"min.insync.replicas": 2}) as cluster:
        src, dst, group = unique_topic("eos-in"), unique_topic("eos-out"), unique_topic("copy")
        cluster.create_topic(src, partitions=2, rf=3)
        cluster.create_topic(dst, partitions=2, rf=3)
        cluster.wait_isr_full(src)
        p = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=5)
        expected = []
        for part in range(2):
            for i in range(PER_PARTITION):
                v = f"p{part}-{i}".encode()
                p.send(src, v, partition=part)
                expected.append(v)
        p.flush(60)
        p.close()

        def copier(part: int, run: int) -> java.JavaProcess:
            return java.start_main(
                COPIER,
                ["--broker-list", cluster.bootstrap, "--input-topic", src,
                 "--input-partition", str(part), "--output-topic", dst,
                 "--transactional-id", f"{group}-{part}", "--consumer-group", group,
                 "--transaction-size", "50", "--enable-random-aborts",
                 "--use-group-metadata"],
                workdir=tmp_path / "copiers",
                name=f"copier-{part}-{run}",
            )  # fmt: skip

        procs = {0: copier(0, 0), 1: copier(1, 0)}
        # kill -9 copier 0 once it is under way, and start it again with the same id
        wait_until(lambda: _progress(procs[0]) >= 500, 120, 0.2, "copier 0 under way")
        java._kill_group(procs[0].proc, signal.SIGKILL)
        procs[0].proc.wait(10)
        procs[0] = copier(0, 1)
        # kill -9 the transaction coordinator of copier 1's id, then restart it
        err, coordinator = cluster.find_coordinator(f"{group}-1", key_type=1)
        assert err == 0
        wait_until(lambda: _progress(procs[1]) >= 500, 120, 0.2, "copier 1 under way")
        cluster.kill9(coordinator)
        time.sleep(2)
        cluster.restart(coordinator)
        for proc in procs.values():
            r = proc.wait(300)
            assert r.returncode == 0, r.describe(4000)

        c = KafkaConsumer(
            dst,
            bootstrap_servers=cluster.bootstrap,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            consumer_timeout_ms=15000,
        )
        try:
            got = [m.value for m in c]
        finally:
            c.close()
        print(f"output: {len(got)} records read_committed, {len(set(got))} distinct, "
              f"{len(expected)} expected")  # fmt: skip
        assert len(got) == len(set(got)), "duplicates in the output"
        assert sorted(got) == sorted(expected)
