"""Prometheus metrics under Kafka's names, as the JMX exporter renders them.

``metrics.listener=http://host:port`` (off by default) serves ``/metrics``.  The names are the
ones Prometheus' JMX exporter gives Kafka's MBeans with its example Kafka config
(prometheus/jmx_exporter ``example_configs/kafka-2_0_0.yml``: ``lowercaseOutputName``,
``<name>PerSec`` meters' ``Count`` -> ``kafka_<domain>_<type>_<name>_total``, gauges'
``Value`` -> ``kafka_<domain>_<type>_<name>``, histograms -> quantile gauges plus
``_count``), so dashboards written for a Kafka behind the JMX exporter work.  Consumer lag
uses danielqsj/kafka_exporter's names (``kafka_consumergroup_lag{consumergroup,topic,
partition}``), the ones most Grafana lag dashboards query; the connection count uses
Strimzi's rendering of ``socket-server-metrics`` (``kafka_server_socket_server_metrics_
connection_count{listener,networkProcessor}``).  docs/metrics.md lists every metric.

Costs.  On the produce and fetch paths only plain Python counters move
(``BrokerMetrics``: dict look-ups and integer additions, nothing of prometheus_client), and
only when the listener is configured (else ``Broker.metrics`` is None and the handlers skip
it).  Everything else -- partition counts, log sizes, lag, quantiles -- is computed at scrape
time: ``snapshot(broker)`` reads the broker's state on the event loop, yielding to it every
``SNAPSHOT_CHUNK`` partitions, into plain tuples; ``render(snapshot, accept)`` then builds the
metric families (a prometheus_client ``Collector``) and encodes them in a worker thread, since
it touches nothing but the snapshot.  A scrape of 10,000 partitions therefore never holds the
loop for more than one chunk.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Sample

from pybroker.errors import ErrorCode
from pybroker.wire import messages as _messages  # noqa: F401  (registers the declarations)
from pybroker.wire.schema import SCHEMAS

SNAPSHOT_CHUNK = 500  # partitions read per event-loop step while taking a snapshot
# request latency buckets, seconds (Prometheus' convention); Kafka's TotalTimeMs quantiles are
# estimated from them
LATENCY_BOUNDS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
# Kafka's Yammer histogram percentiles, labelled as the JMX exporter labels them ("0.$N" of
# the attribute <N>thPercentile)
QUANTILES = (
    ("0.50", 0.5),
    ("0.75", 0.75),
    ("0.95", 0.95),
    ("0.98", 0.98),
    ("0.99", 0.99),
    ("0.999", 0.999),
)
QUANTILE_WINDOW_S = 300.0  # Kafka's reservoir favours the last 5 minutes
SNAPSHOT_EVERY_S = 15.0

_bucket = bisect.bisect_left
_API_NAMES: dict[int, str] = {k: api.name for k, api in SCHEMAS.by_key.items()}
_ERROR_NAMES: dict[int, str] = {int(e): e.name for e in ErrorCode}
FETCH, PRODUCE = 1, 0


def api_name(api_key: int) -> str:
    return _API_NAMES.get(api_key, f"Api{api_key}")


def error_name(code: int) -> str:
    return _ERROR_NAMES.get(code, f"UNKNOWN_{code}")


def _count_errors(obj: dict, counts: dict[int, int]) -> None:
    """Kafka's ``AbstractResponse.errorCounts``: every ``error_code`` of the answer, NONE too."""
    code = obj.get("error_code")
    if code is not None:
        counts[code] = counts.get(code, 0) + 1
    for v in obj.values():
        if type(v) is list:
            for x in v:
                if type(x) is dict:
                    _count_errors(x, counts)


class BrokerMetrics:
    """The counters the request paths move; plain ints and dicts, owned by the event loop.

    ``request`` is called once per request by the connection; ``produced`` and ``consumed``
    by the Produce and Fetch handlers per partition appended / answered with records."""

    def __init__(self) -> None:
        # topic -> [bytes in, messages in, bytes out]; topics deleted are folded into _retired
        self.topics: dict[str, list[int]] = {}
        self._retired = [0, 0, 0]
        self.replication_bytes_out = 0  # (bytes in: ReplicaManager.replication_bytes_in)
        self.requests: dict[tuple[str, int], int] = {}  # (request name, version) -> count
        # request name -> [count per LATENCY_BOUNDS bucket + overflow bucket, sum seconds]
        self.latency: dict[str, list[float]] = {}
        self.errors: dict[tuple[str, int], int] = {}  # (request name, error code) -> count
        self.idle = IdleMeter()
        self._history: deque[tuple[float, dict[str, list[float]]]] = deque()
        self._errors_scratch: dict[int, int] = {}

    # -- the hot path ---------------------------------------------------------------------
    def produced(self, topic: str, nbytes: int, records: int) -> None:
        c = self.topics.get(topic)
        if c is None:
            c = self.topics[topic] = [0, 0, 0]
        c[0] += nbytes
        c[1] += records

    def consumed(self, topic: str, nbytes: int) -> None:
        c = self.topics.get(topic)
        if c is None:
            c = self.topics[topic] = [0, 0, 0]
        c[2] += nbytes

    def request(
        self, api_key: int, version: int, body: dict, response: dict | None, seconds: float
    ) -> None:
        name = _API_NAMES.get(api_key) or api_name(api_key)
        requests = self.requests
        key = (name, version)
        requests[key] = requests.get(key, 0) + 1
        h = self.latency.get(name)
        if h is None:
            h = self.latency[name] = [0] * (len(LATENCY_BOUNDS) + 2)
        h[_bucket(LATENCY_BOUNDS, seconds)] += 1
        h[-1] += seconds
        if api_key == FETCH:  # as Kafka: also under FetchConsumer / FetchFollower
            if version >= 15:
                replica = (body.get("replica_state") or {}).get("replica_id", -1)
            else:
                replica = body.get("replica_id", -1)
            self._request("FetchFollower" if replica >= 0 else "FetchConsumer", version, seconds)
        if response is None:
            return
        errors = self.errors
        if api_key == PRODUCE:  # the hot two, walked without the generic recursion
            for t in response["responses"]:
                for p in t["partition_responses"]:
                    key = (name, p["error_code"])
                    errors[key] = errors.get(key, 0) + 1
        elif api_key == FETCH:
            key = (name, response["error_code"])
            errors[key] = errors.get(key, 0) + 1
            for t in response["responses"]:
                for p in t["partitions"]:
                    key = (name, p["error_code"])
                    errors[key] = errors.get(key, 0) + 1
        else:
            counts = self._errors_scratch
            _count_errors(response, counts)
            for code, n in counts.items():
                key = (name, code)
                errors[key] = errors.get(key, 0) + n
            counts.clear()

    def _request(self, name: str, version: int, seconds: float) -> None:
        key = (name, version)
        requests = self.requests
        requests[key] = requests.get(key, 0) + 1
        h = self.latency.get(name)
        if h is None:
            h = self.latency[name] = [0] * (len(LATENCY_BOUNDS) + 2)
        h[_bucket(LATENCY_BOUNDS, seconds)] += 1
        h[-1] += seconds

    # -- scrape time ----------------------------------------------------------------------
    def retire_topics(self, live: Iterable[str]) -> None:
        """Drop the per-topic counters of deleted topics (Kafka removes their MBeans), keeping
        the all-topics totals monotonic."""
        live = set(live)
        for topic in [t for t in self.topics if t not in live]:
            c = self.topics.pop(topic)
            for i in range(3):
                self._retired[i] += c[i]

    def totals(self) -> list[int]:
        out = list(self._retired)
        for c in self.topics.values():
            for i in range(3):
                out[i] += c[i]
        return out

    def quantile_base(self, now: float) -> dict[str, list[float]]:
        """Bucket counts at the start of the quantile window (the oldest snapshot at most
        QUANTILE_WINDOW_S old); a snapshot of now is kept every SNAPSHOT_EVERY_S."""
        hist = self._history
        if not hist or now - hist[-1][0] >= SNAPSHOT_EVERY_S:
            hist.append((now, {k: list(v) for k, v in self.latency.items()}))
        while len(hist) > 1 and now - hist[0][0] > QUANTILE_WINDOW_S:
            hist.popleft()
        return hist[0][1] if len(hist) > 1 else {}


class IdleMeter:
    """How much of the time the event loop's thread is off the CPU (Kafka's network processor
    idle share), from that thread's CPU clock (``time.thread_time``) read at scrape time:
    nothing is measured per request or per loop iteration.  Time the loop spends blocked in
    a system call that does not use the CPU (a disk read waiting for the device) or waiting
    for the GIL counts as idle.  ``start`` and ``read`` must run on the loop's thread."""

    def __init__(self) -> None:
        self._start: tuple[float, float] | None = None  # (wall, thread CPU) at start
        self._last: tuple[float, float] | None = None  # at the previous read
        self.share: float = math.nan
        self.idle_s = 0.0  # wall seconds minus the loop thread's CPU seconds since start

    def start(self) -> None:
        self._start = self._last = (time.perf_counter(), time.thread_time())

    def read(self) -> float:
        """The idle share since the previous read (at least one second back; else the share
        the previous read gave)."""
        if self._start is None or self._last is None:
            return math.nan
        now, cpu = time.perf_counter(), time.thread_time()
        self.idle_s = max(0.0, (now - self._start[0]) - (cpu - self._start[1]))
        wall0, cpu0 = self._last
        if now - wall0 >= 1.0 or (math.isnan(self.share) and now > wall0):
            self.share = min(1.0, max(0.0, 1.0 - (cpu - cpu0) / (now - wall0)))
            if now - wall0 >= 1.0:
                self._last = (now, cpu)
        return self.share


# -- the snapshot -------------------------------------------------------------------------


@dataclass(slots=True)
class PartitionRow:
    topic: str
    partition: int
    size: int
    log_start: int
    log_end: int
    high_watermark: int
    segments: int
    leader: bool
    isr: int
    replicas: int
    min_isr: int


@dataclass
class Snapshot:
    broker_id: int
    partitions: list[PartitionRow] = field(default_factory=list)
    topics_in: dict[str, list[int]] = field(default_factory=dict)
    totals: list[int] = field(default_factory=list)
    replication_bytes: tuple[int, int] = (0, 0)
    requests: dict[tuple[str, int], int] = field(default_factory=dict)
    latency: dict[str, list[float]] = field(default_factory=dict)
    latency_base: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[tuple[str, int], int] = field(default_factory=dict)
    isr_shrinks: int = 0
    isr_expands: int = 0
    controller: bool = False
    offline_partitions: int = 0
    global_partitions: int = 0
    global_topics: int = 0
    connections: dict[str, int] = field(default_factory=dict)
    idle_share: float = math.nan
    idle_seconds: float = 0.0
    group_states: dict[str, int] = field(default_factory=dict)
    # (group, topic, partition, committed offset, lag or None)
    group_offsets: list[tuple[str, str, int, int, int | None]] = field(default_factory=list)
    group_members: dict[str, int] = field(default_factory=dict)
    fetch_sessions: int = 0
    fetch_session_partitions: int = 0
    fetch_session_evictions: int = 0
    # client quotas: total throttle time given, by quota key (quotas/manager.py)
    quota_throttle_ms: dict[str, int] = field(default_factory=dict)
    offline_replicas: int = 0  # replicas lost with a failed log dir
    # share groups (KIP-932): coordinated groups by state, acknowledged records by type,
    # the share-partitions led here (SharePartitionManager.views())
    share_group_states: dict[str, int] = field(default_factory=dict)
    share_acks: dict[str, float] = field(default_factory=dict)  # (and state write counters)
    share_partitions: list[dict] = field(default_factory=list)
    # (log dir, 1 if offline) of every entry of log.dirs
    log_dirs: list[tuple[str, int]] = field(default_factory=list)


async def snapshot(broker: Any) -> Snapshot:
    """Read what the metrics show from ``broker`` (pybroker.broker.Broker), on its event loop,
    yielding every SNAPSHOT_CHUNK partitions."""
    m: BrokerMetrics = broker.metrics
    cluster = broker.cluster
    replicas = broker.replicas
    snap = Snapshot(broker_id=broker.config.broker_id)
    topics = cluster.topics
    m.retire_topics(topics)
    snap.topics_in = {t: list(c) for t, c in m.topics.items()}
    snap.totals = m.totals()
    snap.replication_bytes = (
        getattr(replicas, "replication_bytes_in", 0),
        m.replication_bytes_out,
    )
    snap.requests = dict(m.requests)
    snap.latency = {k: list(v) for k, v in m.latency.items()}
    snap.latency_base = m.quantile_base(time.monotonic())
    snap.errors = dict(m.errors)
    snap.isr_shrinks = getattr(replicas, "isr_shrinks", 0)
    snap.isr_expands = getattr(replicas, "isr_expands", 0)
    snap.idle_share = m.idle.read()
    snap.idle_seconds = m.idle.idle_s
    min_isr = broker._min_insync_replicas
    rows = snap.partitions
    for i, r in enumerate(list(replicas.replicas.values())):
        if i and i % SNAPSHOT_CHUNK == 0:
            await asyncio.sleep(0)
        log = r.log
        try:
            rows.append(
                PartitionRow(
                    r.topic,
                    r.partition,
                    log.size,
                    log.log_start_offset,
                    log.log_end_offset,
                    log.high_watermark,
                    len(log.segments),
                    r.role == "leader",
                    len(r.isr),
                    len(r.replicas),
                    min_isr(r.topic),
                )
            )
        except (OSError, ValueError, AttributeError):  # closed under us (topic deleted)
            continue
    snap.offline_replicas = len(getattr(replicas, "offline", ()))
    logs = broker.logs
    if logs is not None:
        snap.log_dirs = [(str(d), int(d in logs.offline_dirs)) for d in logs.log_dirs]
    snap.controller = cluster.controller_id == snap.broker_id
    if snap.controller:
        live = cluster.brokers
        n = 0
        for info in list(topics.values()):
            snap.global_topics += 1
            for state in info.partitions.values():
                snap.global_partitions += 1
                if state.leader < 0 or state.leader not in live:
                    snap.offline_partitions += 1
                n += 1
            if n >= SNAPSHOT_CHUNK:
                n = 0
                await asyncio.sleep(0)
    server = broker.server
    if server is not None:
        for name in (e.listener for e in broker.config.listeners):
            snap.connections[name] = 0
        for conn in list(server.connections):
            key = conn.listener or ""
            snap.connections[key] = snap.connections.get(key, 0) + 1
    await _groups(broker, snap)
    _share_groups(broker, snap)
    cache = broker.fetch_sessions
    snap.fetch_sessions = len(cache)
    snap.fetch_session_partitions = cache.total_partitions
    snap.fetch_session_evictions = getattr(cache, "evictions", 0)
    quotas = getattr(broker, "quotas", None)
    if quotas is not None:
        snap.quota_throttle_ms = dict(quotas.throttle_ms)
    return snap


async def _groups(broker: Any, snap: Snapshot) -> None:
    groups = broker.groups
    if groups is None:
        return
    ends = {(row.topic, row.partition): row.high_watermark for row in snap.partitions}
    for g in groups.list_groups():
        gid = g.group_id
        snap.group_states[g.state.value] = snap.group_states.get(g.state.value, 0) + 1
        snap.group_members[gid] = len(g.members)
        try:
            committed = await groups.offsets.load(gid)
        except Exception:  # the store is unreachable now: no lag this scrape
            continue
        for (topic, partition), co in sorted(committed.items()):
            end = ends.get((topic, partition))
            lag = None if end is None or co.offset < 0 else max(0, end - co.offset)
            snap.group_offsets.append((gid, topic, partition, co.offset, lag))


def _share_groups(broker: Any, snap: Snapshot) -> None:
    coordinator = getattr(broker, "share_groups", None)
    if coordinator is not None:
        for g in list(coordinator.groups.values()):
            state = g.state.value
            snap.share_group_states[state] = snap.share_group_states.get(state, 0) + 1
    shares = getattr(broker, "shares", None)
    if shares is not None:
        snap.share_acks = dict(shares.stats)
        snap.share_partitions = shares.views()


# -- rendering (a worker thread: the snapshot only) ---------------------------------------


def _counter(name: str, doc: str, labels: list[str] | None = None) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, labels=labels)


def _add_total(family: CounterMetricFamily, value: float) -> None:
    """The all-topics sample of a per-topic meter: the same name without the topic label, as
    the JMX exporter renders Kafka's topic-less MBean."""
    family.samples.append(Sample(family.name + "_total", {}, float(value)))


def _streamed(family: Metric, samples: Iterator[Sample]) -> Metric:
    """``family`` with its samples made one at a time while the encoder writes them.  A family
    of 10,000 partitions then never holds 10,000 sample objects (tuples and label dicts the
    cyclic GC tracks): they die young, so encoding triggers no full collection, which would
    hold the GIL -- and the event loop -- for as long as it walks the broker's whole heap."""
    family.samples = samples  # type: ignore[assignment]  (the encoders iterate it once)
    return family


def _quantile(counts: list[float], q: float) -> float:
    """A quantile of bucketed observations (linear within a bucket), in milliseconds."""
    total = sum(counts[: len(LATENCY_BOUNDS) + 1])
    if total <= 0:
        return math.nan
    rank = q * total
    seen = 0.0
    for i, c in enumerate(counts[: len(LATENCY_BOUNDS) + 1]):
        if c and seen + c >= rank:
            lo = LATENCY_BOUNDS[i - 1] if i > 0 else 0.0
            hi = LATENCY_BOUNDS[i] if i < len(LATENCY_BOUNDS) else LATENCY_BOUNDS[-1]
            return 1000.0 * (lo + (hi - lo) * (rank - seen) / c)
        seen += c
    return 1000.0 * LATENCY_BOUNDS[-1]


class SnapshotCollector(Collector):
    """A prometheus_client collector over one Snapshot."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def collect(self) -> Iterator[Metric]:
        s = self.snap
        yield from self._topic_meters(s)
        yield from self._requests(s)
        yield from self._replica_manager(s)
        yield from self._logs(s)
        yield from self._groups(s)
        yield from self._share(s)
        yield from self._misc(s)

    def _topic_meters(self, s: Snapshot) -> Iterator[Metric]:
        for i, (name, what) in enumerate(
            (
                ("bytesin", "BytesInPerSec: bytes of record batches appended from clients"),
                ("messagesin", "MessagesInPerSec: records appended from clients"),
                ("bytesout", "BytesOutPerSec: bytes of records answered to consumers"),
            )
        ):
            f = _counter(f"kafka_server_brokertopicmetrics_{name}", what, ["topic"])
            for topic, c in sorted(s.topics_in.items()):
                f.add_metric([topic], c[i])
            _add_total(f, s.totals[i])
            yield f
        for i, name in enumerate(("replicationbytesin", "replicationbytesout")):
            f = _counter(f"kafka_server_brokertopicmetrics_{name}", f"{name}: follower traffic")
            f.add_metric([], s.replication_bytes[i])
            yield f

    def _requests(self, s: Snapshot) -> Iterator[Metric]:
        f = _counter(
            "kafka_network_requestmetrics_requests",
            "RequestsPerSec: requests handled, per API and version",
            ["request", "version"],
        )
        for (name, version), n in sorted(s.requests.items()):
            f.add_metric([name, str(version)], n)
        yield f
        f = _counter(
            "kafka_network_requestmetrics_errors",
            "ErrorsPerSec: error codes in answers (NONE included), per API and error",
            ["request", "error"],
        )
        for (name, code), n in sorted(s.errors.items()):
            f.add_metric([name, error_name(code)], n)
        yield f
        # TotalTimeMs as the JMX exporter renders a Yammer histogram: quantile gauges (over the
        # last QUANTILE_WINDOW_S) and _count, here with _sum too: a Prometheus summary
        summary = Metric(
            "kafka_network_requestmetrics_totaltimems",
            "TotalTimeMs: request handling time in ms (from decoding to the encoded answer)",
            "summary",
        )
        hist = HistogramMetricFamily(
            "pybroker_request_total_time_seconds",
            "request handling time (from decoding to the encoded answer)",
            labels=["request"],
        )
        n_buckets = len(LATENCY_BOUNDS) + 1
        for name, counts in sorted(s.latency.items()):
            base = s.latency_base.get(name)
            window = counts if base is None else [a - b for a, b in zip(counts, base, strict=True)]
            labels = {"request": name}
            for label, q in QUANTILES:
                summary.samples.append(
                    Sample(summary.name, dict(labels, quantile=label), _quantile(window, q))
                )
            count = sum(counts[:n_buckets])
            summary.samples.append(Sample(summary.name + "_count", labels, float(count)))
            summary.samples.append(Sample(summary.name + "_sum", labels, counts[-1] * 1000.0))
            cumulative = 0.0
            buckets = []
            for i, bound in enumerate(LATENCY_BOUNDS):
                cumulative += counts[i]
                buckets.append((repr(bound), cumulative))
            buckets.append(("+Inf", float(count)))
            hist.add_metric([name], buckets, counts[-1])
        yield summary
        yield hist

    def _replica_manager(self, s: Snapshot) -> Iterator[Metric]:
        rows = s.partitions
        leaders = [r for r in rows if r.leader]

        def gauge(name: str, doc: str, value: float, domain: str = "server") -> Metric:
            g = GaugeMetricFamily(f"kafka_{domain}_{name}", doc)
            g.add_metric([], value)
            return g

        yield gauge("replicamanager_partitioncount", "PartitionCount: local replicas", len(rows))
        yield gauge("replicamanager_leadercount", "LeaderCount: partitions led", len(leaders))
        yield gauge(
            "replicamanager_underreplicatedpartitions",
            "UnderReplicatedPartitions: led partitions whose ISR is smaller than the replicas",
            sum(1 for r in leaders if r.isr < r.replicas),
        )
        yield gauge(
            "replicamanager_underminisrpartitioncount",
            "UnderMinIsrPartitionCount: led partitions whose ISR is below min.insync.replicas",
            sum(1 for r in leaders if r.isr < r.min_isr),
        )
        yield gauge(
            "replicamanager_atminisrpartitioncount",
            "AtMinIsrPartitionCount: led partitions whose ISR is at min.insync.replicas",
            sum(1 for r in leaders if r.isr == r.min_isr),
        )
        yield gauge(
            "replicamanager_offlinereplicacount",
            "OfflineReplicaCount: replicas offline here after their log dir failed",
            s.offline_replicas,
        )
        yield gauge(
            "logmanager_offlinelogdirectorycount",
            "OfflineLogDirectoryCount: entries of log.dirs offline after an I/O error",
            sum(off for _, off in s.log_dirs),
            "log",
        )
        per_dir = GaugeMetricFamily(
            "kafka_log_logmanager_logdirectoryoffline",
            "LogDirectoryOffline: 1 when that log dir is offline",
            labels=["logDirectory"],
        )
        for d, off in s.log_dirs:
            per_dir.add_metric([d], off)
        yield per_dir
        for name, value in (("isrshrinks", s.isr_shrinks), ("isrexpands", s.isr_expands)):
            f = _counter(f"kafka_server_replicamanager_{name}", f"{name}: ISR changes")
            f.add_metric([], value)
            yield f
        yield gauge(
            "kafkacontroller_activecontrollercount",
            "ActiveControllerCount: 1 on the controller",
            1 if s.controller else 0,
            "controller",
        )
        yield gauge(
            "kafkacontroller_offlinepartitionscount",
            "OfflinePartitionsCount: partitions without a live leader (the controller's count)",
            s.offline_partitions,
            "controller",
        )
        yield gauge(
            "kafkacontroller_globalpartitioncount",
            "GlobalPartitionCount (the controller's count)",
            s.global_partitions,
            "controller",
        )
        yield gauge(
            "kafkacontroller_globaltopiccount",
            "GlobalTopicCount (the controller's count)",
            s.global_topics,
            "controller",
        )

    def _logs(self, s: Snapshot) -> Iterator[Metric]:
        for name, doc, attr in (
            ("kafka_log_log_size", "Size: bytes of the log", "size"),
            ("kafka_log_log_logstartoffset", "LogStartOffset", "log_start"),
            ("kafka_log_log_logendoffset", "LogEndOffset", "log_end"),
            ("kafka_log_log_numlogsegments", "NumLogSegments", "segments"),
        ):
            yield _streamed(
                GaugeMetricFamily(name, doc, labels=["topic", "partition"]),
                (
                    Sample(
                        name, {"topic": r.topic, "partition": str(r.partition)}, getattr(r, attr)
                    )
                    for r in s.partitions
                ),
            )

    def _groups(self, s: Snapshot) -> Iterator[Metric]:
        states = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")
        g = GaugeMetricFamily(
            "kafka_coordinator_group_groupmetadatamanager_numgroups",
            "NumGroups: groups this broker coordinates",
        )
        g.add_metric([], sum(s.group_states.values()))
        yield g
        for state in states:
            g = GaugeMetricFamily(
                f"kafka_coordinator_group_groupmetadatamanager_numgroups{state.lower()}",
                f"NumGroups{state}",
            )
            g.add_metric([], s.group_states.get(state, 0))
            yield g
        g = GaugeMetricFamily(
            "kafka_coordinator_group_groupmetadatamanager_numoffsets",
            "NumOffsets: committed offsets of the groups this broker coordinates",
        )
        g.add_metric([], len(s.group_offsets))
        yield g
        # kafka_exporter's names (danielqsj/kafka_exporter)
        members = GaugeMetricFamily(
            "kafka_consumergroup_members", "members of the group", labels=["consumergroup"]
        )
        for gid, n in sorted(s.group_members.items()):
            members.add_metric([gid], n)
        yield members
        lv = ["consumergroup", "topic", "partition"]
        current = GaugeMetricFamily(
            "kafka_consumergroup_current_offset", "committed offset", labels=lv
        )
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag",
            "high watermark minus committed offset (partitions with a replica here)",
            labels=lv,
        )
        lag_sum = GaugeMetricFamily(
            "kafka_consumergroup_lag_sum", "lag summed per topic", labels=lv[:2]
        )
        sums: dict[tuple[str, str], int] = {}
        for gid, topic, _, _, behind in s.group_offsets:
            if behind is not None:
                sums[(gid, topic)] = sums.get((gid, topic), 0) + behind
        for (gid, topic), total in sorted(sums.items()):
            lag_sum.add_metric([gid, topic], total)

        def labels(gid: str, topic: str, partition: int) -> dict[str, str]:
            return {"consumergroup": gid, "topic": topic, "partition": str(partition)}

        yield _streamed(
            current,
            (Sample(current.name, labels(g, t, p), o) for g, t, p, o, _ in s.group_offsets),
        )
        yield _streamed(
            lag,
            (
                Sample(lag.name, labels(g, t, p), b)
                for g, t, p, _, b in s.group_offsets
                if b is not None
            ),
        )
        yield lag_sum

    def _share(self, s: Snapshot) -> Iterator[Metric]:
        """Kafka's share-group metrics (KIP-932), as the JMX exporter renders them."""
        g = GaugeMetricFamily(
            "kafka_server_group_coordinator_metrics_group_count",
            "group-count: groups this broker coordinates, by protocol",
            labels=["protocol"],
        )
        g.add_metric(["share"], sum(s.share_group_states.values()))
        yield g
        g = GaugeMetricFamily(
            "kafka_server_group_coordinator_metrics_share_group_count",
            "share-group-count: share groups this broker coordinates, by state",
            labels=["state"],
        )
        for state in ("Empty", "Stable", "Dead"):
            g.add_metric([state], s.share_group_states.get(state, 0))
        yield g
        f = _counter(
            "kafka_server_sharegroupmetrics_recordacknowledgements",
            "RecordAcknowledgementsPerSec: records acknowledged, by acknowledgement type",
            labels=["ackType"],
        )
        for key, ack in (("accepted", "Accept"), ("released", "Release"),
                         ("rejected", "Reject"), ("renewed", "Renew")):  # fmt: skip
            f.add_metric([ack], s.share_acks.get(key, 0))
        yield f
        lv = ["group", "topic", "partition"]
        gauges = {
            "inflightmessagecount": (
                "InFlightMessageCount: records from the share-partition start offset to the "
                "last one in flight",
                "in_flight",
            ),
            "inflightbatchcount": ("InFlightBatchCount: in-flight batches", "batches"),
            "acquiredmessagecount": ("records acquired and not yet acknowledged", "acquired"),
            "acknowledgedmessagecount": (
                "records acknowledged above the start offset",
                "acknowledged",
            ),
        }
        for name, (doc, key) in gauges.items():
            g = GaugeMetricFamily(f"kafka_server_sharepartitionmetrics_{name}", doc, labels=lv)
            for v in s.share_partitions:
                g.add_metric([v["group"], v["topic"], str(v["partition"])], v[key])
            yield g
        f = _counter(
            "kafka_server_sharepartitionmetrics_acquisitionlocktimeout",
            "AcquisitionLockTimeoutPerSec: records whose acquisition lock ran out",
            labels=lv,
        )
        for v in s.share_partitions:
            f.add_metric([v["group"], v["topic"], str(v["partition"])], v["lock_timeouts"])
        yield f
        f = _counter(
            "kafka_server_share_coordinator_metrics_write",
            "write-total: share-partition state writes (to the metadata store)",
        )
        f.add_metric([], s.share_acks.get("state_writes", 0))
        yield f
        f = _counter(
            "pybroker_share_state_write_seconds",
            "seconds spent in share-partition state writes: over write-total, their mean latency",
        )
        f.add_metric([], s.share_acks.get("state_write_seconds", 0.0))
        yield f

    def _misc(self, s: Snapshot) -> Iterator[Metric]:
        conns = GaugeMetricFamily(
            "kafka_server_socket_server_metrics_connection_count",
            "connection-count: open client connections per listener",
            labels=["listener", "networkProcessor"],
        )
        for listener, n in sorted(s.connections.items()):
            conns.add_metric([listener, "0"], n)
        yield conns
        for name, doc in (
            (
                "kafka_network_socketserver_networkprocessoravgidlepercent",
                "NetworkProcessorAvgIdlePercent: share of time the event loop waited (0-1)",
            ),
            (
                "kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent",
                "RequestHandlerAvgIdlePercent: the same share (one loop handles both)",
            ),
        ):
            g = GaugeMetricFamily(name, doc)
            g.add_metric([], s.idle_share)
            yield g
        f = _counter("pybroker_event_loop_idle_seconds", "seconds the event loop waited")
        f.add_metric([], s.idle_seconds)
        yield f
        for name, value in (
            ("numincrementalfetchsessions", s.fetch_sessions),
            ("numincrementalfetchpartitionscached", s.fetch_session_partitions),
        ):
            g = GaugeMetricFamily(f"kafka_server_fetchsessioncache_{name}", name)
            g.add_metric([], value)
            yield g
        f = _counter(
            "kafka_server_fetchsessioncache_incrementalfetchsessionevictions",
            "IncrementalFetchSessionEvictionsPerSec",
        )
        f.add_metric([], s.fetch_session_evictions)
        yield f
        f = _counter(
            "pybroker_quota_throttle_time_ms",
            "throttle time given to clients over a quota, by quota type (Produce: "
            "producer_byte_rate, Fetch: consumer_byte_rate, Request: request_percentage, "
            "ConnectionCreation: connection_creation_rate)",
            labels=["type"],
        )
        for key, kind in QUOTA_TYPES.items():
            f.add_metric([kind], s.quota_throttle_ms.get(key, 0))
        yield f


QUOTA_TYPES = {
    "producer_byte_rate": "Produce",
    "consumer_byte_rate": "Fetch",
    "request_percentage": "Request",
    "connection_creation_rate": "ConnectionCreation",
}


def render(snap: Snapshot, accept: str | None = None) -> tuple[bytes, str]:
    """The exposition of ``snap`` in the format ``accept`` asks for (Prometheus text by
    default, OpenMetrics on request): (body, content type).  Thread-safe."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snap))
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type


async def exposition(broker: Any, accept: str | None = None) -> tuple[bytes, str]:
    """Snapshot on the loop (chunked), encode in a worker thread."""
    snap = await snapshot(broker)
    return await asyncio.to_thread(render, snap, accept)
