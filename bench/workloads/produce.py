"""Produce workloads: W1 (1 KiB, acks=1), W2 (100 B, acks=all, idempotent), W6 (3 brokers,
RF 3), W11 and W13 (W1 over SSL and SASL_SSL), all with Kafka's ProducerPerformance.
"""

from __future__ import annotations

import uuid

from bench.clients import create_topics, pp_cmd, producer_perf
from bench.targets import Target


# W1 ---------------------------------------------------------------------------------------
def w1_setup(target: Target, sizes: dict) -> dict:
    return {"sizes": sizes}


def w1_run(target: Target, st: dict, i: int) -> dict[str, float]:
    topic = f"w1-{i}-{uuid.uuid4().hex[:6]}"
    create_topics(target, [topic], 6)
    n = st["sizes"]["w1_records"]
    r = producer_perf(target, topic, n, 1024, ["acks=1"])
    return {"MB/s": r["MB/s"], "_bytes": n * 1024}


def w1_cmds(sizes: dict) -> list[str]:
    return [
        "topic: 6 partitions, RF 1 (fresh topic per run, kafka-python CreateTopics)",
        pp_cmd("w1-<run>", sizes["w1_records"], 1024, ["acks=1"]),
    ]


# W2 ---------------------------------------------------------------------------------------
W2_PROPS = ["acks=all", "enable.idempotence=true"]


def w2_run(target: Target, st: dict, i: int) -> dict[str, float]:
    topic = f"w2-{i}-{uuid.uuid4().hex[:6]}"
    create_topics(target, [topic], 6)
    n = st["sizes"]["w2_records"]
    r = producer_perf(target, topic, n, 100, W2_PROPS)
    return {"records/s": r["records/s"], "_bytes": n * 100}


def w2_cmds(sizes: dict) -> list[str]:
    return [
        "topic: 6 partitions, RF 1 (fresh topic per run)",
        pp_cmd("w2-<run>", sizes["w2_records"], 100, W2_PROPS),
    ]


# W6 ---------------------------------------------------------------------------------------
W6_PROPS = ["acks=all"]


def w6_run(target: Target, st: dict, i: int) -> dict[str, float]:
    topic = f"w6-{i}-{uuid.uuid4().hex[:6]}"
    create_topics(target, [topic], 6, rf=3, configs={"min.insync.replicas": "2"})
    n = st["sizes"]["w6_records"]
    r = producer_perf(target, topic, n, 1024, W6_PROPS)
    return {"MB/s": r["MB/s"], "_bytes": n * 1024}


def w6_cmds(sizes: dict) -> list[str]:
    return [
        "Kafka: 3 KRaft nodes (node 1 broker+controller); pybroker: 3 brokers + ZooKeeper",
        "topic: 6 partitions, RF 3, min.insync.replicas=2 (fresh per run)",
        pp_cmd("w6-<run>", sizes["w6_records"], 1024, W6_PROPS),
    ]


# W11, W12: W1 and W3 over TLS ----------------------------------------------------------------
def w11_run(target: Target, st: dict, i: int) -> dict[str, float]:
    topic = f"w11-{i}-{uuid.uuid4().hex[:6]}"
    create_topics(target, [topic], 6)
    n = st["sizes"]["w1_records"]
    r = producer_perf(target, topic, n, 1024, ["acks=1"], tls=True)
    return {"MB/s": r["MB/s"], "_bytes": n * 1024}


def w11_cmds(sizes: dict) -> list[str]:
    return [
        "both brokers: an SSL listener beside PLAINTEXT, ssl.keystore.type=PEM with a throwaway "
        "EC P-256 certificate (pybroker/testing/tls_certs.py); clients: security.protocol=SSL, "
        "ssl.truststore.type=PEM",
        "topic: 6 partitions, RF 1 (fresh per run, created over PLAINTEXT)",
        pp_cmd("w11-<run>", sizes["w1_records"], 1024, ["acks=1", "security.protocol=SSL", "..."]),
    ]


# W13, W14: W1 and W3 over SASL_SSL (SCRAM-SHA-512) -------------------------------------------
def w13_cmds(sizes: dict) -> list[str]:
    return [
        "both brokers: a SASL_SSL listener beside PLAINTEXT (W11's certificate; "
        "sasl.enabled.mechanisms=SCRAM-SHA-512, user bench: Kafka's kafka-storage format "
        "--add-scram, pybroker's add-scram); clients: security.protocol=SASL_SSL, "
        "sasl.mechanism=SCRAM-SHA-512",
        "topic: 6 partitions, RF 1 (fresh per run, created over PLAINTEXT)",
        pp_cmd(
            "w13-<run>", sizes["w1_records"], 1024, ["acks=1", "security.protocol=SASL_SSL", "..."]
        ),  # fmt: skip
    ]
