"""The fault campaign's cluster in network namespaces (compat_tests/netns.py), with small disks.

    with running_network_cluster(workdir, clients=4) as nc:
        nc.net                    # the Network: nodes zk1..zk3, b0..b2, c0..c3, obs
        nc.cluster                # a compat_tests.cluster.Cluster (brokers in b0..b2)
        nc.ensemble               # ZooKeeper, 3 nodes in zk1..zk3
        nc.log_disks[0]           # broker 0's two log dirs, each a SmallDisk (tmpfs)
        with nc.net.entered("c0"): load.start()   # a client in its own namespace

Every process has a namespace of its own: three ZooKeeper nodes (an ensemble, so one node can
be cut from the other two), three brokers (each advertising its namespace address, port
9092), and the clients (``c0``.. and ``obs``, the harness's observer: Metadata polls, the
invariant monitor, the final reader).  The harness thread that enters the context is moved
to ``obs`` for its duration (threads it starts inherit it), and back at the end.

Each broker has ``log.dirs`` on two tmpfs of LOG_DISK_MB (JBOD: a full one takes only its
partitions offline), each ZooKeeper node its dataDir on one of ZK_DISK_MB.  Teardown
(always, also on failure): brokers SIGTERM'ed (then killed), ZooKeeper stopped, the small
disks unmounted, the namespaces, veths and bridge removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from compat_tests.broker_process import BrokerProcess
from compat_tests.cluster import Cluster
from compat_tests.netns import Network
from tests.small_disk import SmallDisk
from tests.zk_server import ZK_SERVER_SH

OBSERVER = "obs"
BROKER_PORT = 9092
ZK_CLIENT_PORT = 2181
LOG_DISK_MB = int(os.environ.get("PYBROKER_FAULT_LOG_DISK_MB", "384"))
ZK_DISK_MB = 64
# small JVMs: three ZooKeeper nodes share two cores with the brokers and the clients
ZK_JVMFLAGS = "-Xms32m -Xmx160m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xss512k"


def zk_node(i: int) -> str:
    return f"zk{i}"


def broker_node(i: int) -> str:
    return f"b{i}"


def client_node(i: int) -> str:
    return f"c{i}"


# ------------------------------------------------------------------------------------------
# ZooKeeper, one node per namespace
# ------------------------------------------------------------------------------------------


class ZooKeeperNode:
    """One member of the ensemble: ``zkServer.sh start-foreground`` in its namespace, its
    dataDir on a SmallDisk."""

    def __init__(self, net: Network, myid: int, workdir: Path, servers: dict[int, str]):
        self.net, self.myid = net, myid
        self.node = zk_node(myid)
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.disk = SmallDisk(self.dir / "data", ZK_DISK_MB)
        self.servers = servers
        self.proc: subprocess.Popen | None = None
        self.exit_codes: list[int] = []

    @property
    def address(self) -> str:
        return self.net.address(self.node)

    def _write_config(self) -> Path:
        cfg = self.dir / "zoo.cfg"
        lines = [
            "tickTime=500",
            "initLimit=20",
            "syncLimit=5",
            f"dataDir={self.disk.path}",
            f"clientPort={ZK_CLIENT_PORT}",
            f"clientPortAddress={self.address}",
            "admin.enableServer=false",
            "maxSessionTimeout=60000",
            "minSessionTimeout=1000",
            "globalOutstandingLimit=1000",
            "4lw.commands.whitelist=srvr",
            "preAllocSize=1024",  # KiB: transaction logs grow 1 MiB at a time (small disks)
            "snapCount=5000",
            "autopurge.snapRetainCount=3",
            "autopurge.purgeInterval=1",
        ]
        lines += [f"server.{i}={addr}:2888:3888" for i, addr in sorted(self.servers.items())]
        cfg.write_text("\n".join(lines) + "\n")
        (self.disk.path / "myid").write_text(f"{self.myid}\n")
        for extra in ("log4j.properties", "logback.xml"):
            src = Path("/etc/zookeeper/conf") / extra
            if src.exists() and not (self.dir / extra).exists():
                shutil.copy(src, self.dir / extra)
        return cfg

    def start(self) -> None:
        assert not self.is_running()
        if not self.disk.mounted:
            self.disk.mount()
        cfg = self._write_config()
        env = dict(
            os.environ, ZOO_LOG_DIR=str(self.dir), ZOOCFGDIR=str(self.dir), JVMFLAGS=ZK_JVMFLAGS
        )
        with open(self.dir / "zk.out", "ab") as out:
            out.write(f"===== harness {time.strftime('%H:%M:%S')}: start\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                self.net.command(self.node, [ZK_SERVER_SH, "start-foreground", str(cfg)]),
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def mode(self) -> str | None:
        """ "leader", "follower", or None (not serving: down, or no quorum), from ``srvr``
        asked from the observer's namespace."""
        with self.net.entered(OBSERVER):
            try:
                with socket.create_connection((self.address, ZK_CLIENT_PORT), timeout=1.0) as s:
                    s.sendall(b"srvr")
                    s.settimeout(2.0)
                    reply = b""
                    while chunk := s.recv(4096):
                        reply += chunk
            except OSError:
                return None
        for line in reply.decode(errors="replace").splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def note(self, what: str) -> None:
        with open(self.dir / "zk.out", "ab") as out:
            out.write(f"===== harness {time.strftime('%H:%M:%S')}: {what}\n".encode())

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            self.note("SIGTERM")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.exit_codes.append(proc.returncode)

    def exited(self) -> int | None:
        """The exit code if the process ended by itself (not stopped by the harness)."""
        if self.proc is not None and self.proc.poll() is not None:
            return self.proc.returncode
        return None


class ZooKeeperEnsemble:
    """Three ZooKeeper nodes; ``connect`` lists them all (clients fail over between them).
    ``restart()`` (the campaign's zk_restart) stops and starts every node, same data."""

    def __init__(self, net: Network, workdir: Path, size: int = 3):
        servers = {i: net.address(zk_node(i)) for i in range(1, size + 1)}
        self.nodes = {i: ZooKeeperNode(net, i, Path(workdir) / f"zk{i}", servers) for i in servers}

    @property
    def connect(self) -> str:
        return ",".join(f"{n.address}:{ZK_CLIENT_PORT}" for n in self.nodes.values())

    def start(self, timeout: float = 60.0) -> None:
        for n in self.nodes.values():
            if not n.is_running():
                n.start()
        self.wait_quorum(timeout)

    def wait_quorum(
        self, timeout: float = 60.0, nodes: list[int] | None = None, restart: bool = False
    ) -> list[tuple[int, int]]:
        """Until every node (of ``nodes``) serves, one of them as leader.  A node that
        exited is an error, or with ``restart`` is started again (as a supervisor would);
        returns the (node, exit code) restarted."""
        want = [self.nodes[i] for i in (nodes or self.nodes)]
        deadline = time.monotonic() + timeout
        restarted: list[tuple[int, int]] = []
        while True:
            modes = [n.mode() for n in want]
            if all(modes) and (nodes is not None or "leader" in modes):
                return restarted
            for n in want:
                code = n.exited()
                if code is not None and restart:
                    restarted.append((n.myid, code))
                    n.stop()
                    n.start()
                elif code is not None:
                    raise RuntimeError(f"ZooKeeper node {n.myid} exited with {code}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"ZooKeeper ensemble not serving within {timeout}s: {modes}")
            time.sleep(0.2)

    def leader(self) -> int | None:
        for i, n in self.nodes.items():
            if n.mode() == "leader":
                return i
        return None

    def stop(self) -> None:
        for n in self.nodes.values():
            n.stop()

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        for n in self.nodes.values():
            n.disk.unmount()


# ------------------------------------------------------------------------------------------
# brokers, one per namespace
# ------------------------------------------------------------------------------------------


class NetnsBrokerProcess(BrokerProcess):
    """A broker in its own namespace, listening on (and advertising) its address, port 9092;
    its readiness probe runs from the observer's namespace."""

    def __init__(self, net: Network, node: str, workdir: Path, **kw) -> None:
        super().__init__(workdir, port=BROKER_PORT, **kw)
        self.net, self.node = net, node
        self.host = net.address(node)

    def command(self) -> list[str]:
        return self.net.command(self.node, super().command())

    def ready(self) -> bool:
        with self.net.entered(OBSERVER):
            return super().ready()


@dataclass
class NetworkCluster:
    net: Network
    ensemble: ZooKeeperEnsemble
    cluster: Cluster
    log_disks: dict[int, list[SmallDisk]] = field(default_factory=dict)
    clients: list[str] = field(default_factory=list)

    def broker_node(self, broker_id: int) -> str:
        return broker_node(broker_id)

    def zk_nodes(self) -> list[str]:
        return [n.node for n in self.ensemble.nodes.values()]

    def broker_nodes(self, ids=None) -> list[str]:
        return [broker_node(i) for i in (self.cluster.ids if ids is None else ids)]


@contextlib.contextmanager
def running_network_cluster(
    workdir: Path, size: int = 3, clients: int = 4, overrides: dict[str, object] | None = None
) -> Iterator[NetworkCluster]:
    """The network, ZooKeeper's ensemble, ``size`` brokers with two small log dirs each; this
    thread in the observer's namespace meanwhile.  Everything is torn down at the end."""
    workdir = Path(workdir)
    net = Network()
    for i in range(1, 4):
        net.add(zk_node(i))
    for i in range(size):
        net.add(broker_node(i))
    names = [net.add(client_node(i)) for i in range(clients)]
    net.add(OBSERVER)
    ensemble: ZooKeeperEnsemble | None = None
    cluster: Cluster | None = None
    disks: dict[int, list[SmallDisk]] = {}
    net.start()
    try:
        with net.entered(OBSERVER):
            ensemble = ZooKeeperEnsemble(net, workdir / "zookeeper")
            ensemble.start()

            def factory(i: int, **kw) -> NetnsBrokerProcess:
                return NetnsBrokerProcess(net, broker_node(i), workdir / f"broker{i}", **kw)

            cluster = Cluster(workdir, ensemble, size, overrides, broker_factory=factory)
            for i, b in cluster.brokers.items():
                disks[i] = [SmallDisk(b.workdir / d, LOG_DISK_MB).mount() for d in ("d1", "d2")]
                b.overrides["log.dirs"] = ",".join(str(d.path) for d in disks[i])
            cluster.start()
            nc = NetworkCluster(net, ensemble, cluster, disks, names)
            yield nc
            net.heal_all()
            cluster.stop_problems = cluster.stop()
    finally:
        with contextlib.suppress(Exception):
            net.heal_all()
        if cluster is not None:
            cluster.cleanup()
        if ensemble is not None:
            ensemble.cleanup()
        for ds in disks.values():
            for d in ds:
                d.unmount()
        net.close()
