"""W23: ``n`` concurrent client connections to one broker (idle, then each sending a small
request per second, spread over the second; the produce probe in a process of its own):
broker RSS per connection, accept rate, p99 of a produce meanwhile,
and the broker's longest event-loop stall (pybroker's loop.stall.warn.ms warnings) during a
storm of 1,000 connects in one second.  Beside Kafka KRaft.

The command is bench/scale/cli.py; docs/scale.md discusses the curves.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.scale.harness import (
    Results,
    System,
    longest_stall_ms,
    run_on_each,
    start_kafka,
    start_pybroker,
)
from pybroker.testing.procstat import cpu_seconds, rss_mib
from pybroker.testing.scale import (
    PRODUCE,
    Clients,
    Conn,
    create_topics,
    open_fds,
    wait_all_answer,
)
from pybroker.wire.records import build_batch

STORM = 1000  # connects in one second
TICK_SLICES = 50  # a second's requests sent in 50 slices, 20 ms apart


def _produce_latencies(
    address: tuple[str, int],
    topic: str,
    stop: threading.Event,
    ready: Callable[[], None] | None = None,
) -> list[float]:
    """Produce (acks=1, one 100-byte record) back to back until ``stop``: each round trip's
    seconds."""
    record = build_batch([(None, b"x" * 100, [])])
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 30000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": record}]}],
    }
    out: list[float] = []
    with Conn(*address) as c:
        if ready is not None:
            ready()
        while not stop.is_set():
            t0 = time.perf_counter()
            c.request(PRODUCE, body)
            out.append(time.perf_counter() - t0)
            time.sleep(0.01)
    return out


def _probe_main(address: tuple[str, int], topic: str, stop: Any, out: Any) -> None:
    out.put(_produce_latencies(address, topic, stop, lambda: out.put("ready")))


class ProduceProbe:
    """``_produce_latencies`` in a process of its own: the client connections' selector loop
    in this process holds the GIL for most of a tick, and a probe thread beside it would time
    the bench, not the broker."""

    def __init__(self, address: tuple[str, int], topic: str) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.stop, self.out = ctx.Event(), ctx.Queue()
        self.proc = ctx.Process(target=_probe_main, args=(address, topic, self.stop, self.out))
        self.proc.start()
        assert self.out.get(timeout=300) == "ready"  # (started and connected)

    def latencies(self) -> list[float]:
        """Stop the probe: every produce round trip's seconds."""
        self.stop.set()
        try:
            return self.out.get(timeout=300)
        finally:
            self.proc.join(60)


def _queued(clients: Clients) -> int:
    """Answers still expected on the connections that are still open (a connection the
    broker closed or never accepted is left out of the selector and expects none)."""
    live = clients.sel.get_map()
    return sum(v for s, v in clients.pending.items() if v > 0 and s in live)


def p99_ms(values: list[float]) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(len(v) * 0.99))] * 1000


def _median_ms(values: list[float]) -> float | None:
    return sorted(values)[len(values) // 2] * 1000 if values else None


def w23(system: System, n: int, res: Results, timeout_s: float) -> None:
    w = "W23"
    node = next(iter(system.nodes.values()))
    topic = "w23"
    create_topics(node.address, [topic], 1, 1, timeout_s)
    wait_all_answer(node.address, [topic], 1, timeout_s, poll_s=0.5)
    pid = node.pid()
    assert pid is not None
    time.sleep(3)
    rss0, fds0 = rss_mib([pid]), open_fds(pid)
    clients = Clients(node.address)
    try:
        c0, since = cpu_seconds([pid]), time.time()
        took = clients.open(n)
        res.add(w, n, system, "connect + ApiVersions, all (s)", took)
        res.add(w, n, system, "accept rate (connections/s)", n / took)
        res.add(w, n, system, "connections failed", clients.failed)
        res.add(w, n, system, "broker CPU for the connects (s)", cpu_seconds([pid]) - c0)
        res.add(
            w,
            n,
            system,
            "longest event-loop stall logged, connects (ms)",
            longest_stall_ms(system, since),
        )
        time.sleep(5)
        rss1 = rss_mib([pid])
        res.add(
            w,
            n,
            system,
            "open descriptors (before -> with the connections)",
            f"{fds0:,} -> {open_fds(pid):,}",
        )
        res.add(w, n, system, "RSS per idle connection (KiB)", (rss1 - rss0) * 1024 / n)
        # each connection sends a small request a second; a producer meanwhile
        probe = ProduceProbe(node.address, topic)
        answered0, c0, t0 = clients.answered, cpu_seconds([pid]), time.monotonic()
        since = time.time()
        for _ in range(20):  # each connection once a second, spread over the second
            tick = time.monotonic()
            for k in range(TICK_SLICES):
                clients.tick(k, TICK_SLICES)
                while time.monotonic() - tick < (k + 1) / TICK_SLICES:
                    clients.poll(0.005)
        lat = probe.latencies()
        busy = time.monotonic() - t0
        res.add(
            w,
            n,
            system,
            "small requests answered per second",
            (clients.answered - answered0) / busy,
        )
        res.add(
            w,
            n,
            system,
            "broker CPU per 1,000 requests (s)",
            (cpu_seconds([pid]) - c0) / max(1, clients.answered - answered0) * 1000,
        )
        res.add(w, n, system, "produce p99 meanwhile (ms)", p99_ms(lat))
        res.add(w, n, system, "produces meanwhile", len(lat))
        res.add(w, n, system, "RSS with active connections (MiB)", rss_mib([pid]))
        # the requests still queued (a broker slower than n requests a second) are answered
        # before the storm, so that the storm's figures are the storm's
        backlog, t1 = _queued(clients), time.monotonic()
        while _queued(clients) and time.monotonic() - t1 < 300:
            clients.poll(0.05)
        res.add(w, n, system, "requests still queued when the ticks stopped", backlog)
        res.add(w, n, system, "until they were answered (s)", time.monotonic() - t1)
        res.add(
            w,
            n,
            system,
            "longest event-loop stall logged, ticks (ms)",
            longest_stall_ms(system, since),
        )
        # a storm: STORM more connects in one second, a producer meanwhile
        probe = ProduceProbe(node.address, topic)
        since = time.time()
        storm = Clients(node.address)
        took = storm.open(STORM, spread_s=1.0)
        time.sleep(1)
        lat = probe.latencies()
        res.add(w, n, system, f"storm: {STORM:,} connects in 1 s, all answered after (s)", took)
        res.add(w, n, system, "storm: failed", storm.failed)
        res.add(w, n, system, "storm: produce p99 meanwhile (ms)", p99_ms(lat))
        # (p99 of ~200 round trips is their second-longest: the median and count beside it)
        res.add(w, n, system, "storm: produce median meanwhile (ms)", _median_ms(lat))
        res.add(w, n, system, "storm: produces meanwhile", len(lat))
        res.add(
            w,
            n,
            system,
            "storm: longest event-loop stall logged (ms)",
            longest_stall_ms(system, since),
        )
        storm.close()
    finally:
        clients.close()


def run_w23(size: int, targets: list[str], workdir: Path, res: Results, timeout_s: float):
    def start(kind: str, wd: Path) -> System:
        if kind == "pybroker":
            return start_pybroker(wd, brokers=1, overrides={"max.connections.per.ip": 1_000_000})
        return start_kafka(wd, brokers=1)

    run_on_each("W23", w23, start, size, targets, workdir, res, timeout_s)
