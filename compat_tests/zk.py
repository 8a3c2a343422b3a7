"""A throwaway ZooKeeper server (the Debian `zookeeper` package) for tests.

    with ZooKeeperServer(tmp_path) as zk:
        zk.connect          # "127.0.0.1:<port>"

The server runs in the foreground in its own process group on a free loopback port with its
own data dir; stop() kills the whole group. scripts/install-test-deps installs the package.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from compat_tests.procutil import free_port, kill_group, tail, wait_for_port

ZK_SERVER_SH = Path(os.environ.get("ZK_SERVER_SH", "/usr/share/zookeeper/bin/zkServer.sh"))


class ZooKeeperMissing(RuntimeError):
    pass


class ZooKeeperServer:
    def __init__(self, workdir: Path, *, host: str = "127.0.0.1", tick_time_ms: int = 500):
        self.workdir = Path(workdir)
        self.host = host
        self.tick_time_ms = tick_time_ms
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.output_path = self.workdir / "zookeeper.out"

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        if not ZK_SERVER_SH.exists():
            raise ZooKeeperMissing(
                f"{ZK_SERVER_SH} not found: install the Debian package `zookeeper` "
                "(scripts/install-test-deps does it)"
            )
        if shutil.which("java") is None:
            raise ZooKeeperMissing("java not found: ZooKeeper needs a JRE")
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        last_error: Exception | None = None
        for _attempt in range(3):  # a free port can be taken between probe and bind: retry
            self.port = free_port(self.host)
            cfg = self.workdir / "zoo.cfg"
            cfg.write_text(
                f"tickTime={self.tick_time_ms}\n"
                f"dataDir={data}\n"
                f"clientPort={self.port}\n"
                f"clientPortAddress={self.host}\n"
                "admin.enableServer=false\n"
                "maxSessionTimeout=60000\n"
                "maxClientCnxns=0\n"
                "4lw.commands.whitelist=*\n"
            )
            env = dict(os.environ, ZOO_LOG_DIR=str(self.workdir), ZOOCFGDIR=str(self.workdir))
            out = open(self.output_path, "ab")
            self.proc = subprocess.Popen(
                [str(ZK_SERVER_SH), "start-foreground", str(cfg)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
            out.close()
            try:
                wait_for_port(self.host, self.port, timeout, self.proc)
                return self
            except (RuntimeError, TimeoutError) as e:
                last_error = e
                self.stop()
        raise RuntimeError(
            f"ZooKeeper did not start: {last_error}\n--- {self.output_path} ---\n"
            + tail(self.output_path)
        )

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        kill_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            kill_group(proc, signal.SIGKILL)
            proc.wait(timeout=10)
        # the JVM may have left children in the group; make sure nothing survives
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        time.sleep(0)

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
