"""ShareFetch (key 78): request and response layouts, versions 1-2 (KIP-932).

Kafka's spec: validVersions 1-2 (v0 was Kafka 4.0's early access), flexible from 0; v2 adds
the acquire mode (KIP-1206) and the Renew acknowledgement (KIP-1222).  In Kafka 4.4 the
response's records are not nullable.  Layout checked against kafka-clients 4.4.0's generated
classes (compat_tests/test_java_schemas.py).
"""

from pybroker.wire.messages.common_structs import (
    acknowledgement_batches,
    current_leader,
    error_fields,
    node_endpoints,
    share_session_request,
)
from pybroker.wire.schema import F, api, declare

SHARE_FETCH = declare(
    api(
        78,
        "ShareFetch",
        versions="1-2",
        flexible="0+",
        request=[
            *share_session_request(),
            F("max_wait_ms", "int32", "0+"),
            F("min_bytes", "int32", "0+"),
            F("max_bytes", "int32", "0+", default=0x7FFFFFFF),
            F("max_records", "int32", "1+"),
            F("batch_size", "int32", "1+"),
            F("share_acquire_mode", "int8", "2+", default=0),
            F("is_renew_ack", "bool", "2+", default=False),
            F(
                "topics",
                "[]FetchTopic",
                "0+",
                F("topic_id", "uuid", "0+"),
                F(
                    "partitions",
                    "[]FetchPartition",
                    "0+",
                    F("partition_index", "int32", "0+"),
                    F("partition_max_bytes", "int32", "0"),
                    acknowledgement_batches(),
                ),
            ),
            F(
                "forgotten_topics_data",
                "[]ForgottenTopic",
                "0+",
                F("topic_id", "uuid", "0+"),
                F("partitions", "[]int32", "0+"),
            ),
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            *error_fields(),
            F("acquisition_lock_timeout_ms", "int32", "0+"),
            F(
                "responses",
                "[]ShareFetchableTopicResponse",
                "0+",
                F("topic_id", "uuid", "0+"),
                F(
                    "partitions",
                    "[]PartitionData",
                    "0+",
                    F("partition_index", "int32", "0+"),
                    *error_fields(),
                    F("acknowledge_error_code", "int16", "0+"),
                    F("acknowledge_error_message", "string", "0+", nullable="0+", default=None),
                    current_leader(),
                    F("records", "records", "0+"),
                    F(
                        "acquired_records",
                        "[]AcquiredRecords",
                        "0+",
                        F("first_offset", "int64", "0+"),
                        F("last_offset", "int64", "0+"),
                        F("delivery_count", "int16", "0+"),
                    ),
                ),
            ),
            node_endpoints(),
        ],
    )
)
