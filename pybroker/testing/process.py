"""Run `python -m pybroker serve` as a real process for tests.

    b = BrokerProcess(workdir, zookeeper_connect=None, overrides={"num.partitions": "3"})
    b.start()            # free loopback port; waits until ready() (ApiVersions + Metadata)
    b.bootstrap          # "127.0.0.1:<port>"
    b.kill9(); b.restart()   # same port, same log.dirs, same ZooKeeper chroot
    b.stop()             # SIGTERM, wait, assert exit code 0

stderr and stdout go to <workdir>/broker.stderr (appended across restarts); `output()` returns
its tail for failure reports.  ``start_all(brokers)`` starts several at once (a cluster).

``ready()`` is an ApiVersions and a Metadata round trip through pybroker's codec
(pybroker.testing.client); pybroker/testing/debug_process.py overrides it with hand-built bytes
and runs its brokers with asyncio's debug mode (``asyncio_debug``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

from pybroker.testing.client import broker_ready
from pybroker.testing.procutil import free_ports, tail

HOST = "127.0.0.1"
START_TIMEOUT = float(os.environ.get("PYBROKER_TEST_START_TIMEOUT", "30"))
ZK_SESSION_TIMEOUT_MS = "8000"
# the event loop of the brokers tests start (event.loop), unless a test sets its own: unset,
# the default (uvloop); the whole suite on asyncio's is PYBROKER_TEST_EVENT_LOOP=asyncio
# (docs/testing.md)
TEST_EVENT_LOOP = os.environ.get("PYBROKER_TEST_EVENT_LOOP", "")


class BrokerStartError(RuntimeError):
    pass


class BrokerProcess:
    asyncio_debug = False  # PYTHONASYNCIODEBUG=1 in the broker (slower; finds loop misuse)
    cwd: Path | None = None  # the broker's working directory (None: this process's)

    def __init__(
        self,
        workdir: Path,
        *,
        zookeeper_connect: str | None = None,
        overrides: dict[str, object] | None = None,
        broker_id: int = 0,
        port: int | None = None,
        log_dir: Path | None = None,
        chroot: str | None = None,
    ):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.host = HOST
        # node.cores above 1: a node of that many broker processes on port, port+1, ...
        self.cores = int((overrides or {}).get("node.cores", 1)) or (os.cpu_count() or 1)
        self.port = port or free_ports(self.cores, HOST)
        self.broker_id = broker_id
        self.log_dir = Path(log_dir) if log_dir else self.workdir / "log-dirs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.zookeeper_connect = zookeeper_connect
        self.chroot = None
        if zookeeper_connect is not None:
            self.chroot = chroot or f"/pybroker-{uuid.uuid4().hex[:12]}"
        self.overrides = {k: str(v) for k, v in (overrides or {}).items()}
        self.stderr_path = self.workdir / "broker.stderr"
        self.proc: subprocess.Popen | None = None
        self.exit_codes: list[int] = []

    # -- facts ------------------------------------------------------------------------------
    @property
    def backend(self) -> str:
        return "zookeeper" if self.zookeeper_connect else "embedded"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def ports(self) -> list[int]:
        """The Kafka ports of the node's broker processes (one unless node.cores > 1)."""
        return [self.port + k for k in range(self.cores)]

    @property
    def broker_ids(self) -> list[int]:
        return [self.broker_id + k for k in range(self.cores)]

    @property
    def bootstrap_servers(self) -> str:
        """The same as ``bootstrap`` (the name Kafka clients give the setting)."""
        return self.bootstrap

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "pybroker", "serve"]
        for k, v in self.settings().items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def settings(self) -> dict[str, str]:
        """The broker's configuration (what command() passes as --override)."""
        settings = {
            "listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "log.dirs": str(self.log_dir),
            "broker.id": str(self.broker_id),
        }
        if TEST_EVENT_LOOP:
            settings["event.loop"] = TEST_EVENT_LOOP
        if self.zookeeper_connect:
            settings["zookeeper.connect"] = f"{self.zookeeper_connect}{self.chroot}"
            # shorter than Kafka's 18 s so a restart after kill -9 waits less for the old
            # session's ephemeral /brokers/ids/<id> to go; a test may override it
            settings["zookeeper.session.timeout.ms"] = ZK_SESSION_TIMEOUT_MS
        settings.update(self.overrides)
        return settings

    def output(self, max_lines: int = 200) -> str:
        return tail(self.stderr_path, max_lines)

    def traceback_excerpt(self, context: int = 12) -> str:
        """The first Python traceback in the broker's output with the lines around it, or ""."""
        try:
            lines = self.stderr_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        for i, line in enumerate(lines):
            if line.startswith("Traceback (most recent call last)"):
                return "\n".join(lines[max(0, i - 2) : i + context])
        return ""

    # -- lifecycle --------------------------------------------------------------------------
    def spawn(self) -> None:
        with open(self.stderr_path, "ab") as out:
            out.write(f"\n===== start: {' '.join(self.command())}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                self.command(),
                stdout=out,
                stderr=out,
                stdin=subprocess.DEVNULL,
                env=self.environment(),
                cwd=self.cwd,
                start_new_session=True,
            )

    def environment(self) -> dict[str, str]:
        """The broker's environment: this process's, unbuffered, asyncio debug as chosen."""
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if self.asyncio_debug:
            env["PYTHONASYNCIODEBUG"] = "1"
        else:  # not inherited either: debug mode slows the loop (bench, fuzz)
            env.pop("PYTHONASYNCIODEBUG", None)
        return env

    def _wait_ready(self, deadline: float) -> None:
        assert self.proc is not None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.exit_codes.append(self.proc.returncode)
                raise BrokerStartError(
                    f"broker exited with {self.proc.returncode} during startup\n"
                    f"--- {self.stderr_path} ---\n{self.output()}"
                )
            if self.ready():
                return
            time.sleep(0.05)
        raise BrokerStartError(
            f"broker was not ready on {self.bootstrap} within {START_TIMEOUT}s\n"
            f"--- {self.stderr_path} ---\n{self.output()}"
        )

    def ready(self) -> bool:
        """One ApiVersions and one Metadata round trip on a fresh connection, the Metadata
        naming a live controller (with node.cores > 1: on every process of the node; each
        serves only once it registered)."""
        return all(broker_ready(self.host, p) for p in self.ports)

    def start(self, timeout: float = START_TIMEOUT) -> BrokerProcess:
        """Start once and wait until ready (no retry: a broker restarted right after kill -9
        waits by itself for its old ZooKeeper registration to expire)."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.spawn()
        try:
            self._wait_ready(time.monotonic() + timeout)
        except BrokerStartError:
            if self.proc.poll() is None:
                self._terminate_hard()
            raise
        return self

    def mark(self, what: str) -> None:
        """Note in the broker's output what the harness did, and when (to tell our signals
        from anyone else's when reading a log)."""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S") + f",{int(time.time() * 1000) % 1000:03d}"
        with open(self.stderr_path, "ab") as out:
            out.write(f"===== harness {stamp}: {what}\n".encode())

    def _terminate_hard(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.mark(f"SIGKILL to process group {self.proc.pid}")
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, wait, and assert a clean exit (code 0)."""
        proc = self.proc
        assert proc is not None, "broker was never started"
        if proc.poll() is None:
            self.mark(f"SIGTERM to pid {proc.pid}")
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._terminate_hard()
                raise AssertionError(
                    f"broker did not exit within {timeout}s of SIGTERM (killed)\n{self.output()}"
                ) from None
        code = proc.returncode
        self.mark(f"pid {proc.pid} exited with {code}")
        self.exit_codes.append(code)
        assert code == 0, f"broker exited with {code} after SIGTERM\n{self.output()}"
        return code

    def kill9(self) -> None:
        """SIGKILL the broker (a multi-core node: every process of it, as a machine crash)."""
        assert self.proc is not None and self.proc.poll() is None, "broker is not running"
        if self.cores > 1:
            self.mark(f"SIGKILL to process group {self.proc.pid}")
            os.killpg(self.proc.pid, signal.SIGKILL)
        else:
            self.mark(f"SIGKILL to pid {self.proc.pid}")
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.exit_codes.append(self.proc.returncode)

    def worker_pid(self, broker_id: int) -> int | None:
        """The pid of a multi-core node's broker process ``broker_id``, None if none runs."""
        assert self.proc is not None
        for task in os.listdir(f"/proc/{self.proc.pid}/task"):
            with open(f"/proc/{self.proc.pid}/task/{task}/children") as f:
                children = [int(c) for c in f.read().split()]
            for pid in children:
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        args = f.read().split(b"\0")
                except OSError:
                    continue
                if f"--broker-id={broker_id}".encode() in args:
                    return pid
        return None

    def kill9_worker(self, broker_id: int) -> int:
        """SIGKILL one broker process of a multi-core node (the node starts it again)."""
        pid = self.worker_pid(broker_id)
        assert pid is not None, f"no process of broker {broker_id} runs"
        self.mark(f"SIGKILL to broker {broker_id}'s process {pid}")
        os.kill(pid, signal.SIGKILL)
        return pid

    def restart(self, timeout: float = START_TIMEOUT) -> BrokerProcess:
        """Start again on the same port, log.dirs and chroot (stopping first if running)."""
        if self.proc is not None and self.proc.poll() is None:
            self.stop()
        return self.start(timeout)

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cleanup(self) -> None:
        """Kill whatever is left (fixture teardown safety net)."""
        self._terminate_hard()


def stop_all(brokers: dict[int, BrokerProcess]) -> list[str]:
    """SIGTERM every running broker; the problems (a broker that did not exit 0: the first
    line of why), empty when all stopped cleanly."""
    problems = []
    for i, b in brokers.items():
        try:
            if b.is_running():
                b.stop()
        except AssertionError as e:
            problems.append(f"broker {i}: {str(e).splitlines()[0]}")
    return problems


def start_all(brokers: Iterable[BrokerProcess], timeout: float = START_TIMEOUT) -> None:
    """Start the brokers in parallel, each until ready; raise the first failure (after all
    attempts ended; the caller cleans up)."""
    errors: list[BaseException] = []

    def run(b: BrokerProcess) -> None:
        try:
            b.start(timeout)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(b,)) for b in brokers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
