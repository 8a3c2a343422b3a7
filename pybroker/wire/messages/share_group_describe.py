"""ShareGroupDescribe (key 77): request and response layouts, version 1 (KIP-932).

Kafka's spec: validVersions 1, flexible from 0.  Layout checked against kafka-clients 4.4.0's
generated classes (compat_tests/test_java_schemas.py).
"""

from pybroker.wire.schema import F, api, declare

SHARE_GROUP_DESCRIBE = declare(
    api(
        77,
        "ShareGroupDescribe",
        versions="1",
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
                    F("rack_id", "string", "0+", nullable="0+", default=None),
                    F("member_epoch", "int32", "0+"),
                    F("client_id", "string", "0+"),
                    F("client_host", "string", "0+"),
                    F("subscribed_topic_names", "[]string", "0+"),
                    F(
                        "assignment",
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
                    ),
                ),
                F("authorized_operations", "int32", "0+", default=-2147483648),
            ),
        ],
    )
)
