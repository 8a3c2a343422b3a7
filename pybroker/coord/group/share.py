"""Share groups (KIP-932): the pure state machine behind ShareGroupHeartbeat.

As Kafka 4.2+'s GroupMetadataManager.shareGroupHeartbeat, without awaiting:

- A member joins with member epoch 0 and the member id it chose (a UUID, KIP-1082) and its
  subscribed topic names; it leaves with -1.  Any other epoch must be the member's current or
  previous one (FENCED_MEMBER_EPOCH otherwise); an unknown member is UNKNOWN_MEMBER_ID.
- Any change of membership or subscriptions, or of the partitions the group may be assigned,
  bumps the group epoch; the SimpleAssignor (``simple_assign``) then computes the target
  assignment for the new epoch.  Share-group members own nothing exclusively, so there is no
  revocation: a member moves to the assignment epoch and its target at its next heartbeat.
- The partitions the group may be assigned are those whose share-partition state exists
  (``assignable``, given by the shell: coord/group/share_coordinator.py initializes the state of
  every partition of a subscribed topic before it calls the machine, as Kafka's coordinator
  initializes it through the share coordinator).
- A member sending no heartbeat within share.session.timeout.ms is removed (``tick``).

Group states: Empty (no members), Stable, Dead.

Records.  ``meta_record()`` and ``member_record(m)`` are the group's durable state (Kafka's
ShareGroupMetadata / ShareGroupMemberMetadata / target and current assignment records);
``ShareGroup.from_records`` rebuilds it, timers restarted at load time.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pybroker.errors import ErrorCode

LEAVE_EPOCH = -1
RECORD_VERSION = 1
SIMPLE = "simple"  # Kafka's SimpleAssignor, the only share-group assignor
PROTOCOL_TYPE = "share"

Partitions = dict[str, set[int]]  # topic name -> partitions
Assignment = dict[str, Partitions]  # member id -> its partitions


class ShareGroupState(enum.Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


class ShareGroupError(Exception):
    """A heartbeat Kafka refuses: the error code and Kafka's message."""

    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message or ErrorCode(code).name)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ShareGroupConfig:
    """The group's effective settings: group.share.* broker configs, overridden per group by
    the share.* group configs (the shell resolves them)."""

    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 5000
    max_size: int = 200


@dataclass
class ShareMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed: tuple[str, ...] = ()  # sorted topic names
    assigned: Partitions = field(default_factory=dict)
    deadline_ms: int = 0  # session timeout

    def record(self) -> dict[str, Any]:
        return {
            "member_id": self.member_id,
            "member_epoch": self.member_epoch,
            "previous_member_epoch": self.previous_member_epoch,
            "rack_id": self.rack_id,
            "client_id": self.client_id,
            "client_host": self.client_host,
            "subscribed": list(self.subscribed),
            "assigned": {t: sorted(ps) for t, ps in sorted(self.assigned.items())},
        }


@dataclass(frozen=True)
class HeartbeatRequest:
    member_id: str
    member_epoch: int
    rack_id: str | None
    subscribed: list[str] | None  # None: unchanged since the last heartbeat
    client_id: str
    client_host: str


@dataclass
class HeartbeatResult:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Partitions | None  # None: not sent (unchanged)


def _copy(p: Mapping[str, Iterable[int]]) -> Partitions:
    return {t: set(ps) for t, ps in p.items() if ps}


class ShareGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ShareMember] = {}
        self.target: Assignment = {}
        # what the assignment was computed from: {topic: sorted assignable partitions}
        self.assignable_seen: dict[str, tuple[int, ...]] = {}
        self.dead = False

    # -- reading ----------------------------------------------------------------------------
    @property
    def state(self) -> ShareGroupState:
        if self.dead:
            return ShareGroupState.DEAD
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    @property
    def is_empty(self) -> bool:
        return not self.members

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed}

    def next_deadline(self) -> int | None:
        return min((m.deadline_ms for m in self.members.values()), default=None)

    # -- the protocol -----------------------------------------------------------------------
    def heartbeat(
        self,
        now: int,
        req: HeartbeatRequest,
        assignable: Mapping[str, Iterable[int]],
        config: ShareGroupConfig,
    ) -> HeartbeatResult:
        """Apply one heartbeat (member epoch >= 0; a leave goes to ``leave``).  ``assignable``:
        topic name -> the partitions whose share-partition state exists, for the subscribed
        topics that exist.  Raises ShareGroupError."""
        member = self.members.get(req.member_id)
        if member is None:
            if req.member_epoch != 0:
                raise ShareGroupError(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"Member {req.member_id} is not a member of group {self.group_id}.",
                )
            if len(self.members) >= config.max_size:
                raise ShareGroupError(
                    ErrorCode.GROUP_MAX_SIZE_REACHED,
                    "The share group has reached its maximum capacity of "
                    f"{config.max_size} members.",
                )
            member = ShareMember(req.member_id)
        elif req.member_epoch != 0:
            _check_epoch(member, req.member_epoch)
        before = _copy(member.assigned)
        bump = req.member_id not in self.members
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        member.client_id, member.client_host = req.client_id, req.client_host
        if req.subscribed is not None:
            subscribed = tuple(sorted(set(req.subscribed)))
            if subscribed != member.subscribed:
                member.subscribed = subscribed
                bump = True
        self.members[member.member_id] = member
        seen = self._assignable_view(assignable)
        if seen != self.assignable_seen:
            bump = True
        if bump:
            self.group_epoch += 1
        if self.assignment_epoch < self.group_epoch:
            self._assign(seen)
        self._reconcile(member, changed_subscription=bump)
        member.deadline_ms = now + config.session_timeout_ms
        full = req.member_epoch == 0 or req.subscribed is not None
        changed = member.assigned != before
        return HeartbeatResult(
            member.member_id,
            member.member_epoch,
            config.heartbeat_interval_ms,
            _copy(member.assigned) if full or changed else None,
        )

    def leave(self, member_id: str) -> None:
        """A member's heartbeat with epoch -1: removed, the group epoch bumped.  Raises
        ShareGroupError (UNKNOWN_MEMBER_ID)."""
        if member_id not in self.members:
            raise ShareGroupError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {member_id} is not a member of group {self.group_id}.",
            )
        self._remove(member_id)

    def tick(self, now: int) -> list[str]:
        """Remove the members whose session expired; their ids."""
        gone = [mid for mid, m in self.members.items() if m.deadline_ms <= now]
        for mid in gone:
            self._remove(mid)
        return gone

    def refresh(self, assignable: Mapping[str, Iterable[int]]) -> bool:
        """The assignable partitions changed (a topic grew, was deleted or initialized) without
        a heartbeat: bump the epoch and assign again (members pick it up at their next
        heartbeat).  True if anything changed."""
        if not self.members:
            return False
        seen = self._assignable_view(assignable)
        if seen == self.assignable_seen:
            return False
        self.group_epoch += 1
        self._assign(seen)
        return True

    def mark_dead(self) -> None:
        self.dead = True
        self.members.clear()

    # -- internals --------------------------------------------------------------------------
    def _assignable_view(self, assignable: Mapping[str, Iterable[int]]) -> dict[str, tuple]:
        topics = self.subscribed_topics()
        return {t: tuple(sorted(ps)) for t, ps in assignable.items() if t in topics and ps}

    def _remove(self, member_id: str) -> None:
        del self.members[member_id]
        self.target.pop(member_id, None)
        self.group_epoch += 1
        if not self.members:
            # Kafka writes the target assignment metadata at the new epoch for an empty group
            self.assignment_epoch = self.group_epoch
            self.target = {}
            self.assignable_seen = {}
        elif self.assignment_epoch < self.group_epoch:
            self._assign(self._assignable_view(self.assignable_seen))

    def _assign(self, seen: dict[str, tuple]) -> None:
        subscriptions = {mid: set(m.subscribed) for mid, m in self.members.items()}
        self.target = simple_assign(subscriptions, seen, self.target)
        self.assignable_seen = seen
        self.assignment_epoch = self.group_epoch

    def _reconcile(self, member: ShareMember, changed_subscription: bool) -> None:
        """Kafka's ShareGroupAssignmentBuilder: no revocation, straight to the target (limited
        to the topics the member subscribes to)."""
        if member.member_epoch == self.assignment_epoch and not changed_subscription:
            return
        target = self.target.get(member.member_id, {})
        assigned = {t: set(ps) for t, ps in target.items() if t in member.subscribed and ps}
        if member.member_epoch != self.assignment_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = self.assignment_epoch
        member.assigned = assigned

    # -- records ----------------------------------------------------------------------------
    def meta_record(self) -> dict[str, Any]:
        return {
            "version": RECORD_VERSION,
            "group_epoch": self.group_epoch,
            "assignment_epoch": self.assignment_epoch,
            "assignable": {t: list(ps) for t, ps in sorted(self.assignable_seen.items())},
        }

    def member_record(self, m: ShareMember) -> dict[str, Any]:
        rec = m.record()
        rec["target"] = {
            t: sorted(ps) for t, ps in sorted(self.target.get(m.member_id, {}).items())
        }
        return rec

    @classmethod
    def from_records(
        cls, group_id: str, meta: dict, members: list[dict], now: int, config: ShareGroupConfig
    ) -> ShareGroup:
        """Rebuild a group from its records (ValueError / KeyError / TypeError when they
        cannot be read); every member's session starts again at ``now``."""
        if meta.get("version") != RECORD_VERSION:
            raise ValueError(f"unknown share group record version {meta.get('version')!r}")
        g = cls(group_id)
        g.group_epoch = int(meta["group_epoch"])
        g.assignment_epoch = int(meta["assignment_epoch"])
        g.assignable_seen = {
            str(t): tuple(int(p) for p in ps) for t, ps in meta["assignable"].items()
        }
        for rec in members:
            m = ShareMember(
                member_id=str(rec["member_id"]),
                member_epoch=int(rec["member_epoch"]),
                previous_member_epoch=int(rec["previous_member_epoch"]),
                rack_id=rec.get("rack_id"),
                client_id=str(rec.get("client_id", "")),
                client_host=str(rec.get("client_host", "")),
                subscribed=tuple(str(t) for t in rec["subscribed"]),
                assigned={str(t): {int(p) for p in ps} for t, ps in rec["assigned"].items()},
                deadline_ms=now + config.session_timeout_ms,
            )
            g.members[m.member_id] = m
            g.target[m.member_id] = {
                str(t): {int(p) for p in ps} for t, ps in rec.get("target", {}).items()
            }
        return g


def _check_epoch(member: ShareMember, epoch: int) -> None:
    """Kafka's throwIfShareGroupMemberEpochIsInvalid."""
    if epoch > member.member_epoch:
        raise ShareGroupError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The share group member has a greater member epoch ({epoch}) than the one known "
            f"by the group coordinator ({member.member_epoch}). The member must abandon all "
            "its partitions and rejoin.",
        )
    if epoch < member.member_epoch and epoch != member.previous_member_epoch:
        raise ShareGroupError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The share group member has a smaller member epoch ({epoch}) than the one known "
            f"by the group coordinator ({member.member_epoch}), and it does not match the "
            f"previous member epoch ({member.previous_member_epoch}). The member must abandon "
            "all its partitions and rejoin.",
        )


# -- the SimpleAssignor ----------------------------------------------------------------------


def simple_assign(
    subscriptions: Mapping[str, set[str]],
    partitions: Mapping[str, Iterable[int]],
    current: Assignment,
) -> Assignment:
    """Kafka's SimpleAssignor (KIP-932): per topic, each partition is shared by
    ``ceil(subscribers / partitions)`` members (so with more members than partitions every
    member may get every partition), each member gets its fair number of partitions, and a
    member keeps what it had where that stays within both bounds (sticky).  ``partitions``:
    topic -> its assignable partitions; ``current``: the previous target assignment."""
    out: Assignment = {mid: {} for mid in subscriptions}
    members = sorted(subscriptions)
    for topic in sorted(partitions):
        parts = sorted(set(partitions[topic]))
        subs = [mid for mid in members if topic in subscriptions[mid]]
        if not parts or not subs:
            continue
        for mid, ps in _assign_topic(topic, parts, subs, current).items():
            if ps:
                out[mid][topic] = ps
    return out


def _assign_topic(
    topic: str, parts: list[int], subs: list[str], current: Assignment
) -> dict[str, set[int]]:
    sharing = (len(subs) + len(parts) - 1) // len(parts)
    precise = sharing * len(parts) / len(subs)
    # Kafka's desired counts: ceil(precise * (i + 1)) - ceil(precise * i)
    desired = {mid: _ceil(precise * (i + 1)) - _ceil(precise * i) for i, mid in enumerate(subs)}
    valid = set(parts)
    mine: dict[str, set[int]] = {
        mid: {p for p in current.get(mid, {}).get(topic, ()) if p in valid} for mid in subs
    }
    # members over their count give up partitions (highest first, deterministic)
    for mid in subs:
        while len(mine[mid]) > desired[mid]:
            mine[mid].discard(max(mine[mid]))
    holders: dict[int, list[str]] = {p: [] for p in parts}
    for mid in subs:
        for p in sorted(mine[mid]):
            holders[p].append(mid)
    # partitions shared by more members than the sharing factor lose the extra holders
    for p in parts:
        while len(holders[p]) > sharing:
            mid = holders[p].pop()
            mine[mid].discard(p)
    # the rest: round-robin over the members still below their count
    unfilled = [mid for mid in subs if len(mine[mid]) < desired[mid]]
    i = 0
    for p in parts:
        need = sharing - len(holders[p])
        tried = 0
        while need > 0 and unfilled and tried < len(unfilled):
            mid = unfilled[i % len(unfilled)]
            if p in mine[mid]:
                i += 1
                tried += 1
                continue
            mine[mid].add(p)
            holders[p].append(mid)
            need -= 1
            tried = 0
            if len(mine[mid]) >= desired[mid]:
                unfilled.remove(mid)
            else:
                i += 1
    return mine


def _ceil(x: float) -> int:
    n = int(x)
    return n + 1 if x > n else n
