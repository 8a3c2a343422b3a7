"""The classic consumer-group protocol as a pure state machine (no asyncio, no I/O), following
Kafka's GroupCoordinator.  One :class:`Group` per group id; every input is a method call
carrying ``now`` and returns the ``(reply token, response)`` pairs that became ready;
``tick(now)`` applies expired deadlines and ``next_deadline()`` says when to call it next.

States and their legal predecessors (as Kafka's ClassicGroupState):

    Empty               <- PreparingRebalance
    PreparingRebalance  <- Empty, Stable, CompletingRebalance
    CompletingRebalance <- PreparingRebalance
    Stable              <- CompletingRebalance
    Dead                <- Empty, PreparingRebalance, CompletingRebalance, Stable

Member ids, generations, protocols, timeouts and static membership: docs/internals.md
("pybroker/coord/group/classic.py").
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pybroker.coord.group.classic_tally import MemberTally
from pybroker.coord.group.deadlines import DeadlineHeap
from pybroker.coord.group.responses import join_error, sync_reply
from pybroker.errors import ErrorCode

Reply = Hashable
Output = tuple[Reply, dict]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# read once for every commit's checks (3.11: an Enum class attribute is a slow lookup)
_EMPTY, _COMPLETING, _DEAD = GroupState.EMPTY, GroupState.COMPLETING_REBALANCE, GroupState.DEAD


LEGAL_PREDECESSORS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(
        {
            GroupState.EMPTY,
            GroupState.PREPARING_REBALANCE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.STABLE,
        }
    ),
}


@dataclass(frozen=True)
class GroupConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    initial_rebalance_delay_ms: int = 3000


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    last_heartbeat_ms: int
    assignment: bytes = b""
    awaiting_join: Reply | None = None
    awaiting_sync: Reply | None = None

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""


@dataclass
class JoinRequest:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool


@dataclass
class Group:
    group_type: ClassVar[str] = "classic"  # (ListGroups v5; KIP-848 groups are "consumer")
    group_id: str
    config: GroupConfig
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending_members: dict[str, int] = field(default_factory=dict)  # member id -> deadline
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    state_timestamp_ms: int = 0
    rebalance_deadline_ms: int | None = None
    # The initial rebalance delay (Kafka's InitialDelayedJoin): remaining budget and whether
    # a member joined during the current delay.
    initial_delay_remaining_ms: int = 0
    in_initial_delay: bool = False
    joined_during_delay: bool = False
    # members' and pending members' deadlines; ``_track`` pushes after each change
    _deadlines: DeadlineHeap = field(default_factory=DeadlineHeap, repr=False, compare=False)
    # protocol support and parked joins over the members; ``_put``/``_pop`` keep it
    _tally: MemberTally = field(default_factory=MemberTally, repr=False, compare=False)

    # -- state ------------------------------------------------------------------------------
    def _transition(self, to: GroupState, now: int) -> None:
        if self.state not in LEGAL_PREDECESSORS[to]:
            raise AssertionError(f"group {self.group_id}: illegal {self.state.value} -> {to.value}")
        self.state = to
        self.state_timestamp_ms = now

    def is_empty(self) -> bool:
        return not self.members and not self.pending_members

    def _fenced(self, member_id: str, instance_id: str | None) -> bool:
        if instance_id is None:
            return False
        current = self.static_members.get(instance_id)
        return current is not None and current != member_id

    def _member_error(self, member_id: str, instance_id: str | None) -> int | None:
        if self._fenced(member_id, instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    def _supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        return self._tally.supported_by_all({n for n, _ in protocols}, len(self.members))

    def _put(self, m: Member) -> None:
        self.members[m.member_id] = m
        self._tally.add(m)

    def _pop(self, member_id: str) -> Member:
        m = self.members.pop(member_id)
        self._tally.remove(m)
        return m

    def _select_protocol(self) -> str:
        candidates = self._tally.candidates(len(self.members))
        votes: dict[str, int] = {}
        for m in self.members.values():
            for name, _ in m.protocols:  # each member votes for its most preferred candidate
                if name in candidates:
                    votes[name] = votes.get(name, 0) + 1
                    break
        # Most votes; ties go to the leader's (then the first member's) preference order.
        order = [n for n, _ in self.members[self.leader_id].protocols] if self.leader_id else []
        return max(votes, key=lambda n: (votes[n], -order.index(n) if n in order else -999))

    @classmethod
    def downgraded(
        cls, group_id: str, config: GroupConfig, generation_id: int, members: list[Member], now: int
    ) -> tuple[Group, list[Output]]:
        """The classic group a KIP-848 group of classic members becomes (Kafka's
        ClassicGroup.fromConsumerGroup): Stable at ``generation_id`` with the members' current
        assignments, the first member as leader, then a rebalance so that they rejoin."""
        g = cls(group_id, config, state=GroupState.STABLE, generation_id=generation_id)
        g.protocol_type = "consumer"
        g.state_timestamp_ms = now
        for m in members:
            m.last_heartbeat_ms = now
            g._put(m)
            g._track(m)
            if m.group_instance_id is not None:
                g.static_members[m.group_instance_id] = m.member_id
        g.leader_id = members[0].member_id
        g.protocol_name = g._select_protocol()
        return g, g._prepare_rebalance(now)

    # -- JoinGroup --------------------------------------------------------------------------
    def join(self, reply: Reply, now: int, req: JoinRequest) -> list[Output]:
        if self.state == GroupState.DEAD:
            return [(reply, join_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, req.member_id))]
        if not (
            self.config.min_session_timeout_ms
            <= req.session_timeout_ms
            <= self.config.max_session_timeout_ms
        ):
            return [(reply, join_error(ErrorCode.INVALID_SESSION_TIMEOUT, req.member_id))]
        if not self._supports(req.protocol_type, req.protocols):
            return [(reply, join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id))]
        if req.member_id == "":
            return self._join_unknown(reply, now, req)
        return self._join_known(reply, now, req)

    def _join_unknown(self, reply: Reply, now: int, req: JoinRequest) -> list[Output]:
        # Kafka's clientId-UUID; a client id is cut to 1000 characters so that the member id
        # always fits a response's int16-length string (Kafka fails to serialize it)
        new_id = f"{req.client_id[:1000]}-{uuid.uuid4()}"
        iid = req.group_instance_id
        if iid is not None and iid in self.static_members:
            return self._replace_static(reply, now, req, new_id)
        if iid is None and req.require_known_member_id:
            self.pending_members[new_id] = now + req.session_timeout_ms
            self._push(now + req.session_timeout_ms, new_id)
            return [(reply, join_error(ErrorCode.MEMBER_ID_REQUIRED, new_id))]
        return self._add_member(reply, now, req, new_id)

    def _join_known(self, reply: Reply, now: int, req: JoinRequest) -> list[Output]:
        mid = req.member_id
        if self._fenced(mid, req.group_instance_id):
            return [(reply, join_error(ErrorCode.FENCED_INSTANCE_ID, mid))]
        if mid in self.pending_members:
            del self.pending_members[mid]
            return self._add_member(reply, now, req, mid)
        m = self.members.get(mid)
        if m is None:
            return [(reply, join_error(ErrorCode.UNKNOWN_MEMBER_ID, mid))]
        m.last_heartbeat_ms = now
        self._track(m)
        same = m.protocols == req.protocols
        if self.state == GroupState.PREPARING_REBALANCE:
            return self._update_and_rebalance(reply, now, m, req)
        if self.state == GroupState.COMPLETING_REBALANCE:
            if same:
                return [(reply, self._join_response(m))]
            return self._update_and_rebalance(reply, now, m, req)
        if self.state == GroupState.STABLE:
            if mid == self.leader_id or not same:
                return self._update_and_rebalance(reply, now, m, req)
            return [(reply, self._join_response(m))]
        return [(reply, join_error(ErrorCode.UNKNOWN_MEMBER_ID, mid))]

    def _add_member(self, reply: Reply, now: int, req: JoinRequest, member_id: str) -> list[Output]:
        m = Member(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            session_timeout_ms=req.session_timeout_ms,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=list(req.protocols),
            last_heartbeat_ms=now,
            awaiting_join=reply,
        )
        if not self.members:
            self.protocol_type = req.protocol_type
        if self.leader_id is None:
            self.leader_id = member_id
        self._put(m)
        if req.group_instance_id is not None:
            self.static_members[req.group_instance_id] = member_id
        if self.in_initial_delay:
            self.joined_during_delay = True
        return self._rebalance_or_complete(now)

    def _update_and_rebalance(
        self, reply: Reply, now: int, m: Member, req: JoinRequest
    ) -> list[Output]:
        out: list[Output] = []
        if m.awaiting_join is not None and m.awaiting_join != reply:
            # A second join from the same member supersedes the first (Kafka answers the
            # older one with the same result later; we release it now as a retriable error).
            out.append((m.awaiting_join, join_error(ErrorCode.REBALANCE_IN_PROGRESS, m.member_id)))
        self._tally.set_protocols(m, req.protocols)
        m.session_timeout_ms = req.session_timeout_ms
        m.rebalance_timeout_ms = req.rebalance_timeout_ms
        self._tally.set_awaiting_join(m, reply)
        return out + self._rebalance_or_complete(now)

    def _replace_static(
        self, reply: Reply, now: int, req: JoinRequest, new_id: str
    ) -> list[Output]:
        iid = req.group_instance_id
        old_id = self.static_members[iid]
        m = self._pop(old_id)
        out: list[Output] = []
        if m.awaiting_join is not None:
            out.append((m.awaiting_join, join_error(ErrorCode.FENCED_INSTANCE_ID, old_id)))
            m.awaiting_join = None  # (not in members: untallied)
        if m.awaiting_sync is not None:
            out.append((m.awaiting_sync, sync_reply(ErrorCode.FENCED_INSTANCE_ID)))
            m.awaiting_sync = None
        m.member_id = new_id
        m.last_heartbeat_ms = now
        self._put(m)
        self.static_members[iid] = new_id
        current_leader = self.leader_id
        if current_leader == old_id:
            self.leader_id = new_id
        if self.state == GroupState.STABLE:
            # Kafka's updateStaticMemberAndRebalance: the member's metadata is updated, and a
            # Stable group rebalances only if that changes the protocol it would select.
            old_protocols = m.protocols
            self._tally.set_protocols(m, req.protocols)
            if self._select_protocol() == self.protocol_name:
                m.session_timeout_ms = req.session_timeout_ms
                m.rebalance_timeout_ms = req.rebalance_timeout_ms
                m.client_id, m.client_host = req.client_id, req.client_host
                self._track(m)
                # The old leader id is returned (no member list), so a restarted leader does
                # not run an assignment a Stable group would never hand out.
                resp = self._join_response(m)
                resp["leader"], resp["members"] = current_leader, []
                return out + [(reply, resp)]
            self._tally.set_protocols(m, old_protocols)
        return out + self._update_and_rebalance(reply, now, m, req)

    def _rebalance_or_complete(self, now: int) -> list[Output]:
        if self.state in (GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            return self._prepare_rebalance(now)
        return self._maybe_complete_join(now)

    def _prepare_rebalance(self, now: int) -> list[Output]:
        out: list[Output] = []
        if self.state == GroupState.COMPLETING_REBALANCE:
            for m in self.members.values():
                m.assignment = b""
                if m.awaiting_sync is not None:
                    out.append((m.awaiting_sync, sync_reply(ErrorCode.REBALANCE_IN_PROGRESS)))
                    m.awaiting_sync = None
        rebalance_timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        if self.state == GroupState.EMPTY:
            # Kafka's InitialDelayedJoin: a new group's first rebalance completes only on its
            # timer, also with a delay of 0, so that joins arriving together share generation 1.
            delay = self.config.initial_rebalance_delay_ms
            self.in_initial_delay = True
            self.joined_during_delay = False
            self.initial_delay_remaining_ms = max(rebalance_timeout - delay, 0)
            self.rebalance_deadline_ms = now + delay
        else:
            self.in_initial_delay = False
            self.rebalance_deadline_ms = now + rebalance_timeout
        self._transition(GroupState.PREPARING_REBALANCE, now)
        return out + self._maybe_complete_join(now)

    def _all_joined(self) -> bool:
        return not self.pending_members and self._tally.awaiting_join == len(self.members)

    def _maybe_complete_join(self, now: int) -> list[Output]:
        if self.state != GroupState.PREPARING_REBALANCE or self.in_initial_delay:
            return []
        if self._all_joined():
            return self._complete_join(now)
        return []

    def _complete_join(self, now: int) -> list[Output]:
        out: list[Output] = []
        for mid in [mid for mid, m in self.members.items() if m.awaiting_join is None]:
            out += self._remove_member(mid)
        self.pending_members.clear()
        self.rebalance_deadline_ms = None
        self.in_initial_delay = False
        self.generation_id += 1
        if not self.members:
            # Kafka keeps the protocol type of a group that became empty (ListGroups shows it)
            self.protocol_name = None
            self.leader_id = None
            self._transition(GroupState.EMPTY, now)
            return out
        if self.leader_id not in self.members:
            self.leader_id = next(iter(self.members))
        self.protocol_name = self._select_protocol()
        self._transition(GroupState.COMPLETING_REBALANCE, now)
        for m in self.members.values():
            out.append((m.awaiting_join, self._join_response(m)))
            self._tally.set_awaiting_join(m, None)
            m.last_heartbeat_ms = now
            self._track(m)
        return out

    def _join_response(self, m: Member) -> dict:
        is_leader = m.member_id == self.leader_id
        return {
            "error_code": ErrorCode.NONE,
            "generation_id": self.generation_id,
            "protocol_type": self.protocol_type,
            "protocol_name": self.protocol_name,
            "leader": self.leader_id,
            "skip_assignment": False,
            "member_id": m.member_id,
            "members": [
                {
                    "member_id": o.member_id,
                    "group_instance_id": o.group_instance_id,
                    "metadata": o.metadata(self.protocol_name),
                }
                for o in self.members.values()
            ]
            if is_leader
            else [],
        }

    def _remove_member(self, member_id: str) -> list[Output]:
        m = self._pop(member_id)
        out: list[Output] = []
        if m.awaiting_join is not None:
            out.append((m.awaiting_join, join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id)))
        if m.awaiting_sync is not None:
            out.append((m.awaiting_sync, sync_reply(ErrorCode.UNKNOWN_MEMBER_ID)))
        if (
            m.group_instance_id is not None
            and self.static_members.get(m.group_instance_id) == member_id
        ):
            del self.static_members[m.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return out

    # -- SyncGroup --------------------------------------------------------------------------
    def sync(
        self,
        reply: Reply,
        now: int,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> list[Output]:
        if self.state == GroupState.DEAD:
            return [(reply, sync_reply(ErrorCode.COORDINATOR_NOT_AVAILABLE))]
        err = self._member_error(member_id, instance_id)
        if err is not None:
            return [(reply, sync_reply(err))]
        if generation_id != self.generation_id:
            return [(reply, sync_reply(ErrorCode.ILLEGAL_GENERATION))]
        if (protocol_type is not None and protocol_type != self.protocol_type) or (
            protocol_name is not None and protocol_name != self.protocol_name
        ):
            return [(reply, sync_reply(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))]
        m = self.members[member_id]
        m.last_heartbeat_ms = now
        self._track(m)
        if self.state == GroupState.PREPARING_REBALANCE:
            return [(reply, sync_reply(ErrorCode.REBALANCE_IN_PROGRESS))]
        if self.state == GroupState.STABLE:
            return [(reply, sync_reply(ErrorCode.NONE, m.assignment, self))]
        # CompletingRebalance
        out: list[Output] = []
        if m.awaiting_sync is not None and m.awaiting_sync != reply:
            out.append((m.awaiting_sync, sync_reply(ErrorCode.REBALANCE_IN_PROGRESS)))
        m.awaiting_sync = reply
        if member_id == self.leader_id:
            for mid, other in self.members.items():
                other.assignment = bytes(assignments.get(mid, b""))
            self._transition(GroupState.STABLE, now)
            for other in self.members.values():
                if other.awaiting_sync is not None:
                    out.append(
                        (other.awaiting_sync, sync_reply(ErrorCode.NONE, other.assignment, self))
                    )
                    other.awaiting_sync = None
        return out

    # -- Heartbeat ------------------------------------------------------------------------------
    def heartbeat(
        self, now: int, member_id: str, instance_id: str | None, generation_id: int
    ) -> int:
        if self.state == GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        err = self._member_error(member_id, instance_id)
        if err is not None:
            return err
        if generation_id != self.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if self.state == GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        m = self.members[member_id]
        m.last_heartbeat_ms = now
        self._track(m)
        if self.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # -- LeaveGroup -------------------------------------------------------------------------
    def leave(
        self, now: int, leaving: list[tuple[str, str | None]]
    ) -> tuple[list[int], list[Output]]:
        """Per leaving (member id, instance id): its error code; plus the outputs."""
        errors: list[int] = []
        out: list[Output] = []
        removed = False
        for member_id, instance_id in leaving:
            if instance_id is not None:
                current = self.static_members.get(instance_id)
                if current is None:
                    errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
                if member_id and member_id != current:
                    errors.append(ErrorCode.FENCED_INSTANCE_ID)
                    continue
                member_id = current
            if member_id in self.pending_members:
                del self.pending_members[member_id]
                errors.append(ErrorCode.NONE)
                removed = True
                continue
            if member_id not in self.members:
                errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            out += self._remove_member(member_id)
            errors.append(ErrorCode.NONE)
            removed = True
        if removed:
            out += self._after_removal(now)
        return errors, out

    def _after_removal(self, now: int) -> list[Output]:
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            return self._prepare_rebalance(now)
        if self.state == GroupState.PREPARING_REBALANCE:
            return self._maybe_complete_join(now)
        return []

    # -- time ---------------------------------------------------------------------------------
    def _member_deadline(self, m: Member) -> int | None:
        if m.awaiting_join is not None:
            return None  # parked in a join: the rebalance timeout governs
        return m.last_heartbeat_ms + m.session_timeout_ms

    def _track(self, m: Member) -> None:
        """``m``'s deadline may have changed: the one writer of ``_deadlines``."""
        if (d := self._member_deadline(m)) is not None:
            self._push(d, m.member_id)

    def _push(self, deadline: int, member_id: str) -> None:
        live = len(self.members) + len(self.pending_members)
        self._deadlines.push(deadline, member_id, live, self._live_deadlines)

    def _live_deadlines(self) -> list[tuple[int, str]]:
        members = ((self._member_deadline(m), mid) for mid, m in self.members.items())
        return [(d, mid) for mid, d in self.pending_members.items()] + [
            (d, mid) for d, mid in members if d is not None
        ]

    def _live(self, deadline: int, member_id: str) -> bool:
        m = self.members.get(member_id)
        in_members = m is not None and self._member_deadline(m) == deadline
        return in_members or self.pending_members.get(member_id) == deadline

    def next_deadline(self) -> int | None:
        """The earliest of the members' sessions, pending members' and the rebalance timer:
        the heap's first live entry (stale ones are dropped on the way)."""
        first = self._deadlines.first(self._live)
        r = self.rebalance_deadline_ms
        return r if r is not None and (first is None or r < first) else first

    def tick(self, now: int) -> list[Output]:
        out: list[Output] = []
        first = self.next_deadline()
        expired: list[str] = []
        if first is not None and first <= now:  # else no member is due: no scan
            for mid, deadline in list(self.pending_members.items()):
                if deadline <= now:
                    del self.pending_members[mid]
            expired = [
                mid
                for mid, m in self.members.items()
                if (d := self._member_deadline(m)) is not None and d <= now
            ]
        for mid in expired:
            out += self._remove_member(mid)
        if expired:
            out += self._after_removal(now)
        if (
            self.state == GroupState.PREPARING_REBALANCE
            and self.rebalance_deadline_ms is not None
            and self.rebalance_deadline_ms <= now
        ):
            if self.in_initial_delay:
                delay = self.config.initial_rebalance_delay_ms
                if self.joined_during_delay and self.initial_delay_remaining_ms > 0:
                    step = min(delay, self.initial_delay_remaining_ms)
                    self.initial_delay_remaining_ms -= step
                    self.joined_during_delay = False
                    self.rebalance_deadline_ms = now + step
                    return out
                self.in_initial_delay = False
                out += self._maybe_complete_join(now)
                if self.state == GroupState.PREPARING_REBALANCE:
                    # Someone has not rejoined yet: wait for them up to the rebalance timeout.
                    timeout = max(
                        (m.rebalance_timeout_ms for m in self.members.values()), default=0
                    )
                    self.rebalance_deadline_ms = now + timeout
                return out
            out += self._complete_join(now)
        elif not expired and self.state == GroupState.PREPARING_REBALANCE:
            out += self._maybe_complete_join(now)
        return out

    # -- offsets and admin ---------------------------------------------------------------------
    def validate_commit(
        self, member_id: str, instance_id: str | None, generation_id: int, now: int | None = None
    ) -> int:
        """Kafka's checks before an OffsetCommit (generation -1 from a non-member is a
        simple consumer storing offsets, allowed while the group has no members).  A valid
        commit from a member renews its session, as in Kafka."""
        if (state := self.state) is _DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self._fenced(member_id, instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if generation_id < 0 and state is _EMPTY:
            return ErrorCode.NONE
        if state is _COMPLETING:
            return ErrorCode.REBALANCE_IN_PROGRESS
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != self.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if now is not None:
            m = self.members[member_id]
            m.last_heartbeat_ms = now
            self._track(m)
        return ErrorCode.NONE

    def validate_txn_commit(
        self, member_id: str, instance_id: str | None, generation_id: int
    ) -> int:
        """Kafka's checks before a TxnOffsetCommit (KIP-447): member and generation are
        checked only when the producer gives them (v3+ from a group-aware producer)."""
        if self.state == GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self._fenced(member_id, instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id and member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id >= 0 and generation_id != self.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def mark_dead(self, now: int) -> None:
        self._transition(GroupState.DEAD, now)

    def unload(self, now: int, code: int = ErrorCode.NOT_COORDINATOR) -> list[Output]:
        """Coordination of the group moved to another broker (Kafka's onGroupUnloaded): the
        group becomes Dead here, and members parked in JoinGroup or SyncGroup are answered
        NOT_COORDINATOR so they look the coordinator up again.  (An online upgrade to a
        KIP-848 group answers them REBALANCE_IN_PROGRESS instead: they rejoin.)"""
        outputs: list[Output] = []
        for m in self.members.values():
            if m.awaiting_join is not None:
                outputs.append((m.awaiting_join, join_error(code, m.member_id)))
                self._tally.set_awaiting_join(m, None)
                self._track(m)
            if m.awaiting_sync is not None:
                outputs.append((m.awaiting_sync, sync_reply(code)))
                m.awaiting_sync = None
        if self.state != GroupState.DEAD:
            self._transition(GroupState.DEAD, now)
        return outputs

    def describe(self) -> dict[str, Any]:
        show_meta = self.state == GroupState.STABLE  # as Kafka's GroupSummary
        return {
            "error_code": ErrorCode.NONE,
            "group_id": self.group_id,
            "group_state": self.state.value,
            "protocol_type": self.protocol_type or "",
            "protocol_data": (self.protocol_name or "") if show_meta else "",
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.metadata(self.protocol_name) if show_meta else b"",
                    "member_assignment": m.assignment if show_meta else b"",
                }
                for m in self.members.values()
            ],
        }
