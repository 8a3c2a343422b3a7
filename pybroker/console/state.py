"""The console's view of the broker's state, read on the event loop into plain rows.

Everything comes from the same in-process services the Kafka API handlers use: the cluster
metadata cache (``broker.cluster``: brokers, controller, topics, partition leaders, replicas,
ISR), this broker's replicas (``broker.replicas``: log start / end, high watermark, size of
the partitions it hosts) and the group coordinator (``broker.groups``: the groups it
coordinates, their members and committed offsets).  Walks over partitions yield to the loop
once they held it for ``SLICE_S`` (checked every ``CHECK_EVERY`` partitions), so a topic of
10,000 partitions never holds it for long, and an idle loop is not yielded needlessly.  Only
topics and groups the viewer may DESCRIBE are returned.

Log figures exist only for partitions with a replica on this broker; elsewhere they are None.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from pybroker.console.auth import Viewer
from pybroker.wire.consumer_protocol import parse_assignment

SLICE_S = 0.01
CHECK_EVERY = 64


@dataclass(slots=True)
class PartitionRow:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    offline: bool
    log_start: int | None = None
    log_end: int | None = None
    high_watermark: int | None = None
    size: int | None = None
    compacted: bool = False  # cleanup.policy holds compact
    transactional: bool = False  # transactional batches (their markers take offsets)

    @property
    def records(self) -> int | None:
        """High watermark minus log start: the records a consumer can read, exactly unless
        the log is compacted or holds transaction markers (then at most that)."""
        if self.high_watermark is None or self.log_start is None:
            return None
        return max(0, self.high_watermark - self.log_start)


@dataclass(slots=True)
class RecordCount:
    """A topic's records over the partitions this broker holds a replica of."""

    records: int | None = None
    local: int = 0  # partitions counted
    compacted: bool = False
    transactional: bool = False

    def add(self, row: PartitionRow) -> None:
        n = row.records
        if n is None:
            return
        self.records = (self.records or 0) + n
        self.local += 1
        self.compacted |= row.compacted
        self.transactional |= row.transactional

    @property
    def approximate(self) -> bool:
        return self.compacted or self.transactional


@dataclass(slots=True)
class TopicRow:
    name: str
    partitions: int
    replication_factor: int
    size: int | None
    under_replicated: int
    offline: int
    count: RecordCount = field(default_factory=RecordCount)


@dataclass
class Overview:
    cluster_id: str
    controller: int
    brokers: list[tuple[int, str, int, str | None]]
    topics: int
    partitions: int
    under_replicated: list[tuple[str, PartitionRow]] = field(default_factory=list)
    offline: list[tuple[str, PartitionRow]] = field(default_factory=list)
    cluster_described: bool = True


class _Slice:
    """Yield to the event loop once the walk held it for SLICE_S."""

    __slots__ = ("_since", "_n")

    def __init__(self) -> None:
        self._since = time.perf_counter()
        self._n = 0

    async def tick(self) -> None:
        self._n += 1
        if self._n % CHECK_EVERY == 0 and time.perf_counter() - self._since > SLICE_S:
            await asyncio.sleep(0)
            self._since = time.perf_counter()


def _transactional(log: Any) -> bool:
    """Whether the log's producer state saw transactional batches (a transaction in flight,
    or a producer that wrote a marker): their COMMIT/ABORT markers take offsets but are no
    records.  Producer state expires with its producers, so an old transaction may be missed."""
    ps = log.producer_state
    return bool(ps.ongoing_txns) or any(e.coordinator_epoch >= 0 for e in ps.producers.values())


def _row(broker: Any, topic: str, p: int, state: Any, live: Any) -> PartitionRow:
    row = PartitionRow(
        p, state.leader, list(state.replicas), list(state.isr), state.leader not in live
    )
    r = broker.replicas.replicas.get((topic, p)) if broker.replicas is not None else None
    if r is not None:
        log = r.log
        try:
            row.log_start, row.log_end = log.log_start_offset, log.log_end_offset
            row.high_watermark, row.size = log.high_watermark, log.size
            row.compacted = log.config.compact
            row.transactional = _transactional(log)
        except (OSError, ValueError, AttributeError):  # closed under us (topic deleted)
            pass
    return row


def brokers(broker: Any) -> list[tuple[int, str, int, str | None]]:
    return [(b.id, b.host, b.port, b.rack) for _, b in sorted(broker.cluster.brokers.items())]


async def overview(broker: Any, viewer: Viewer) -> Overview:
    cluster = broker.cluster
    live = cluster.brokers
    out = Overview(cluster.cluster_id, cluster.controller_id, brokers(broker), 0, 0)
    out.cluster_described = viewer.cluster()
    walk = _Slice()
    for name, info in sorted(cluster.topics.items()):
        if not viewer.topic(name):
            continue
        out.topics += 1
        for p, state in sorted(info.partitions.items()):
            await walk.tick()
            out.partitions += 1
            offline = state.leader < 0 or state.leader not in live
            if offline or len(state.isr) < len(state.replicas):
                row = _row(broker, name, p, state, live)
                (out.offline if offline else out.under_replicated).append((name, row))
    return out


async def topic_rows(broker: Any, viewer: Viewer) -> list[TopicRow]:
    cluster = broker.cluster
    live = cluster.brokers
    local = broker.replicas.replicas if broker.replicas is not None else {}
    out = []
    walk = _Slice()
    for name, info in sorted(cluster.topics.items()):
        if not viewer.topic(name):
            continue
        size: int | None = None
        urp = offline = rf = 0
        count = RecordCount()
        for p, state in info.partitions.items():
            await walk.tick()
            rf = max(rf, len(state.replicas))
            if state.leader < 0 or state.leader not in live:
                offline += 1
            if len(state.isr) < len(state.replicas):
                urp += 1
            if (name, p) in local:
                row = _row(broker, name, p, state, live)
                if row.size is not None:
                    size = (size or 0) + row.size
                count.add(row)
        out.append(TopicRow(name, len(info.partitions), rf, size, urp, offline, count))
    return out


async def partition_rows(broker: Any, topic: str) -> list[PartitionRow]:
    """Rows of every partition of the topic, in partition order."""
    cluster = broker.cluster
    info = cluster.topics.get(topic)
    if info is None:
        return []
    live = cluster.brokers
    out = []
    walk = _Slice()
    for p in sorted(info.partitions):
        await walk.tick()
        out.append(_row(broker, topic, p, info.partitions[p], live))
    return out


# -- groups ---------------------------------------------------------------------------------


@dataclass(slots=True)
class MemberRow:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: list[tuple[str, list[int]]]


@dataclass(slots=True)
class OffsetRow:
    """One partition of a group, as ``kafka-consumer-groups --describe`` prints it: assigned
    to a member, committed, or both."""

    topic: str
    partition: int
    committed: int | None  # None: no committed offset ("-")
    log_end: int | None  # the high watermark: what consumers can read
    lag: int | None  # None: unknown (no commit, or no replica on this broker)
    member: MemberRow | None = None  # None: not assigned now ("-")


@dataclass(slots=True)
class GroupRow:
    group_id: str
    state: str
    protocol_type: str
    group_type: str
    members: int
    lag: int | None
    uncommitted: int = 0  # assigned partitions without a committed offset


@dataclass
class GroupDetail:
    group_id: str
    state: str
    protocol_type: str
    group_type: str
    protocol: str
    members: list[MemberRow]
    offsets: list[OffsetRow]
    hidden_topics: int = 0

    @property
    def uncommitted(self) -> int:
        return sum(1 for r in self.offsets if r.committed is None)


@dataclass(slots=True)
class ConsumerRow:
    """A group that consumes a topic: its partitions of the topic assigned and committed."""

    group_id: str
    state: str
    members: int  # members assigned partitions of the topic
    assigned: int
    committed: int
    lag: int | None
    uncommitted: int


async def lag_rows(broker: Any, group_id: str, viewer: Viewer | None = None) -> list[OffsetRow]:
    """Committed offset, high watermark and lag of each partition the group committed (high
    watermark minus committed offset, as kafka-consumer-groups computes it; None where this
    broker holds no replica of the partition)."""
    committed = await broker.groups.offsets.load(group_id)
    local = broker.replicas.replicas if broker.replicas is not None else {}
    out = []
    walk = _Slice()
    for (topic, partition), co in sorted(committed.items()):
        await walk.tick()
        if viewer is not None and not viewer.topic(topic):
            continue
        out.append(_offset_row(local, topic, partition, co.offset))
    return out


def _offset_row(local: Any, topic: str, partition: int, committed: int | None) -> OffsetRow:
    r = local.get((topic, partition))
    end = r.log.high_watermark if r is not None else None
    lag = None if end is None or committed is None or committed < 0 else max(0, end - committed)
    return OffsetRow(topic, partition, committed, end, lag)


def total_lag(rows: list[OffsetRow]) -> int | None:
    lags = [r.lag for r in rows if r.lag is not None]
    return sum(lags) if lags else None


async def _members(broker: Any, g: Any) -> tuple[str, list[MemberRow]]:
    """(protocol or assignor, members with their assignments) of a group: a KIP-848 group's
    from its coordinator (ConsumerGroupDescribe), a classic consumer group's decoded from the
    consumer protocol's assignment (DescribeGroups; empty unless the group is Stable)."""
    groups = broker.groups
    members: list[MemberRow] = []
    if g.group_type == "consumer":
        desc = await groups.describe_consumer_group(g.group_id) or {"members": []}
        for m in desc["members"]:
            assigned = [
                (t["topic_name"], sorted(t["partitions"]))
                for t in m["assignment"]["topic_partitions"]
            ]
            members.append(
                MemberRow(
                    m["member_id"], m["instance_id"], m["client_id"], m["client_host"], assigned
                )
            )
        return desc.get("assignor_name") or "", members
    desc = groups.describe(g.group_id) or {"members": [], "protocol_data": ""}
    for m in desc["members"]:
        assigned = []
        if g.protocol_type == "consumer" and m["member_assignment"]:
            try:
                got = parse_assignment(m["member_assignment"])
                assigned = [(t, sorted(ps)) for t, ps in sorted(got.items())]
            except (ValueError, IndexError):
                assigned = []
        members.append(
            MemberRow(
                m["member_id"], m["group_instance_id"], m["client_id"], m["client_host"], assigned
            )
        )
    return desc.get("protocol_data") or "", members


async def partition_lag(
    broker: Any, group_id: str, members: list[MemberRow], topic: str | None = None
) -> list[OffsetRow]:
    """Every partition the group committed or has assigned (of ``topic`` only, if given), in
    (topic, partition) order: committed partitions with their lag, assigned ones without a
    commit with ``committed`` None, each with the member it is assigned to."""
    committed = {(r.topic, r.partition): r for r in await lag_rows(broker, group_id)}
    owner = {(t, p): m for m in members for t, ps in m.assignment for p in ps}
    local = broker.replicas.replicas if broker.replicas is not None else {}
    out = []
    for key in sorted(set(committed) | set(owner)):
        if topic is not None and key[0] != topic:
            continue
        row = committed.get(key) or _offset_row(local, key[0], key[1], None)
        row.member = owner.get(key)
        out.append(row)
    return out


def _visible(viewer: Viewer) -> Any:
    """ListGroups' rule: every group with DESCRIBE on the cluster, else those with DESCRIBE
    on the group."""
    all_ok = viewer.cluster()
    return lambda gid: all_ok or viewer.group(gid)


async def group_rows(broker: Any, viewer: Viewer) -> list[GroupRow]:
    visible = _visible(viewer)
    out = []
    walk = _Slice()
    for g in sorted(broker.groups.list_groups(), key=lambda g: g.group_id):
        gid = g.group_id
        if not visible(gid):
            continue
        await walk.tick()
        lag, uncommitted = None, 0
        try:
            _, members = await _members(broker, g)
            rows = [r for r in await partition_lag(broker, gid, members) if viewer.topic(r.topic)]
            lag = total_lag(rows)
            uncommitted = sum(1 for r in rows if r.committed is None)
        except Exception:  # the store is unreachable now: no lag shown
            pass
        out.append(
            GroupRow(
                gid,
                g.state.value,
                g.protocol_type or "",
                g.group_type,
                len(g.members),
                lag,
                uncommitted,
            )
        )
    return out


async def topic_consumers(broker: Any, viewer: Viewer, topic: str) -> list[ConsumerRow]:
    """The groups this broker coordinates (and the viewer may describe) that have partitions
    of ``topic`` committed or assigned."""
    visible = _visible(viewer)
    out = []
    walk = _Slice()
    for g in sorted(broker.groups.list_groups(), key=lambda g: g.group_id):
        gid = g.group_id
        if not visible(gid):
            continue
        await walk.tick()
        try:
            _, members = await _members(broker, g)
            rows = await partition_lag(broker, gid, members, topic)
        except Exception:  # the store is unreachable now: the group is not shown
            continue
        if not rows:
            continue
        out.append(
            ConsumerRow(
                gid,
                g.state.value,
                len({r.member.member_id for r in rows if r.member is not None}),
                sum(1 for r in rows if r.member is not None),
                sum(1 for r in rows if r.committed is not None),
                total_lag(rows),
                sum(1 for r in rows if r.committed is None),
            )
        )
    return out


def coordinator(broker: Any, group_id: str) -> int:
    return broker.groups.coordinator_node(group_id)


async def group_detail(broker: Any, group_id: str, viewer: Viewer) -> GroupDetail | None:
    """None when this broker does not coordinate the group (or knows nothing of it)."""
    g = next((x for x in broker.groups.list_groups() if x.group_id == group_id), None)
    if g is None:
        return None
    protocol, members = await _members(broker, g)
    rows = await partition_lag(broker, group_id, members)
    shown = [r for r in rows if viewer.topic(r.topic)]
    for m in members:
        m.assignment = [(t, ps) for t, ps in m.assignment if viewer.topic(t)]
    return GroupDetail(
        group_id,
        g.state.value,
        g.protocol_type or "",
        g.group_type,
        protocol,
        members,
        shown,
        hidden_topics=len({r.topic for r in rows} - {r.topic for r in shown}),
    )
