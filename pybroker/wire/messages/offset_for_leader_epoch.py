"""OffsetForLeaderEpoch (key 23): request and response layouts, versions 0-4.

Kafka's spec: validVersions 2-4.

Kafka 4.0 dropped versions 0-1 from
OffsetForLeaderEpochRequest.json/OffsetForLeaderEpochResponse.json (the spec kafka-python ships
starts at 2); we still declare them because older clients send them. They are taken from Kafka
3.x's specs, whose field version ranges the 4.x spec kept unchanged (v0-1 have no
current_leader_epoch, replica_id or throttle_time_ms, and v0's response has no leader_epoch),
so every field below has exactly Kafka 3.x's versions; tests/test_schema_crosscheck.py also
checks these old versions against kafka-python's legacy kafka.protocol.old classes.
"""

from pybroker.wire.schema import F, api, declare

OFFSET_FOR_LEADER_EPOCH = declare(
    api(
        23,
        "OffsetForLeaderEpoch",
        versions="0-4",
        flexible="4+",
        request=[
            F("replica_id", "int32", "3+", default=-2),
            F(
                "topics",
                "[]OffsetForLeaderTopic",
                "0+",
                F("topic", "string", "0+"),
                F(
                    "partitions",
                    "[]OffsetForLeaderPartition",
                    "0+",
                    F("partition", "int32", "0+"),
                    F("current_leader_epoch", "int32", "2+", default=-1),
                    F("leader_epoch", "int32", "0+"),
                ),
            ),
        ],
        response=[
            F("throttle_time_ms", "int32", "2+"),
            F(
                "topics",
                "[]OffsetForLeaderTopicResult",
                "0+",
                F("topic", "string", "0+"),
                F(
                    "partitions",
                    "[]EpochEndOffset",
                    "0+",
                    F("error_code", "int16", "0+"),
                    F("partition", "int32", "0+"),
                    F("leader_epoch", "int32", "1+", default=-1),
                    F("end_offset", "int64", "0+", default=-1),
                ),
            ),
        ],
    )
)
