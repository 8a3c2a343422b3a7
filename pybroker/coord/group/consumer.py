"""KIP-848 consumer groups: the pure state machine behind ConsumerGroupHeartbeat, as Kafka's
GroupMetadataManager.consumerGroupHeartbeat (3.9/4.x), without awaiting.  A change of
membership, subscriptions or subscribed partition counts bumps the group epoch and the
server-side assignor computes the target assignment; each member reconciles towards it,
revoking before it is given partitions others still own.  Member epochs fence zombies
(FENCED_MEMBER_EPOCH, STALE_MEMBER_EPOCH).  ``meta_record()`` / ``member_record()`` are the
durable state a new coordinator rebuilds the group from; timers are not state.  Members,
states, classic members and records: docs/internals.md ("pybroker/coord/group/consumer.py").
"""

from __future__ import annotations

import base64
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pybroker.coord.group.assignors import RANGE, Assignment, assign
from pybroker.coord.group.consumer_classic import ClassicMembers
from pybroker.coord.group.consumer_index import ConsumerGroupIndex
from pybroker.coord.group.consumer_member import (
    CONSUMER,
    LEAVE_EPOCH,
    LEAVE_STATIC_EPOCH,
    ClassicMetadata,
    ConsumerGroupConfig,
    ConsumerGroupError,
    ConsumerGroupState,
    ConsumerMember,
    HeartbeatRequest,
    MemberState,
    Partitions,
    TopicMeta,
    copy_partitions,
    intersect,
    is_subset,
    subtract,
    to_wire,
)
from pybroker.coord.group.consumer_target import HomogeneousTarget, most_requested
from pybroker.errors import ErrorCode

RECORD_VERSION = 1


@dataclass
class ConsumerGroup(ClassicMembers):
    group_id: str
    config: ConsumerGroupConfig
    state_timestamp_ms: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    group_epoch: int = 0
    assignment_epoch: int = 0
    target: Assignment = field(default_factory=dict)  # member id -> topic -> partitions
    # members whose target changed since take_target_changed, and a replaced static member's
    # old id (their records need writing or deleting)
    target_changed: set[str] = field(default_factory=set)
    dead: bool = False
    _subscribed_partitions: dict[str, int] = field(default_factory=dict)
    _assignor: str | None = None
    _state: ConsumerGroupState = ConsumerGroupState.EMPTY
    # derived from the members, updated with each member change (consumer_index.py)
    _index: ConsumerGroupIndex = field(
        default_factory=ConsumerGroupIndex, compare=False, repr=False
    )
    # the target kept across epochs in the uniform assignor's one-topic case
    # (consumer_target.py), told of each member change as the index is
    _targets: HomogeneousTarget = field(
        default_factory=HomogeneousTarget, compare=False, repr=False
    )

    protocol_type: ClassVar[str] = CONSUMER
    group_type: ClassVar[str] = CONSUMER

    # -- what the coordinator and handlers read ------------------------------------------
    @property
    def state(self) -> ConsumerGroupState:
        return ConsumerGroupState.DEAD if self.dead else self._state

    @property
    def is_empty(self) -> bool:
        return not self.dead and not self.members

    @property
    def protocol_name(self) -> str:
        return self.assignor_name

    @property
    def assignor_name(self) -> str:
        return self._assignor or self.config.assignors[0]

    def _sync(self, m: ConsumerMember) -> None:
        """The index after a change of member ``m`` (which is in the group)."""
        self._index.update(m, self._session_timeout(m))
        self._targets.touch(m.member_id)

    def _unindex(self, member_id: str) -> None:
        """The index after member ``member_id`` left (or was renamed)."""
        self._index.remove(member_id)
        self._targets.touch(member_id)

    def _reindex(self) -> None:
        """The index from scratch, after members were put in place wholesale."""
        self._index.clear()
        self._targets.clear()
        for m in self.members.values():
            self._sync(m)

    def _update_state(self, now: int) -> None:
        if not self.members:
            new = ConsumerGroupState.EMPTY
        elif self.assignment_epoch < self.group_epoch:
            new = ConsumerGroupState.ASSIGNING
        elif self._index.stable_at[self.assignment_epoch] != len(self.members):
            # some member is not STABLE at the assignment epoch
            new = ConsumerGroupState.RECONCILING
        else:
            new = ConsumerGroupState.STABLE
        if new is not self._state:
            self._state = new
            self.state_timestamp_ms = now

    # -- the heartbeat ---------------------------------------------------------------------
    def heartbeat(self, now: int, req: HeartbeatRequest, topics: TopicMeta) -> dict:
        """One ConsumerGroupHeartbeat; the response body (raises ConsumerGroupError)."""
        if req.member_epoch in (LEAVE_EPOCH, LEAVE_STATIC_EPOCH):
            return self._leave(now, req, topics)
        if req.server_assignor is not None and req.server_assignor not in self.config.assignors:
            raise ConsumerGroupError(
                ErrorCode.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(self.config.assignors)}.",
            )
        member = self._member_for(now, req)
        full = req.member_epoch == 0 or (
            req.rebalance_timeout_ms != -1
            and req.subscribed_names is not None
            and req.owned is not None
        )
        changed = False
        if req.instance_id is not None:
            member.instance_id = req.instance_id
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if req.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.subscribed_names is not None and sorted(req.subscribed_names) != sorted(
            member.subscribed_names
        ):
            member.subscribed_names = list(req.subscribed_names)
            changed = True
        if req.subscribed_regex is not None and req.subscribed_regex != (
            member.subscribed_regex or ""
        ):
            member.subscribed_regex = req.subscribed_regex or None
            changed = True
        if req.server_assignor is not None and req.server_assignor != member.server_assignor:
            member.server_assignor = req.server_assignor
            changed = True
        member.last_heartbeat_ms = now
        if req.member_epoch == 0 and member.member_id not in self.members:
            self.members[member.member_id] = member
            changed = True
        self._sync(member)
        # the subscribed topics' partition counts are part of what the assignment depends on
        subscribed = self._subscribed_partition_counts(topics)
        if changed or subscribed != self._subscribed_partitions:
            self._subscribed_partitions = subscribed
            self.group_epoch += 1
        if self.assignment_epoch < self.group_epoch:
            self._compute_target(topics)
        before = copy_partitions(member.assigned)
        self._reconcile(now, member, req.owned)
        self._sync(member)
        self._update_state(now)
        resp: dict[str, Any] = {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "member_id": member.member_id,
            "member_epoch": member.epoch,
            "heartbeat_interval_ms": self.config.heartbeat_interval_ms,
            "assignment": None,
        }
        # Kafka: the assignment goes with a full request or a change of the assigned
        # partitions; an epoch bump alone is told by member_epoch
        if full or before != member.assigned:
            resp["assignment"] = {"topic_partitions": to_wire(member.assigned, topics)}
        return resp

    def _member_for(self, now: int, req: HeartbeatRequest) -> ConsumerMember:
        if req.member_epoch == 0:
            if req.instance_id is not None:
                old = self._by_instance(req.instance_id)
                if old is not None:
                    if not old.left_static and old.member_id != req.member_id:
                        raise ConsumerGroupError(
                            ErrorCode.UNRELEASED_INSTANCE_ID,
                            f"Static member {old.member_id} with instance id "
                            f"{req.instance_id} is not released yet.",
                        )
                    # the new process takes the static member's place and assignment
                    del self.members[old.member_id]
                    self._unindex(old.member_id)
                    self.target_changed.add(old.member_id)  # its record is deleted
                    target = self.target.pop(old.member_id, {})
                    old.member_id = req.member_id or str(uuid.uuid4())
                    self.target[old.member_id] = target
                    old.left_static = False
                    old.client_id, old.client_host = req.client_id, req.client_host
                    self.members[old.member_id] = old
                    return old
            existing = self.members.get(req.member_id) if req.member_id else None
            if existing is not None:
                # a rejoin with epoch 0 of a known member: it starts again from nothing
                existing.assigned, existing.pending_revocation = {}, {}
                existing.epoch, existing.previous_epoch = 0, -1
                existing.state = MemberState.STABLE
                return existing
            if len(self.members) >= self.config.max_size:
                raise ConsumerGroupError(
                    ErrorCode.GROUP_MAX_SIZE_REACHED,
                    f"The consumer group has reached its maximum capacity of "
                    f"{self.config.max_size} members.",
                )
            return ConsumerMember(
                member_id=req.member_id or str(uuid.uuid4()),
                instance_id=req.instance_id,
                rack_id=req.rack_id,
                client_id=req.client_id,
                client_host=req.client_host,
                rebalance_timeout_ms=req.rebalance_timeout_ms,
                subscribed_names=[],
                subscribed_regex=None,
                server_assignor=None,
                last_heartbeat_ms=now,
            )
        member = self.members.get(req.member_id)
        if member is None:
            raise ConsumerGroupError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {req.member_id} is not a member of group {self.group_id}.",
            )
        if req.member_epoch != member.epoch:
            owned_ok = req.owned is not None and is_subset(req.owned, member.assigned)
            if not (req.member_epoch == member.previous_epoch and owned_ok):
                raise ConsumerGroupError(
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    f"The consumer group member has a greater epoch ({req.member_epoch}) than"
                    f" the one known by the group coordinator ({member.epoch}). The member "
                    "must abandon all its partitions and rejoin."
                    if req.member_epoch > member.epoch
                    else f"The consumer group member has a smaller epoch ({req.member_epoch})"
                    f" than the one known by the group coordinator ({member.epoch}). The "
                    "member must abandon all its partitions and rejoin.",
                )
        return member

    def _by_instance(self, instance_id: str) -> ConsumerMember | None:
        for m in self.members.values():
            if m.instance_id == instance_id:
                return m
        return None

    def _leave(self, now: int, req: HeartbeatRequest, topics: TopicMeta) -> dict:
        member = self.members.get(req.member_id)
        if member is None and req.instance_id is not None:
            member = self._by_instance(req.instance_id)
        if member is None:
            raise ConsumerGroupError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {req.member_id} is not a member of group {self.group_id}.",
            )
        if req.member_epoch == LEAVE_STATIC_EPOCH and member.instance_id is not None:
            # kept, with its assignment, until its session times out or it is replaced
            member.left_static = True
            member.last_heartbeat_ms = now
            self._sync(member)
        else:
            self._remove(now, member.member_id, topics)
        return {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "member_id": member.member_id,
            "member_epoch": req.member_epoch,
            "heartbeat_interval_ms": 0,
            "assignment": None,
        }

    def _remove(self, now: int, member_id: str, topics: TopicMeta | None) -> None:
        if self.members.pop(member_id, None) is None:
            return
        self._unindex(member_id)
        self.target.pop(member_id, None)
        self.group_epoch += 1
        if topics is not None:
            self._subscribed_partitions = self._subscribed_partition_counts(topics)
            self._compute_target(topics)
        self._update_state(now)

    def _subscribed_partition_counts(self, topics: TopicMeta) -> dict[str, int]:
        return {t: topics[t][1] for t in sorted(self._index.subscribed(topics))}

    def _compute_target(self, topics: TopicMeta) -> None:
        self.assignment_epoch = self.group_epoch
        # the uniform assignor's one-topic case from the members changed since the last
        # computation (consumer_target.py): a join wave was quadratic (W24, docs/scale.md)
        done = self._targets.compute(self.members, self.target, topics, self.config.assignors[0])
        if done is not None:
            self._assignor, changed = done
            self.target_changed.update(changed)
            return
        chosen = Counter(m.server_assignor for m in self.members.values() if m.server_assignor)
        # Kafka: the most requested server assignor among the members, else the default
        self._assignor = most_requested(chosen)
        # members with the same subscription share one resolved set (the assignors only read
        # them); the partition counts of the subscribed topics only (the assignors ignore the
        # rest): per member, a tuple and a lookup, not a set built from the names or the regex
        subs: dict[str, set[str]] = {}
        resolved: dict[tuple, set[str]] = {}
        for mid, m in self.members.items():
            key = (tuple(m.subscribed_names), m.subscribed_regex)
            names = resolved.get(key)
            if names is None:
                names = resolved[key] = m.subscribed(topics)
            subs[mid] = names
        counts = {t: topics[t][1] for names in resolved.values() for t in names}
        old = self.target
        self.target = assign(self.assignor_name, subs, counts, old)
        self.target_changed.update(
            mid for mid in self.target.keys() | old.keys() if self.target.get(mid) != old.get(mid)
        )
        names = next(iter(resolved.values()), None)
        if (
            self.assignor_name != RANGE
            and names is not None
            and len(names) == 1
            and all(r == names for r in resolved.values())
        ):
            (t,) = names
            self._targets.build(self.members, self.target, t, counts[t])

    def take_target_changed(self) -> set[str]:
        """The members whose target assignment changed since the last call, and the old id of
        a static member a new process replaced: with the heartbeat's own member (a leave's
        too), the only member records a heartbeat can change or delete.  (Removals by the
        timer or by classic requests are written with a full comparison.)"""
        out, self.target_changed = self.target_changed, set()
        return out

    # -- reconciliation (Kafka's CurrentAssignmentBuilder) -----------------------------------
    def _owned_by_others(self, member_id: str, among: Partitions) -> Partitions:
        """The partitions of ``among`` another member still owns (assigned or revoking)."""
        return self._index.owned_by_others(member_id, among)

    def _reconcile(self, now: int, m: ConsumerMember, owned: Partitions | None) -> None:
        target = self.target.get(m.member_id, {})
        if m.state is MemberState.UNREVOKED_PARTITIONS:
            # still waiting for the member to give up pending_revocation?
            if owned is None or any(
                owned.get(t, set()) & ps for t, ps in m.pending_revocation.items()
            ):
                return
            m.pending_revocation = {}
            m.revocation_deadline_ms = None
            m.previous_epoch, m.epoch = m.epoch, self.assignment_epoch
        if (
            m.epoch == self.assignment_epoch
            and m.state is MemberState.STABLE
            and m.assigned == {t: ps for t, ps in target.items() if ps}
        ):
            return
        keep = intersect(m.assigned, target)
        revoke = subtract(m.assigned, target)
        # a member whose request shows it no longer owns them has revoked them already
        if revoke and (owned is None or intersect(owned, revoke)):
            m.assigned = keep
            m.pending_revocation = revoke
            m.state = MemberState.UNREVOKED_PARTITIONS
            m.revocation_deadline_ms = now + m.rebalance_timeout_ms
            return
        # nothing to give up: at the target epoch, with what no one else still owns
        wanted = subtract(target, keep)
        free = subtract(wanted, self._owned_by_others(m.member_id, wanted))
        new_assigned = copy_partitions(keep)
        for t, ps in free.items():
            new_assigned.setdefault(t, set()).update(ps)
        if m.epoch != self.assignment_epoch:
            m.previous_epoch, m.epoch = m.epoch, self.assignment_epoch
        m.assigned = new_assigned
        unreleased = subtract(target, new_assigned)
        m.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE

    # -- timers ----------------------------------------------------------------------------
    def _session_timeout(self, m: ConsumerMember) -> int:
        return m.classic.session_timeout_ms if m.classic else self.config.session_timeout_ms

    def next_deadline(self) -> int | None:
        """The earliest member session, revocation or classic deadline (from the index)."""
        return self._index.next_deadline()

    def tick(self, now: int, topics: TopicMeta | None = None) -> list:
        for mid, m in list(self.members.items()):
            session_over = m.last_heartbeat_ms + self._session_timeout(m) <= now
            other_over = any(
                d is not None and d <= now
                for d in (m.revocation_deadline_ms, m.classic_deadline_ms)
            )
            if session_over or other_over:
                self._remove(now, mid, topics)
        return []

    # -- classic members (Kafka 4.0's online migration) ------------------------------------
    def adopt_subscriptions(self, topics: TopicMeta, now: int) -> None:
        """After members were put in place from another group's state (an online upgrade):
        what the current target assignment was computed from is their subscriptions now."""
        self._reindex()
        self._subscribed_partitions = self._subscribed_partition_counts(topics)
        self._update_state(now)

    # -- offsets ---------------------------------------------------------------------------
    def validate_offset_commit(
        self, member_id: str, member_epoch: int, api_version: int, transactional: bool = False
    ) -> int:
        """Kafka's ConsumerGroup.validateOffsetCommit."""
        if self.dead:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if member_epoch < 0 and not self.members:
            return ErrorCode.NONE  # an admin or a consumer without group management
        m = self.members.get(member_id)
        if m is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if m.classic is not None:
            # a classic member commits with its generation id, which is its member epoch
            return ErrorCode.NONE if member_epoch == m.epoch else ErrorCode.ILLEGAL_GENERATION
        if not transactional and api_version < 9:
            return ErrorCode.UNSUPPORTED_VERSION
        return self._epoch_check(member_epoch, m.epoch)

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> int:
        """Kafka's ConsumerGroup.validateOffsetFetch (OffsetFetch v9+ with a member)."""
        if member_epoch < 0 and not member_id:
            return ErrorCode.NONE
        m = self.members.get(member_id or "")
        if m is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != m.epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    @staticmethod
    def _epoch_check(received: int, expected: int) -> int:
        if received > expected:
            return ErrorCode.FENCED_MEMBER_EPOCH
        if received < expected:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    # -- coordinator plumbing shared with classic groups -----------------------------------
    def validate_commit(
        self, member_id: str, instance_id: str | None, generation_id: int, now: int | None = None
    ) -> int:
        return self.validate_offset_commit(member_id, generation_id, 9)

    def member_type(self, member_id: str) -> int:
        """KIP-1099's member_type in ConsumerGroupDescribe v1: 0 classic, 1 consumer."""
        m = self.members.get(member_id)
        return 0 if m is not None and m.classic is not None else 1

    def validate_txn_commit(
        self, member_id: str, instance_id: str | None, generation_id: int
    ) -> int:
        if self.dead:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if member_id and member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_id and generation_id >= 0:
            m = self.members[member_id]
            if m.classic is not None:
                return ErrorCode.NONE if generation_id == m.epoch else ErrorCode.ILLEGAL_GENERATION
            return self._epoch_check(generation_id, m.epoch)
        return ErrorCode.NONE

    def mark_dead(self, now: int) -> None:
        self.dead = True
        self.state_timestamp_ms = now

    def unload(self, now: int) -> list:
        self.mark_dead(now)
        return []

    def subscribed_topics(self, topics: TopicMeta) -> set[str]:
        return self._index.subscribed(topics)

    # -- records ---------------------------------------------------------------------------
    def meta_record(self) -> dict:
        """The group-level record: epochs, the chosen assignor and what the assignment of the
        assignment epoch was computed from."""
        return {
            "version": RECORD_VERSION,
            "group_epoch": self.group_epoch,
            "assignment_epoch": self.assignment_epoch,
            "assignor": self._assignor,
            "subscribed_partitions": dict(self._subscribed_partitions),
        }

    def member_record(self, m: ConsumerMember) -> dict:
        """One member's record: its metadata, epochs, current and target assignment."""
        return {
            "version": RECORD_VERSION,
            "member_id": m.member_id,
            "instance_id": m.instance_id,
            "rack_id": m.rack_id,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "rebalance_timeout_ms": m.rebalance_timeout_ms,
            "subscribed_names": list(m.subscribed_names),
            "subscribed_regex": m.subscribed_regex,
            "server_assignor": m.server_assignor,
            "epoch": m.epoch,
            "previous_epoch": m.previous_epoch,
            "state": m.state.value,
            "assigned": _sorted_lists(m.assigned),
            "pending_revocation": _sorted_lists(m.pending_revocation),
            "target": _sorted_lists(self.target.get(m.member_id, {})),
            "left_static": m.left_static,
            "classic": None
            if m.classic is None
            else {
                "session_timeout_ms": m.classic.session_timeout_ms,
                "protocols": [[n, base64.b64encode(md).decode()] for n, md in m.classic.protocols],
            },
        }

    @classmethod
    def from_records(
        cls, group_id: str, config: ConsumerGroupConfig, meta: dict, members: list[dict], now: int
    ) -> ConsumerGroup:
        """The group as its records describe it, loaded at ``now`` (every member's session,
        and a pending revocation's deadline, start again then).  Raises ValueError (KeyError,
        TypeError included) on a record it cannot read."""
        g = cls(group_id, config, state_timestamp_ms=now)
        g.group_epoch = int(meta["group_epoch"])
        g.assignment_epoch = int(meta["assignment_epoch"])
        g._assignor = meta.get("assignor")
        g._subscribed_partitions = {
            str(t): int(n) for t, n in meta["subscribed_partitions"].items()
        }
        for r in members:
            m = ConsumerMember(
                member_id=str(r["member_id"]),
                instance_id=r["instance_id"],
                rack_id=r["rack_id"],
                client_id=str(r["client_id"]),
                client_host=str(r["client_host"]),
                rebalance_timeout_ms=int(r["rebalance_timeout_ms"]),
                subscribed_names=[str(t) for t in r["subscribed_names"]],
                subscribed_regex=r["subscribed_regex"],
                server_assignor=r["server_assignor"],
                epoch=int(r["epoch"]),
                previous_epoch=int(r["previous_epoch"]),
                state=MemberState(r["state"]),
                assigned=_sets(r["assigned"]),
                pending_revocation=_sets(r["pending_revocation"]),
                last_heartbeat_ms=now,
                left_static=bool(r["left_static"]),
            )
            classic = r.get("classic")
            if classic is not None:
                m.classic = ClassicMetadata(
                    int(classic["session_timeout_ms"]),
                    [(str(n), base64.b64decode(md)) for n, md in classic["protocols"]],
                )
            if m.state is MemberState.UNREVOKED_PARTITIONS:
                m.revocation_deadline_ms = now + m.rebalance_timeout_ms
            g.members[m.member_id] = m
            g.target[m.member_id] = _sets(r["target"])
        g._reindex()
        g._update_state(now)
        return g

    # -- describing ------------------------------------------------------------------------
    def describe_consumer(self, topics: TopicMeta) -> dict:
        """A ConsumerGroupDescribe group entry."""
        return {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "group_id": self.group_id,
            "group_state": self.state.value,
            "group_epoch": self.group_epoch,
            "assignment_epoch": self.assignment_epoch,
            "assignor_name": self.assignor_name,
            "members": [
                {
                    "member_id": m.member_id,
                    "instance_id": m.instance_id,
                    "rack_id": m.rack_id,
                    "member_epoch": m.epoch,
                    "member_type": self.member_type(m.member_id),
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "subscribed_topic_names": list(m.subscribed_names),
                    "subscribed_topic_regex": m.subscribed_regex,
                    "assignment": {"topic_partitions": to_wire(m.assigned, topics, True)},
                    "target_assignment": {
                        "topic_partitions": to_wire(self.target.get(m.member_id, {}), topics, True)
                    },
                }
                for m in self.members.values()
            ],
        }


def _sorted_lists(p: Partitions) -> dict[str, list[int]]:
    return {t: sorted(ps) for t, ps in sorted(p.items()) if ps}


def _sets(d: dict) -> Partitions:
    return {str(t): {int(x) for x in ps} for t, ps in d.items() if ps}
