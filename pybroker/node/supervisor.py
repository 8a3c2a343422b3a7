"""A multi-core node: ``pybroker serve`` with ``node.cores`` above 1 (docs/multicore.md).

Python runs one event loop on one core, so a node that should use N cores runs N broker
processes, each a whole pybroker broker with its own broker.id and ports (node/plan.py), and
this supervisor process, which

* holds the embedded metadata store (when zookeeper.connect is unset): the LocalStore under
  ``<first log dir>/__cluster_metadata``, as a one-core broker keeps it, served to the
  processes over a Unix socket in a private directory (metadata/store_server.py); with
  ZooKeeper each process is a client of the ensemble and the supervisor holds no state;
* starts the processes (``python -m pybroker.node.worker``, settings on stdin) and waits until
  every one serves before it says the node started; one that fails to start stops the start
  (its own error is in the log, naming the key);
* starts again a process that ends by itself (a crash, an OOM kill, kill -9), after a delay
  that doubles while it keeps failing quickly (0.5 s up to 30 s): its partitions' leadership
  has moved to other in-sync replicas meanwhile, and the process recovers its logs and catches
  up as any restarted broker does;
* serves the node's metrics.listener (node/http.py);
* on SIGTERM or SIGINT stops every process (each a clean, controlled shutdown), then the store.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pybroker.builder import METADATA_DIR
from pybroker.config import Config, ConfigError
from pybroker.coord.metadata.local import LocalStore
from pybroker.coord.metadata.store_server import StoreServer
from pybroker.http_server import HttpServer
from pybroker.node import plan
from pybroker.node.http import NodeHttp, ProcessView

log = logging.getLogger("pybroker.node")

STOP_TIMEOUT_S = 60.0  # a process still running this long after SIGTERM is killed
QUICK_FAILURE_S = 10.0  # a process that ends sooner after start counts as failing quickly
MAX_RESTART_DELAY_S = 30.0
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class NodeStartError(RuntimeError):
    pass


def _proc_figures(pid: int | None) -> tuple[float, float]:
    """(CPU seconds, RSS MiB) of a live process, from /proc; zeros when unknown."""
    if pid is None:
        return 0.0, 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        fields = stat[stat.rindex(")") + 2 :].split()
        cpu = (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
        rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE") / 1048576
        return cpu, rss
    except (OSError, ValueError, IndexError):
        return 0.0, 0.0


class Worker:
    """One broker process of the node and its restarts."""

    def __init__(self, node: Node, index: int, settings: dict[str, str]) -> None:
        self.node = node
        self.index = index
        self.settings = settings
        self.broker_id = int(settings["broker.id"])
        self.port = 0  # its first Kafka listener's port (set by the Node)
        self._fails = 0  # quick failures in a row
        self.proc: asyncio.subprocess.Process | None = None
        self.state = "stopped"
        self.restarts = 0
        self.metrics_port: int | None = None
        self.started_at = 0.0
        self.ready: asyncio.Future[None] | None = None
        self._task: asyncio.Task | None = None

    def view(self) -> ProcessView:
        pid = self.proc.pid if self.proc is not None and self.proc.returncode is None else None
        cpu, rss = _proc_figures(pid)
        return ProcessView(
            self.broker_id,
            pid,
            self.port,
            self.state,
            self.restarts,
            cpu,
            rss,
            self.metrics_port,
        )

    async def spawn(self) -> None:
        """Start the process; ``ready`` settles when it serves (or fails if it ends first)."""
        loop = asyncio.get_running_loop()
        r, w = os.pipe()
        env = dict(os.environ)
        env["PYBROKER_NODE_READY_FD"] = str(w)
        env["PYBROKER_NODE_PARENT"] = str(os.getpid())
        env["PYBROKER_NODE_LOG_LEVEL"] = self.node.log_level
        if self.node.store_server is not None:
            env["PYBROKER_NODE_STORE"] = str(self.node.store_server.socket_path)
        else:
            env.pop("PYBROKER_NODE_STORE", None)
        try:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "pybroker.node.worker",
                f"--broker-id={self.broker_id}",  # (for ps; the settings come on stdin)
                stdin=asyncio.subprocess.PIPE,
                pass_fds=(w,),
                env=env,
            )
        finally:
            os.close(w)
        self.state = "starting"
        self.metrics_port = None
        self.started_at = time.monotonic()
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(self.settings).encode())
        self.proc.stdin.close()
        self.ready = loop.create_future()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(r, "rb", buffering=0)
        )
        self._task = asyncio.create_task(self._watch(reader), name=f"broker-{self.broker_id}")

    async def _watch(self, reader: asyncio.StreamReader) -> None:
        assert self.proc is not None and self.ready is not None
        proc, ready = self.proc, self.ready
        line = await reader.readline()
        if line:
            try:
                info = json.loads(line)
                self.metrics_port = info.get("metrics_port")
            except ValueError:
                pass
            self.state = "serving"
            if not ready.done():
                ready.set_result(None)
        code = await proc.wait()
        if not ready.done():
            ready.set_exception(
                NodeStartError(f"broker {self.broker_id} exited with {code} while starting")
            )
        self.state = "stopped"
        if self.node.stopping:
            return
        how = f"was killed by signal {-code}" if code < 0 else f"exited with {code}"
        quick = time.monotonic() - self.started_at < QUICK_FAILURE_S
        self._fails = self._fails + 1 if quick else 0
        delay = min(MAX_RESTART_DELAY_S, 0.5 * 2 ** max(0, self._fails - 1))
        log.error(
            "broker %d (pid %d) %s; starting it again in %.1f s",
            self.broker_id,
            proc.pid,
            how,
            delay,
        )
        self.state = "restarting"
        await asyncio.sleep(delay)
        if self.node.stopping:
            self.state = "stopped"
            return
        self.restarts += 1
        try:
            await self.spawn()
        except OSError as e:
            log.error("broker %d could not be started again: %s", self.broker_id, e)
            self.state = "stopped"

    async def stop(self) -> int | None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return proc.returncode if proc is not None else None
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            return await asyncio.wait_for(proc.wait(), STOP_TIMEOUT_S)
        except TimeoutError:
            log.error(
                "broker %d did not stop within %.0f s: killed", self.broker_id, STOP_TIMEOUT_S
            )
            proc.kill()
            return await proc.wait()


class Node:
    def __init__(self, config: Config, settings: dict[str, str], log_level: str = "INFO") -> None:
        self.config = config
        self.cores = plan.cores_wanted(config)
        self.log_level = log_level
        self.stopping = False
        clashes = plan.port_clashes(config, self.cores)
        if clashes:
            raise ConfigError(
                f"invalid value for configuration key 'node.cores': {self.cores} broker "
                f"processes need ports that clash: {'; '.join(clashes)}"
            )
        self.workers = [
            Worker(self, k, plan.worker_settings(settings, config, k)) for k in range(self.cores)
        ]
        for k, w in enumerate(self.workers):
            w.port = config.listeners[0].port + k
        self.store: LocalStore | None = None
        self.store_server: StoreServer | None = None
        self._socket_dir: str | None = None
        self.http: HttpServer | None = None

    def views(self) -> list[ProcessView]:
        return [w.view() for w in self.workers]

    def describe(self) -> dict[str, Any]:
        cfg = self.config
        first, last = self.workers[0], self.workers[-1]
        return {
            "node.cores": self.cores,
            "broker.id": f"{first.broker_id}..{last.broker_id}",
            "listeners": ",".join(w.settings["listeners"] for w in self.workers),
            "log.dirs": ",".join(str(d) for d in cfg.log_dir_list),
            "metadata": "zookeeper" if cfg.zookeeper_connect else "embedded",
            "rack": plan.node_rack(cfg),
        }

    async def start(self) -> None:
        cfg = self.config
        if not cfg.zookeeper_connect:
            self.store = LocalStore(cfg.data_dir / METADATA_DIR)
            await self.store.start()
            self._socket_dir = tempfile.mkdtemp(prefix="pybroker-node-")  # 0700, a short path
            self.store_server = StoreServer(self.store, Path(self._socket_dir) / "store.sock")
            await self.store_server.start()
        if cfg.metrics_listener is not None:
            self.http = HttpServer(cfg.metrics_listener.host, cfg.metrics_listener.port)
            await self.http.bind()
        for w in self.workers:
            await w.spawn()
        try:
            await asyncio.gather(*(w.ready for w in self.workers))
        except NodeStartError as e:
            raise NodeStartError(f"{e} (its log above says why); the node does not start") from None
        if self.http is not None:
            NodeHttp(self.views, self.cores).install(self.http)
            await self.http.start()

    async def stop(self) -> int:
        """Stop every process (in parallel), then the listener and the store; returns the
        exit status for the node: 0 when every process stopped cleanly."""
        self.stopping = True
        codes = await asyncio.gather(*(w.stop() for w in self.workers))
        if self.http is not None:
            await self.http.stop()
        if self.store_server is not None:
            await self.store_server.stop()
        if self.store is not None:
            await self.store.close()
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
        bad = [
            (w.broker_id, c) for w, c in zip(self.workers, codes, strict=True) if c not in (0, None)
        ]
        for broker_id, code in bad:
            log.error("broker %d exited with %s at shutdown", broker_id, code)
        return 1 if bad else 0


async def serve_node(config: Config, settings: dict[str, str], log_level: str) -> int:
    """``pybroker serve`` for node.cores != 1: run the node until SIGTERM or SIGINT."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    node = Node(config, settings, log_level)
    starting = asyncio.create_task(node.start(), name="node-start")
    stopped = asyncio.create_task(stop.wait(), name="node-stop-signal")
    try:
        await asyncio.wait({starting, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():  # SIGTERM while the processes start: stop them
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
            await node.stop()
            print("pybroker stopped", file=sys.stderr, flush=True)
            return 0
        starting.result()
    except BaseException:
        stopped.cancel()
        await node.stop()
        raise
    print(
        "pybroker started (" + ", ".join(f"{k}={v}" for k, v in node.describe().items()) + ")",
        file=sys.stderr,
        flush=True,
    )
    await stopped
    log.info("shutting down the node")
    code = await node.stop()
    print("pybroker stopped", file=sys.stderr, flush=True)
    return code
