"""AlterPartitionReassignments (key 45): request and response layouts, version 0.

Kafka's spec: validVersions 0 (Kafka 3.9; v1, allowReplicationFactorChange, is Kafka 4.1's).
"""

from pybroker.wire.schema import F, api, declare

ALTER_PARTITION_REASSIGNMENTS = declare(
    api(
        45,
        "AlterPartitionReassignments",
        versions="0",
        flexible="0+",
        request=[
            F("timeout_ms", "int32", "0+", default=60000),
            F(
                "topics",
                "[]ReassignableTopic",
                "0+",
                F("name", "string", "0+"),
                F(
                    "partitions",
                    "[]ReassignablePartition",
                    "0+",
                    F("partition_index", "int32", "0+"),
                    F("replicas", "[]int32", "0+", nullable="0+", default=None),
                ),
            ),
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            F("error_code", "int16", "0+"),
            F("error_message", "string", "0+", nullable="0+"),
            F(
                "responses",
                "[]ReassignableTopicResponse",
                "0+",
                F("name", "string", "0+"),
                F(
                    "partitions",
                    "[]ReassignablePartitionResponse",
                    "0+",
                    F("partition_index", "int32", "0+"),
                    F("error_code", "int16", "0+"),
                    F("error_message", "string", "0+", nullable="0+"),
                ),
            ),
        ],
    )
)
