"""A real multi-broker cluster for tests: one throwaway ZooKeeper plus N pybroker processes.

    zk = ZooKeeperServer(workdir / "zk"); zk.start()
    c = Cluster(workdir, zk, size=3)          # brokers 0..2, one chroot, free loopback ports
    c.start()                                 # all brokers in parallel, waits for registration
    c.create_topic("t", partitions=3, rf=3, configs={"min.insync.replicas": "2"})
    md = c.metadata(["t"])                    # hand-built Metadata v7 (controller, leaders,
    md.partitions[("t", 0)].leader            #  leader epochs, replicas, ISR)
    c.kill9(1); c.restart(1); c.pause(2); c.resume(2)
    c.wait_isr_full("t")                      # every partition: ISR == replicas, leader live
    c.wait_replicas_on_disk("t")              # {partition: {broker: log dir}}, once made
    c.find_coordinator("group")               # FindCoordinator v1, by hand
    c.stop()                                  # SIGTERM to every broker; exit 0 asserted
    c.replica_batches("t", 0)                 # on-disk batch headers of each replica

``running_cluster`` starts a private ZooKeeper and the brokers and always ends every process
it started (the compat tests' `cluster` fixtures wrap it; the bench's W6 uses Cluster).  Wire
bytes for Metadata / FindCoordinator are built by hand (struct, rawkafka.py), so what the
tests see does not depend on pybroker's codec nor on a client's metadata cache.

Named here too: the acks=all idempotent producer loads (kafka-python and confluent-kafka) that
record every acknowledgement, a reader that consumes a whole topic with assign/seek, and
`check_records`, which verifies exactly-once and per-producer order of acknowledged records
(pybroker/testing/cluster_loads.py), and the replicas' on-disk checks (`compare_replicas`,
`read_batches`, pybroker/testing/replica_files.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from pybroker.testing import rawkafka
from pybroker.testing.cluster import CLUSTER_OVERRIDES  # settings every cluster broker gets
from pybroker.testing.cluster_loads import (  # noqa: F401 (named here for their importers)
    Ack,
    CheckResult,
    ConfluentLoad,
    KafkaPythonLoad,
    Load,
    LoadStats,
    check_records,
    read_topic,
)
from pybroker.testing.debug_process import BrokerProcess
from pybroker.testing.process import BrokerStartError, start_all, stop_all
from pybroker.testing.replica_files import (  # noqa: F401 (named here for their importers)
    BATCH_HEADER,
    BatchHeader,
    ReplicaCheck,
    compare_replicas,
    read_batches,
    read_checkpoint,
    replica_dirs,
    segment_problems,
)
from pybroker.testing.zookeeper import ZooKeeperServer

SESSION_TIMEOUT_S = 6.0
SUPERVISOR_BACKOFF_S = 5.0  # Cluster.restart: before starting a broker that exited again


def wait_until(cond: Callable, timeout: float, interval: float = 0.1, what: str = "condition"):
    """Poll cond() until truthy (returned) or raise AssertionError at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


# ------------------------------------------------------------------------------------------
# hand-built Metadata v7 and FindCoordinator v1
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionInfo:
    error: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]


@dataclass
class ClusterMetadata:
    via: int  # the broker that answered
    controller_id: int
    brokers: dict[int, tuple[str, int]]
    topic_errors: dict[str, int]
    partitions: dict[tuple[str, int], PartitionInfo]

    def topic(self, name: str) -> dict[int, PartitionInfo]:
        return {p: info for (t, p), info in self.partitions.items() if t == name}


def metadata_v7_request(correlation_id: int, topics: list[str] | None) -> bytes:
    body = struct.pack(">i", -1 if topics is None else len(topics))
    for t in topics or []:
        body += rawkafka.kstring(t)
    body += b"\x00"  # allow_auto_topic_creation = false
    return rawkafka.frame(rawkafka.request_header(rawkafka.API_METADATA, 7, correlation_id) + body)


def wait_for_partitions_everywhere(
    host: str, ports: list[int], topic: str, partitions: int, timeout: float = 30.0
) -> None:
    """Until every broker listening on ``ports`` has every partition of ``topic`` with a
    leader in its own metadata (Kafka's TestUtils.waitForAllPartitionsMetadata): metadata
    reaches the brokers of a cluster or a node milliseconds apart, and a client's next request
    may go to any of them."""

    def known_at(port: int) -> bool:
        with rawkafka.Conn(host, port, timeout=5.0) as c:
            _corr, body = c.roundtrip(metadata_v7_request(1, [topic]))
        parts = parse_metadata_v7(body, -1).topic(topic)
        return len(parts) == partitions and all(p.leader >= 0 for p in parts.values())

    for port in ports:
        wait_until(lambda p=port: known_at(p), timeout, what=f"{topic} in the metadata of :{port}")


def parse_metadata_v7(body: bytes, via: int) -> ClusterMetadata:
    r = rawkafka.Reader(body)
    r.take(">i")  # throttle_time_ms
    brokers = {}
    for _ in range(r.take(">i")):
        node = r.take(">i")
        host = r.string()
        port = r.take(">i")
        r.string()  # rack
        brokers[node] = (host, port)
    r.string()  # cluster_id
    controller = r.take(">i")
    topic_errors, parts = {}, {}

    def ints() -> tuple[int, ...]:
        n = r.take(">i")
        return tuple(r.take(">i") for _ in range(max(n, 0)))

    for _ in range(r.take(">i")):
        err = r.take(">h")
        name = r.string()
        r.take(">b")  # is_internal
        topic_errors[name] = err
        for _ in range(r.take(">i")):
            perr, index, leader, epoch = r.take(">hiii")
            replicas, isr, offline = ints(), ints(), ints()
            parts[(name, index)] = PartitionInfo(perr, leader, epoch, replicas, isr, offline)
    return ClusterMetadata(via, controller, brokers, topic_errors, parts)


def find_coordinator_v1_request(correlation_id: int, group: str, key_type: int = 0) -> bytes:
    body = rawkafka.kstring(group) + bytes([key_type])  # 0: group, 1: transactional id
    return rawkafka.frame(rawkafka.request_header(10, 1, correlation_id) + body)


# ------------------------------------------------------------------------------------------
# the cluster
# ------------------------------------------------------------------------------------------


class Cluster:
    def __init__(
        self,
        workdir: Path,
        zookeeper,  # pybroker.testing.zookeeper.ZooKeeperServer (running)
        size: int = 3,
        overrides: dict[str, object] | None = None,
        chroot: str | None = None,
        broker_factory: Callable[..., BrokerProcess] | None = None,
    ):
        """``broker_factory(broker_id, zookeeper_connect=, overrides=, broker_id=,
        chroot=)`` makes each BrokerProcess (default: one on loopback under workdir/broker<i>;
        compat_tests/net_cluster.py puts each in a network namespace)."""
        self.workdir = Path(workdir)
        self.zookeeper = zookeeper
        settings = dict(CLUSTER_OVERRIDES)
        settings.update(overrides or {})
        self.settings = settings
        self.broker_factory = broker_factory or (
            lambda i, **kw: BrokerProcess(self.workdir / f"broker{i}", **kw)
        )
        self.brokers: dict[int, BrokerProcess] = {}
        first = None
        for i in range(size):
            b = self.broker_factory(
                i,
                zookeeper_connect=zookeeper.connect,
                overrides=settings,
                broker_id=i,
                chroot=chroot or (first.chroot if first else None),
            )
            first = first or b
            self.brokers[i] = b
        self.paused: set[int] = set()
        self.supervised_restarts = 0  # see restart()
        self.supervisor_restarts: list[str] = []
        self.stop_problems: list[str] = []
        self._corr = 0
        self.events: list[tuple[float, str]] = []  # (time.time(), what) for reports

    # -- facts ------------------------------------------------------------------------------
    @property
    def ids(self) -> list[int]:
        return sorted(self.brokers)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def running(self) -> list[int]:
        return [i for i, b in self.brokers.items() if b.is_running() and i not in self.paused]

    def note(self, what: str) -> None:
        self.events.append((time.time(), what))

    # -- lifecycle --------------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> Cluster:
        start_all(self.brokers.values())
        wait_until(lambda: self._all_registered(), timeout, 0.2, f"all of {self.ids} registered")
        return self

    def _all_registered(self) -> bool:
        try:
            md = self.metadata([])
        except OSError:
            return False
        return set(md.brokers) == set(self.ids) and md.controller_id in self.ids

    def add_broker(self, timeout: float = 60.0) -> int:
        """Start one more broker (the next id, same settings and chroot), as an operator adds
        a machine to a running cluster; returns its id once the cluster knows it."""
        new_id = max(self.brokers) + 1
        first = self.brokers[min(self.brokers)]
        b = self.broker_factory(
            new_id,
            zookeeper_connect=self.zookeeper.connect,
            overrides=self.settings,
            broker_id=new_id,
            chroot=first.chroot,
        )
        self.brokers[new_id] = b
        self.note(f"add broker {new_id}")
        b.start(timeout)
        wait_until(self._all_registered, timeout, 0.2, f"broker {new_id} registered")
        return new_id

    def kill9(self, broker_id: int) -> float:
        """kill -9; returns the time.monotonic() of the kill."""
        self.resume(broker_id)
        self.note(f"kill -9 broker {broker_id}")
        t = time.monotonic()
        self.brokers[broker_id].kill9()
        return t

    def restart(self, broker_id: int, timeout: float = 90.0) -> None:
        """Start a stopped/killed broker again (same port, log dir, chroot); a running one is
        stopped cleanly first (SIGTERM, exit 0 asserted).  The bound is generous: on a
        loaded machine a start printed nothing for 30 s.  With ``supervised_restarts`` > 0 a
        broker that exited by itself while starting (a start-up failure: Kafka too exits when
        ZooKeeper is out of reach for zookeeper.connection.timeout.ms) is started again after
        SUPERVISOR_BACKOFF_S, as Kafka's supervisor (systemd Restart=on-failure) would, at
        most that many times; each such restart is listed in ``supervisor_restarts``."""
        self.resume(broker_id)
        self.note(f"restart broker {broker_id}")
        b = self.brokers[broker_id]
        for attempt in range(self.supervised_restarts + 1):
            try:
                b.restart(timeout)
                return
            except BrokerStartError as e:
                code = b.proc.returncode if b.proc is not None else None
                if attempt == self.supervised_restarts or code is None or code < 0:
                    raise  # (a start that hung was killed by us: negative code)
                first = str(e).splitlines()[0][:200]
                self.supervisor_restarts.append(f"broker {broker_id} exited {code}: {first}")
                self.note(f"broker {broker_id} exited {code} while starting: started again")
                time.sleep(SUPERVISOR_BACKOFF_S)

    def stop_broker(self, broker_id: int) -> None:
        self.resume(broker_id)
        self.note(f"SIGTERM broker {broker_id}")
        self.brokers[broker_id].stop()

    def pause(self, broker_id: int) -> None:
        b = self.brokers[broker_id]
        assert b.is_running()
        self.note(f"SIGSTOP broker {broker_id}")
        b.mark(f"SIGSTOP to pid {b.pid}")
        os.kill(b.pid, signal.SIGSTOP)
        self.paused.add(broker_id)

    def resume(self, broker_id: int) -> None:
        if broker_id not in self.paused:
            return
        b = self.brokers[broker_id]
        self.paused.discard(broker_id)
        if b.is_running():
            self.note(f"SIGCONT broker {broker_id}")
            os.kill(b.pid, signal.SIGCONT)
            b.mark(f"SIGCONT to pid {b.pid}")

    def stop(self) -> list[str]:
        """SIGTERM every running broker (SIGCONT first); returns the problems (a broker that
        did not exit 0), empty when all stopped cleanly."""
        for i in list(self.paused):
            self.resume(i)
        return stop_all(self.brokers)

    def cleanup(self) -> None:
        for i in list(self.paused):
            self.resume(i)
        for b in self.brokers.values():
            b.cleanup()

    def outputs(self, max_lines: int = 120) -> str:
        return "\n".join(
            f"----- broker {i} ({b.stderr_path})\n{b.output(max_lines)}"
            for i, b in self.brokers.items()
        )

    # -- requests ---------------------------------------------------------------------------
    def _roundtrip(self, broker_id: int, request: Callable[[int], bytes], timeout: float):
        b = self.brokers[broker_id]
        self._corr += 1
        corr = self._corr
        with rawkafka.Conn(b.host, b.port, timeout=timeout) as c:
            got_corr, body = c.roundtrip(request(corr))
        assert got_corr == corr
        return body

    def metadata(
        self, topics: list[str] | None = None, via: Iterable[int] | None = None, timeout=2.0
    ) -> ClusterMetadata:
        """Metadata v7 from the first running broker (in `via` order) that answers."""
        last: Exception | None = None
        for i in via if via is not None else self.running():
            try:
                body = self._roundtrip(i, lambda c: metadata_v7_request(c, topics), timeout)
                return parse_metadata_v7(body, i)
            except (OSError, AssertionError, struct.error) as e:
                last = e
        raise OSError(f"no broker answered Metadata: {last}")

    def find_coordinator(
        self, group: str, via: int | None = None, key_type: int = 0
    ) -> tuple[int, int]:
        """(error_code, node_id) from FindCoordinator v1 (key_type 1: a transactional id)."""
        targets = [via] if via is not None else self.running()
        last: Exception | None = None
        for i in targets:
            try:
                body = self._roundtrip(
                    i, lambda c: find_coordinator_v1_request(c, group, key_type), 2.0
                )
                r = rawkafka.Reader(body)
                r.take(">i")
                err = r.take(">h")
                r.string()
                return err, r.take(">i")
            except (OSError, AssertionError, struct.error) as e:
                last = e
        raise OSError(f"no broker answered FindCoordinator: {last}")

    # -- topic helpers ----------------------------------------------------------------------
    def create_topic(
        self,
        name: str,
        partitions: int = 3,
        rf: int = 3,
        configs: dict[str, str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="cluster-admin")
        try:
            admin.create_topics(
                [NewTopic(name, partitions, rf, topic_configs=configs or {})], timeout_ms=15000
            )
        finally:
            admin.close()
        self.wait_isr_full(name, timeout=timeout, partitions=partitions)

    def isr_full(self, topic: str, partitions: int | None = None) -> ClusterMetadata | None:
        """The metadata if every partition has a running leader and ISR == replicas."""
        try:
            md = self.metadata([topic])
        except OSError:
            return None
        parts = md.topic(topic)
        if not parts or (partitions is not None and len(parts) != partitions):
            return None
        running = set(self.running())
        for info in parts.values():
            if info.leader not in running or set(info.isr) != set(info.replicas):
                return None
        return md

    def wait_isr_full(self, topic: str, timeout: float = 60.0, partitions: int | None = None):
        try:
            return wait_until(
                lambda: self.isr_full(topic, partitions), timeout, 0.2, f"{topic}: ISRs full"
            )
        except AssertionError as e:
            try:
                md = self.metadata([topic])
                state = {p: i for p, i in sorted(md.topic(topic).items())}
            except OSError as oe:
                state = oe
            raise AssertionError(f"{e}; last metadata: {state}") from None

    def replicas_on_disk(
        self, topic: str, partitions: int | None = None
    ) -> dict[int, dict[int, Path]] | None:
        """{partition: {broker: the log dir holding its replica}} if every replica of the
        topic on a running broker has its log in exactly one of that broker's log dirs."""
        try:
            parts = self.metadata([topic]).topic(topic)
        except OSError:
            return None
        if not parts or (partitions is not None and len(parts) != partitions):
            return None
        running = set(self.running())
        out: dict[int, dict[int, Path]] = {}
        for p, info in sorted(parts.items()):
            out[p] = {}
            for i in info.replicas:
                if i not in running:
                    continue
                found = replica_dirs(self.brokers[i], topic, p)
                if len(found) != 1:
                    return None
                out[p][i] = found[0]
        return out

    def wait_replicas_on_disk(
        self, topic: str, partitions: int | None = None, timeout: float = 30.0
    ) -> dict[int, dict[int, Path]]:
        """Until every replica of the topic on a running broker has its log on disk, in one
        log dir: returns {partition: {broker: log dir}}.  Metadata, from any broker, names a
        partition's replicas, leader and ISR from the cluster's state as soon as the topic
        exists, before each broker has handled the change and made its logs (Kafka's
        LeaderAndIsr too is handled by each broker in its own time), so a test that looks at
        a broker's disk after creating a topic waits here first: a replica not there yet is
        not a replica in the other dir."""
        return wait_until(
            lambda: self.replicas_on_disk(topic, partitions),
            timeout,
            0.05,
            f"{topic}: every replica's log on disk",
        )

    def leader_of(self, topic: str, partition: int) -> PartitionInfo:
        return self.metadata([topic]).partitions[(topic, partition)]

    def wait_new_leader(
        self, topic: str, partition: int, old_leader: int, timeout: float = 60.0
    ) -> PartitionInfo:
        """Poll Metadata (from running brokers) until a running broker other than
        old_leader leads the partition."""

        def check():
            try:
                info = self.metadata([topic]).partitions.get((topic, partition))
            except OSError:
                return None
            if info and info.leader != old_leader and info.leader in self.running():
                return info
            return None

        return wait_until(check, timeout, 0.02, f"{topic}-{partition}: new leader")


@contextlib.contextmanager
def running_cluster(workdir: Path, size: int = 3, overrides: dict[str, object] | None = None):
    """A private ZooKeeper + `size` started brokers; yields the Cluster.  On exit every broker
    is stopped with SIGTERM (SIGCONT first), then anything left is killed and ZooKeeper is
    stopped.  Brokers that did not exit 0 are listed in `cluster.stop_problems`."""
    zk = ZooKeeperServer(Path(workdir) / "zookeeper")
    zk.start()
    cluster = Cluster(workdir, zk, size, overrides)
    try:
        cluster.start()
        yield cluster
        cluster.stop_problems = cluster.stop()
    finally:
        cluster.cleanup()
        zk.stop()


def broker_log_excerpt(b: BrokerProcess, patterns: Iterable[str], max_lines: int = 40) -> str:
    """Lines of a broker's output containing any pattern (first max_lines)."""
    try:
        text = Path(b.stderr_path).read_text(errors="replace")
    except OSError:
        return ""
    pats = list(patterns)
    lines = [ln for ln in text.splitlines() if any(p in ln for p in pats)]
    return "\n".join(lines[:max_lines])


# Broker errors already reported as bugs: signature -> short reason, named in the fault
# report when seen.  None open ("offset index does not match the log" was fixed in 48f4667).
KNOWN_BUGS: dict[str, str] = {}


# Problems (texts of fault_injection / test findings) caused by bugs already reported.  None
# open: "did not exit within 20 s of SIGTERM" was fixed (bounded shutdown steps, issue 10).
KNOWN_PROBLEMS: dict[str, str] = {}


def known_bugs_seen(cluster: Cluster) -> dict[str, str]:
    """{signature: reason} for every KNOWN_BUGS signature in any broker's output."""
    seen = {}
    for b in cluster.brokers.values():
        try:
            text = Path(b.stderr_path).read_text(errors="replace")
        except OSError:
            continue
        for sig, reason in KNOWN_BUGS.items():
            if sig in text:
                seen[sig] = reason
    return seen
