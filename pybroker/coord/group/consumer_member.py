"""A KIP-848 group's vocabulary (Kafka's ConsumerGroupMember, MemberState and friends): group
and member states, the group's config, its members (classic-protocol ones included), a
heartbeat as the state machine sees it, and partition sets by topic name with their wire form
(topic ids).  The state machine itself is consumer.py."""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pybroker.coord.group.assignors import ASSIGNORS
from pybroker.errors import ErrorCode

Partitions = dict[str, set[int]]  # topic name -> partitions
TopicMeta = dict[str, tuple[uuid.UUID, int]]  # topic name -> (topic id, partition count)

LEAVE_EPOCH, LEAVE_STATIC_EPOCH = -1, -2
CONSUMER = "consumer"


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class MemberState(enum.Enum):
    STABLE = "STABLE"
    UNREVOKED_PARTITIONS = "UNREVOKED_PARTITIONS"
    UNRELEASED_PARTITIONS = "UNRELEASED_PARTITIONS"


@dataclass(frozen=True)
class ConsumerGroupConfig:
    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 5000
    assignors: tuple[str, ...] = ASSIGNORS  # the first is the default
    max_size: int = 2**31 - 1
    migration_policy: str = "bidirectional"  # group.consumer.migration.policy

    @property
    def upgrade_enabled(self) -> bool:
        return self.migration_policy in ("upgrade", "bidirectional")

    @property
    def downgrade_enabled(self) -> bool:
        return self.migration_policy in ("downgrade", "bidirectional")


@dataclass
class ClassicMetadata:
    """What a member that speaks the classic protocol (JoinGroup/SyncGroup/Heartbeat) brought
    with its JoinGroup: its session timeout and protocols (name, subscription metadata)."""

    session_timeout_ms: int
    protocols: list[tuple[str, bytes]]

    @property
    def protocol_name(self) -> str:
        return self.protocols[0][0]


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_names: list[str]
    subscribed_regex: str | None
    server_assignor: str | None
    epoch: int = 0
    previous_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Partitions = field(default_factory=dict)
    pending_revocation: Partitions = field(default_factory=dict)
    last_heartbeat_ms: int = 0
    revocation_deadline_ms: int | None = None
    left_static: bool = False  # a static member that left with -2 and may come back
    classic: ClassicMetadata | None = None  # a classic-protocol member (online migration)
    classic_deadline_ms: int | None = None  # a classic member's join or sync timeout

    def subscribed(self, topics: TopicMeta) -> set[str]:
        return resolve_subscription(self.subscribed_names, self.subscribed_regex, topics)


def resolve_subscription(names: Iterable[str], regex: str | None, topics: TopicMeta) -> set[str]:
    """The existing topics a subscription (topic names, a regular expression) covers."""
    out = {t for t in names if t in topics}
    if regex is not None:
        pattern = re.compile(regex)
        out |= {t for t in topics if pattern.fullmatch(t)}
    return out


@dataclass
class HeartbeatRequest:
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    subscribed_names: list[str] | None
    subscribed_regex: str | None
    server_assignor: str | None
    owned: Partitions | None  # None: unchanged since the last heartbeat
    client_id: str = ""
    client_host: str = ""


class ConsumerGroupError(Exception):
    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message or ErrorCode(code).name)
        self.code = code
        self.message = message


# -- partition sets (topic name -> partitions) ---------------------------------------------


def copy_partitions(p: Partitions) -> Partitions:
    return {t: set(ps) for t, ps in p.items() if ps}


def subtract(a: Partitions, b: Partitions) -> Partitions:
    return {t: ps - b.get(t, set()) for t, ps in a.items() if ps - b.get(t, set())}


def intersect(a: Partitions, b: Partitions) -> Partitions:
    return {t: ps & b.get(t, set()) for t, ps in a.items() if ps & b.get(t, set())}


def is_subset(a: Partitions, b: Partitions) -> bool:
    return all(ps <= b.get(t, set()) for t, ps in a.items())


def to_wire(p: Partitions, topics: TopicMeta, with_names: bool = False) -> list[dict]:
    out = []
    for t in sorted(p):
        if not p[t] or t not in topics:
            continue
        entry: dict[str, Any] = {"topic_id": topics[t][0], "partitions": sorted(p[t])}
        if with_names:
            entry["topic_name"] = t
        out.append(entry)
    return out


def owned_from_wire(
    items: list[dict] | None, name_of: Callable[[uuid.UUID], str | None]
) -> Partitions | None:
    """A heartbeat's owned partitions by topic name (``name_of``: topic id -> name or None;
    partitions of unknown topics are dropped); None when the request did not send them."""
    if items is None:
        return None
    out: Partitions = {}
    for tp in items:
        name = name_of(tp["topic_id"])
        if name is not None and tp["partitions"]:
            out.setdefault(name, set()).update(tp["partitions"])
    return out
