"""OffsetDelete (key 47): request and response layouts, version 0.

Kafka's spec: validVersions 0.
"""

from pybroker.wire.schema import F, api, declare

OFFSET_DELETE = declare(
    api(
        47,
        "OffsetDelete",
        versions="0",
        flexible="none",
        request=[
            F("group_id", "string", "0+"),
            F(
                "topics",
                "[]OffsetDeleteRequestTopic",
                "0+",
                F("name", "string", "0+"),
                F(
                    "partitions",
                    "[]OffsetDeleteRequestPartition",
                    "0+",
                    F("partition_index", "int32", "0+"),
                ),
            ),
        ],
        response=[
            F("error_code", "int16", "0+"),
            F("throttle_time_ms", "int32", "0+"),
            F(
                "topics",
                "[]OffsetDeleteResponseTopic",
                "0+",
                F("name", "string", "0+"),
                F(
                    "partitions",
                    "[]OffsetDeleteResponsePartition",
                    "0+",
                    F("partition_index", "int32", "0+"),
                    F("error_code", "int16", "0+"),
                ),
            ),
        ],
    )
)
