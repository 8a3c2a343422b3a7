"""Classic-protocol members of a KIP-848 group (Kafka 4.0's online migration: Kafka's
GroupMetadataManager.classicGroupJoinToConsumerGroup and friends).

A member with ``classic`` set speaks JoinGroup/SyncGroup/Heartbeat/LeaveGroup: ``classic_join``
updates it from its subscription and reconciles it at once (its subscription's owned partitions
are what it owns), ``classic_sync`` hands it its current assignment, ``classic_heartbeat`` asks
it to rejoin (REBALANCE_IN_PROGRESS) while it lags the group epoch, must revoke, or may collect
released partitions; its session timeout is the one of its JoinGroup, and one rebalance timeout
bounds the time it takes to rejoin and to sync.  A group of classic members only becomes a
classic group again through migration.py.

:class:`ClassicMembers` is a part of consumer.py's ConsumerGroup (its base class): these
methods run the group's own reconciliation (``_reconcile``, ``_compute_target``) on its state.
"""

from __future__ import annotations

import uuid

from pybroker.coord.group.classic import JoinRequest
from pybroker.coord.group.consumer_member import (
    CONSUMER,
    ClassicMetadata,
    ConsumerGroupError,
    ConsumerMember,
    MemberState,
    TopicMeta,
    subtract,
)
from pybroker.coord.group.responses import join_error
from pybroker.errors import ErrorCode
from pybroker.wire.consumer_protocol import encode_assignment, parse_subscription


class ClassicMembers:
    """The classic-protocol entry points of a ConsumerGroup: they use its members, target,
    epochs and config, and its ``_by_instance``, ``_owned_by_others``, ``_remove``,
    ``_subscribed_partition_counts``, ``_compute_target``, ``_reconcile`` and
    ``_update_state``, and keep its ``_index`` (and incremental target) in step with ``_sync``
    after changing a member and ``_unindex`` when one leaves or is renamed."""

    @property
    def all_classic(self) -> bool:
        """Every member speaks the classic protocol (and there is one): a downgrade candidate."""
        return bool(self.members) and self._index.classic_members == len(self.members)

    def _common_classic_protocols(self, but: str | None = None) -> set[str] | None:
        common: set[str] | None = None
        for m in self.members.values():
            if m.classic is None or m.member_id == but:
                continue
            names = {n for n, _ in m.classic.protocols}
            common = names if common is None else common & names
        return common

    def _classic_member(self, member_id: str, instance_id: str | None) -> ConsumerMember:
        if instance_id is None:
            m = self.members.get(member_id)
            if m is None:
                raise ConsumerGroupError(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"Member {member_id} is not a member of group {self.group_id}.",
                )
        else:
            found = self._by_instance(instance_id)
            if found is None:
                raise ConsumerGroupError(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"Member with instance id {instance_id} is not a member of group "
                    f"{self.group_id}.",
                )
            if found.member_id != member_id:
                raise ConsumerGroupError(
                    ErrorCode.FENCED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {instance_id} was fenced by "
                    f"member {found.member_id}.",
                )
            m = found
        if m.classic is None:
            raise ConsumerGroupError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {m.member_id} does not use the classic protocol.",
            )
        return m

    def _waiting_on_unreleased(self, m: ConsumerMember) -> bool:
        if m.state is not MemberState.UNRELEASED_PARTITIONS:
            return False
        pending = subtract(self.target.get(m.member_id, {}), m.assigned)
        return bool(self._owned_by_others(m.member_id, pending))

    def classic_join(self, now: int, req: JoinRequest, topics: TopicMeta) -> dict:
        """A classic JoinGroup in this group (Kafka's classicGroupJoinToConsumerGroup): the
        member is created or updated from its subscription, reconciled at once with what its
        subscription says it owns, and answered without waiting for anyone (generation id =
        its member epoch; no leader: it syncs with no assignments and gets its own)."""
        unknown = not req.member_id
        member_id = req.member_id or str(uuid.uuid4())
        existing = self.members.get(member_id)
        static = self._by_instance(req.group_instance_id) if req.group_instance_id else None
        if len(self.members) >= self.config.max_size and existing is None and static is None:
            raise ConsumerGroupError(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of "
                f"{self.config.max_size} members.",
            )
        if existing is not None and existing.classic is None:
            raise ConsumerGroupError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {member_id} does not use the classic protocol.",
            )
        common = self._common_classic_protocols(but=member_id)
        names = {n for n, _ in req.protocols}
        if (
            req.protocol_type != CONSUMER
            or not names
            or (common is not None and not common & names)
        ):
            raise ConsumerGroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if unknown and req.require_known_member_id and req.group_instance_id is None:
            return {**join_error(ErrorCode.MEMBER_ID_REQUIRED), "member_id": member_id}
        try:
            sub = parse_subscription(req.protocols[0][1])
        except ValueError as e:
            raise ConsumerGroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, str(e)) from e
        changed = False
        if static is not None and static.member_id != member_id:
            if not unknown:
                raise ConsumerGroupError(
                    ErrorCode.FENCED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {req.group_instance_id} was "
                    f"fenced by member {static.member_id}.",
                )
            # a restarted static member takes its place and assignment under a new id
            del self.members[static.member_id]
            self._unindex(static.member_id)
            self.target[member_id] = self.target.pop(static.member_id, {})
            static.member_id, static.left_static = member_id, False
            self.members[member_id] = static
            member = static
        elif existing is not None or static is not None:
            member = existing or static  # type: ignore[assignment]
        else:
            member = ConsumerMember(
                member_id=member_id,
                instance_id=req.group_instance_id,
                rack_id=None,
                client_id=req.client_id,
                client_host=req.client_host,
                rebalance_timeout_ms=req.rebalance_timeout_ms,
                subscribed_names=[],
                subscribed_regex=None,
                server_assignor=None,
            )
            self.members[member_id] = member
            changed = True
        if sub.rack_id is not None:
            member.rack_id = sub.rack_id
        member.instance_id = req.group_instance_id
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.client_id, member.client_host = req.client_id, req.client_host
        member.server_assignor = None
        member.classic = ClassicMetadata(req.session_timeout_ms, list(req.protocols))
        if sorted(sub.topics) != sorted(member.subscribed_names):
            member.subscribed_names = list(sub.topics)
            changed = True
        self._sync(member)
        subscribed = self._subscribed_partition_counts(topics)
        if changed or subscribed != self._subscribed_partitions:
            self._subscribed_partitions = subscribed
            self.group_epoch += 1
        if self.assignment_epoch < self.group_epoch:
            self._compute_target(topics)
        owned = {t: set(ps) for t, ps in sub.owned_partitions.items() if t in topics and ps}
        self._reconcile(now, member, owned)
        member.last_heartbeat_ms = now
        member.classic_deadline_ms = now + member.rebalance_timeout_ms  # until its SyncGroup
        self._sync(member)
        self._update_state(now)
        return {
            **join_error(ErrorCode.NONE),
            "generation_id": member.epoch,
            "protocol_type": CONSUMER,
            "protocol_name": member.classic.protocol_name,
            "member_id": member.member_id,
        }

    def classic_sync(
        self,
        now: int,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> dict:
        """A classic SyncGroup: the member's current assignment in the consumer protocol's
        encoding (Kafka's classicGroupSyncToConsumerGroup).  Raises ConsumerGroupError."""
        m = self._classic_member(member_id, instance_id)
        assert m.classic is not None
        if generation_id != m.epoch:
            raise ConsumerGroupError(ErrorCode.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != CONSUMER) or (
            protocol_name is not None and protocol_name != m.classic.protocol_name
        ):
            raise ConsumerGroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if self.group_epoch > m.epoch and m.state is not MemberState.UNREVOKED_PARTITIONS:
            raise ConsumerGroupError(ErrorCode.REBALANCE_IN_PROGRESS)
        m.classic_deadline_ms = None
        m.last_heartbeat_ms = now
        self._sync(m)
        try:
            version = max(0, min(3, int.from_bytes(m.classic.protocols[0][1][:2], "big")))
        except (IndexError, ValueError):
            version = 0
        return {
            "error_code": ErrorCode.NONE,
            "protocol_type": protocol_type,
            "protocol_name": protocol_name,
            "assignment": encode_assignment(m.assigned, version),
        }

    def classic_heartbeat(
        self, now: int, member_id: str, instance_id: str | None, generation_id: int
    ) -> int:
        """A classic Heartbeat (Kafka's classicGroupHeartbeatToConsumerGroup): the member
        rejoins (REBALANCE_IN_PROGRESS) while its epoch lags the group's, while it has
        partitions to revoke, or once partitions it waits for were released."""
        try:
            m = self._classic_member(member_id, instance_id)
        except ConsumerGroupError as e:
            return e.code
        if generation_id != m.epoch:
            return ErrorCode.ILLEGAL_GENERATION
        m.last_heartbeat_ms = now
        if (
            m.epoch < self.group_epoch
            or m.state is MemberState.UNREVOKED_PARTITIONS
            or (m.state is MemberState.UNRELEASED_PARTITIONS and not self._waiting_on_unreleased(m))
        ):
            if m.classic_deadline_ms is None:
                m.classic_deadline_ms = now + m.rebalance_timeout_ms  # until it rejoins
            self._sync(m)
            return ErrorCode.REBALANCE_IN_PROGRESS
        self._sync(m)
        return ErrorCode.NONE

    def classic_leave(
        self, now: int, leaving: list[tuple[str, str | None]], topics: TopicMeta
    ) -> list[int]:
        """A classic LeaveGroup (members by id, or by instance id as the admin client removes
        static members): an error code per member."""
        out = []
        for member_id, instance_id in leaving:
            try:
                if instance_id is not None and not member_id:
                    m = self._by_instance(instance_id)
                    if m is None:
                        raise ConsumerGroupError(ErrorCode.UNKNOWN_MEMBER_ID)
                else:
                    m = self._classic_member(member_id, instance_id)
            except ConsumerGroupError as e:
                out.append(e.code)
                continue
            self._remove(now, m.member_id, topics)
            out.append(ErrorCode.NONE)
        return out
