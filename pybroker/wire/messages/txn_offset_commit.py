"""TxnOffsetCommit (key 28): request and response layouts, versions 0-4.

Kafka's spec: validVersions 0-5 in Kafka 4.0 (0-4 in 3.9), flexible from 3; v2 adds the
committed leader epoch, v3 the member id, group instance id and generation (KIP-447); v4-5
are KIP-890's.
"""

from pybroker.wire.schema import F, api, declare

TXN_OFFSET_COMMIT = declare(
    api(
        28,
        "TxnOffsetCommit",
        versions="0-4",
        flexible="3+",
        request=[
            F("transactional_id", "string", "0+"),
            F("group_id", "string", "0+"),
            F("producer_id", "int64", "0+"),
            F("producer_epoch", "int16", "0+"),
            F("generation_id", "int32", "3+", default=-1),
            F("member_id", "string", "3+", default=""),
            F("group_instance_id", "string", "3+", nullable="3+", default=None),
            F(
                "topics",
                "[]TxnOffsetCommitRequestTopic",
                "0+",
                F("name", "string", "0+"),
                F(
                    "partitions",
                    "[]TxnOffsetCommitRequestPartition",
                    "0+",
                    F("partition_index", "int32", "0+"),
                    F("committed_offset", "int64", "0+"),
                    F("committed_leader_epoch", "int32", "2+", default=-1),
                    F("committed_metadata", "string", "0+", nullable="0+"),
                ),
            ),
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            F(
                "topics",
                "[]TxnOffsetCommitResponseTopic",
                "0+",
                F("name", "string", "0+"),
                F(
                    "partitions",
                    "[]TxnOffsetCommitResponsePartition",
                    "0+",
                    F("partition_index", "int32", "0+"),
                    F("error_code", "int16", "0+"),
                ),
            ),
        ],
    )
)
