"""Structs that several of Kafka's message specs repeat, declared once (the specs share them
too: LeaderIdAndEpoch and NodeEndpoint in Produce, Fetch, ShareFetch and ShareAcknowledge; the
KIP-848 and KIP-932 group messages' Assignment, TopicPartitions and DescribedGroup).  Each
builder returns the Field tree as the spec writes it; the caller gives what differs between
messages (the versions a field exists in, its tag, its defaults).  Declares no API.
"""

from pybroker.wire.schema import F, Field


def error_fields(versions: str = "0+") -> tuple[Field, Field]:
    """ErrorCode and its nullable ErrorMessage, as most flexible responses carry them."""
    return (
        F("error_code", "int16", versions),
        F("error_message", "string", versions, nullable=versions, default=None),
    )


def current_leader(
    versions: str = "0+", *, default: int | None = None, tag: int | None = None
) -> Field:
    """LeaderIdAndEpoch: the partition's leader as the answering broker knows it (KIP-951)."""
    return F(
        "current_leader",
        "LeaderIdAndEpoch",
        versions,
        F("leader_id", "int32", versions, default=default),
        F("leader_epoch", "int32", versions, default=default),
        tag=tag,
    )


def node_endpoints(versions: str = "0+", *, tag: int | None = None) -> Field:
    """NodeEndpoint: the brokers named as current leaders in the response (KIP-951)."""
    return F(
        "node_endpoints",
        "[]NodeEndpoint",
        versions,
        F("node_id", "int32", versions),
        F("host", "string", versions),
        F("port", "int32", versions),
        F("rack", "string", versions, nullable=versions, default=None),
        tag=tag,
    )


def acknowledgement_batches() -> Field:
    """AcknowledgementBatch of ShareFetch and ShareAcknowledge (KIP-932)."""
    return F(
        "acknowledgement_batches",
        "[]AcknowledgementBatch",
        "0+",
        F("first_offset", "int64", "0+"),
        F("last_offset", "int64", "0+"),
        F("acknowledge_types", "[]int8", "0+"),
    )


def topic_partitions(*, topic_names: bool = False, nullable: bool = False) -> Field:
    """TopicPartitions of the KIP-848/KIP-932 group messages: topic id (and, in the describe
    responses, topic name) with partition indexes."""
    return F(
        "topic_partitions",
        "[]TopicPartitions",
        "0+",
        F("topic_id", "uuid", "0+"),
        *([F("topic_name", "string", "0+")] if topic_names else []),
        F("partitions", "[]int32", "0+"),
        **({"nullable": "0+", "default": None} if nullable else {}),
    )


def assignment(
    name: str = "assignment", *, topic_names: bool = False, nullable: bool = False
) -> Field:
    """Assignment of the KIP-848/KIP-932 group messages: its TopicPartitions."""
    return F(
        name,
        "Assignment",
        "0+",
        topic_partitions(topic_names=topic_names),
        **({"nullable": "0+", "default": None} if nullable else {}),
    )


def describe_groups_request() -> list[Field]:
    """ConsumerGroupDescribe's and ShareGroupDescribe's request."""
    return [
        F("group_ids", "[]string", "0+"),
        F("include_authorized_operations", "bool", "0+"),
    ]


def described_groups(*member_fields: Field) -> Field:
    """DescribedGroup of ConsumerGroupDescribe and ShareGroupDescribe; their Member structs
    differ (``member_fields``)."""
    return F(
        "groups",
        "[]DescribedGroup",
        "0+",
        *error_fields(),
        F("group_id", "string", "0+"),
        F("group_state", "string", "0+"),
        F("group_epoch", "int32", "0+"),
        F("assignment_epoch", "int32", "0+"),
        F("assignor_name", "string", "0+"),
        F("members", "[]Member", "0+", *member_fields),
        F("authorized_operations", "int32", "0+", default=-2147483648),
    )


def group_heartbeat_response() -> list[Field]:
    """ConsumerGroupHeartbeat's and ShareGroupHeartbeat's response (KIP-932 took KIP-848's)."""
    return [
        F("throttle_time_ms", "int32", "0+"),
        *error_fields(),
        F("member_id", "string", "0+", nullable="0+", default=None),
        F("member_epoch", "int32", "0+"),
        F("heartbeat_interval_ms", "int32", "0+"),
        assignment(nullable=True),
    ]


def share_session_request() -> list[Field]:
    """The share session's fields that open ShareFetch's and ShareAcknowledge's requests."""
    return [
        F("group_id", "string", "0+", nullable="0+", default=None),
        F("member_id", "string", "0+", nullable="0+"),
        F("share_session_epoch", "int32", "0+"),
    ]
