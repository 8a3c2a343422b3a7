"""Online migration between the classic and the KIP-848 group protocols (Kafka 4.0, with
group.consumer.migration.policy).  Upgrade: the first ConsumerGroupHeartbeat to a non-empty
classic consumer group turns it into a KIP-848 group, its members kept at the generation as
their epoch (Kafka's ConsumerGroup.fromClassicGroup).  Downgrade: when the last member speaking
the consumer protocol leaves, the group becomes classic again and rebalances (Kafka's
ClassicGroup.fromConsumerGroup).  Both refused as Kafka refuses them.  Details:
docs/internals.md ("pybroker/coord/group/migration.py").
"""

from __future__ import annotations

from pybroker.coord.group.classic import Group, GroupConfig, GroupState, Member, Output
from pybroker.coord.group.consumer import ConsumerGroup
from pybroker.coord.group.consumer_member import (
    ClassicMetadata,
    ConsumerGroupConfig,
    ConsumerMember,
    MemberState,
    Partitions,
    TopicMeta,
)
from pybroker.errors import ErrorCode
from pybroker.wire.consumer_protocol import (
    PROTOCOL_TYPE,
    encode_assignment,
    parse_assignment,
    parse_subscription,
)


class MigrationRefused(Exception):
    """The group cannot be converted; the message says why (Kafka's log line)."""


def can_upgrade(g: Group, config: ConsumerGroupConfig) -> str | None:
    """Why a non-empty classic group cannot be upgraded; None when it can."""
    if not config.upgrade_enabled:
        return "the online upgrade is disabled"
    if g.protocol_type != PROTOCOL_TYPE:
        return "the group does not use the consumer embedded protocol"
    if len(g.members) > config.max_size:
        return "the group size exceeds the consumer group maximum size"
    return None


def upgrade(
    g: Group, config: ConsumerGroupConfig, now: int, topics: TopicMeta
) -> tuple[ConsumerGroup, list[Output]]:
    """The KIP-848 group ``g`` becomes, and the answers for its parked requests.  Raises
    MigrationRefused when a member's subscription or assignment cannot be read."""
    cg = ConsumerGroup(g.group_id, config, state_timestamp_ms=now)
    cg.group_epoch = cg.assignment_epoch = g.generation_id
    for m in g.members.values():
        protocol = g.protocol_name or (m.protocols[0][0] if m.protocols else "")
        try:
            sub = parse_subscription(m.metadata(protocol))
            assigned = parse_assignment(m.assignment)
        except ValueError as e:
            raise MigrationRefused(
                f"Cannot upgrade the classic group {g.group_id} to consumer group because the "
                "embedded consumer protocol is malformed."
            ) from e
        partitions: Partitions = {t: set(ps) for t, ps in assigned.items() if t in topics and ps}
        member = ConsumerMember(
            member_id=m.member_id,
            instance_id=m.group_instance_id,
            rack_id=sub.rack_id,
            client_id=m.client_id,
            client_host=m.client_host,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            subscribed_names=list(sub.topics),
            subscribed_regex=None,
            server_assignor=None,
            epoch=g.generation_id,
            previous_epoch=g.generation_id,
            state=MemberState.STABLE,
            assigned=partitions,
            last_heartbeat_ms=now,
            classic=ClassicMetadata(m.session_timeout_ms, list(m.protocols)),
        )
        cg.members[m.member_id] = member
        cg.target[m.member_id] = {t: set(ps) for t, ps in partitions.items()}
    cg.adopt_subscriptions(topics, now)
    outputs = g.unload(now, code=ErrorCode.REBALANCE_IN_PROGRESS)
    return cg, outputs


def can_downgrade(cg: ConsumerGroup, config: ConsumerGroupConfig) -> bool:
    """Only classic members are left (at least one) and the policy allows a downgrade."""
    return config.downgrade_enabled and cg.all_classic


def downgrade(
    cg: ConsumerGroup, config: GroupConfig, now: int, generation_id: int
) -> tuple[Group, list[Output]]:
    """The classic group ``cg`` becomes, in PreparingRebalance at ``generation_id`` (the group
    epoch before the leaving member was removed: Kafka converts instead of removing, so the
    classic members' generation is still the group's), and what it answers.  Raises
    MigrationRefused when the members share no protocol."""
    members = []
    for m in cg.members.values():
        classic = m.classic
        assert classic is not None
        members.append(
            Member(
                member_id=m.member_id,
                group_instance_id=m.instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                session_timeout_ms=classic.session_timeout_ms,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                protocol_type=PROTOCOL_TYPE,
                protocols=list(classic.protocols),
                last_heartbeat_ms=now,
                assignment=encode_assignment(m.assigned),
            )
        )
    common = set.intersection(*({n for n, _ in m.protocols} for m in members))
    if not common:
        raise MigrationRefused(f"the members of group {cg.group_id} share no protocol")
    g, outputs = Group.downgraded(cg.group_id, config, generation_id, members, now)
    assert g.state is GroupState.PREPARING_REBALANCE
    return g, outputs
