"""A real Apache Kafka 3.9 (KRaft) on loopback, from the jars of scripts/fetch-java-deps; with
``kafka4=True`` Apache Kafka 4.4 instead (java/kafka4/pom.xml: share groups, KIP-932).

For side-by-side runs against pybroker:

    from pybroker.testing.kafka_reference import start_kafka, start_kafka_cluster
    with start_kafka() as kafka:                 # one node: broker + controller
        kafka.bootstrap                          # "127.0.0.1:<port>"
    with start_kafka_cluster(3) as cluster:      # node 1 broker+controller, nodes 2-3 brokers
        cluster.bootstrap                        # all three brokers' listeners
    with start_kafka(kafka4=True) as kafka:      # Kafka 4.4, its share coordinator's state
        ...                                      #  topic at replication factor 1
    with start_kafka_zk(3, "127.0.0.1:2181/k") as cluster:   # ZooKeeper mode (deprecated in
        cluster.nodes[0].kill9()                 # 3.9, still served): broker.id 0..2, the
                                                 # controller elected through /controller

    python -m pybroker.testing.kafka_reference [--brokers 3] [--smoke] [--workdir DIR]
        starts it, prints the bootstrap servers, and runs until Ctrl-C; --smoke instead
        produces and consumes with kafka-python and stops.

Each node gets free loopback ports, a server.properties and data dir under the work dir (a
temp dir unless given), its storage formatted with kafka.tools.StorageTool (`format -t
<cluster id> -c server.properties`), then runs kafka.Kafka with -Xmx512m and G1 (Kafka's own
GC flags) and java/log4j/broker.properties; its output goes to <workdir>/node<id>/kafka.out.
start_* return once the PLAINTEXT listener answers Metadata listing every broker. stop() sends
SIGTERM (Kafka's controlled shutdown), brokers first and the controller last, and waits.
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from pybroker.testing import java, rawkafka
from pybroker.testing.procutil import free_port, tail

HOST = "127.0.0.1"
HEAP = "512m"
# Kafka's kafka-run-class.sh defaults (KAFKA_JVM_PERFORMANCE_OPTS), minus the GC log.
JVM_PERFORMANCE_OPTS = [
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.net.preferIPv4Stack=true",
]


def new_cluster_id() -> str:
    """A Kafka Uuid in its base64url form (22 chars), not starting with '-' (as Kafka's)."""
    while True:
        s = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not s.startswith("-"):
            return s


def metadata_brokers(host: str, port: int, timeout: float = 2.0) -> tuple[list[int], int]:
    """(broker ids, controller id) from a Metadata v1 round trip with no topics."""
    with rawkafka.Conn(host, port, timeout=timeout) as c:
        _corr, body = c.roundtrip(rawkafka.metadata_v1(11, topics=[]))
    r = rawkafka.Reader(body)
    n = r.take(">i")
    ids = []
    for _ in range(n):
        node_id = r.take(">i")
        r.string()  # host
        r.take(">i")  # port
        r.string()  # rack
        ids.append(node_id)
    controller = r.take(">i")
    return sorted(ids), controller


@dataclass
class KafkaNode:
    node_id: int
    workdir: Path
    port: int
    controller_port: int | None  # set on the node that runs the controller
    voters: str  # controller.quorum.voters
    overrides: dict[str, object] = field(default_factory=dict)
    heap: str = HEAP
    proc: subprocess.Popen | None = None
    ssl_port: int | None = None  # an SSL listener too (its ssl.* settings in overrides)
    secure_protocol: str = "SSL"  # that listener's protocol: SSL or SASL_SSL
    scram: str | None = None  # kafka-storage format --add-scram (SASL_SSL's user)
    kafka4: bool = False  # Apache Kafka 4.4 (java/kafka4/pom.xml) instead of 3.9
    # ZooKeeper mode (zookeeper.connect, broker.id; no KRaft roles, no storage format)
    zookeeper_connect: str | None = None

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def properties_path(self) -> Path:
        return self.workdir / "server.properties"

    @property
    def out_path(self) -> Path:
        return self.workdir / "kafka.out"

    def properties(self) -> dict[str, object]:
        if self.zookeeper_connect is not None:
            return self._zk_properties()
        controller = self.controller_port is not None
        listeners = [f"PLAINTEXT://{HOST}:{self.port}"]
        advertised = [f"PLAINTEXT://{HOST}:{self.port}"]
        if self.ssl_port is not None:
            listeners.append(f"{self.secure_protocol}://{HOST}:{self.ssl_port}")
            advertised.append(f"{self.secure_protocol}://{HOST}:{self.ssl_port}")
        if controller:
            listeners.append(f"CONTROLLER://{HOST}:{self.controller_port}")
        props: dict[str, object] = {
            "process.roles": "broker,controller" if controller else "broker",
            "node.id": self.node_id,
            "controller.quorum.voters": self.voters,
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(advertised),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
            "SSL:SSL,SASL_SSL:SASL_SSL",
            **self._common_properties(),
        }
        if self.kafka4:  # the share coordinator's internal topic, on one node
            props["share.coordinator.state.topic.replication.factor"] = 1
            props["share.coordinator.state.topic.min.isr"] = 1
        props.update(self.overrides)
        return props

    def _common_properties(self) -> dict[str, object]:
        """What every reference node runs with, KRaft or ZooKeeper: one node's internal topics
        (replication factor 1), no initial rebalance delay, few threads."""
        return {
            "log.dirs": self.workdir / "data",
            "num.partitions": 1,
            "offsets.topic.replication.factor": 1,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "group.initial.rebalance.delay.ms": 0,
            "num.network.threads": 2,
            "num.io.threads": 4,
        }

    def _zk_properties(self) -> dict[str, object]:
        props: dict[str, object] = {
            "broker.id": self.node_id,
            "zookeeper.connect": self.zookeeper_connect,
            "listeners": f"PLAINTEXT://{HOST}:{self.port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{self.port}",
            **self._common_properties(),
        }
        props.update(self.overrides)
        return props

    def kill9(self) -> None:
        """SIGKILL the node's process group and wait for it."""
        self.signal(signal.SIGKILL)
        self.wait(30)

    def write_properties(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        text = "".join(f"{k}={v}\n" for k, v in self.properties().items())
        self.properties_path.write_text(text)

    def _java(self) -> dict:
        """The classpath and logging settings of this node's Kafka version."""
        if self.kafka4:
            return {
                "cp": java.kafka4_classpath(),
                "log4j": None,
                "jvm_args": [f"-Dlog4j2.configurationFile={java.KAFKA4_BROKER_LOG4J2}"],
            }
        return {"cp": None, "log4j": java.BROKER_LOG4J, "jvm_args": []}

    def format_storage(self, cluster_id: str, timeout: float = 120) -> None:
        j = self._java()
        r = java.run_main(
            java.STORAGE_TOOL,
            [
                "format",
                "-t",
                cluster_id,
                "-c",
                self.properties_path,
                "--ignore-formatted",
                *(["--add-scram", self.scram] if self.scram else []),
            ],  # fmt: skip
            timeout=timeout,
            log4j=None if self.kafka4 else java.TOOLS_LOG4J,
            cp=j["cp"],
            jvm_args=[f"-Dlog4j2.configurationFile={java.KAFKA4_TOOLS_LOG4J2}"]
            if self.kafka4
            else None,
        )
        if not r.ok:
            raise RuntimeError(f"StorageTool format failed for node {self.node_id}\n{r.describe()}")

    def start(self) -> None:
        j = self._java()
        cmd = java.java_command(
            java.KAFKA_SERVER,
            [self.properties_path],
            heap=self.heap,
            log4j=j["log4j"],
            jvm_args=[f"-Xms{self.heap}", *JVM_PERFORMANCE_OPTS, *j["jvm_args"]],
            fast_start=False,
            cp=j["cp"],
        )
        with open(self.out_path, "ab") as out:
            out.write(f"\n===== start: {' '.join(map(str, cmd))}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
                start_new_session=True,
            )

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.is_running():
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float) -> int | None:
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def output(self, max_lines: int = 80) -> str:
        return tail(self.out_path, max_lines)


class KafkaReference:
    """A running Apache Kafka (one or more nodes); a context manager that stops it."""

    def __init__(self, nodes: list[KafkaNode], workdir: Path, cluster_id: str, owns_dir: bool):
        self.nodes = nodes
        self.workdir = workdir
        self.cluster_id = cluster_id
        self._owns_dir = owns_dir

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def version(self) -> str:
        if self.nodes and self.nodes[0].kafka4:
            return java.kafka4_version()
        return java.kafka_version()

    def start(self, timeout: float) -> KafkaReference:
        """Start every node and wait until all are ready; on a failure every node is stopped
        and the error raised."""
        try:
            for n in self.nodes:
                n.start()
            self.wait_ready(timeout)
        except BaseException:
            self.stop(check=False)
            raise
        return self

    def wait_ready(self, timeout: float) -> None:
        want = sorted(n.node_id for n in self.nodes)
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            for n in self.nodes:
                if not n.is_running():
                    raise RuntimeError(
                        f"Kafka node {n.node_id} exited with {n.proc.returncode} during start\n"
                        f"--- {n.out_path} ---\n{n.output()}"
                    )
            try:
                seen = [metadata_brokers(HOST, n.port) for n in self.nodes]
                if all(ids == want and ctrl in want for ids, ctrl in seen):
                    return
                last = seen
            except (OSError, struct.error, AssertionError, TypeError, ValueError) as e:
                last = e
            time.sleep(0.2)
        self.stop(check=False)
        raise TimeoutError(
            f"Kafka did not list brokers {want} within {timeout}s (last: {last})\n"
            + "\n".join(f"--- node {n.node_id} ---\n{n.output(40)}" for n in self.nodes)
        )

    def stop(self, timeout: float = 60.0, *, check: bool = True) -> None:
        """SIGTERM brokers first, the controller node last; SIGKILL after `timeout`."""
        order = sorted(self.nodes, key=lambda n: n.controller_port is not None)
        codes = {}
        for n in order:
            n.signal(signal.SIGTERM)
            code = n.wait(timeout)
            if code is None:
                n.signal(signal.SIGKILL)
                n.wait(10)
            codes[n.node_id] = code
        if self._owns_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if check:
            bad = {k: c for k, c in codes.items() if c not in (0, 143)}  # 143: killed by TERM
            if bad:
                raise RuntimeError(f"Kafka nodes did not shut down cleanly: {bad}")

    def __enter__(self) -> KafkaReference:
        return self

    def __exit__(self, *exc) -> None:
        self.stop(check=exc[0] is None)


def _start(
    brokers: int,
    workdir: Path | str | None,
    overrides: dict[str, object] | None,
    heap: str,
    timeout: float,
    ssl: bool = False,
    secure_protocol: str = "SSL",
    scram: str | None = None,
    kafka4: bool = False,
) -> KafkaReference:
    java.classpath()  # fetch the jars first (cached), so the timeout covers start-up only
    if kafka4:
        java.kafka4_classpath()
    owns = workdir is None
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="kafka-ref-"))
    root.mkdir(parents=True, exist_ok=True)
    cport = free_port(HOST)
    voters = f"1@{HOST}:{cport}"
    nodes = []
    used = {cport}
    for node_id in range(1, brokers + 1):
        port = free_port(HOST)
        while port in used:
            port = free_port(HOST)
        used.add(port)
        node_overrides = dict(overrides or {})
        if brokers > 1:
            rf = min(3, brokers)
            node_overrides.setdefault("offsets.topic.replication.factor", rf)
            node_overrides.setdefault("transaction.state.log.replication.factor", rf)
            node_overrides.setdefault("default.replication.factor", rf)
            node_overrides.setdefault("min.insync.replicas", max(1, rf - 1))
        nodes.append(
            KafkaNode(
                node_id=node_id,
                workdir=root / f"node{node_id}",
                port=port,
                controller_port=cport if node_id == 1 else None,
                voters=voters,
                overrides=node_overrides,
                heap=heap,
                ssl_port=free_port(HOST) if ssl else None,
                secure_protocol=secure_protocol,
                scram=scram,
                kafka4=kafka4,
            )
        )
    cluster_id = new_cluster_id()
    for n in nodes:
        n.write_properties()
        n.format_storage(cluster_id)
    return KafkaReference(nodes, root, cluster_id, owns).start(timeout)


def start_kafka_zk(
    brokers: int,
    zookeeper_connect: str,
    workdir: Path | str | None = None,
    *,
    overrides: dict[str, object] | None = None,
    heap: str = HEAP,
    timeout: float = 180.0,
) -> KafkaReference:
    """``brokers`` Kafka brokers in ZooKeeper mode (broker.id 0..brokers-1) on the ZooKeeper at
    ``zookeeper_connect`` (a chroot path is created by Kafka): the pre-KRaft controller (one
    broker wins /controller).  Internal topics use min(3, brokers) replicas."""
    java.classpath()
    owns = workdir is None
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="kafka-zk-"))
    root.mkdir(parents=True, exist_ok=True)
    nodes = []
    used: set[int] = set()
    rf = min(3, brokers)
    for node_id in range(brokers):
        port = free_port(HOST)
        while port in used:
            port = free_port(HOST)
        used.add(port)
        node_overrides: dict[str, object] = {
            "offsets.topic.replication.factor": rf,
            "transaction.state.log.replication.factor": rf,
            "default.replication.factor": rf,
            **(overrides or {}),
        }
        nodes.append(
            KafkaNode(
                node_id=node_id,
                workdir=root / f"node{node_id}",
                port=port,
                controller_port=None,
                voters="",
                overrides=node_overrides,
                heap=heap,
                zookeeper_connect=zookeeper_connect,
            )
        )
    for n in nodes:
        n.write_properties()
    return KafkaReference(nodes, root, "", owns).start(timeout)


def start_kafka(
    workdir: Path | str | None = None,
    *,
    overrides: dict[str, object] | None = None,
    heap: str = HEAP,
    timeout: float = 120.0,
    ssl: bool = False,
    secure_protocol: str = "SSL",
    scram: str | None = None,
    kafka4: bool = False,
) -> KafkaReference:
    """One KRaft node (process.roles=broker,controller, node.id=1) on free loopback ports;
    ``ssl``: a secure listener too (node.ssl_port: ``secure_protocol`` SSL or SASL_SSL),
    configured by ssl.* / sasl.* ``overrides``; ``scram``: a user added at format time
    (``kafka-storage format --add-scram``'s syntax); ``kafka4``: Apache Kafka 4.4."""
    return _start(1, workdir, overrides, heap, timeout, ssl, secure_protocol, scram, kafka4)


def start_kafka_cluster(
    brokers: int = 3,
    workdir: Path | str | None = None,
    *,
    overrides: dict[str, object] | None = None,
    heap: str = HEAP,
    timeout: float = 180.0,
) -> KafkaReference:
    """`brokers` KRaft nodes: node 1 runs broker+controller (a one-voter quorum), the rest are
    brokers only. Internal topics and default.replication.factor use min(3, brokers) replicas,
    min.insync.replicas one less."""
    return _start(brokers, workdir, overrides, heap, timeout)


def smoke(ref: KafkaReference, count: int = 1000) -> None:
    """kafka-python: create a topic, produce `count` records (acks=all), read them back."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = f"smoke-{uuid.uuid4().hex[:8]}"
    rf = min(3, len(ref.nodes))
    admin = KafkaAdminClient(bootstrap_servers=ref.bootstrap)
    admin.create_topics([NewTopic(topic, 3, rf)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=ref.bootstrap, acks="all")
    futures = [producer.send(topic, key=b"%d" % (i % 7), value=b"v%d" % i) for i in range(count)]
    producer.flush()
    for f in futures:
        f.get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=ref.bootstrap, enable_auto_commit=False)
    parts = [TopicPartition(topic, p) for p in range(3)]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    got = []
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        for recs in consumer.poll(timeout_ms=500).values():
            got += [r.value for r in recs]
    consumer.close()
    assert sorted(got) == sorted(b"v%d" % i for i in range(count)), f"read {len(got)} of {count}"
    print(f"smoke: {count} records produced (acks=all) and read back from {topic} (rf={rf})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brokers", type=int, default=1)
    ap.add_argument("--workdir", help="keep data here (default: a temp dir, removed at stop)")
    ap.add_argument("--heap", default=HEAP)
    ap.add_argument("--kafka4", action="store_true", help="Apache Kafka 4.4 (share groups)")
    ap.add_argument("--smoke", action="store_true", help="produce/consume with kafka-python, stop")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    if args.brokers == 1:
        ref = start_kafka(args.workdir, heap=args.heap, kafka4=args.kafka4)
    else:
        ref = start_kafka_cluster(args.brokers, args.workdir, heap=args.heap)
    with ref:
        print(
            f"Apache Kafka {ref.version} ({len(ref.nodes)} node(s), cluster {ref.cluster_id}) "
            f"ready in {time.monotonic() - t0:.1f}s: bootstrap {ref.bootstrap}; "
            f"work dir {ref.workdir}",
            flush=True,
        )
        if args.smoke:
            smoke(ref)
        else:
            try:
                signal.pause()
            except KeyboardInterrupt:
                pass
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    sys.exit(main())
