"""The brokers under test: Apache Kafka 3.9 (pybroker.testing.kafka_reference, KRaft) or
pybroker (`python -m pybroker serve`, embedded metadata store; several brokers: ZooKeeper and
pybroker.testing.cluster_harness), started alike by ``start_target`` with the workload's
overrides and, for TLS workloads, an SSL or SASL_SSL listener beside PLAINTEXT.  ``Target`` is
what a workload sees (bootstrap, pids, stop, logs); ``RssSampler`` follows their memory.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pybroker.testing import kafka_reference
from pybroker.testing.debug_process import BrokerProcess
from pybroker.testing.procstat import rss_mib
from pybroker.testing.procutil import free_port

HOST = "127.0.0.1"
KAFKA, PYBROKER = "kafka", "pybroker"

# Both brokers: no initial rebalance delay (as the brief's "same settings where they map").
PYBROKER_OVERRIDES: dict[str, object] = {"group.initial.rebalance.delay.ms": 0}
KAFKA_OVERRIDES: dict[str, object] = {"group.initial.rebalance.delay.ms": 0}


class RssSampler:
    """Samples the summed VmRSS every `interval` s; `peak` is the largest sum seen. With
    `hwm()` (per-process VmHWM, summed) it gives the peak over the broker's whole life."""

    def __init__(self, pids: list[int], interval: float = 0.25):
        self.pids = pids
        self.interval = interval
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mib(self.pids))
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def hwm(self) -> float:
        return rss_mib(self.pids, "VmHWM")


class BenchBroker(BrokerProcess):
    """compat_tests' BrokerProcess without PYTHONASYNCIODEBUG (asyncio debug mode is a test
    aid that slows the event loop down)."""

    asyncio_debug = False


@dataclass
class Target:
    kind: str  # KAFKA or PYBROKER
    bootstrap: str
    pids: list[int]
    stop: Callable[[], None]
    logs: Callable[[], str]  # tail of the broker output(s), for failure reports
    brokers: int = 1
    extra_rss: Callable[[], dict[str, float]] = lambda: {}  # e.g. ZooKeeper's, not counted
    log_dirs: list[Path] = field(default_factory=list)  # the first broker's first
    tls_bootstrap: str | None = None  # the SSL listener(s), for workloads with tls=True
    tls_props: list[str] = field(default_factory=list)  # client properties for them

    @property
    def first(self) -> tuple[str, int]:
        host, port = self.bootstrap.split(",")[0].rsplit(":", 1)
        return host, int(port)


SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule"
BENCH_USER, BENCH_PASSWORD = "bench", "bench-secret"
BENCH_SCRAM = f"SCRAM-SHA-512=[name={BENCH_USER},password={BENCH_PASSWORD}]"


def _tls(workdir: Path, protocol: str = "SSL") -> tuple[dict[str, object], list[str]]:
    """Throwaway certificates: the brokers' ssl.* settings (a PEM key store) and the clients'
    properties (a PEM trust store).  ``protocol`` SASL_SSL: SCRAM-SHA-512 on top, as user
    BENCH_USER (each broker creates it its own way before it starts)."""
    from pybroker.testing.tls_certs import make_certs

    certs = make_certs(workdir / "certs")
    broker: dict[str, object] = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.server),
    }
    client = [
        f"security.protocol={protocol}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={certs.ca}",
    ]
    if protocol == "SASL_SSL":
        broker["sasl.enabled.mechanisms"] = "SCRAM-SHA-512"
        broker["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"] = f"{SCRAM_JAAS} required;"
        client += [
            "sasl.mechanism=SCRAM-SHA-512",
            f'sasl.jaas.config={SCRAM_JAAS} required username="{BENCH_USER}" '
            f'password="{BENCH_PASSWORD}";',
        ]
    return broker, client


def start_target(
    kind: str,
    brokers: int,
    workdir: Path,
    overrides: dict[str, object] | None = None,
    tls: str = "",
    kafka4: bool = False,
) -> Target:
    """Kafka or pybroker, `brokers` of them; `overrides` (the workload's) go to both alike;
    `tls` ("SSL" or "SASL_SSL"): such a listener beside the PLAINTEXT one
    (Target.tls_bootstrap); `kafka4`: Kafka is Apache Kafka 4.4 (one node)."""
    workdir.mkdir(parents=True, exist_ok=True)
    ssl_broker, ssl_client = _tls(workdir, tls) if tls else ({}, [])
    if kind == KAFKA:
        props = dict(KAFKA_OVERRIDES, **(overrides or {}), **ssl_broker)
        if brokers == 1:
            ref = kafka_reference.start_kafka(
                workdir,
                overrides=props,
                ssl=bool(tls),
                secure_protocol=tls or "SSL",
                scram=BENCH_SCRAM if tls == "SASL_SSL" else None,
                kafka4=kafka4,
            )
        else:
            ref = kafka_reference.start_kafka_cluster(brokers, workdir, overrides=props)
        return Target(
            KAFKA,
            ref.bootstrap,
            [n.proc.pid for n in ref.nodes],
            lambda: ref.stop(check=False),
            lambda: "\n".join(f"--- node {n.node_id} ---\n{n.output(60)}" for n in ref.nodes),
            brokers,
            log_dirs=[n.workdir / "data" for n in ref.nodes],
            tls_bootstrap=f"127.0.0.1:{ref.nodes[0].ssl_port}" if tls else None,
            tls_props=ssl_client,
        )
    pyprops = dict(PYBROKER_OVERRIDES, **(overrides or {}))
    if brokers == 1:
        b = BenchBroker(workdir / "pybroker", overrides=pyprops)
        ssl_port = free_port("127.0.0.1") if tls else None
        if tls:
            b.overrides.update(
                {k: str(v) for k, v in ssl_broker.items()},
                listeners=f"PLAINTEXT://127.0.0.1:{b.port},{tls}://127.0.0.1:{ssl_port}",
            )
        if tls == "SASL_SSL":  # the user first, as README's add-scram
            props_file = workdir / "pybroker.properties"
            props_file.write_text("".join(f"{k}={v}\n" for k, v in b.settings().items()))
            subprocess.run(
                [sys.executable, "-m", "pybroker", "add-scram", str(props_file), BENCH_SCRAM],
                check=True,
                capture_output=True,
                timeout=120,
            )
        b.start()

        def stop_one() -> None:
            try:
                b.stop(timeout=60)
            finally:
                b.cleanup()

        return Target(
            PYBROKER,
            b.bootstrap,
            [b.pid],
            stop_one,
            lambda: b.output(80),
            log_dirs=[b.log_dir],
            tls_bootstrap=f"127.0.0.1:{ssl_port}" if tls else None,
            tls_props=ssl_client,
        )
    from pybroker.testing.cluster_harness import Cluster
    from pybroker.testing.zookeeper import ZooKeeperServer

    zk = ZooKeeperServer(workdir / "zookeeper")
    zk.start()
    overrides = dict(pyprops, **{"min.insync.replicas": 2})
    overrides["default.replication.factor"] = min(3, brokers)
    cluster = Cluster(workdir, zk, brokers, overrides)
    for b in cluster.brokers.values():
        b.__class__ = BenchBroker
    try:
        cluster.start()
    except BaseException:
        cluster.cleanup()
        zk.stop()
        raise

    def stop_cluster() -> None:
        try:
            cluster.stop()
        finally:
            cluster.cleanup()
            zk.stop()

    return Target(
        PYBROKER,
        cluster.bootstrap,
        [b.pid for b in cluster.brokers.values()],
        stop_cluster,
        lambda: cluster.outputs(60),
        brokers,
        lambda: {"ZooKeeper": rss_mib([zk.proc.pid], "VmHWM")} if zk.proc else {},
        [b.log_dir for b in cluster.brokers.values()],
    )
