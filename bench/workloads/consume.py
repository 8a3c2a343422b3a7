"""Consume workloads: W3 (1 KiB records, Kafka's ConsumerPerformance), W12 and W14 (W3 over
SSL and SASL_SSL).
"""

from __future__ import annotations

import uuid
from pathlib import Path

from bench.clients import WorkloadError, create_topics, pp_cmd, producer_perf, run_java, show_cmd
from bench.targets import Target
from pybroker.testing import java

# W3 ---------------------------------------------------------------------------------------
# The topic holds 10% more records than a run reads, so that no partition runs dry before the
# count is reached: a Java consumer whose next fetch holds only drained partitions waits out
# fetch.max.wait.ms (500 ms) while the other partitions' records sit in its buffer, which added
# 0.5-2 s to a 2-3 s run of either broker, depending on how the partitions happened to group.
W3_SPARE = 1.1


def w3_setup(target: Target, sizes: dict) -> dict:
    topic = "w3"
    create_topics(target, [topic], 6)
    producer_perf(target, topic, int(sizes["w3_records"] * W3_SPARE), 1024, ["acks=1"])
    return {"sizes": sizes, "topic": topic}


def consumer_perf_args(bootstrap: str, topic: str, n: int, group: str) -> list[object]:
    return [
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--messages",
        n,
        "--group",
        group,
        "--timeout",
        60000,
    ]


def consumer_perf(args: list[object], n: int) -> dict[str, str]:
    """Run ConsumerPerformance; its figures row (column -> value), checked to have read n."""
    r = run_java(java.CONSUMER_PERFORMANCE, args, timeout=900)
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    head = next((k for k, ln in enumerate(lines) if ln.startswith("start.time")), None)
    if head is None or head + 1 >= len(lines):
        raise WorkloadError(f"ConsumerPerformance printed no figures\n{r.describe(3000)}")
    cols = [c.strip() for c in lines[head].split(",")]
    vals = [v.strip() for v in lines[head + 1].split(",")]
    row = dict(zip(cols, vals, strict=False))
    if int(float(row["data.consumed.in.nMsg"])) < n:
        raise WorkloadError(f"ConsumerPerformance read {row['data.consumed.in.nMsg']} of {n}")
    return row


def w3_run(target: Target, st: dict, i: int, tls: bool = False) -> dict[str, float]:
    n = st["sizes"]["w3_records"]
    bootstrap = target.tls_bootstrap if tls else target.bootstrap
    args = consumer_perf_args(bootstrap, st["topic"], n, f"w3-{i}-{uuid.uuid4().hex[:6]}")
    if tls:
        config = Path(target.log_dirs[0]).parent / f"consumer-tls-{i}.properties"
        config.write_text("".join(p + "\n" for p in target.tls_props))
        args += ["--consumer.config", str(config)]
    row = consumer_perf(args, n)
    return {
        "MB/s": float(row["MB.sec"]),
        "fetch MB/s": float(row["fetch.MB.sec"]),
        "_bytes": n * 1024,
    }


def w3_cmds(sizes: dict) -> list[str]:
    n = sizes["w3_records"]
    return [
        "setup: topic w3, 6 partitions; " + pp_cmd("w3", int(n * W3_SPARE), 1024, ["acks=1"]),
        show_cmd(java.CONSUMER_PERFORMANCE, consumer_perf_args("<bootstrap>", "w3", n, "w3-<run>")),
    ]


def w12_run(target: Target, st: dict, i: int) -> dict[str, float]:
    return w3_run(target, st, i, tls=True)


def w12_cmds(sizes: dict) -> list[str]:
    n = sizes["w3_records"]
    return [
        "as W11's TLS set-up; setup over PLAINTEXT: topic w3, 6 partitions; "
        + pp_cmd("w3", int(n * W3_SPARE), 1024, ["acks=1"]),
        show_cmd(
            java.CONSUMER_PERFORMANCE,
            [
                *consumer_perf_args("<ssl bootstrap>", "w3", n, "w3-<run>"),
                "--consumer.config",
                "<security.protocol=SSL, ssl.truststore.*>",
            ],
        ),
    ]


def w14_cmds(sizes: dict) -> list[str]:
    return ["as W13's SASL_SSL set-up; otherwise as W12", *w12_cmds(sizes)[1:]]
