"""ShareAcknowledge (key 79): request and response layouts, versions 1-2 (KIP-932).

Kafka's spec: validVersions 1-2 (v0 was Kafka 4.0's early access), flexible from 0; v2 adds
the Renew acknowledgement (KIP-1222) and the lock timeout in the response.  Layout checked
against kafka-clients 4.4.0's generated classes (compat_tests/test_java_schemas.py).
"""

from pybroker.wire.messages.common_structs import (
    acknowledgement_batches,
    current_leader,
    error_fields,
    node_endpoints,
    share_session_request,
)
from pybroker.wire.schema import F, api, declare

SHARE_ACKNOWLEDGE = declare(
    api(
        79,
        "ShareAcknowledge",
        versions="1-2",
        flexible="0+",
        request=[
            *share_session_request(),
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
                    acknowledgement_batches(),
                ),
            ),
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            *error_fields(),
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
                    *error_fields(),
                    current_leader(),
                ),
            ),
            node_endpoints(),
        ],
    )
)
