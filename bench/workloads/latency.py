"""W4: end-to-end latency of 100 B records, acks=1 (Kafka's EndToEndLatency)."""

from __future__ import annotations

import re
import uuid

from bench.clients import WorkloadError, create_topics, run_java, show_cmd
from bench.targets import Target
from pybroker.testing import java

# W4 ---------------------------------------------------------------------------------------
_E2E_PCT = re.compile(r"Percentiles: 50th = ([\d.]+), 99th = ([\d.]+), 99\.9th = ([\d.]+)")
_E2E_AVG = re.compile(r"Avg latency: ([\d.]+) ms")


def w4_run(target: Target, st: dict, i: int) -> dict[str, float]:
    topic = f"w4-{i}-{uuid.uuid4().hex[:6]}"
    create_topics(target, [topic], 1)
    n = st["sizes"]["w4_messages"]
    r = run_java(java.END_TO_END_LATENCY, [target.bootstrap, topic, n, 1, 100], timeout=900)
    m, a = _E2E_PCT.search(r.stdout), _E2E_AVG.search(r.stdout)
    if not m:
        raise WorkloadError(f"EndToEndLatency printed no percentiles\n{r.describe(3000)}")
    return {"p50 ms": float(m.group(1)), "p99 ms": float(m.group(2)), "avg ms": float(a.group(1))}


def w4_cmds(sizes: dict) -> list[str]:
    return [
        "topic: 1 partition (fresh per run)",
        show_cmd(
            java.END_TO_END_LATENCY, ["<bootstrap>", "w4-<run>", sizes["w4_messages"], 1, 100]
        ),
    ]
