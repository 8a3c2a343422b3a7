"""ListOffsets (key 2): request and response layouts, versions 0-9.

Kafka's spec: validVersions 1-11 (Kafka 4.0 removed v0); Kafka 3.9's 0-9.
"""

from pybroker.wire.schema import F, api, declare

LIST_OFFSETS = declare(
    api(
        2,
        "ListOffsets",
        versions="0-9",
        flexible="6+",
        request=[
            F("replica_id", "int32", "0+"),
            F("isolation_level", "int8", "2+"),
            F(
                "topics",
                "[]ListOffsetsTopic",
                "0+",
                F("name", "string", "0+"),
                F(
                    "partitions",
                    "[]ListOffsetsPartition",
                    "0+",
                    F("partition_index", "int32", "0+"),
                    F("current_leader_epoch", "int32", "4+", default=-1),
                    F("timestamp", "int64", "0+"),
                    F("max_num_offsets", "int32", "0", default=1),
                ),
            ),
            F("timeout_ms", "int32", "10+"),
        ],
        response=[
            F("throttle_time_ms", "int32", "2+"),
            F(
                "topics",
                "[]ListOffsetsTopicResponse",
                "0+",
                F("name", "string", "0+"),
                F(
                    "partitions",
                    "[]ListOffsetsPartitionResponse",
                    "0+",
                    F("partition_index", "int32", "0+"),
                    F("error_code", "int16", "0+"),
                    F("old_style_offsets", "[]int64", "0"),
                    F("timestamp", "int64", "1+", default=-1),
                    F("offset", "int64", "1+", default=-1),
                    F("leader_epoch", "int32", "4+", default=-1),
                ),
            ),
        ],
    )
)
