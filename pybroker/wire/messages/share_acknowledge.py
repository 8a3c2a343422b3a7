"""ShareAcknowledge (key 79): request and response layouts, versions 1-2 (KIP-932).

Kafka's spec: validVersions 1-2 (v0 was Kafka 4.0's early access), flexible from 0; v2 adds
the Renew acknowledgement (KIP-1222) and the lock timeout in the response.  Layout checked
against kafka-clients 4.4.0's generated classes (compat_tests/test_java_schemas.py).
"""

from pybroker.wire.messages.share_fetch import acknowledgement_batches, node_endpoints
from pybroker.wire.schema import F, api, declare

SHARE_ACKNOWLEDGE = declare(
    api(
        79,
        "ShareAcknowledge",
        versions="1-2",
        flexible="0+",
        request=[
            F("group_id", "string", "0+", nullable="0+", default=None),
            F("member_id", "string", "0+", nullable="0+"),
            F("share_session_epoch", "int32", "0+"),
            F("is_renew_ack", "bool", "2+", default=False),
            F(
                "topics",
                "[]AcknowledgeTopic",
                "0+",
                F("topic_id", "uuid", "0+"),
                F(
                    "partitions",
                    "[]AcknowledgePartition",
                    "0+",
                    F("partition_index", "int32", "0+"),
                    acknowledgement_batches(),  # type: ignore[arg-type]
                ),
            ),
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            F("error_code", "int16", "0+"),
            F("error_message", "string", "0+", nullable="0+", default=None),
            F("acquisition_lock_timeout_ms", "int32", "2+"),
            F(
                "responses",
                "[]ShareAcknowledgeTopicResponse",
                "0+",
                F("topic_id", "uuid", "0+"),
                F(
                    "partitions",
                    "[]PartitionData",
                    "0+",
                    F("partition_index", "int32", "0+"),
                    F("error_code", "int16", "0+"),
                    F("error_message", "string", "0+", nullable="0+", default=None),
                    F(
                        "current_leader",
                        "LeaderIdAndEpoch",
                        "0+",
                        F("leader_id", "int32", "0+"),
                        F("leader_epoch", "int32", "0+"),
                    ),
                ),
            ),
            node_endpoints(),  # type: ignore[list-item]
        ],
    )
)
