"""Share groups (KIP-932) for the console: the share groups this broker coordinates and, per
share-partition, its start offset, lag and record counts.

Counts come from where they live: for a partition this broker leads, the live share-partition
(``broker.shares``: Available, Acquired (in flight to a consumer), Acknowledged and Archived
records between the start offset and the end of the in-flight records); elsewhere, the stored
state (coord/group/share_store.py: Acknowledged and Archived past the start offset; what is
acquired right now only the leader knows, shown "-").  Lag is the high watermark minus the start
offset minus the records already acknowledged or archived past it (Kafka's), for the partitions
with a replica here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pybroker.coord.group.share_store import ACKNOWLEDGED, ARCHIVED
from pybroker.coord.metadata.store import StoreError

if TYPE_CHECKING:
    from pybroker.console.auth import Viewer
    from pybroker.coord.group.share import ShareGroup
    from pybroker.services import BrokerServices


@dataclass(slots=True)
class SharePartitionRow:
    topic: str
    partition: int
    start_offset: int | None  # None: not resolved yet (no fetch so far)
    lag: int | None
    in_flight: int | None  # acquired by a consumer now (None: led elsewhere)
    available: int | None
    acknowledged: int
    archived: int
    led_here: bool


@dataclass(slots=True)
class ShareMemberRow:
    member_id: str
    client_id: str
    host: str
    epoch: int
    assignment: list[tuple[str, list[int]]]


@dataclass
class ShareGroupDetail:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    members: list[ShareMemberRow] = field(default_factory=list)
    partitions: list[SharePartitionRow] = field(default_factory=list)

    @property
    def lag(self) -> int | None:
        lags = [p.lag for p in self.partitions if p.lag is not None]
        return sum(lags) if lags else None


def share_groups(broker: BrokerServices) -> list[ShareGroup]:
    coordinator = broker.share_groups  # (None before the broker's start made it)
    if coordinator is None or not broker.config.group_share_enable:
        return []
    return sorted(coordinator.groups.values(), key=lambda g: g.group_id)


async def partitions(
    broker: BrokerServices, group_id: str, viewer: Viewer
) -> list[SharePartitionRow]:
    coordinator = broker.share_groups
    live = {
        (v["topic"], v["partition"]): v for v in broker.shares.views() if v["group"] == group_id
    }
    local = broker.replicas.replicas if broker.replicas is not None else {}
    meta = broker.cluster.topics
    out = []
    try:
        stored = await coordinator.store.partitions(group_id)
    except StoreError:
        stored = []
    by_id = {info.topic_id: name for name, info in meta.items()}
    for tid, p in stored:
        topic = by_id.get(tid)
        if topic is None or not viewer.topic(topic):
            continue
        v = live.get((topic, p))
        if v is not None:
            start, acked, archived = v["start_offset"], v["acknowledged"], v["archived"]
            in_flight, available = v["acquired"], v["available"]
        else:
            try:
                got = await coordinator.store.read(group_id, tid, p)
            except (StoreError, ValueError):
                got = None
            if got is None:
                continue
            st = got[0]
            start = st.start_offset if st.start_offset >= 0 else None
            acked = sum(b - a + 1 for a, b, s, _ in st.batches if s == ACKNOWLEDGED)
            archived = sum(b - a + 1 for a, b, s, _ in st.batches if s == ARCHIVED)
            in_flight = available = None
        r = local.get((topic, p))
        end = r.log.high_watermark if r is not None else None
        lag = None if end is None or start is None else max(end - start - acked - archived, 0)
        out.append(
            SharePartitionRow(
                topic, p, start, lag, in_flight, available, acked, archived, v is not None
            )
        )
    return sorted(out, key=lambda r: (r.topic, r.partition))


async def detail(broker: BrokerServices, group_id: str, viewer: Viewer) -> ShareGroupDetail | None:
    g = next((x for x in share_groups(broker) if x.group_id == group_id), None)
    if g is None:
        return None
    d = ShareGroupDetail(group_id, g.state.value, g.group_epoch, g.assignment_epoch)
    for m in sorted(g.members.values(), key=lambda m: m.member_id):
        d.members.append(
            ShareMemberRow(
                m.member_id,
                m.client_id,
                m.client_host,
                m.member_epoch,
                [(t, sorted(ps)) for t, ps in sorted(m.assigned.items()) if viewer.topic(t)],
            )
        )
    d.partitions = await partitions(broker, group_id, viewer)
    return d
