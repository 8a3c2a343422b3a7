"""ConsumerGroupDescribe (key 69): request and response layouts, versions 0-1 (KIP-848).

Kafka's spec: validVersions 0-1, flexible from 0; v1 (KIP-1099) adds each member's type.
Layouts checked against the generated classes of kafka-clients 3.9.0 (v0) and 4.1.1 (v1).
"""

from pybroker.wire.schema import F, api, declare


def _assignment(name: str) -> object:
    return F(
        name,
        "Assignment",
        "0+",
        F(
            "topic_partitions",
            "[]TopicPartitions",
            "0+",
            F("topic_id", "uuid", "0+"),
            F("topic_name", "string", "0+"),
            F("partitions", "[]int32", "0+"),
        ),
    )


CONSUMER_GROUP_DESCRIBE = declare(
    api(
        69,
        "ConsumerGroupDescribe",
        versions="0-1",
        flexible="0+",
        request=[
            F("group_ids", "[]string", "0+"),
            F("include_authorized_operations", "bool", "0+"),
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            F(
                "groups",
                "[]DescribedGroup",
                "0+",
                F("error_code", "int16", "0+"),
                F("error_message", "string", "0+", nullable="0+", default=None),
                F("group_id", "string", "0+"),
                F("group_state", "string", "0+"),
                F("group_epoch", "int32", "0+"),
                F("assignment_epoch", "int32", "0+"),
                F("assignor_name", "string", "0+"),
                F(
                    "members",
                    "[]Member",
                    "0+",
                    F("member_id", "string", "0+"),
                    F("instance_id", "string", "0+", nullable="0+", default=None),
                    F("rack_id", "string", "0+", nullable="0+", default=None),
                    F("member_epoch", "int32", "0+"),
                    F("client_id", "string", "0+"),
                    F("client_host", "string", "0+"),
                    F("subscribed_topic_names", "[]string", "0+"),
                    F("subscribed_topic_regex", "string", "0+", nullable="0+", default=None),
                    _assignment("assignment"),  # type: ignore[arg-type]
                    _assignment("target_assignment"),  # type: ignore[arg-type]
                    F("member_type", "int8", "1+", default=-1),
                ),
                F("authorized_operations", "int32", "0+", default=-2147483648),
            ),
        ],
    )
)
