"""The workloads W1-W17 (docs/bench.md), one module per family, and the sizes per scale.

- produce: W1, W2, W6 (3 brokers), W11 (TLS), W13 (SASL_SSL)
- consume: W3, W12 (TLS), W14 (SASL_SSL)
- latency: W4; python_clients: W5; groups: W7, W16, W17; partitions: W8, W15;
  compaction: W9; transactions: W10; share_groups: W20

``WORKLOADS`` maps each id to its ``Workload`` (base.py): metrics, setup, run, commands.
"""

from __future__ import annotations

from bench.workloads.base import CPU_METRIC, GIB, MIB, Metric, Workload, no_setup
from bench.workloads.compaction import W9_OVERRIDES, w9_cmds, w9_run, w9_setup
from bench.workloads.consume import w3_cmds, w3_run, w3_setup, w12_cmds, w12_run, w14_cmds
from bench.workloads.groups import (
    W16_OVERRIDES,
    W17_OVERRIDES,
    w7_cmds,
    w7_run,
    w7_setup,
    w16_cmds,
    w16_run,
    w16_setup,
    w17_cmds,
    w17_run,
)
from bench.workloads.latency import w4_cmds, w4_run
from bench.workloads.partitions import w8_cmds, w8_run, w8_setup, w15_cmds, w15_run, w15_setup
from bench.workloads.produce import (
    w1_cmds,
    w1_run,
    w1_setup,
    w2_cmds,
    w2_run,
    w6_cmds,
    w6_run,
    w11_cmds,
    w11_run,
    w13_cmds,
)
from bench.workloads.python_clients import w5_cmds, w5_run
from bench.workloads.share_groups import w20_cmds, w20_metrics, w20_run, w20_setup
from bench.workloads.transactions import w10_cmds, w10_run

# record counts etc. per scale; each full-scale run lasts roughly 5-30 s on a 2-core machine
SIZES = {
    "full": {
        "w1_records": 300_000,
        "w2_records": 500_000,
        "w3_records": 300_000,
        "w4_messages": 1_500,
        "w5_records": 200_000,
        "w6_records": 60_000,
        "w7_members": 10,
        "w8_topics": 100,
        "w8_parts_per_topic": 100,
        "w8_connections": 1_000,
        "w9_bytes": GIB,
        "w9_keys": 100_000,
        "w10_transactions": 2_000,
        "w15_partitions": 1_000,
        "w20_records": 200_000,
    },
    "small": {
        "w1_records": 30_000,
        "w2_records": 100_000,
        "w3_records": 30_000,
        "w4_messages": 300,
        "w5_records": 10_000,
        "w6_records": 20_000,
        "w7_members": 10,
        "w8_topics": 10,
        "w8_parts_per_topic": 100,
        "w8_connections": 100,
        "w9_bytes": 128 * MIB,
        "w9_keys": 12_500,
        "w10_transactions": 200,
        "w15_partitions": 1_000,
        "w20_records": 20_000,
    },
    "smoke": {"w1_records": 2_000},
}


WORKLOADS: dict[str, Workload] = {
    w.wid: w
    for w in [
        Workload(
            "W1",
            "produce 1 KiB, acks=1, 6 partitions (ProducerPerformance)",
            [Metric("MB/s", "MB/s", True), Metric(CPU_METRIC, "s", False)],
            w1_setup,
            w1_run,
            w1_cmds,
        ),
        Workload(
            "W2",
            "produce 100 B, acks=all, idempotent (ProducerPerformance)",
            [Metric("records/s", "records/s", True), Metric(CPU_METRIC, "s", False)],
            no_setup,
            w2_run,
            w2_cmds,
        ),
        Workload(
            "W3",
            "consume 1 KiB records (ConsumerPerformance)",
            [
                Metric("MB/s", "MB/s", True),
                Metric("fetch MB/s", "MB/s", True),
                Metric(CPU_METRIC, "s", False),
            ],
            w3_setup,
            w3_run,
            w3_cmds,
        ),
        Workload(
            "W4",
            "end-to-end latency, 100 B, acks=1 (EndToEndLatency)",
            [Metric("p50 ms", "ms", False), Metric("p99 ms", "ms", False)],
            no_setup,
            w4_run,
            w4_cmds,
        ),
        Workload(
            "W5",
            "kafka-python producer / consumer, 1 KiB",
            [
                Metric("produce MB/s", "MB/s", True),
                Metric("consume MB/s", "MB/s", True),
                Metric(CPU_METRIC, "s", False),
            ],
            no_setup,
            w5_run,
            w5_cmds,
        ),
        Workload(
            "W6",
            "3 brokers, RF=3, acks=all produce 1 KiB (ProducerPerformance)",
            [Metric("MB/s", "MB/s", True), Metric(CPU_METRIC, "s", False)],
            no_setup,
            w6_run,
            w6_cmds,
            brokers=3,
        ),
        Workload(
            "W7",
            "consumer-group rebalance, 10 kafka-python members",
            [
                Metric("join s", "s", False),
                Metric("leave s", "s", False),
                Metric("retries", "", False),
            ],
            w7_setup,
            w7_run,
            w7_cmds,
        ),
        Workload(
            "W8",
            "scale: 10,000 partitions, 1,000 idle connections",
            [
                Metric("create s", "s", False),
                Metric("metadata ms", "ms", False),
                Metric("response KiB", "KiB", False),
                Metric("RSS MiB (partitions)", "MiB", False),
                Metric("RSS MiB (+conns)", "MiB", False),
                Metric("conn RSS KiB each", "KiB", False),
                Metric("metadata ms (+conns)", "ms", False),
            ],
            w8_setup,
            w8_run,
            w8_cmds,
        ),
        Workload(
            "W9",
            "log cleaner: compact 1 GiB, 10% live keys; produce p99 meanwhile",
            [
                Metric("cleaner MB/s", "MB/s", True),
                Metric(CPU_METRIC, "s", False),
                Metric("produce p99 ms idle", "ms", False),
                Metric("produce p99 ms cleaning", "ms", False),
                Metric("p99 cleaning / idle", "", False),
                Metric("log left %", "%", False),
            ],
            w9_setup,
            w9_run,
            w9_cmds,
            overrides=W9_OVERRIDES,
        ),
        Workload(
            "W10",
            "transactions: 100 records of 1 KiB per transaction, 6 partitions; read_committed "
            "consume",
            [
                Metric("transactions/s", "txn/s", True),
                Metric("records/s", "records/s", True),
                Metric("read_committed MB/s", "MB/s", True),
                Metric(CPU_METRIC, "s", False),
            ],
            w1_setup,
            w10_run,
            w10_cmds,
        ),
        Workload(
            "W11",
            "W1 over TLS: produce 1 KiB, acks=1, 6 partitions, SSL listener",
            [Metric("MB/s", "MB/s", True), Metric(CPU_METRIC, "s", False)],
            w1_setup,
            w11_run,
            w11_cmds,
            tls="SSL",
        ),
        Workload(
            "W12",
            "W3 over TLS: consume 1 KiB records (ConsumerPerformance), SSL listener",
            [
                Metric("MB/s", "MB/s", True),
                Metric("fetch MB/s", "MB/s", True),
                Metric(CPU_METRIC, "s", False),
            ],
            w3_setup,
            w12_run,
            w12_cmds,
            tls="SSL",
        ),
        Workload(
            "W13",
            "W1 over SASL_SSL (SCRAM-SHA-512): produce 1 KiB, acks=1, 6 partitions",
            [Metric("MB/s", "MB/s", True), Metric(CPU_METRIC, "s", False)],
            w1_setup,
            w11_run,
            w13_cmds,
            tls="SASL_SSL",
        ),
        Workload(
            "W14",
            "W3 over SASL_SSL (SCRAM-SHA-512): consume 1 KiB records (ConsumerPerformance)",
            [
                Metric("MB/s", "MB/s", True),
                Metric("fetch MB/s", "MB/s", True),
                Metric(CPU_METRIC, "s", False),
            ],
            w3_setup,
            w12_run,
            w14_cmds,
            tls="SASL_SSL",
        ),
        Workload(
            "W15",
            "fetch sessions: a consumer of 1,000 idle partitions, full vs incremental fetches",
            [
                Metric("full fetch CPU ms", "ms", False),
                Metric("incremental fetch CPU ms", "ms", False),
                Metric("full / incremental", "", True),
                Metric("full answer KiB", "KiB", False),
                Metric("incremental answer B", "B", False),
            ],
            w15_setup,
            w15_run,
            w15_cmds,
        ),
        Workload(
            "W16",
            "KIP-848: five Java 4.1 consumers to a stable assignment, consumer vs classic",
            [
                Metric("consumer protocol s", "s", False),
                Metric("classic protocol s", "s", False),
            ],
            w16_setup,
            w16_run,
            w16_cmds,
            overrides=W16_OVERRIDES,
        ),
        Workload(
            "W17",
            "KIP-848 online migration: classic group upgraded by consumer members, then downgraded",
            [Metric("upgrade s", "s", False), Metric("downgrade s", "s", False)],
            w16_setup,
            w17_run,
            w17_cmds,
            overrides=W17_OVERRIDES,
        ),
        Workload(
            "W20",
            "share groups (KIP-932): 1 partition, 1/4/8 share consumers (Kafka 4.4 reference)",
            w20_metrics(),
            w20_setup,
            w20_run,
            w20_cmds,
            kafka4=True,
        ),
    ]
}
