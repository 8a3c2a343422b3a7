"""Scale benchmarks W21-W24 (issue 27): pybroker beside Apache Kafka 3.9 at Kafka's upper limits.

    python -m bench.scale [--workloads W21,W22,W23,W24] [--sizes 1000,10000,100000]
                          [--targets pybroker,kafka] [--results FILE] [--keep DIR]

* W21: one broker, ``n`` partitions (topics of 100, RF 1; CreateTopics 50 topics at a time):
  time (and broker CPU) until every partition answers ListOffsets; RSS and open descriptors at
  rest; Metadata for all topics (time, bytes); a producer writing round-robin to min(n,
  10,000) partitions and a consumer group reading them (MB/s, broker CPU s per GiB); a clean
  restart and a restart after kill -9 until the broker listens and until every partition
  answers.  pybroker with its embedded store (``--w21-metadata zookeeper``: on ZooKeeper)
  beside Kafka in KRaft mode (one node).
* W22: three brokers on one ZooKeeper, ``n`` partition replicas (n/3 partitions, RF 3):
  controller failover (kill -9 of the controller) until every partition has a live leader and
  a produce to every partition succeeds; the killed broker restarted until it is back in every
  ISR; a controlled shutdown (SIGTERM) of another broker until it exits, and how many
  partitions had no live leader meanwhile.  ZooKeeper requests (its ``srvr`` Received count)
  during each step.  Beside Kafka 3.9 in ZooKeeper mode (the comparison is about ZooKeeper).
* W23: ``n`` concurrent client connections to one broker (idle, then each sending a small
  request per second, spread over the second; the produce probe in a process of its own):
  broker RSS per connection, accept rate, p99 of a produce meanwhile,
  and the broker's longest event-loop stall (pybroker's loop.stall.warn.ms warnings) during a
  storm of 1,000 connects in one second.  Beside Kafka KRaft.
* W24: groups of ``n`` members (classic with the cooperative-sticky assignor, and KIP-848):
  time from the last join to a stable assignment, time to settle after one member leaves,
  coordinator CPU, the largest JoinGroup/SyncGroup (or heartbeat) request and response.
  Beside Kafka KRaft.

Every figure goes to ``--results`` (default bench/results/<date>-scale.md) with the command,
the load average before and after, and the machine.  Wall times on a shared machine are
distorted by its load: CPU seconds and counts (ZooKeeper requests, bytes) are given too.
docs/scale.md discusses the curves.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pybroker.wire.messages  # noqa: F401  (declares every API's schema)
from pybroker.testing import kafka_reference
from pybroker.testing.process import BrokerProcess
from pybroker.testing.procstat import cpu_seconds, rss_mib
from pybroker.testing.scale import (
    HOST,
    METADATA,
    PER_TOPIC,
    PRODUCE,
    UNREACHABLE,
    Clients,
    ClusterMetadata,
    Conn,
    create_topics,
    metadata,
    open_fds,
    produce_everywhere,
    topic_names,
    wait_all_answer,
)
from pybroker.testing.zookeeper import ZooKeeperServer
from pybroker.wire.records import build_batch

ROOT = Path(__file__).resolve().parent.parent


SESSION_TIMEOUT_MS = 6000  # ZooKeeper session of every broker, both systems (W22)
MIB = 1 << 20
GIB = 1 << 30


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


# ------------------------------------------------------------------------------------------
# ZooKeeper request counts (srvr's "Received")
# ------------------------------------------------------------------------------------------


def zk_received(zk: ZooKeeperServer) -> int:
    return zk_srvr(zk, "Received")


def zk_srvr(zk: ZooKeeperServer, field: str) -> int:
    """A number from ZooKeeper's ``srvr`` answer ("Received", "Node count"); -1: none."""
    try:
        with socket.create_connection(("127.0.0.1", zk.port), timeout=5) as s:
            s.sendall(b"srvr")
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
    except OSError:
        return -1
    for line in reply.decode(errors="replace").splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split(":")[1])
    return -1


# ------------------------------------------------------------------------------------------
# the systems under test
# ------------------------------------------------------------------------------------------


@dataclass
class Node:
    """One broker of either system: its id, address and how to signal it."""

    node_id: int
    host: str
    port: int
    pid: Callable[[], int | None]
    kill9: Callable[[], None]
    terminate: Callable[[float], int | None]  # SIGTERM, wait: exit code
    restart: Callable[[], None]  # start again, not waiting for it
    running: Callable[[], bool]

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)


@dataclass(eq=False)
class System:
    kind: str  # "pybroker" or "kafka"
    mode: str  # "embedded", "zookeeper", "kraft"
    nodes: dict[int, Node]
    stop: Callable[[], None]
    zk: ZooKeeperServer | None = None
    notes: list[str] = field(default_factory=list)

    def pids(self) -> list[int]:
        return [p for n in self.nodes.values() if (p := n.pid()) is not None]

    def live(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.running()]


def _py_node(b: BrokerProcess) -> Node:
    def terminate(timeout: float) -> int | None:
        proc = b.proc
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def restart() -> None:
        b._spawn()

    return Node(
        b.broker_id,
        b.host,
        b.port,
        lambda: b.pid if b.is_running() else None,
        b.kill9,
        terminate,
        restart,
        b.is_running,
    )


PYBROKER_OVERRIDES = {
    "group.initial.rebalance.delay.ms": 0,
    "max.broker.partitions": 1_000_000,
    "zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS,
    "replica.lag.time.max.ms": 30000,
    "log.flush.offset.checkpoint.interval.ms": 60000,
}


def start_pybroker(
    workdir: Path,
    brokers: int = 1,
    metadata_mode: str = "embedded",
    overrides: dict[str, object] | None = None,
    timeout: float = 300,
) -> System:
    zk = None
    connect = None
    if metadata_mode == "zookeeper" or brokers > 1:
        zk = ZooKeeperServer(workdir / "zookeeper")
        zk.start()
        connect = zk.connect
    settings = {**PYBROKER_OVERRIDES, **(overrides or {})}
    procs: dict[int, BrokerProcess] = {}
    chroot = None
    for i in range(brokers):
        b = BrokerProcess(
            workdir / f"pybroker{i}",
            zookeeper_connect=connect,
            overrides=settings,
            broker_id=i,
            chroot=chroot,
        )
        chroot = b.chroot
        procs[i] = b
    try:
        for b in procs.values():
            b.start(timeout)
    except BaseException:
        for b in procs.values():
            b.cleanup()
        if zk:
            zk.stop()
        raise

    def stop() -> None:
        for b in procs.values():
            if b.is_running():
                try:
                    b.stop(timeout=600)
                except AssertionError as e:
                    log(f"pybroker {b.broker_id} stop: {str(e)[:300]}")
            b.cleanup()
        if zk:
            zk.stop()

    nodes = {i: _py_node(b) for i, b in procs.items()}
    system = System("pybroker", "zookeeper" if connect else "embedded", nodes, stop, zk)
    STDERR[system] = lambda: "".join(
        b.stderr_path.read_text(errors="replace") for b in procs.values()
    )
    return system


def _kafka_node(n: kafka_reference.KafkaNode) -> Node:
    def terminate(timeout: float) -> int | None:
        n.signal(signal.SIGTERM)
        return n.wait(timeout)

    return Node(
        n.node_id,
        HOST,
        n.port,
        lambda: n.proc.pid if n.is_running() else None,
        n.kill9,
        terminate,
        n.start,
        n.is_running,
    )


KAFKA_OVERRIDES: dict[str, object] = {
    "group.initial.rebalance.delay.ms": 0,
    "zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS,
}


def start_kafka(
    workdir: Path,
    brokers: int = 1,
    metadata_mode: str = "kraft",
    overrides: dict[str, object] | None = None,
    heap: str = "1g",
) -> System:
    settings = {**KAFKA_OVERRIDES, **(overrides or {})}
    if metadata_mode == "kraft":
        settings.pop("zookeeper.session.timeout.ms", None)
        assert brokers == 1
        ref = kafka_reference.start_kafka(workdir / "kafka", overrides=settings, heap=heap)
        zk = None
    else:
        zk = ZooKeeperServer(workdir / "zookeeper")
        zk.start()
        try:
            ref = kafka_reference.start_kafka_zk(
                brokers, zk.connect + "/kafka", workdir / "kafka", overrides=settings, heap=heap
            )
        except BaseException:
            zk.stop()
            raise

    def stop() -> None:
        ref.stop(timeout=600, check=False)
        if zk:
            zk.stop()

    nodes = {n.node_id: _kafka_node(n) for n in ref.nodes}
    return System("kafka", metadata_mode, nodes, stop, zk, [f"heap -Xmx{heap}"])


# ------------------------------------------------------------------------------------------
# results
# ------------------------------------------------------------------------------------------


@dataclass
class Results:
    path: Path | None
    rows: list[dict[str, Any]] = field(default_factory=list)

    def add(self, workload: str, size: int, system: System | str, metric: str, value: Any):
        kind = system if isinstance(system, str) else f"{system.kind} ({system.mode})"
        row = {"workload": workload, "size": size, "system": kind, "metric": metric}
        row["value"] = value
        self.rows.append(row)
        log(f"  {workload} n={size:,} {kind}: {metric} = {fmt(value)}")

    def table(self) -> str:
        out = ["| workload | n | system | metric | value |", "|---|---|---|---|---|"]
        for r in self.rows:
            out.append(
                f"| {r['workload']} | {r['size']:,} | {r['system']} | {r['metric']} "
                f"| {fmt(r['value'])} |"
            )
        return "\n".join(out)


def fmt(v: Any) -> str:
    if isinstance(v, float):
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        if abs(v) >= 10:
            return f"{v:.1f}"
        return f"{v:.3g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


KEEP = False
PROFILE_DIR: Path | None = None


@contextlib.contextmanager
def profiled(system: System, step: str, nodes: list[Node] | None = None) -> Iterator[None]:
    """py-spy record (raw) of the pybroker nodes during a step, with --profile."""
    spies = []
    if PROFILE_DIR is not None and system.kind == "pybroker":
        for n in nodes if nodes is not None else list(system.nodes.values()):
            pid = n.pid()
            if pid is None:
                continue
            out = PROFILE_DIR / f"{step}-broker{n.node_id}.txt"
            spies.append(
                subprocess.Popen(
                    ["py-spy", "record", "-r", "40", "-f", "raw", "-o", str(out), "-p", str(pid)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        time.sleep(1)
    try:
        yield
    finally:
        for spy in spies:
            spy.send_signal(signal.SIGINT)
        for spy in spies:
            with contextlib.suppress(subprocess.TimeoutExpired):
                spy.wait(60)


def measure_cpu(system: System) -> float:
    return cpu_seconds(system.pids())


# ------------------------------------------------------------------------------------------
# W21: one broker, many partitions
# ------------------------------------------------------------------------------------------

RECORD_BYTES = 1024
PRODUCE_PARTITIONS = 10_000
PRODUCE_BYTES = 256 * MIB


def _wait_listening(node: Node, timeout_s: float) -> float:
    """Seconds until the node answers Metadata (a broker that listens and serves)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if not node.running():
            raise RuntimeError(f"broker {node.node_id} exited during start")
        try:
            with Conn(*node.address, timeout_s=10) as c:
                md = metadata(c, [])
            if md.controller in md.brokers:
                return time.monotonic() - t0
        except UNREACHABLE:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"broker {node.node_id} not listening within {timeout_s}s")


def _restart(
    system: System, node: Node, names: list[str], how: str, res: Results, n: int, timeout_s: float
) -> None:
    w = "W21"
    t0 = time.monotonic()
    if how == "clean":
        code = node.terminate(timeout_s)
        res.add(w, n, system, "clean shutdown: SIGTERM -> exit (s)", time.monotonic() - t0)
        res.add(w, n, system, "clean shutdown: exit code", code)
    else:
        node.kill9()
    t0 = time.monotonic()
    node.restart()
    listening = _wait_listening(node, timeout_s)
    serving = wait_all_answer(node.address, names, PER_TOPIC, timeout_s, poll_s=1.0)
    serving += listening
    pid = node.pid()
    res.add(w, n, system, f"restart after {how}: start -> listening (s)", listening)
    res.add(w, n, system, f"restart after {how}: start -> every partition answers (s)", serving)
    res.add(
        w, n, system, f"restart after {how}: CPU until then (s)", cpu_seconds([pid] if pid else [])
    )


def _produce_consume(system: System, node: Node, names: list[str], res: Results, n: int) -> None:
    """A producer writing round-robin to the first PRODUCE_PARTITIONS partitions (1 KiB
    records), then one consumer of a group reading them all back (confluent-kafka)."""
    from confluent_kafka import Consumer, Producer

    w = "W21"
    parts = [(t, p) for t in names for p in range(PER_TOPIC)][:PRODUCE_PARTITIONS]
    records = PRODUCE_BYTES // RECORD_BYTES
    value = os.urandom(RECORD_BYTES)
    bootstrap = f"{node.host}:{node.port}"
    pids = system.pids()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": 50,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "enable.idempotence": False,
        }
    )
    failures = [0]

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures[0] += 1

    with profiled(system, f"w21-{n}-produce"):
        c0, t0 = cpu_seconds(pids), time.monotonic()
        for i in range(records):
            t, p = parts[i % len(parts)]
            while True:
                try:
                    producer.produce(t, value, partition=p, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 10000 == 0:
                producer.poll(0)
        left = producer.flush(600)
        took = time.monotonic() - t0
        c1 = cpu_seconds(pids)
    moved = records * RECORD_BYTES
    res.add(w, n, system, f"produce to {len(parts):,} partitions (MB/s)", moved / MIB / took)
    res.add(w, n, system, "produce: broker CPU s per GiB", (c1 - c0) / (moved / GIB))
    res.add(w, n, system, "produce: failed deliveries", failures[0] + left)
    topics = sorted({t for t, _ in parts})
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"w21-{uuid_hex()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 * MIB,
        }
    )
    with profiled(system, f"w21-{n}-consume"):
        c0, t0 = cpu_seconds(pids), time.monotonic()
        consumer.subscribe(topics)
        got = 0
        first = None
        while got < records and time.monotonic() - t0 < 900:
            for m in consumer.consume(10000, 1.0):
                if m.error() is None:
                    got += 1
                    if first is None:
                        first = time.monotonic()
        took = time.monotonic() - t0
        c1 = cpu_seconds(pids)
        consumer.close()
    res.add(w, n, system, "consumer group: subscribe -> first record (s)", (first or t0) - t0)
    res.add(
        w,
        n,
        system,
        "consumer group: read all (MB/s, from subscribe)",
        got * RECORD_BYTES / MIB / took,
    )
    res.add(
        w,
        n,
        system,
        "consume: broker CPU s per GiB",
        (c1 - c0) / (max(got, 1) * RECORD_BYTES / GIB),
    )
    res.add(w, n, system, "consume: records read / written", f"{got:,} / {records:,}")


def uuid_hex() -> str:
    return os.urandom(4).hex()


def w21(system: System, n: int, res: Results, timeout_s: float) -> None:
    w = "W21"
    names = topic_names(n)
    node = next(iter(system.nodes.values()))
    pids = system.pids()
    c0, t0 = cpu_seconds(pids), time.monotonic()
    create_topics(node.address, names, PER_TOPIC, 1, timeout_s)
    res.add(w, n, system, "create: CreateTopics answered (s)", time.monotonic() - t0)
    wait_all_answer(node.address, names, PER_TOPIC, timeout_s)
    res.add(w, n, system, "create: until every partition answers (s)", time.monotonic() - t0)
    res.add(w, n, system, "create: broker CPU (s)", cpu_seconds(pids) - c0)
    time.sleep(10)
    pid = node.pid()
    assert pid is not None
    res.add(w, n, system, "RSS at rest (MiB)", rss_mib([pid]))
    res.add(w, n, system, "open descriptors at rest", open_fds(pid))
    times, size = [], 0
    with Conn(*node.address, timeout_s=300) as c:
        for _ in range(3):
            md = metadata(c, None)
            times.append(md.seconds)
            size = md.response_bytes
    res.add(w, n, system, "Metadata, all topics (ms, median of 3)", sorted(times)[1] * 1000)
    res.add(w, n, system, "Metadata, all topics (bytes)", size)
    _produce_consume(system, node, names, res, n)
    time.sleep(5)
    _restart(system, node, names, "clean", res, n, timeout_s)
    time.sleep(5)
    _restart(system, node, names, "kill -9", res, n, timeout_s)


def _run_on_each(
    wid: str,
    workload: Callable[[System, int, Results, float], object],
    start: Callable[[str, Path], System],
    size: int,
    targets: list[str],
    workdir: Path,
    res: Results,
    timeout_s: float,
    *,
    record_start: bool = False,
) -> None:
    """Start each target in a work dir of its own, run the workload on it, record an error
    instead of stopping (a failed start too with ``record_start``), stop it, and remove the
    work dir (unless KEEP)."""
    for kind in targets:
        wd = workdir / f"{wid.lower()}-{kind}-{size}"
        log(f"{wid} n={size:,} {kind}: starting (load {loadavg()})")
        try:
            system = start(kind, wd)
        except Exception as e:  # noqa: BLE001 - recorded
            if not record_start:
                raise
            res.add(wid, size, kind, "error", f"start: {type(e).__name__}: {str(e)[:300]}")
            continue
        try:
            workload(system, size, res, timeout_s)
        except Exception as e:  # noqa: BLE001 - recorded
            res.add(wid, size, system, "error", f"{type(e).__name__}: {str(e)[:300]}")
        finally:
            system.stop()
            log(f"{wid} n={size:,} {kind}: done (load {loadavg()})")
            if not KEEP:
                shutil.rmtree(wd, ignore_errors=True)


def run_w21(size: int, targets: list[str], workdir: Path, res: Results, timeout_s: float):
    def start(kind: str, wd: Path) -> System:
        if kind == "pybroker":
            return start_pybroker(wd, brokers=1)
        if kind == "pybroker-zk":
            return start_pybroker(wd, brokers=1, metadata_mode="zookeeper")
        if kind == "kafka-zk":
            return start_kafka(wd, brokers=1, metadata_mode="zookeeper", heap=W21_KAFKA_HEAP)
        return start_kafka(wd, brokers=1, heap=W21_KAFKA_HEAP)

    _run_on_each("W21", w21, start, size, targets, workdir, res, timeout_s, record_start=True)


W21_KAFKA_HEAP = "2g"


# ------------------------------------------------------------------------------------------
# W22: a 3-broker ZooKeeper cluster, controller failover, broker restart, controlled shutdown
# ------------------------------------------------------------------------------------------


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


def w22(system: System, n_replicas: int, res: Results, timeout_s: float) -> None:
    w = "W22"
    partitions = max(PER_TOPIC, n_replicas // 3)
    names = topic_names(partitions)
    first = next(iter(system.nodes.values())).address
    zk = system.zk
    assert zk is not None
    with profiled(system, f"w22-{n_replicas}-create"):
        c0, z0, t0 = measure_cpu(system), zk_received(zk), time.monotonic()
        create_topics(first, names, PER_TOPIC, 3, timeout_s)
        wait_all_answer(first, names, PER_TOPIC, timeout_s)
        took = time.monotonic() - t0
    res.add(w, n_replicas, system, "create: until every partition answers (s)", took)
    res.add(w, n_replicas, system, "create: brokers' CPU (s)", measure_cpu(system) - c0)
    res.add(w, n_replicas, system, "create: ZooKeeper requests", zk_received(zk) - z0)
    # every ISR full before the failover (followers caught up)
    _wait_isrs_full(system, names, timeout_s)
    time.sleep(5)
    res.add(w, n_replicas, system, "RSS at rest, all brokers (MiB)", rss_mib(system.pids()))
    res.add(w, n_replicas, system, "ZooKeeper znodes at rest", zk_srvr(zk, "Node count"))
    # -- controller failover
    ctrl = _controller(system)
    victim = system.nodes[ctrl]
    survivors = [n for n in system.nodes.values() if n.node_id != ctrl]
    with profiled(system, f"w22-{n_replicas}-failover", survivors):
        _w22_failover(system, n_replicas, res, timeout_s, names, victim, survivors)
    # -- the killed broker restarts
    with profiled(system, f"w22-{n_replicas}-restart", survivors):
        _w22_restart(system, n_replicas, res, timeout_s, names, victim)
    # -- controlled shutdown of the broker (not the controller) leading the most partitions
    ctrl = _controller(system)
    md = _metadata_from(system, names) or ClusterMetadata({}, -1, {})
    counts = {n.node_id: 0 for n in system.live() if n.node_id != ctrl}
    for _, _, info in md.partitions():
        if info.leader in counts:
            counts[info.leader] += 1
    target = system.nodes[max(counts, key=lambda b: counts[b])]
    res.add(w, n_replicas, system, "controlled shutdown: partitions it led", counts[target.node_id])
    with profiled(system, f"w22-{n_replicas}-shutdown"):
        _w22_controlled_shutdown(system, n_replicas, res, timeout_s, names, target)


def _w22_failover(
    system: System,
    n_replicas: int,
    res: Results,
    timeout_s: float,
    names: list[str],
    victim: Node,
    survivors: list[Node],
) -> None:
    w = "W22"
    zk = system.zk
    assert zk is not None
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
    res.add(w, n_replicas, system, "failover: kill -9 -> every partition led (s)", led_s)
    res.add(
        w, n_replicas, system, "failover: kill -9 -> produce to every partition ok (s)", produce_s
    )
    res.add(
        w,
        n_replicas,
        system,
        "failover: survivors' CPU (s)",
        cpu_seconds([p for n in survivors if (p := n.pid())]) - c0,
    )
    res.add(w, n_replicas, system, "failover: ZooKeeper requests", zk_received(zk) - z0)
    res.add(w, n_replicas, system, "failover: new controller", new_ctrl)


def _w22_restart(
    system: System, n_replicas: int, res: Results, timeout_s: float, names: list[str], victim: Node
) -> None:
    w = "W22"
    zk = system.zk
    assert zk is not None
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
    res.add(w, n_replicas, system, "restart: start -> listening (s)", listening)
    res.add(w, n_replicas, system, "restart: start -> back in every ISR (s)", back)
    res.add(
        w,
        n_replicas,
        system,
        "restart: CPU of the restarted broker (s)",
        cpu_seconds([pid] if pid else []),
    )
    res.add(
        w, n_replicas, system, "restart: CPU of the other brokers (s)", cpu_seconds(others) - c0
    )
    res.add(w, n_replicas, system, "restart: ZooKeeper requests", zk_received(zk) - z0)


def _w22_controlled_shutdown(
    system: System, n_replicas: int, res: Results, timeout_s: float, names: list[str], target: Node
) -> None:
    w = "W22"
    zk = system.zk
    assert zk is not None
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
    res.add(w, n_replicas, system, "controlled shutdown: SIGTERM -> exit (s)", exit_s)
    res.add(w, n_replicas, system, "controlled shutdown: exit code", code)
    res.add(w, n_replicas, system, "controlled shutdown: most partitions without leader", worst[0])
    res.add(w, n_replicas, system, "controlled shutdown: of them with leader -1", worst[1])
    res.add(
        w,
        n_replicas,
        system,
        "controlled shutdown: ZooKeeper sessions lost meanwhile",
        _logged(system, since, "ZooKeeper session LOST"),
    )
    res.add(w, n_replicas, system, "controlled shutdown: ZooKeeper requests", zk_received(zk) - z0)
    md = _metadata_from(system, names)
    live = set(_live_addresses(system))
    led = sum(1 for _, _, i in md.partitions() if i.leader in live) if md else 0
    res.add(w, n_replicas, system, "controlled shutdown: partitions led after exit", led)


def _wait_isrs_full(system: System, names: list[str], timeout_s: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        md = _metadata_from(system, names)
        if md is not None and all(set(i.isr) == set(i.replicas) for _, _, i in md.partitions()):
            return time.monotonic() - t0
        time.sleep(1)
    raise TimeoutError("ISRs not full")


# ------------------------------------------------------------------------------------------
# W23: many client connections to one broker
# ------------------------------------------------------------------------------------------

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


def _p99(values: list[float]) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(len(v) * 0.99))] * 1000


def _stalls(system: System, since: float) -> float | None:
    """pybroker: the longest 'event loop stalled N ms' warning logged since ``since`` (epoch
    seconds); None for Kafka (a JVM has no such loop)."""
    if system.kind != "pybroker" or STDERR.get(system) is None:
        return None
    worst = 0.0
    for line in STDERR[system]().splitlines():
        if "event loop stalled" not in line:
            continue
        try:
            stamp = dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except ValueError:
            continue
        if stamp >= since:
            worst = max(worst, float(line.split("stalled")[1].split()[0]))
    return worst


def _logged(system: System, since: float, text: str) -> int | None:
    """pybroker: how many log lines holding ``text`` its brokers wrote since ``since``
    (epoch seconds); None for Kafka.  (A ZooKeeper session lost at a high load makes the
    brokers answer Metadata without leaders for seconds: a sample to read beside it.)"""
    if system.kind != "pybroker" or STDERR.get(system) is None:
        return None
    count = 0
    for line in STDERR[system]().splitlines():
        if text not in line:
            continue
        try:
            stamp = dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except ValueError:
            continue
        count += stamp >= since
    return count


STDERR: dict[System, Callable[[], str]] = {}


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
            w, n, system, "longest event-loop stall logged, connects (ms)", _stalls(system, since)
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
        res.add(w, n, system, "produce p99 meanwhile (ms)", _p99(lat))
        res.add(w, n, system, "produces meanwhile", len(lat))
        res.add(w, n, system, "RSS with active connections (MiB)", rss_mib([pid]))
        # the requests still queued (a broker slower than n requests a second) are answered
        # before the storm, so that the storm's figures are the storm's
        backlog, t1 = _queued(clients), time.monotonic()
        while _queued(clients) and time.monotonic() - t1 < 300:
            clients.poll(0.05)
        res.add(w, n, system, "requests still queued when the ticks stopped", backlog)
        res.add(w, n, system, "until they were answered (s)", time.monotonic() - t1)
        res.add(w, n, system, "longest event-loop stall logged, ticks (ms)", _stalls(system, since))
        # a storm: STORM more connects in one second, a producer meanwhile
        probe = ProduceProbe(node.address, topic)
        since = time.time()
        storm = Clients(node.address)
        took = storm.open(STORM, spread_s=1.0)
        time.sleep(1)
        lat = probe.latencies()
        res.add(w, n, system, f"storm: {STORM:,} connects in 1 s, all answered after (s)", took)
        res.add(w, n, system, "storm: failed", storm.failed)
        res.add(w, n, system, "storm: produce p99 meanwhile (ms)", _p99(lat))
        res.add(w, n, system, "storm: longest event-loop stall logged (ms)", _stalls(system, since))
        storm.close()
    finally:
        clients.close()


def run_w23(size: int, targets: list[str], workdir: Path, res: Results, timeout_s: float):
    def start(kind: str, wd: Path) -> System:
        if kind == "pybroker":
            return start_pybroker(wd, brokers=1, overrides={"max.connections.per.ip": 1_000_000})
        return start_kafka(wd, brokers=1)

    _run_on_each("W23", w23, start, size, targets, workdir, res, timeout_s)


# ------------------------------------------------------------------------------------------
# W24: consumer groups of many members
# ------------------------------------------------------------------------------------------

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

    _run_on_each("W24", w24, start, size, targets, workdir, res, timeout_s)


# ------------------------------------------------------------------------------------------
# the command
# ------------------------------------------------------------------------------------------


def run_w22(size: int, targets: list[str], workdir: Path, res: Results, timeout_s: float):
    def start(kind: str, wd: Path) -> System:
        if kind == "pybroker":
            return start_pybroker(wd, brokers=3)
        return start_kafka(wd, brokers=3, metadata_mode="zookeeper")

    _run_on_each("W22", w22, start, size, targets, workdir, res, timeout_s)


WORKLOADS = {"W21": run_w21, "W22": run_w22, "W23": run_w23, "W24": run_w24}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="W21,W22,W23,W24")
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--targets", default="pybroker,kafka")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--workdir")
    ap.add_argument("--results")
    ap.add_argument("--keep", action="store_true", help="keep the brokers' dirs and logs")
    ap.add_argument(
        "--profile", help="py-spy (raw) profiles of pybroker processes per step into DIR"
    )
    args = ap.parse_args(argv)
    global KEEP, PROFILE_DIR
    KEEP = args.keep
    PROFILE_DIR = Path(args.profile) if args.profile else None
    if PROFILE_DIR:
        PROFILE_DIR.mkdir(parents=True, exist_ok=True)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="scale-"))
    workdir.mkdir(parents=True, exist_ok=True)
    date = dt.date.today().isoformat()
    path = Path(args.results) if args.results else ROOT / "bench" / "results" / f"{date}-scale.md"
    res = Results(path)
    cmd = "python -m bench.scale " + " ".join(argv if argv is not None else sys.argv[1:])
    load0 = loadavg()
    for wid in args.workloads.split(","):
        for size in [int(s) for s in args.sizes.split(",")]:
            WORKLOADS[wid](size, args.targets.split(","), workdir, res, args.timeout)
    text = (
        f"\n## {dt.datetime.now():%Y-%m-%d %H:%M} `{cmd}`\n\n"
        f"Load average before: {load0}; after: {loadavg()}.  {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, git {_git_rev()}.\n\n{res.table()}\n"
    )
    with open(path, "a") as f:
        f.write(text)
    print(text)
    return 0


def _git_rev() -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip()
    return "?"


if __name__ == "__main__":
    sys.exit(main())
