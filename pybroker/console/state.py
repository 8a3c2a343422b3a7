"""The console's rows, built on the event loop from the read model (pybroker/read_model.py:
its walks, log figures, offline and lag rules, committed offsets) and filtered for the viewer:
only topics and groups the viewer may DESCRIBE are returned.

Everything comes from the in-process services the Kafka API handlers use: the cluster metadata
cache (brokers, controller, topics, leaders, replicas, ISR), this broker's replicas (log start
and end, high watermark, size; None for partitions without a replica here) and the group
coordinator (the groups it coordinates, their members and committed offsets).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pybroker import read_model
from pybroker.console.auth import Viewer
from pybroker.read_model import Walk
from pybroker.wire.consumer_protocol import parse_assignment

if TYPE_CHECKING:
    from pybroker.coord.group.classic import Group
    from pybroker.coord.group.consumer import ConsumerGroup
    from pybroker.coord.metadata.model import BrokerInfo, PartitionState
    from pybroker.replication.manager import Replica
    from pybroker.services import BrokerServices


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


def _row(
    broker: BrokerServices, topic: str, p: int, state: PartitionState, live: dict[int, BrokerInfo]
) -> PartitionRow:
    row = PartitionRow(
        p, state.leader, list(state.replicas), list(state.isr), state.leader not in live
    )
    r = read_model.local_replicas(broker).get((topic, p))
    if r is not None:
        f = read_model.log_figures(r.log)
        if f is not None:
            row.log_start, row.log_end = f.log_start, f.log_end
            row.high_watermark, row.size = f.high_watermark, f.size
            row.compacted = f.compacted
            row.transactional = read_model.transactional(r.log)
    return row


def brokers(broker: BrokerServices) -> list[tuple[int, str, int, str | None]]:
    return [(b.id, b.host, b.port, b.rack) for _, b in sorted(broker.cluster.brokers.items())]


async def overview(broker: BrokerServices, viewer: Viewer) -> Overview:
    cluster = broker.cluster
    live = cluster.brokers
    out = Overview(cluster.cluster_id, cluster.controller_id, brokers(broker), 0, 0)
    out.cluster_described = viewer.cluster()
    walk = Walk()
    for name, info in sorted(cluster.topics.items()):
        if not viewer.topic(name):
            continue
        out.topics += 1
        for p, state in sorted(info.partitions.items()):
            await walk.tick()
            out.partitions += 1
            offline = read_model.offline(state, live)
            if offline or read_model.under_replicated(state):
                row = _row(broker, name, p, state, live)
                (out.offline if offline else out.under_replicated).append((name, row))
    return out


async def topic_rows(broker: BrokerServices, viewer: Viewer) -> list[TopicRow]:
    cluster = broker.cluster
    live = cluster.brokers
    local = read_model.local_replicas(broker)
    out = []
    walk = Walk()
    for name, info in sorted(cluster.topics.items()):
        if not viewer.topic(name):
            continue
        size: int | None = None
        urp = offline = rf = 0
        count = RecordCount()
        for p, state in info.partitions.items():
            await walk.tick()
            rf = max(rf, len(state.replicas))
            if read_model.offline(state, live):
                offline += 1
            if read_model.under_replicated(state):
                urp += 1
            if (name, p) in local:
                row = _row(broker, name, p, state, live)
                if row.size is not None:
                    size = (size or 0) + row.size
                count.add(row)
        out.append(TopicRow(name, len(info.partitions), rf, size, urp, offline, count))
    return out


async def partition_rows(broker: BrokerServices, topic: str) -> list[PartitionRow]:
    """Rows of every partition of the topic, in partition order."""
    cluster = broker.cluster
    info = cluster.topics.get(topic)
    if info is None:
        return []
    live = cluster.brokers
    out = []
    walk = Walk()
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


async def lag_rows(
    broker: BrokerServices, group_id: str, viewer: Viewer | None = None
) -> list[OffsetRow]:
    """Committed offset, high watermark and lag of each partition the group committed (high
    watermark minus committed offset, as kafka-consumer-groups computes it; None where this
    broker holds no replica of the partition)."""
    committed = await read_model.committed_offsets(broker, group_id)
    local = read_model.local_replicas(broker)
    out = []
    walk = Walk()
    for (topic, partition), offset in sorted(committed.items()):
        await walk.tick()
        if viewer is not None and not viewer.topic(topic):
            continue
        out.append(_offset_row(local, topic, partition, offset))
    return out


def _offset_row(
    local: dict[tuple[str, int], Replica], topic: str, partition: int, committed: int | None
) -> OffsetRow:
    r = local.get((topic, partition))
    end = r.log.high_watermark if r is not None else None
    return OffsetRow(topic, partition, committed, end, read_model.lag(end, committed))


def total_lag(rows: list[OffsetRow]) -> int | None:
    lags = [r.lag for r in rows if r.lag is not None]
    return sum(lags) if lags else None


async def _members(broker: BrokerServices, g: Group | ConsumerGroup) -> tuple[str, list[MemberRow]]:
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
    broker: BrokerServices, group_id: str, members: list[MemberRow], topic: str | None = None
) -> list[OffsetRow]:
    """Every partition the group committed or has assigned (of ``topic`` only, if given), in
    (topic, partition) order: committed partitions with their lag, assigned ones without a
    commit with ``committed`` None, each with the member it is assigned to."""
    committed = {(r.topic, r.partition): r for r in await lag_rows(broker, group_id)}
    owner = {(t, p): m for m in members for t, ps in m.assignment for p in ps}
    local = read_model.local_replicas(broker)
    out = []
    for key in sorted(set(committed) | set(owner)):
        if topic is not None and key[0] != topic:
            continue
        row = committed.get(key) or _offset_row(local, key[0], key[1], None)
        row.member = owner.get(key)
        out.append(row)
    return out


def _visible(viewer: Viewer) -> Callable[[str], bool]:
    """ListGroups' rule: every group with DESCRIBE on the cluster, else those with DESCRIBE
    on the group."""
    all_ok = viewer.cluster()
    return lambda gid: all_ok or viewer.group(gid)


async def _visible_groups(broker: BrokerServices, viewer: Viewer) -> AsyncIterator[Any]:
    """The groups this broker coordinates that the viewer may describe, by id, the walk
    yielding to the loop between them."""
    visible = _visible(viewer)
    walk = Walk()
    for g in sorted(broker.groups.list_groups(), key=lambda g: g.group_id):
        if not visible(g.group_id):
            continue
        await walk.tick()
        yield g


async def group_rows(broker: BrokerServices, viewer: Viewer) -> list[GroupRow]:
    out = []
    async for g in _visible_groups(broker, viewer):
        gid = g.group_id
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


async def topic_consumers(broker: BrokerServices, viewer: Viewer, topic: str) -> list[ConsumerRow]:
    """The groups this broker coordinates (and the viewer may describe) that have partitions
    of ``topic`` committed or assigned."""
    out = []
    async for g in _visible_groups(broker, viewer):
        gid = g.group_id
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


def coordinator(broker: BrokerServices, group_id: str) -> int:
    return broker.groups.coordinator_node(group_id)


async def group_detail(broker: BrokerServices, group_id: str, viewer: Viewer) -> GroupDetail | None:
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
