"""DescribeShareGroupOffsets (key 90): request and response layouts, versions 0-1 (KIP-932).

Kafka's spec: validVersions 0-1, flexible from 0; v1 adds each partition's lag.  Layout
checked against kafka-clients 4.4.0's generated classes (compat_tests/test_java_schemas.py).
"""

from pybroker.wire.messages.common_structs import error_fields
from pybroker.wire.schema import F, api, declare

DESCRIBE_SHARE_GROUP_OFFSETS = declare(
    api(
        90,
        "DescribeShareGroupOffsets",
        versions="0-1",
        flexible="0+",
        request=[
            F(
                "groups",
                "[]DescribeShareGroupOffsetsRequestGroup",
                "0+",
                F("group_id", "string", "0+"),
                F(
                    "topics",
                    "[]DescribeShareGroupOffsetsRequestTopic",
                    "0+",
                    F("topic_name", "string", "0+"),
                    F("partitions", "[]int32", "0+"),
                    nullable="0+",
                    default=None,
                ),
            ),
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            F(
                "groups",
                "[]DescribeShareGroupOffsetsResponseGroup",
                "0+",
                F("group_id", "string", "0+"),
                F(
                    "topics",
                    "[]DescribeShareGroupOffsetsResponseTopic",
                    "0+",
                    F("topic_name", "string", "0+"),
                    F("topic_id", "uuid", "0+"),
                    F(
                        "partitions",
                        "[]DescribeShareGroupOffsetsResponsePartition",
                        "0+",
                        F("partition_index", "int32", "0+"),
                        F("start_offset", "int64", "0+"),
                        F("leader_epoch", "int32", "0+"),
                        F("lag", "int64", "1+", default=-1),
                        *error_fields(),
                    ),
                ),
                *error_fields(),
            ),
        ],
    )
)
