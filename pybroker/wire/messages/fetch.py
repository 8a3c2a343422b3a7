"""Fetch (key 1): request and response layouts, versions 0-17.

Kafka's spec: validVersions 4-18 (Kafka 4.0 removed v0-3, KIP-896); Kafka 3.9's 0-16.  The old
versions' fields carry Kafka 3.9's version ranges, which the 4.x spec kept.
"""

from pybroker.wire.messages.common_structs import current_leader, node_endpoints
from pybroker.wire.schema import F, api, declare

FETCH = declare(
    api(
        1,
        "Fetch",
        versions="0-17",
        flexible="12+",
        request=[
            F("cluster_id", "string", "12+", nullable="12+", tag=0, default=None),
            F("replica_id", "int32", "0-14", default=-1),
            F(
                "replica_state",
                "ReplicaState",
                "15+",
                F("replica_id", "int32", "15+", default=-1),
                F("replica_epoch", "int64", "15+", default=-1),
                tag=1,
            ),
            F("max_wait_ms", "int32", "0+"),
            F("min_bytes", "int32", "0+"),
            F("max_bytes", "int32", "3+", default=0x7FFFFFFF),
            F("isolation_level", "int8", "4+", default=0),
            F("session_id", "int32", "7+", default=0),
            F("session_epoch", "int32", "7+", default=-1),
            F(
                "topics",
                "[]FetchTopic",
                "0+",
                F("topic", "string", "0-12"),
                F("topic_id", "uuid", "13+"),
                F(
                    "partitions",
                    "[]FetchPartition",
                    "0+",
                    F("partition", "int32", "0+"),
                    F("current_leader_epoch", "int32", "9+", default=-1),
                    F("fetch_offset", "int64", "0+"),
                    F("last_fetched_epoch", "int32", "12+", default=-1),
                    F("log_start_offset", "int64", "5+", default=-1),
                    F("partition_max_bytes", "int32", "0+"),
                    F("replica_directory_id", "uuid", "17+", tag=0),
                    F("high_watermark", "int64", "18+", tag=1, default=9223372036854775807),
                ),
            ),
            F(
                "forgotten_topics_data",
                "[]ForgottenTopic",
                "7+",
                F("topic", "string", "7-12"),
                F("topic_id", "uuid", "13+"),
                F("partitions", "[]int32", "7+"),
            ),
            F("rack_id", "string", "11+", default=""),
        ],
        response=[
            F("throttle_time_ms", "int32", "1+"),
            F("error_code", "int16", "7+"),
            F("session_id", "int32", "7+", default=0),
            F(
                "responses",
                "[]FetchableTopicResponse",
                "0+",
                F("topic", "string", "0-12"),
                F("topic_id", "uuid", "13+"),
                F(
                    "partitions",
                    "[]PartitionData",
                    "0+",
                    F("partition_index", "int32", "0+"),
                    F("error_code", "int16", "0+"),
                    F("high_watermark", "int64", "0+"),
                    F("last_stable_offset", "int64", "4+", default=-1),
                    F("log_start_offset", "int64", "5+", default=-1),
                    F(
                        "diverging_epoch",
                        "EpochEndOffset",
                        "12+",
                        F("epoch", "int32", "12+", default=-1),
                        F("end_offset", "int64", "12+", default=-1),
                        tag=0,
                    ),
                    current_leader("12+", default=-1, tag=1),
                    F(
                        "snapshot_id",
                        "SnapshotId",
                        "12+",
                        F("end_offset", "int64", "0+", default=-1),
                        F("epoch", "int32", "0+", default=-1),
                        tag=2,
                    ),
                    F(
                        "aborted_transactions",
                        "[]AbortedTransaction",
                        "4+",
                        F("producer_id", "int64", "4+"),
                        F("first_offset", "int64", "4+"),
                        nullable="4+",
                    ),
                    F("preferred_read_replica", "int32", "11+", default=-1),
                    F("records", "records", "0+", nullable="0+"),
                ),
            ),
            node_endpoints("16+", tag=0),
        ],
    )
)
