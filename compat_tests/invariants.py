"""What clients see must never go back: monitors for the fault-injection campaign.

Two threads run beside the producer loads of compat_tests/fault_injection.py:

- ``CommittingConsumer``: a kafka-python group member (``enable_auto_commit=False``) that
  consumes the topic and commits, synchronously, the offset after the last record of each
  poll.  Every commit the coordinator acknowledged is recorded (``acked``: partition ->
  highest acknowledged offset).  It also records the offsets it resumed from after each
  (re)assignment, so a consumer that resumed far back is visible in the report.

- ``InvariantMonitor``: polls, every ``interval`` seconds, with hand-built requests (no
  client cache in between):
    * ListOffsets v4 (timestamp -1: "latest", isolation read_uncommitted) of every partition at
      its leader as Metadata names it, passing the leader epoch from that Metadata, as the
      Java consumer does; Metadata naming an older leader epoch than one seen before is
      ignored, as Kafka's clients ignore it (KIP-320).  The answer is the high watermark a
      client is shown; it must never be lower than an answer seen before (Kafka's
      KIP-207/KIP-392 rule: a new leader answers
      OFFSET_NOT_AVAILABLE until its high watermark has caught up).  Answers with an error
      code are retriable and ignored.
    * OffsetFetch v1 of the consumer's group at the coordinator FindCoordinator names.  The
      committed offset must be at least every commit acknowledged before the request was
      sent, and must never be lower than one answered before.

Violations are kept in ``problems`` (the first few of each kind with their context) and counted
in ``violations``.
"""

from __future__ import annotations

import struct
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from pybroker.testing import rawkafka
from pybroker.testing.cluster_loads import FAILOVER_CLIENT

API_LIST_OFFSETS = 2
API_OFFSET_FETCH = 9
API_FIND_COORDINATOR = 10
LATEST = -1
MAX_PROBLEMS_PER_KIND = 5


def list_offsets_v4_request(
    correlation_id: int, topic: str, partitions: dict[int, int], timestamp: int = LATEST
) -> bytes:
    """partitions: {partition: current_leader_epoch}."""
    body = struct.pack(">ib", -1, 0)  # replica_id, isolation_level read_uncommitted
    body += struct.pack(">i", 1) + rawkafka.kstring(topic) + struct.pack(">i", len(partitions))
    for p, epoch in sorted(partitions.items()):
        body += struct.pack(">iiq", p, epoch, timestamp)
    return rawkafka.frame(rawkafka.request_header(API_LIST_OFFSETS, 4, correlation_id) + body)


def parse_list_offsets_v4(body: bytes) -> dict[int, tuple[int, int]]:
    """{partition: (error_code, offset)}."""
    r = rawkafka.Reader(body)
    r.take(">i")  # throttle_time_ms
    out = {}
    for _ in range(r.take(">i")):
        r.string()
        for _ in range(r.take(">i")):
            p, err, _ts, offset, _epoch = r.take(">ihqqi")
            out[p] = (err, offset)
    return out


def offset_fetch_v1_request(correlation_id: int, group: str, topic: str, partitions) -> bytes:
    body = rawkafka.kstring(group) + struct.pack(">i", 1) + rawkafka.kstring(topic)
    body += struct.pack(">i", len(partitions)) + b"".join(struct.pack(">i", p) for p in partitions)
    return rawkafka.frame(rawkafka.request_header(API_OFFSET_FETCH, 1, correlation_id) + body)


def parse_offset_fetch_v1(body: bytes) -> dict[int, tuple[int, int]]:
    """{partition: (error_code, committed_offset)}."""
    r = rawkafka.Reader(body)
    out = {}
    for _ in range(r.take(">i")):
        r.string()
        for _ in range(r.take(">i")):
            p, offset = r.take(">iq")
            r.string()  # metadata
            out[p] = (r.take(">h"), offset)
    return out


# ------------------------------------------------------------------------------------------
# the committing group member
# ------------------------------------------------------------------------------------------


# long enough that a rebalance's JoinGroup + SyncGroup ends inside one poll (see
# CommittingConsumer._subscribe_with_metadata); records end a poll early as they arrive
POLL_MS = 1000


class CommittingConsumer(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, group: str):
        super().__init__(name=f"consumer-{group}", daemon=True)
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.acked: dict[int, int] = {}  # partition -> highest acknowledged committed offset
        self.commits = 0
        self.commit_errors: Counter = Counter()
        self.records = 0
        self.resumes: list[tuple[int, int, int]] = []  # (partition, resumed at, acked then)
        self.lock = threading.Lock()
        self._halt = threading.Event()
        self.error: BaseException | None = None

    def acked_snapshot(self) -> dict[int, int]:
        with self.lock:
            return dict(self.acked)

    def stop(self, timeout: float = 60.0) -> None:
        self._halt.set()
        self.join(timeout)

    def summary(self) -> str:
        back = [r for r in self.resumes if r[1] < r[2]]
        return (
            f"committing consumer {self.group}: {self.records} records, {self.commits} commits "
            f"acknowledged, commit errors {dict(self.commit_errors)}, "
            f"{len(self.resumes)} resumes ({len(back)} behind an acknowledged commit)"
        )

    def _subscribe_with_metadata(self, consumer) -> None:
        """Subscribe, then wait until the client's metadata lists the topic's partitions
        before the first poll, so that the first assignment is made from metadata that
        already has them.  kafka-python 3.0.12 rejoins when the metadata it assigned from
        differs from the newest (an assignment made before the topic was known), and if a
        poll() times out while that rejoin's SyncGroup is in flight, the rejoin is dropped:
        the member never takes its assignment nor heartbeats again (its join loop stops once
        the snapshots agree, leaving the join task unawaited).  Kafka's own brokers show the
        same with group.initial.rebalance.delay.ms=0, as the test clusters use."""
        consumer.subscribe([self.topic])
        while not self._halt.is_set() and not consumer.partitions_for_topic(self.topic):
            time.sleep(0.1)

    def run(self) -> None:
        from kafka import KafkaConsumer, TopicPartition
        from kafka.structs import OffsetAndMetadata

        try:
            consumer = KafkaConsumer(
                bootstrap_servers=self.bootstrap,
                group_id=self.group,
                client_id=self.group,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                session_timeout_ms=10000,
                heartbeat_interval_ms=1000,
                request_timeout_ms=15000,
                **FAILOVER_CLIENT,
                max_poll_records=500,
            )
        except BaseException as e:  # noqa: BLE001
            self.error = e
            return
        seen_assignment: set[int] = set()
        try:
            self._subscribe_with_metadata(consumer)
            while not self._halt.is_set():
                try:
                    batches = consumer.poll(timeout_ms=POLL_MS)
                except Exception as e:  # noqa: BLE001 - coordinator/leader moves
                    self.commit_errors[f"poll {type(e).__name__}"] += 1
                    time.sleep(0.2)
                    continue
                assignment = {tp.partition for tp in consumer.assignment()}
                for p in assignment - seen_assignment:
                    try:
                        pos = consumer.position(TopicPartition(self.topic, p), timeout_ms=5000)
                    except Exception:  # noqa: BLE001
                        pos = None
                    if pos is not None:
                        with self.lock:
                            self.resumes.append((p, pos, self.acked.get(p, 0)))
                seen_assignment = assignment
                offsets = {}
                for tp, records in batches.items():
                    self.records += len(records)
                    offsets[tp] = OffsetAndMetadata(records[-1].offset + 1, "", -1)
                if not offsets:
                    continue
                try:
                    consumer.commit(offsets)
                except Exception as e:  # noqa: BLE001 - outcome unknown: not acknowledged
                    self.commit_errors[type(e).__name__] += 1
                    seen_assignment = set()  # a rebalance may follow: record the resume
                    continue
                with self.lock:
                    self.commits += 1
                    for tp, om in offsets.items():
                        if om.offset > self.acked.get(tp.partition, -1):
                            self.acked[tp.partition] = om.offset
        except BaseException as e:  # noqa: BLE001
            self.error = e
        finally:
            try:
                consumer.close(autocommit=False)
            except Exception:  # noqa: BLE001
                pass


# ------------------------------------------------------------------------------------------
# the monitor
# ------------------------------------------------------------------------------------------


@dataclass
class MonitorStats:
    hw_checks: int = 0
    hw_errors: Counter = field(default_factory=Counter)  # error code -> count
    offset_checks: int = 0
    offset_errors: Counter = field(default_factory=Counter)
    violations: Counter = field(default_factory=Counter)  # kind -> count
    stale_metadata: int = 0  # answers naming an older leader epoch than seen before
    problems: list[str] = field(default_factory=list)


class InvariantMonitor(threading.Thread):
    def __init__(
        self,
        cluster,  # pybroker.testing.cluster_harness.Cluster
        topic: str,
        partitions: int,
        consumer: CommittingConsumer | None,
        interval: float = 0.2,
    ):
        super().__init__(name="invariant-monitor", daemon=True)
        self.cluster, self.topic, self.partitions = cluster, topic, partitions
        self.consumer = consumer
        self.interval = interval
        self.stats = MonitorStats()
        self.max_hw: dict[int, tuple[int, int, float]] = {}  # p -> (hw, via broker, when)
        self.max_committed: dict[int, tuple[int, int]] = {}  # p -> (offset, via broker)
        self.max_epoch: dict[int, int] = {}  # p -> highest leader epoch Metadata named
        self._halt = threading.Event()
        self._corr = 10_000_000
        self.error: BaseException | None = None

    def stop(self, timeout: float = 30.0) -> MonitorStats:
        self._halt.set()
        self.join(timeout)
        if self.error is not None:
            raise AssertionError(f"invariant monitor crashed: {self.error!r}") from self.error
        return self.stats

    def summary(self) -> str:
        s = self.stats
        return (
            f"invariants: {s.hw_checks} high-watermark answers (errors {dict(s.hw_errors)}), "
            f"{s.offset_checks} committed-offset answers (errors {dict(s.offset_errors)}), "
            f"stale metadata ignored {s.stale_metadata}, violations {dict(s.violations) or 0}"
        )

    def _problem(self, kind: str, text: str) -> None:
        self.stats.violations[kind] += 1
        if self.stats.violations[kind] <= MAX_PROBLEMS_PER_KIND:
            self.stats.problems.append(f"{kind}: {text}")
            self.cluster.note(f"INVARIANT {kind}: {text}")

    def _roundtrip(self, broker_id: int, data_for) -> bytes | None:
        b = self.cluster.brokers[broker_id]
        self._corr += 1
        corr = self._corr
        try:
            with rawkafka.Conn(b.host, b.port, timeout=2.0) as c:
                got = c.roundtrip(data_for(corr))
        except (OSError, AssertionError):
            return None
        return got[1] if got[0] == corr else None

    def run(self) -> None:
        try:
            while not self._halt.wait(self.interval):
                self.check_once()
        except BaseException as e:  # noqa: BLE001
            self.error = e

    def check_once(self) -> None:
        try:
            md = self.cluster.metadata([self.topic], timeout=1.0)
        except OSError:
            return
        self._check_high_watermarks(md)
        if self.consumer is not None:
            self._check_committed()

    def _check_high_watermarks(self, md) -> None:
        by_leader: dict[int, dict[int, int]] = defaultdict(dict)
        for p, info in md.topic(self.topic).items():
            # as Kafka's clients (KIP-320): Metadata naming an older leader epoch than one
            # seen before is stale (a broker cut off still believes it leads) and ignored
            if info.leader_epoch < self.max_epoch.get(p, -1):
                self.stats.stale_metadata += 1
                continue
            self.max_epoch[p] = info.leader_epoch
            if info.error == 0 and info.leader in self.cluster.running():
                by_leader[info.leader][p] = info.leader_epoch
        for leader, parts in by_leader.items():
            body = self._roundtrip(
                leader, lambda c, ps=parts: list_offsets_v4_request(c, self.topic, ps)
            )
            if body is None:
                continue
            try:
                answers = parse_list_offsets_v4(body)
            except struct.error:
                self._problem("malformed ListOffsets answer", f"from broker {leader}")
                continue
            now = time.monotonic()
            for p, (err, offset) in answers.items():
                if err:
                    self.stats.hw_errors[err] += 1
                    continue
                self.stats.hw_checks += 1
                prev = self.max_hw.get(p)
                if prev is not None and offset < prev[0]:
                    self._problem(
                        "high watermark went back",
                        f"{self.topic}-{p}: broker {leader} (epoch {parts[p]}) answered "
                        f"latest={offset}, broker {prev[1]} had answered {prev[0]} "
                        f"{now - prev[2]:.1f} s before",
                    )
                if prev is None or offset > prev[0]:
                    self.max_hw[p] = (offset, leader, now)

    def _check_committed(self) -> None:
        try:
            err, node = self.cluster.find_coordinator(self.consumer.group)
        except OSError:
            return
        if err or node not in self.cluster.running():
            return
        acked = self.consumer.acked_snapshot()  # acknowledged before the request is sent
        parts = list(range(self.partitions))
        body = self._roundtrip(
            node, lambda c: offset_fetch_v1_request(c, self.consumer.group, self.topic, parts)
        )
        if body is None:
            return
        try:
            answers = parse_offset_fetch_v1(body)
        except struct.error:
            self._problem("malformed OffsetFetch answer", f"from broker {node}")
            return
        for p, (err, offset) in answers.items():
            if err:
                self.stats.offset_errors[err] += 1
                continue
            self.stats.offset_checks += 1
            if p in acked and offset < acked[p]:
                self._problem(
                    "committed offset behind an acknowledged commit",
                    f"{self.topic}-{p}: coordinator {node} answered {offset}, "
                    f"commit of {acked[p]} was acknowledged before",
                )
            prev = self.max_committed.get(p)
            if prev is not None and offset < prev[0]:
                self._problem(
                    "committed offset went back",
                    f"{self.topic}-{p}: coordinator {node} answered {offset}, "
                    f"broker {prev[1]} had answered {prev[0]}",
                )
            if prev is None or offset > prev[0]:
                self.max_committed[p] = (offset, node)
