"""AlterReplicaLogDirs (key 34): request and response layouts, versions 0-2.

Kafka's spec: validVersions 1-2 (Kafka 4.0 dropped v0, which is the same as v1; Kafka 3.9
serves 0-2, and so do we)."""

from pybroker.wire.schema import F, api, declare

ALTER_REPLICA_LOG_DIRS = declare(
    api(
        34,
        "AlterReplicaLogDirs",
        versions="0-2",
        flexible="2+",
        request=[
            F(
                "dirs",
                "[]AlterReplicaLogDir",
                "0+",
                F("path", "string", "0+"),
                F(
                    "topics",
                    "[]AlterReplicaLogDirTopic",
                    "0+",
                    F("name", "string", "0+"),
                    F("partitions", "[]int32", "0+"),
                ),
            ),
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            F(
                "results",
                "[]AlterReplicaLogDirTopicResult",
                "0+",
                F("topic_name", "string", "0+"),
                F(
                    "partitions",
                    "[]AlterReplicaLogDirPartitionResult",
                    "0+",
                    F("partition_index", "int32", "0+"),
                    F("error_code", "int16", "0+"),
                ),
            ),
        ],
    )
)
