"""Prometheus exposition of the read model's metrics snapshot, under Kafka's names as the JMX
exporter renders them.

``metrics.listener=http://host:port`` (off by default) serves ``/metrics``.  The names are the
ones Prometheus' JMX exporter gives Kafka's MBeans with its example Kafka config
(prometheus/jmx_exporter ``example_configs/kafka-2_0_0.yml``: ``<name>PerSec`` meters' ``Count``
-> ``kafka_<domain>_<type>_<name>_total``, gauges' ``Value`` -> ``kafka_<domain>_<type>_<name>``,
histograms -> quantile gauges plus ``_count``), so dashboards written for a Kafka behind the
JMX exporter work; consumer lag uses danielqsj/kafka_exporter's names, the connection count
Strimzi's.  docs/metrics.md lists every metric.  A scrape takes the snapshot on the loop
(pybroker/read_model.py, chunked) and renders it here in a worker thread.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Sample

from pybroker.metrics import LATENCY_BOUNDS, error_name
from pybroker.read_model import BrokerState, Snapshot, snapshot

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


async def exposition(broker: BrokerState, accept: str | None = None) -> tuple[bytes, str]:
    """Snapshot on the loop (chunked), encode in a worker thread."""
    snap = await snapshot(broker)
    return await asyncio.to_thread(render, snap, accept)
