"""W24: groups of ``n`` members (classic with the cooperative-sticky assignor, and KIP-848):
time from the last join to a stable assignment, time to settle after one member leaves,
coordinator CPU, the largest JoinGroup/SyncGroup (or heartbeat) request and response.
Beside Kafka KRaft.

The command is bench/scale/cli.py; docs/scale.md discusses the curves.
"""

from __future__ import annotations

import time
from pathlib import Path

from bench.scale.harness import (
    Node,
    Results,
    System,
    profiled,
    run_on_each,
    start_kafka,
    start_pybroker,
    uuid_hex,
)
from pybroker.testing.procstat import cpu_seconds
from pybroker.testing.scale import (
    METADATA,
    Conn,
    create_topics,
    wait_all_answer,
)

FIND_COORDINATOR = 10
W24_OVERRIDES = {
    "group.coordinator.rebalance.protocols": "classic,consumer",
    "group.consumer.max.size": 100_000,  # Kafka's default is 200
    "group.max.size": 100_000,
}


def w24(system: System, n: int, res: Results, timeout_s: float) -> None:
    import asyncio

    from pybroker.testing.scale_groups import run_group

    w = "W24"
    node = next(iter(system.nodes.values()))
    topic = f"w24-{uuid_hex()}"
    partitions = 2 * n
    create_topics(node.address, [topic], partitions, 1, timeout_s)
    wait_all_answer(node.address, [topic], partitions, timeout_s, poll_s=0.5)
    with Conn(*node.address) as c:
        _, ans = c.request(
            METADATA, {"topics": [{"name": topic}], "allow_auto_topic_creation": False}
        )
    topic_id = ans["topics"][0]["topic_id"]
    res.add(w, n, system, "group coordinator available after (s)", _wait_coordinator(node, 120))
    pid = node.pid()
    assert pid is not None
    for protocol in ("classic", "consumer"):
        label = "classic (cooperative-sticky)" if protocol == "classic" else "KIP-848 (consumer)"
        try:
            with profiled(system, f"w24-{n}-{protocol}", rate=200):
                run = asyncio.run(
                    run_group(
                        node.host,
                        node.port,
                        protocol,
                        n,
                        topic,
                        topic_id,
                        partitions,
                        lambda: cpu_seconds([pid]),
                        timeout=timeout_s,
                    )
                )
        except Exception as e:  # noqa: BLE001 - recorded
            res.add(w, n, system, f"{label}: error", f"{type(e).__name__}: {str(e)[:300]}")
            continue
        res.add(w, n, system, f"{label}: last join -> stable (s)", run.join_to_stable_s)
        res.add(w, n, system, f"{label}: first join -> stable (s)", run.first_to_stable_s)
        res.add(w, n, system, f"{label}: one leaves -> stable (s)", run.leave_to_stable_s)
        res.add(w, n, system, f"{label}: coordinator CPU, joins (s)", run.cpu_join_s)
        res.add(w, n, system, f"{label}: coordinator CPU, one leave (s)", run.cpu_leave_s)
        names = {11: "JoinGroup", 14: "SyncGroup", 68: "ConsumerGroupHeartbeat"}
        for api, name in names.items():
            if api in run.stats.largest_request:
                res.add(
                    w,
                    n,
                    system,
                    f"{label}: largest {name} request / response (bytes)",
                    f"{run.stats.largest_request[api]:,} / {run.stats.largest_response[api]:,}",
                )
        res.add(w, n, system, f"{label}: requests sent", run.stats.requests)


def _wait_coordinator(node: Node, timeout_s: float) -> float:
    """FindCoordinator until it names a coordinator: Kafka creates __consumer_offsets on the
    first FindCoordinator, and answers JoinGroup and ConsumerGroupHeartbeat with
    COORDINATOR_NOT_AVAILABLE until then (the simulated members never ask it)."""
    t0 = time.monotonic()
    with Conn(*node.address) as c:
        while time.monotonic() - t0 < timeout_s:
            _, ans = c.request(FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": ["w24"]})
            if all(k["error_code"] == 0 for k in ans["coordinators"]):
                return time.monotonic() - t0
            time.sleep(0.2)
    raise TimeoutError(f"no group coordinator within {timeout_s}s")


def run_w24(size: int, targets: list[str], workdir: Path, res: Results, timeout_s: float):
    def start(kind: str, wd: Path) -> System:
        if kind == "pybroker":
            return start_pybroker(wd, brokers=1, overrides=W24_OVERRIDES)
        return start_kafka(wd, brokers=1, overrides=W24_OVERRIDES)

    run_on_each("W24", w24, start, size, targets, workdir, res, timeout_s)
