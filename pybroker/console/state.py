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
from pybroker.coord.metadata.placement import coordinator_for
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


@dataclass(slots=True)
class TopicRow:
    name: str
    partitions: int
    replication_factor: int
    size: int | None
    under_replicated: int
    offline: int


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
        for p, state in info.partitions.items():
            await walk.tick()
            rf = max(rf, len(state.replicas))
            if state.leader < 0 or state.leader not in live:
                offline += 1
            if len(state.isr) < len(state.replicas):
                urp += 1
            r = local.get((name, p))
            if r is not None:
                try:
                    size = (size or 0) + r.log.size
                except (OSError, ValueError, AttributeError):
                    pass
        out.append(TopicRow(name, len(info.partitions), rf, size, urp, offline))
    return out


async def partition_rows(broker: Any, topic: str, first: int, count: int) -> list[PartitionRow]:
    """Rows of partitions ``first`` .. ``first + count - 1`` (those that exist)."""
    cluster = broker.cluster
    info = cluster.topics.get(topic)
    if info is None:
        return []
    live = cluster.brokers
    out = []
    walk = _Slice()
    for p in sorted(info.partitions)[first : first + count]:
        await walk.tick()
        out.append(_row(broker, topic, p, info.partitions[p], live))
    return out


# -- groups ---------------------------------------------------------------------------------


@dataclass(slots=True)
class GroupRow:
    group_id: str
    state: str
    protocol_type: str
    group_type: str
    members: int
    lag: int | None


@dataclass(slots=True)
class MemberRow:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: list[tuple[str, list[int]]]


@dataclass(slots=True)
class OffsetRow:
    topic: str
    partition: int
    committed: int
    log_end: int | None  # the high watermark: what consumers can read
    lag: int | None


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
        r = local.get((topic, partition))
        end = r.log.high_watermark if r is not None else None
        lag = None if end is None or co.offset < 0 else max(0, end - co.offset)
        out.append(OffsetRow(topic, partition, co.offset, end, lag))
    return out


def total_lag(rows: list[OffsetRow]) -> int | None:
    lags = [r.lag for r in rows if r.lag is not None]
    return sum(lags) if lags else None


async def group_rows(broker: Any, viewer: Viewer) -> list[GroupRow]:
    groups = broker.groups
    out = []
    all_ok = viewer.cluster()
    for g in sorted(groups.list_groups(), key=lambda g: g.group_id):
        gid = g.group_id
        if not all_ok and not viewer.group(gid):
            continue
        try:
            lag = total_lag(await lag_rows(broker, gid, viewer))
        except Exception:  # the store is unreachable now: no lag shown
            lag = None
        out.append(
            GroupRow(gid, g.state.value, g.protocol_type or "", g.group_type, len(g.members), lag)
        )
    return out


def coordinator(broker: Any, group_id: str) -> int:
    return coordinator_for(group_id, broker.cluster.brokers)


async def group_detail(broker: Any, group_id: str, viewer: Viewer) -> GroupDetail | None:
    """None when this broker does not coordinate the group (or knows nothing of it)."""
    groups = broker.groups
    g = next((x for x in groups.list_groups() if x.group_id == group_id), None)
    if g is None:
        return None
    members: list[MemberRow] = []
    protocol = ""
    if g.group_type == "consumer":
        desc = await groups.describe_consumer_group(group_id) or {"members": []}
        protocol = desc.get("assignor_name") or ""
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
    else:
        desc = groups.describe(group_id) or {"members": [], "protocol_data": ""}
        protocol = desc.get("protocol_data") or ""
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
                    m["member_id"],
                    m["group_instance_id"],
                    m["client_id"],
                    m["client_host"],
                    assigned,
                )
            )
    committed = await lag_rows(broker, group_id)
    shown = [r for r in committed if viewer.topic(r.topic)]
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
        hidden_topics=len({r.topic for r in committed} - {r.topic for r in shown}),
    )
