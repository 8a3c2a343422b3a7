"""A throwaway real ZooKeeper (Debian's zookeeper package) for tests.

``ZooKeeperServer(workdir)`` writes a zoo.cfg (tickTime=500, its own dataDir, a free loopback
port, admin server off, maxSessionTimeout raised) and runs ``zkServer.sh start-foreground`` in
its own process group; ``stop()`` always ends that group.  ``restart()`` keeps the port and the
data dir, so sessions survive it.  ``zookeeper_available()`` says whether zkServer.sh and java
are installed (``ZK_SERVER_SH`` overrides the script's path).  ``ZooKeeperEnsemble(n)`` runs
n of them as one quorum (the bench's ZooKeeper-backed targets).

Used by the pytest plugin's ``kafka_cluster`` fixture, the cluster harness and the project's
own tests (tests/conftest.py's ``zk_server``/``zk_connect`` fixtures).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from pybroker.testing.procutil import free_port

ZK_SERVER_SH = os.environ.get("ZK_SERVER_SH", "/usr/share/zookeeper/bin/zkServer.sh")
STANDALONE = "minSessionTimeout=1000\nglobalOutstandingLimit=1000\n"  # zoo.cfg of one server


def zookeeper_available() -> bool:
    return os.path.exists(ZK_SERVER_SH) and shutil.which("java") is not None


def require_zookeeper() -> None:
    """Skip the calling test (pytest) when ZooKeeper is not installed."""
    if not zookeeper_available():
        import pytest  # only under pytest; the module itself needs no test dependency

        pytest.skip(f"ZooKeeper not installed ({ZK_SERVER_SH} or java missing)")


class ZooKeeperServer:
    def __init__(self, workdir: str | os.PathLike[str] | None = None) -> None:
        self._own_tmp = workdir is None
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="pybroker-zk-"))
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _write_config(self, settings: str) -> Path:
        (self.dir / "data").mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "zoo.cfg"
        cfg.write_text(
            "tickTime=500\n"
            f"dataDir={self.dir / 'data'}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n"
            "maxSessionTimeout=60000\n"
            "4lw.commands.whitelist=srvr\n" + settings
        )
        # zkServer.sh reads log4j/java settings from ZOOCFGDIR; keep Debian's log4j if present
        for extra in ("log4j.properties", "logback.xml"):
            src = Path("/etc/zookeeper/conf") / extra
            if src.exists() and not (self.dir / extra).exists():
                shutil.copy(src, self.dir / extra)
        return cfg

    def launch(self, settings: str = STANDALONE) -> None:
        """Start ``zkServer.sh start-foreground`` in a process group of its own, ``settings``
        (zoo.cfg lines) after the common ones; does not wait (see :meth:`serving`)."""
        cfg = self._write_config(settings)
        env = dict(os.environ, ZOO_LOG_DIR=str(self.dir), ZOOCFGDIR=str(self.dir))
        self.proc = subprocess.Popen(
            [ZK_SERVER_SH, "start-foreground", str(cfg)],
            env=env,
            stdout=open(self.dir / "zk.out", "ab"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start(self, timeout: float = 30.0) -> None:
        self.launch()
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                out = (self.dir / "zk.out").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}:\n{out}")
            if self.serving():
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"ZooKeeper did not listen on {self.connect} within {timeout}s")

    def serving(self) -> bool:
        """True once the server answers requests (an accepted TCP connection is not enough:
        ZooKeeper listens before it has loaded its database)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"srvr")
                s.settimeout(2)
                reply = b""
                while chunk := s.recv(4096):
                    reply += chunk
            return b"Zookeeper version" in reply
        except OSError:
            return False

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # the group this object started
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        if self._own_tmp:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


class ZooKeeperEnsemble:
    """``size`` ZooKeeper servers on loopback (server.N lines, a myid each), Debian's defaults
    otherwise (forceSync=yes); one server is a :class:`ZooKeeperServer` as the tests run it."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.root = Path(tempfile.mkdtemp(prefix="pybroker-zk-ensemble-"))
        self.servers = [ZooKeeperServer(self.root / f"zk{i}") for i in range(1, size + 1)]

    @property
    def connect(self) -> str:
        return ",".join(s.connect for s in self.servers)

    def start(self, timeout: float = 120.0) -> None:
        if self.size == 1:
            self.servers[0].start(timeout=timeout)
            return
        peers = [(free_port(), free_port()) for _ in self.servers]
        lines = "".join(
            f"server.{i}=127.0.0.1:{a}:{b}\n" for i, (a, b) in enumerate(peers, start=1)
        )
        for i, s in enumerate(self.servers, start=1):
            (s.dir / "data").mkdir(parents=True, exist_ok=True)
            (s.dir / "data" / "myid").write_text(f"{i}\n")
            s.launch("initLimit=20\nsyncLimit=10\n" + lines)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(s.serving() for s in self.servers):
                return
            time.sleep(0.2)
        raise RuntimeError("the ZooKeeper ensemble did not form")

    def stop(self) -> None:
        for s in self.servers:
            s.stop()
        shutil.rmtree(self.root, ignore_errors=True)
