"""A real multi-broker cluster for tests: one throwaway ZooKeeper plus N pybroker processes.

    zk = ZooKeeperServer(workdir / "zk"); zk.start()
    c = Cluster(workdir, zk, size=3)          # brokers 0..2, one chroot, free loopback ports
    c.start()                                 # all brokers in parallel, waits for registration
    c.create_topic("t", partitions=3, rf=3, configs={"min.insync.replicas": "2"})
    md = c.metadata(["t"])                    # hand-built Metadata v7 (controller, leaders,
    md.partitions[("t", 0)].leader            #  leader epochs, replicas, ISR)
    c.kill9(1); c.restart(1); c.pause(2); c.resume(2)
    c.wait_isr_full("t")                      # every partition: ISR == replicas, leader live
    c.find_coordinator("group")               # FindCoordinator v1, by hand
    c.stop()                                  # SIGTERM to every broker; exit 0 asserted
    c.replica_batches("t", 0)                 # on-disk batch headers of each replica

``running_cluster`` starts a private ZooKeeper and the brokers and always ends every process
it started (the compat tests' `cluster` fixtures wrap it; the bench's W6 uses Cluster).  Wire
bytes for Metadata / FindCoordinator are built by hand (struct, rawkafka.py), so what the
tests see does not depend on pybroker's codec nor on a client's metadata cache.

Also here: the acks=all idempotent producer loads (kafka-python and confluent-kafka) that
record every acknowledgement, a reader that consumes a whole topic with assign/seek, and
`check_records`, which verifies exactly-once and per-producer order of acknowledged records.
"""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pybroker.testing import rawkafka
from pybroker.testing.cluster import CLUSTER_OVERRIDES  # settings every cluster broker gets
from pybroker.testing.debug_process import BrokerProcess
from pybroker.testing.process import BrokerStartError, start_all
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
        b._mark(f"SIGSTOP to pid {b.pid}")
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
            b._mark(f"SIGCONT to pid {b.pid}")

    def stop(self) -> list[str]:
        """SIGTERM every running broker (SIGCONT first); returns the problems (a broker that
        did not exit 0), empty when all stopped cleanly."""
        for i in list(self.paused):
            self.resume(i)
        problems = []
        for i, b in self.brokers.items():
            try:
                if b.is_running():
                    b.stop()
            except AssertionError as e:
                problems.append(f"broker {i}: {str(e).splitlines()[0]}")
        return problems

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


# ------------------------------------------------------------------------------------------
# producer loads: unique payloads, every acknowledgement recorded
# ------------------------------------------------------------------------------------------


@dataclass
class Ack:
    partition: int
    offset: int
    seq: int
    t: float  # time.monotonic() of the callback


@dataclass
class LoadStats:
    name: str
    sent: int = 0
    acked: list[Ack] = field(default_factory=list)
    failed: Counter = field(default_factory=Counter)  # error name -> count
    send_errors: Counter = field(default_factory=Counter)  # errors raised by send() itself
    lock: threading.Lock = field(default_factory=threading.Lock)

    def payload(self, seq: int) -> bytes:
        return f"{self.name}-{seq:08d}".encode()

    def first_ack_after(self, t: float, partition: int | None = None) -> float | None:
        """time.monotonic() of the first acknowledgement after t (of that partition)."""
        with self.lock:
            times = [a.t for a in self.acked if a.t > t and partition in (None, a.partition)]
        return min(times) if times else None

    def summary(self) -> str:
        return (
            f"{self.name}: sent {self.sent}, acknowledged {len(self.acked)}, "
            f"failed {sum(self.failed.values())} {dict(self.failed)}"
            + (f", send() errors {dict(self.send_errors)}" if self.send_errors else "")
        )


class _Load(threading.Thread):
    """Sends unique payloads round-robin over `partitions` until stop() (paced by `interval`
    seconds between sends)."""

    def __init__(self, name: str, bootstrap: str, topic: str, partitions: int, interval: float):
        super().__init__(name=f"load-{name}", daemon=True)
        self.stats = LoadStats(name)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.interval = interval
        self.flush_timeout = 150.0  # at stop(); what is still unacknowledged then counts as failed
        self._halt = threading.Event()
        self.error: BaseException | None = None

    def stop(self, timeout: float = 120.0) -> LoadStats:
        self._halt.set()
        self.join(timeout)
        assert not self.is_alive(), f"{self.name} did not finish within {timeout}s"
        if self.error is not None:
            raise AssertionError(f"{self.name} crashed: {self.error!r}") from self.error
        return self.stats

    def _ack(self, seq: int, partition: int, offset: int) -> None:
        with self.stats.lock:
            self.stats.acked.append(Ack(partition, offset, seq, time.monotonic()))

    def _fail(self, error: object) -> None:
        with self.stats.lock:
            self.stats.failed[type(error).__name__ if not isinstance(error, str) else error] += 1


class KafkaPythonLoad(_Load):
    """kafka-python KafkaProducer(enable_idempotence=True, acks='all', retries huge)."""

    def run(self) -> None:
        from kafka import KafkaProducer
        from kafka.errors import KafkaTimeoutError

        try:
            producer = KafkaProducer(
                bootstrap_servers=self.bootstrap,
                client_id=self.stats.name,
                enable_idempotence=True,
                acks="all",
                retries=2**31 - 1,
                linger_ms=5,
                request_timeout_ms=10000,
                delivery_timeout_ms=120000,
                max_block_ms=5000,
                retry_backoff_ms=100,
                reconnect_backoff_max_ms=1000,
                metadata_max_age_ms=5000,
            )
        except BaseException as e:  # noqa: BLE001
            self.error = e
            return
        try:
            seq = 0
            while not self._halt.is_set():
                p = seq % self.partitions
                try:
                    fut = producer.send(self.topic, value=self.stats.payload(seq), partition=p)
                except Exception as e:  # noqa: BLE001 - buffer full / metadata during outages
                    self.stats.send_errors[type(e).__name__] += 1
                    time.sleep(0.1)
                    continue
                fut.add_callback(lambda md, s=seq: self._ack(s, md.partition, md.offset))
                fut.add_errback(self._fail)
                self.stats.sent += 1
                seq += 1
                if self.interval:
                    time.sleep(self.interval)
            try:
                producer.flush(timeout=self.flush_timeout)
            except KafkaTimeoutError:
                self.stats.failed[f"unacknowledged after {self.flush_timeout:.0f} s flush"] += 1
        except BaseException as e:  # noqa: BLE001
            self.error = e
        finally:
            try:
                producer.close(timeout=5)
            except KafkaTimeoutError:
                pass


class ConfluentLoad(_Load):
    """confluent-kafka Producer(enable.idempotence=True) (acks=all implied)."""

    def run(self) -> None:
        from confluent_kafka import KafkaException, Producer

        try:
            producer = Producer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "client.id": self.stats.name,
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 5,
                    "message.timeout.ms": 120000,
                    "request.timeout.ms": 10000,
                    "topic.metadata.refresh.interval.ms": 5000,
                    "reconnect.backoff.max.ms": 1000,
                    "log_level": 2,  # no connection-refused noise
                }
            )
        except BaseException as e:  # noqa: BLE001
            self.error = e
            return

        def delivered(err, msg, seq):
            if err is not None:
                self._fail(err.name() if hasattr(err, "name") else str(err))
            else:
                self._ack(seq, msg.partition(), msg.offset())

        try:
            seq = 0
            while not self._halt.is_set():
                p = seq % self.partitions
                try:
                    producer.produce(
                        self.topic,
                        value=self.stats.payload(seq),
                        partition=p,
                        on_delivery=lambda err, msg, s=seq: delivered(err, msg, s),
                    )
                except (BufferError, KafkaException) as e:
                    self.stats.send_errors[type(e).__name__] += 1
                    producer.poll(0.1)
                    continue
                self.stats.sent += 1
                seq += 1
                producer.poll(0)
                if self.interval:
                    time.sleep(self.interval)
            remaining = producer.flush(self.flush_timeout)
            if remaining:
                self.stats.failed[f"unacknowledged after {self.flush_timeout:.0f} s flush"] += (
                    remaining
                )
        except BaseException as e:  # noqa: BLE001
            self.error = e


# ------------------------------------------------------------------------------------------
# reading back and checking
# ------------------------------------------------------------------------------------------


def read_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    timeout: float = 90.0,
    isolation_level: str = "read_uncommitted",
) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of the topic, {partition: [(offset, value)] in log order}, read with
    kafka-python (assign + seek_to_beginning) up to the end offsets seen at the start
    (read_committed: the last stable offsets, aborted transactions left out).  Fails when
    no position moved for ``timeout`` seconds (a long campaign's topic takes minutes)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        client_id="cluster-reader",
        max_partition_fetch_bytes=4 * 1024 * 1024,
        isolation_level=isolation_level,
    )
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        end = consumer.end_offsets(tps)
        out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < end[tp] for tp in tps):
            if time.monotonic() > deadline:
                short = {tp.partition: (consumer.position(tp), end[tp]) for tp in tps}
                raise AssertionError(
                    f"read_topic {topic}: no progress for {timeout:.0f} s: (position, end) {short}"
                )
            for tp, records in consumer.poll(timeout_ms=500, max_records=5000).items():
                if records:
                    deadline = time.monotonic() + timeout
                out[tp.partition].extend((r.offset, r.value) for r in records)
        return out
    finally:
        consumer.close()


@dataclass
class CheckResult:
    records_read: int
    acked_checked: int
    problems: list[str]

    def summary(self) -> str:
        return (
            f"records read {self.records_read}, acknowledged records checked {self.acked_checked}"
        )


def check_records(
    read: dict[int, list[tuple[int, bytes]]], loads: list[LoadStats], max_problems: int = 20
) -> CheckResult:
    """Every acknowledged record present exactly once, at the offset its ack reported; for
    each producer and partition, its records (acknowledged or not) appear in send order;
    no payload appears twice; no offset was acknowledged twice (to two records: two brokers
    accepting acks=all writes for one partition at once, a split brain)."""
    problems: list[str] = []
    acked_at: dict[tuple[int, int], list[str]] = defaultdict(list)
    for st in loads:
        for a in st.acked:
            acked_at[(a.partition, a.offset)].append(f"{st.name}-{a.seq}")
    twice = {k: v for k, v in acked_at.items() if len(v) > 1}
    if twice:
        problems.append(
            f"{len(twice)} offsets acknowledged to more than one record (split brain), e.g. "
            + ", ".join(f"p{p}@{o}: {names}" for (p, o), names in list(twice.items())[:5])
        )
    where: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    total = 0
    for p, recs in read.items():
        offsets = [o for o, _ in recs]
        if offsets != sorted(set(offsets)):
            problems.append(f"partition {p}: offsets not strictly increasing")
        for o, v in recs:
            where[v].append((p, o))
            total += 1
    dups = {v: locs for v, locs in where.items() if len(locs) > 1}
    if dups:
        problems.append(
            f"{len(dups)} payloads appear more than once, e.g. "
            + ", ".join(f"{v.decode()}@{locs}" for v, locs in list(dups.items())[:5])
        )
    checked = 0
    for st in loads:
        missing, misplaced = [], []
        for a in st.acked:
            locs = where.get(st.payload(a.seq), [])
            checked += 1
            if not locs:
                missing.append(a)
            elif (a.partition, a.offset) not in locs:
                misplaced.append((a, locs))
        if missing:
            problems.append(
                f"{st.name}: {len(missing)} acknowledged records missing, e.g. "
                + ", ".join(f"seq {a.seq} (acked p{a.partition}@{a.offset})" for a in missing[:5])
            )
        if misplaced:
            problems.append(
                f"{st.name}: {len(misplaced)} acknowledged records at another offset than "
                "acknowledged, e.g. "
                + ", ".join(
                    f"seq {a.seq} acked p{a.partition}@{a.offset}, found {locs}"
                    for a, locs in misplaced[:5]
                )
            )
        # order: per partition, this producer's sequence numbers increase with the offset
        prefix = f"{st.name}-".encode()
        for p, recs in read.items():
            seqs = [int(v[len(prefix) :]) for _, v in recs if v.startswith(prefix)]
            bad = [(a, b) for a, b in zip(seqs, seqs[1:], strict=False) if b <= a]
            if bad:
                problems.append(
                    f"{st.name}: partition {p}: {len(bad)} order inversions, e.g. {bad[:5]}"
                )
        # ack order = offset order per partition
        by_p: dict[int, list[Ack]] = defaultdict(list)
        for a in st.acked:
            by_p[a.partition].append(a)
        for p, acks in by_p.items():
            acks_by_seq = sorted(acks, key=lambda a: a.seq)
            offs = [a.offset for a in acks_by_seq]
            if offs != sorted(offs):
                problems.append(f"{st.name}: partition {p}: acked offsets not in send order")
    return CheckResult(total, checked, problems[:max_problems])


# ------------------------------------------------------------------------------------------
# on-disk replicas: batch headers (Kafka's format, 61-byte record batch header)
# ------------------------------------------------------------------------------------------

BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")  # 61 bytes
assert BATCH_HEADER.size == 61


@dataclass(frozen=True)
class BatchHeader:
    base_offset: int
    last_offset: int
    leader_epoch: int
    crc: int
    producer_id: int
    base_sequence: int


def read_batches(partition_dir: Path) -> list[BatchHeader]:
    """Batch headers of every .log segment of a partition dir, in offset order (a torn tail is
    ignored)."""
    out: list[BatchHeader] = []
    for seg in sorted(partition_dir.glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + BATCH_HEADER.size <= len(data):
            (
                base,
                length,
                epoch,
                _magic,
                crc,
                _attrs,
                last_delta,
                _t0,
                _t1,
                pid,
                _pepoch,
                bseq,
                _count,
            ) = BATCH_HEADER.unpack_from(data, pos)
            if length <= 0 or pos + 12 + length > len(data):
                break
            out.append(BatchHeader(base, base + last_delta, epoch, crc, pid, bseq))
            pos += 12 + length
    return out


def segment_problems(partition_dir: Path) -> list[str]:
    """Every .log segment of a partition dir must be whole batches back to back, each with
    magic 2 and a CRC-32C (over attributes .. end) that matches: after clean stops, a torn or
    corrupt batch anywhere is a problem (a write that failed, ENOSPC, must leave none)."""
    import crc32c

    problems = []
    for seg in sorted(partition_dir.glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + BATCH_HEADER.size <= len(data):
            length = struct.unpack_from(">i", data, pos + 8)[0]
            magic = data[pos + 16]
            end = pos + 12 + length
            if length < BATCH_HEADER.size - 12 or magic != 2 or end > len(data):
                break
            (crc,) = struct.unpack_from(">I", data, pos + 17)
            if crc32c.crc32c(data[pos + 21 : end]) != crc:
                problems.append(f"{seg}: batch at byte {pos}: CRC mismatch")
            pos = end
        if pos != len(data):
            problems.append(f"{seg}: {len(data) - pos} bytes after the last whole batch")
    return problems


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    try:
        lines = path.read_text().split("\n")
    except OSError:
        return {}
    out = {}
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3:
            out[(parts[0], int(parts[1]))] = int(parts[2])
    return out


@dataclass
class ReplicaCheck:
    partition: int
    high_watermarks: dict[int, int]
    compared_below: int
    batches_compared: int
    problems: list[str]


def compare_replicas(cluster: Cluster, topic: str, partition: int) -> ReplicaCheck:
    """Call with every broker stopped.  Reads each replica's replication-offset-checkpoint
    (high watermark) and segment files and compares the batch headers (base offset, last
    offset, leader epoch, CRC, producer id, base sequence) below the smallest high watermark;
    every segment must hold whole batches with valid CRCs only (segment_problems)."""
    hws: dict[int, int] = {}
    batches: dict[int, list[BatchHeader]] = {}
    torn: list[str] = []
    for i, b in cluster.brokers.items():
        log_dirs = [Path(d) for d in b.settings()["log.dirs"].split(",")]
        found = [ld for ld in log_dirs if (ld / f"{topic}-{partition}").is_dir()]
        if not found:
            continue
        log_dir = found[0]
        hws[i] = read_checkpoint(log_dir / "replication-offset-checkpoint").get(
            (topic, partition), 0
        )
        batches[i] = read_batches(log_dir / f"{topic}-{partition}")
        torn += [f"broker {i}: {t}" for t in segment_problems(log_dir / f"{topic}-{partition}")]
    problems: list[str] = list(torn)
    if len(batches) < 2:
        problems.append(f"{topic}-{partition}: replicas on disk: {sorted(batches)}")
        return ReplicaCheck(partition, hws, 0, 0, problems)
    limit = min(hws.values())
    below = {i: [h for h in bs if h.base_offset < limit] for i, bs in batches.items()}
    ref_id = max(hws, key=lambda i: hws[i])
    ref = below[ref_id]
    for i, bs in below.items():
        if bs != ref:
            n = next(
                (k for k, (x, y) in enumerate(zip(bs, ref, strict=False)) if x != y),
                min(len(bs), len(ref)),
            )
            problems.append(
                f"{topic}-{partition}: broker {i} differs from broker {ref_id} below HW {limit} "
                f"at batch #{n}: {bs[n] if n < len(bs) else None} vs "
                f"{ref[n] if n < len(ref) else None} ({len(bs)} vs {len(ref)} batches)"
            )
        if bs and bs[-1].last_offset + 1 < limit:
            problems.append(
                f"{topic}-{partition}: broker {i} log ends at {bs[-1].last_offset + 1} "
                f"below HW {limit}"
            )
    return ReplicaCheck(partition, hws, limit, len(ref), problems)


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
