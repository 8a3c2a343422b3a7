"""W20: share groups (KIP-932), Apache Kafka 4.4 as the reference: 1, 4 and 8 share consumers
(a Java ShareConsumer program) read one topic; records/s and the broker's CPU per GiB.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from bench.clients import WorkloadError, create_topics, pp_cmd, producer_perf, run_java
from bench.targets import Target
from bench.workloads.base import CPU_METRIC, GIB, Metric
from pybroker.testing import java
from pybroker.testing.procstat import cpu_seconds

# W20 --------------------------------------------------------------------------------------
# Share groups (KIP-932): Apache Kafka 4.4 is the reference (3.9 has only their early-access
# v0); both brokers with their share-group defaults (records locks 30 s, 2,000 in-flight
# records per share-partition, max.poll.records 500 on the client)
W20_CONSUMERS = (1, 4, 8)
W20_SIZE = 1024


def w20_setup(target: Target, sizes: dict) -> dict:
    topic = f"w20-{uuid.uuid4().hex[:6]}"
    create_topics(target, [topic], 1)
    producer_perf(target, topic, sizes["w20_records"], W20_SIZE, ["acks=1"])
    workdir = Path(target.log_dirs[0]).parent / "w20"
    cp = java.compile_app("ShareConsumerPerf.java", workdir / "classes", kafka4=True)
    return {"sizes": sizes, "topic": topic, "cp": cp}


def _w20_read(target: Target, st: dict, consumers: int, i: int) -> dict[str, float]:
    """One fresh share group of ``consumers`` reads the topic whole; its figures and the broker's
    CPU seconds over the program's whole life (group set-up and JVM start included)."""
    n = st["sizes"]["w20_records"]
    group = f"w20-{consumers}-{i}-{uuid.uuid4().hex[:6]}"
    cpu0 = cpu_seconds(target.pids)
    r = run_java(
        "ShareConsumerPerf",
        [target.bootstrap, group, st["topic"], consumers, n],
        timeout=900,
        kafka4_cp=st["cp"],
    )
    cpu = cpu_seconds(target.pids) - cpu0
    line = next((e for e in r.json_lines() if "acknowledged" in e), None)
    if line is None or line["acknowledged"] < n:
        raise WorkloadError(f"ShareConsumerPerf: {line}\n{r.describe(3000)}")
    s = max(line["seconds"], 1e-3)
    return {
        f"{consumers} cons. delivered records/s": line["delivered"] / s,
        f"{consumers} cons. acknowledged records/s": line["acknowledged"] / s,
        f"{consumers} cons. {CPU_METRIC}": cpu / (n * W20_SIZE / GIB),
        f"{consumers} cons. redelivered": float(line["redelivered"]),
    }


def w20_run(target: Target, st: dict, i: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    for consumers in W20_CONSUMERS:
        figures.update(_w20_read(target, st, consumers, i))
    return figures


def w20_metrics() -> list[Metric]:
    out = []
    for c in W20_CONSUMERS:
        out += [
            Metric(f"{c} cons. delivered records/s", "records/s", True),
            Metric(f"{c} cons. acknowledged records/s", "records/s", True),
            Metric(f"{c} cons. {CPU_METRIC}", "s", False),
            Metric(f"{c} cons. redelivered", "", False),
        ]
    return out


def w20_cmds(sizes: dict) -> list[str]:
    n = sizes["w20_records"]
    return [
        "Kafka: Apache Kafka 4.4.0 (java/kafka4/pom.xml; KRaft, one node, share groups on by "
        "default, share.coordinator.state.topic RF 1), not 3.9; pybroker with its defaults",
        "setup: topic w20-<id>, 1 partition, RF 1; " + pp_cmd("w20-<id>", n, W20_SIZE, ["acks=1"]),
        "per run, for 1, 4 and 8 consumers, a fresh share group: `java -Xmx512m -cp $KAFKA4_CP "
        f"ShareConsumerPerf <bootstrap> w20-<c>-<run> w20-<id> <c> {n}` "
        "(java/kafka4/src/ShareConsumerPerf.java: kafka-clients 4.4.0, one KafkaShareConsumer "
        "per thread in one JVM, implicit acknowledgement, share.auto.offset.reset=earliest set "
        "through the Admin client first): records/s = records delivered (each delivery) and "
        "offsets acknowledged (the acknowledgement commit callbacks) over the seconds from the "
        "first record received to the last acknowledgement confirmed; CPU s/GiB = broker CPU "
        "seconds over the program's whole life per GiB of records read; redelivered = "
        "deliveries with a delivery count above 1",
    ]
