"""What W21-W24 share (bench/scale/): the systems under test (pybroker or Kafka 3.9, one
broker or a ZooKeeper cluster), ZooKeeper's request counts, the results table, py-spy
profiles (--profile) and the run of a workload on each target."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pybroker.wire.messages  # noqa: F401  (declares every API's schema)
from pybroker.testing import kafka_reference
from pybroker.testing.process import BrokerProcess
from pybroker.testing.procstat import cpu_seconds
from pybroker.testing.scale import (
    HOST,
)
from pybroker.testing.zookeeper import ZooKeeperServer

ROOT = Path(__file__).resolve().parents[2]


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
        b.spawn()

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
def profiled(
    system: System, step: str, nodes: list[Node] | None = None, rate: int = 40
) -> Iterator[None]:
    """py-spy record (raw) of the pybroker nodes during a step, with --profile, ``rate``
    samples a second."""
    spies = []
    if PROFILE_DIR is not None and system.kind == "pybroker":
        for n in nodes if nodes is not None else list(system.nodes.values()):
            pid = n.pid()
            if pid is None:
                continue
            out = PROFILE_DIR / f"{step}-broker{n.node_id}.txt"
            spies.append(
                subprocess.Popen(
                    [
                        "py-spy",
                        "record",
                        "-r",
                        str(rate),
                        "-f",
                        "raw",
                        "-o",
                        str(out),
                        "-p",
                        str(pid),
                    ],
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


def uuid_hex() -> str:
    return os.urandom(4).hex()


def run_on_each(
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
                # removed after the last workload (remove_work_dirs): on this machine's ext4
                # (no journal) each inode allocated in the next minutes would skip over the
                # deleted ones, one buffer lookup each, and charge the next size's creation
                # (a 10,000-partition dir is 60,000 inodes; docs/scale.md, scale12)
                TO_REMOVE.append(wd)


TO_REMOVE: list[Path] = []


def remove_work_dirs() -> None:
    """The work dirs run_on_each left for the end of the invocation."""
    while TO_REMOVE:
        shutil.rmtree(TO_REMOVE.pop(), ignore_errors=True)


def longest_stall_ms(system: System, since: float) -> float | None:
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


def count_logged(system: System, since: float, text: str) -> int | None:
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
