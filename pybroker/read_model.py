"""The broker's state read on the event loop into plain values: the one read model under
/metrics (pybroker/exposition.py renders its ``Snapshot``) and the web console
(pybroker/console/state.py builds its rows from the readers here).

Rules both show the same way: a partition is offline when its leader is not a live broker; a
group's lag on a partition is the high watermark minus its committed offset (as
kafka-consumer-groups computes it), known only where this broker holds a replica; log figures
exist only for partitions with a replica here, and a log closed under the walk (its topic
deleted) is skipped.  Walks over partitions yield to the loop (``Walk``); everything else is
copied without awaiting, so a snapshot is consistent per walk step.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from pybroker.services import BrokerServices

if TYPE_CHECKING:
    from pybroker.coord.metadata.model import BrokerInfo, PartitionState
    from pybroker.log import PartitionLog
    from pybroker.metrics import BrokerMetrics
    from pybroker.replication.manager import Replica
    from pybroker.server import KafkaServer

SLICE_S = 0.01  # the console's walks: yield once the walk held the loop this long
CHECK_EVERY = 64  # ... looked at every CHECK_EVERY steps
SNAPSHOT_CHUNK = 500  # the metrics snapshot: partitions read per event-loop step

TopicPartition = tuple[str, int]


class BrokerState(BrokerServices, Protocol):
    """What the read model reads: the services, and the listeners' open connections."""

    server: KafkaServer | None


class Walk:
    """Yields to the event loop, every ``check_every`` steps, once the walk held it for
    ``slice_s`` (0: at every check, a fixed chunk of steps)."""

    __slots__ = ("_since", "_n", "_slice_s", "_every")

    def __init__(self, slice_s: float = SLICE_S, check_every: int = CHECK_EVERY) -> None:
        self._since = time.perf_counter()
        self._n = 0
        self._slice_s = slice_s
        self._every = check_every

    async def tick(self) -> None:
        self._n += 1
        if self._n % self._every == 0 and time.perf_counter() - self._since > self._slice_s:
            await asyncio.sleep(0)
            self._since = time.perf_counter()


# -- partitions ---------------------------------------------------------------------------


@dataclass(slots=True)
class LogFigures:
    """A local replica's log at one moment."""

    log_start: int
    log_end: int
    high_watermark: int
    size: int
    segments: int
    compacted: bool  # cleanup.policy holds compact


def log_figures(log: PartitionLog) -> LogFigures | None:
    """None when the log was closed under us (its topic deleted)."""
    try:
        return LogFigures(
            log.log_start_offset,
            log.log_end_offset,
            log.high_watermark,
            log.size,
            len(log.segments),
            log.config.compact,
        )
    except (OSError, ValueError, AttributeError):
        return None


def transactional(log: PartitionLog) -> bool:
    """Whether the log's producer state saw transactional batches (a transaction in flight,
    or a producer that wrote a marker): their COMMIT/ABORT markers take offsets but are no
    records.  Producer state expires with its producers, so an old transaction may be missed."""
    ps = log.producer_state
    return bool(ps.ongoing_txns) or any(e.coordinator_epoch >= 0 for e in ps.producers.values())


def local_replicas(services: BrokerServices) -> dict[TopicPartition, Replica]:
    """This broker's replicas (none before the replica manager starts)."""
    replicas = services.replicas
    return replicas.replicas if replicas is not None else {}


def offline(state: PartitionState, live: dict[int, BrokerInfo]) -> bool:
    """No live leader (the controller's OfflinePartitionsCount, the console's offline)."""
    return state.leader < 0 or state.leader not in live


def under_replicated(state: PartitionState) -> bool:
    return len(state.isr) < len(state.replicas)


# -- groups -------------------------------------------------------------------------------


def lag(high_watermark: int | None, committed: int | None) -> int | None:
    """High watermark minus committed offset; None without either (no commit, or no replica
    of the partition on this broker)."""
    if high_watermark is None or committed is None or committed < 0:
        return None
    return max(0, high_watermark - committed)


async def committed_offsets(services: BrokerServices, group_id: str) -> dict[TopicPartition, int]:
    """The group's committed offsets (raises when the store is unreachable)."""
    committed = await services.groups.offsets.load(group_id)
    return {tp: co.offset for tp, co in committed.items()}


# -- the metrics snapshot -----------------------------------------------------------------


@dataclass(slots=True)
class ReplicaRow:
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
    """What /metrics shows, copied into plain values (rendered off the loop)."""

    broker_id: int
    partitions: list[ReplicaRow] = field(default_factory=list)
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


async def snapshot(broker: BrokerState) -> Snapshot:
    """Read what the metrics show, on the event loop, yielding every SNAPSHOT_CHUNK
    partitions.  Needs the broker's metrics counters (metrics.listener set)."""
    m: BrokerMetrics = broker.metrics
    cluster = broker.cluster
    replicas = broker.replicas
    snap = Snapshot(broker_id=broker.config.broker_id)
    topics = cluster.topics
    m.retire_topics(topics)
    snap.topics_in = {t: list(c) for t, c in m.topics.items()}
    snap.totals = m.totals()
    snap.replication_bytes = (
        replicas.replication_bytes_in,
        m.replication_bytes_out,
    )
    snap.requests = dict(m.requests)
    snap.latency = {k: list(v) for k, v in m.latency.items()}
    snap.latency_base = m.quantile_base(time.monotonic())
    snap.errors = dict(m.errors)
    snap.isr_shrinks = replicas.isr_shrinks
    snap.isr_expands = replicas.isr_expands
    snap.idle_share = m.idle.read()
    snap.idle_seconds = m.idle.idle_s
    rows = snap.partitions
    walk = Walk(0.0, SNAPSHOT_CHUNK)
    for r in list(local_replicas(broker).values()):
        await walk.tick()
        f = log_figures(r.log)
        if f is None:
            continue
        rows.append(
            ReplicaRow(
                r.topic,
                r.partition,
                f.size,
                f.log_start,
                f.log_end,
                f.high_watermark,
                f.segments,
                r.role == "leader",
                len(r.isr),
                len(r.replicas),
                replicas.min_insync_replicas(r.topic),
            )
        )
    snap.offline_replicas = len(replicas.offline)
    logs = broker.logs
    if logs is not None:
        snap.log_dirs = [(str(d), int(d in logs.offline_dirs)) for d in logs.log_dirs]
    snap.controller = cluster.controller_id == snap.broker_id
    if snap.controller:
        live = cluster.brokers
        for info in list(topics.values()):
            snap.global_topics += 1
            for state in info.partitions.values():
                await walk.tick()
                snap.global_partitions += 1
                if offline(state, live):
                    snap.offline_partitions += 1
    snap.connections = connections(broker)
    await _groups(broker, snap)
    _share_groups(broker, snap)
    cache = broker.fetch_sessions
    snap.fetch_sessions = len(cache)
    snap.fetch_session_partitions = cache.total_partitions
    snap.fetch_session_evictions = cache.evictions
    quotas = broker.quotas
    if quotas is not None:
        snap.quota_throttle_ms = dict(quotas.throttle_ms)
    return snap


def connections(broker: BrokerState) -> dict[str, int]:
    """Open client connections per listener (every listener named, 0 included)."""
    out: dict[str, int] = {}
    server = broker.server
    if server is None:
        return out
    for name in (e.listener for e in broker.config.listeners):
        out[name] = 0
    for conn in list(server.connections):
        key = conn.listener or ""
        out[key] = out.get(key, 0) + 1
    return out


def _share_groups(broker: BrokerState, snap: Snapshot) -> None:
    coordinator = broker.share_groups
    if coordinator is not None:
        for g in list(coordinator.groups.values()):
            state = g.state.value
            snap.share_group_states[state] = snap.share_group_states.get(state, 0) + 1
    shares = broker.shares
    if shares is not None:
        snap.share_acks = dict(shares.stats)
        snap.share_partitions = shares.views()


async def _groups(broker: BrokerState, snap: Snapshot) -> None:
    groups = broker.groups
    if groups is None:
        return
    ends = {(row.topic, row.partition): row.high_watermark for row in snap.partitions}
    for g in groups.list_groups():
        gid = g.group_id
        snap.group_states[g.state.value] = snap.group_states.get(g.state.value, 0) + 1
        snap.group_members[gid] = len(g.members)
        try:
            committed = await committed_offsets(broker, gid)
        except Exception:  # the store is unreachable now: no lag this scrape
            continue
        for (topic, partition), offset in sorted(committed.items()):
            behind = lag(ends.get((topic, partition)), offset)
            snap.group_offsets.append((gid, topic, partition, offset, behind))
