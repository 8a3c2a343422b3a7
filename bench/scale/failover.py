"""W22: three brokers on one ZooKeeper, ``n`` partition replicas (n/3 partitions, RF 3):
controller failover (kill -9 of the controller) until every partition has a live leader and
a produce to every partition succeeds; the killed broker restarted until it is back in every
ISR; a controlled shutdown (SIGTERM) of another broker until it exits, and how many
partitions had no live leader meanwhile.  ZooKeeper requests (its ``srvr`` Received count)
during each step.  Beside Kafka 3.9 in ZooKeeper mode (the comparison is about ZooKeeper).

The command is bench/scale/cli.py; docs/scale.md discusses the curves.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.scale.harness import (
    Node,
    Results,
    System,
    _logged,
    _run_on_each,
    measure_cpu,
    profiled,
    start_kafka,
    start_pybroker,
    zk_received,
    zk_srvr,
)
from pybroker.testing.procstat import cpu_seconds, rss_mib
from pybroker.testing.scale import (
    PER_TOPIC,
    UNREACHABLE,
    ClusterMetadata,
    Conn,
    create_topics,
    metadata,
    produce_everywhere,
    topic_names,
    wait_all_answer,
)
from pybroker.testing.zookeeper import ZooKeeperServer


def _live_addresses(system: System) -> dict[int, tuple[str, int]]:
    return {n.node_id: n.address for n in system.live()}


def _metadata_from(system: System, names: list[str] | None) -> ClusterMetadata | None:
    for n in system.live():
        try:
            with Conn(*n.address, timeout_s=60) as c:
                return metadata(c, names)
        except UNREACHABLE:
            continue
    return None


def _controller(system: System) -> int:
    for _ in range(600):
        md = _metadata_from(system, [])
        if md is not None and md.controller in system.nodes:
            return md.controller
        time.sleep(0.1)
    raise TimeoutError("no controller")


@dataclass
class _Run:
    """One W22 run (a system at a size): what its steps share, where their figures go."""

    system: System
    n_replicas: int
    res: Results
    timeout_s: float
    names: list[str]

    @property
    def zk(self) -> ZooKeeperServer:
        assert self.system.zk is not None  # W22 runs on ZooKeeper
        return self.system.zk

    def add(self, metric: str, value: Any) -> None:
        self.res.add("W22", self.n_replicas, self.system, metric, value)


def w22(system: System, n_replicas: int, res: Results, timeout_s: float) -> None:
    partitions = max(PER_TOPIC, n_replicas // 3)
    names = topic_names(partitions)
    first = next(iter(system.nodes.values())).address
    run = _Run(system, n_replicas, res, timeout_s, names)
    zk = run.zk
    with profiled(system, f"w22-{n_replicas}-create"):
        c0, z0, t0 = measure_cpu(system), zk_received(zk), time.monotonic()
        create_topics(first, names, PER_TOPIC, 3, timeout_s)
        wait_all_answer(first, names, PER_TOPIC, timeout_s)
        took = time.monotonic() - t0
    run.add("create: until every partition answers (s)", took)
    run.add("create: brokers' CPU (s)", measure_cpu(system) - c0)
    run.add("create: ZooKeeper requests", zk_received(zk) - z0)
    # every ISR full before the failover (followers caught up)
    _wait_isrs_full(system, names, timeout_s)
    time.sleep(5)
    run.add("RSS at rest, all brokers (MiB)", rss_mib(system.pids()))
    run.add("ZooKeeper znodes at rest", zk_srvr(zk, "Node count"))
    # -- controller failover
    ctrl = _controller(system)
    victim = system.nodes[ctrl]
    survivors = [n for n in system.nodes.values() if n.node_id != ctrl]
    with profiled(system, f"w22-{n_replicas}-failover", survivors):
        _w22_failover(run, victim, survivors)
    # -- the killed broker restarts
    with profiled(system, f"w22-{n_replicas}-restart", survivors):
        _w22_restart(run, victim)
    # -- controlled shutdown of the broker (not the controller) leading the most partitions
    ctrl = _controller(system)
    md = _metadata_from(system, names) or ClusterMetadata({}, -1, {})
    counts = {n.node_id: 0 for n in system.live() if n.node_id != ctrl}
    for _, _, info in md.partitions():
        if info.leader in counts:
            counts[info.leader] += 1
    target = system.nodes[max(counts, key=lambda b: counts[b])]
    run.add("controlled shutdown: partitions it led", counts[target.node_id])
    with profiled(system, f"w22-{n_replicas}-shutdown"):
        _w22_controlled_shutdown(run, target)


def _w22_failover(run: _Run, victim: Node, survivors: list[Node]) -> None:
    system, names, timeout_s, zk = run.system, run.names, run.timeout_s, run.zk
    partitions = len(names) * PER_TOPIC
    c0, z0 = cpu_seconds([p for n in survivors if (p := n.pid())]), zk_received(zk)
    t0 = time.monotonic()
    victim.kill9()
    led_s = produce_s = None
    new_ctrl = None
    deadline = t0 + timeout_s
    while time.monotonic() < deadline:
        md = _metadata_from(system, names)
        if md is not None:
            live = set(_live_addresses(system))
            if (
                led_s is None
                and all(info.leader in live for _, _, info in md.partitions())
                and sum(1 for _ in md.partitions()) == partitions
            ):
                led_s = time.monotonic() - t0
                new_ctrl = md.controller
            if led_s is not None:
                if produce_everywhere(survivors[0].address, md) == 0:
                    produce_s = time.monotonic() - t0
                    break
        time.sleep(0.25)
    run.add("failover: kill -9 -> every partition led (s)", led_s)
    run.add("failover: kill -9 -> produce to every partition ok (s)", produce_s)
    run.add(
        "failover: survivors' CPU (s)",
        cpu_seconds([p for n in survivors if (p := n.pid())]) - c0,
    )
    run.add("failover: ZooKeeper requests", zk_received(zk) - z0)
    run.add("failover: new controller", new_ctrl)


def _w22_restart(run: _Run, victim: Node) -> None:
    system, names, timeout_s, zk = run.system, run.names, run.timeout_s, run.zk
    others = [p for n in system.nodes.values() if n is not victim and (p := n.pid())]
    c0, z0, t0 = cpu_seconds(others), zk_received(zk), time.monotonic()
    victim.restart()
    listening = back = None
    while time.monotonic() - t0 < timeout_s:
        if listening is None:
            try:
                with Conn(*victim.address, timeout_s=5) as c:
                    metadata(c, [])
                listening = time.monotonic() - t0
            except UNREACHABLE:
                time.sleep(0.25)
                continue
        md = _metadata_from(system, names)
        if md is not None:
            missing = sum(
                1
                for _, _, info in md.partitions()
                if victim.node_id in info.replicas and victim.node_id not in info.isr
            )
            if not missing:
                back = time.monotonic() - t0
                break
        time.sleep(0.5)
    pid = victim.pid()
    run.add("restart: start -> listening (s)", listening)
    run.add("restart: start -> back in every ISR (s)", back)
    run.add(
        "restart: CPU of the restarted broker (s)",
        cpu_seconds([pid] if pid else []),
    )
    run.add("restart: CPU of the other brokers (s)", cpu_seconds(others) - c0)
    run.add("restart: ZooKeeper requests", zk_received(zk) - z0)


def _w22_controlled_shutdown(run: _Run, target: Node) -> None:
    system, names, timeout_s, zk = run.system, run.names, run.timeout_s, run.zk
    z0, t0, since = zk_received(zk), time.monotonic(), time.time()
    worst = [0, 0]  # most partitions without a live leader; of them, with leader -1
    stop_sampling = threading.Event()

    def sample() -> None:
        while not stop_sampling.is_set():
            md = _metadata_from(system, names)
            if md is not None:  # (the broker shutting down serves until it exits)
                live = {n.node_id for n in system.live()}
                down = [i.leader for _, _, i in md.partitions() if i.leader not in live]
                if len(down) > worst[0]:
                    worst[:] = [len(down), down.count(-1)]
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    code = target.terminate(timeout_s)
    exit_s = time.monotonic() - t0
    stop_sampling.set()
    sampler.join()
    run.add("controlled shutdown: SIGTERM -> exit (s)", exit_s)
    run.add("controlled shutdown: exit code", code)
    run.add("controlled shutdown: most partitions without leader", worst[0])
    run.add("controlled shutdown: of them with leader -1", worst[1])
    run.add(
        "controlled shutdown: ZooKeeper sessions lost meanwhile",
        _logged(system, since, "ZooKeeper session LOST"),
    )
    run.add("controlled shutdown: ZooKeeper requests", zk_received(zk) - z0)
    md = _metadata_from(system, names)
    live = set(_live_addresses(system))
    led = sum(1 for _, _, i in md.partitions() if i.leader in live) if md else 0
    run.add("controlled shutdown: partitions led after exit", led)


def _wait_isrs_full(system: System, names: list[str], timeout_s: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        md = _metadata_from(system, names)
        if md is not None and all(set(i.isr) == set(i.replicas) for _, _, i in md.partitions()):
            return time.monotonic() - t0
        time.sleep(1)
    raise TimeoutError("ISRs not full")


def run_w22(size: int, targets: list[str], workdir: Path, res: Results, timeout_s: float):
    def start(kind: str, wd: Path) -> System:
        if kind == "pybroker":
            return start_pybroker(wd, brokers=3)
        return start_kafka(wd, brokers=3, metadata_mode="zookeeper")

    _run_on_each("W22", w22, start, size, targets, workdir, res, timeout_s)
