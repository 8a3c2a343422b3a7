"""DeleteShareGroupOffsets (key 92): request and response layouts, version 0 (KIP-932).

Kafka's spec: validVersions 0, flexible from 0.  Layout checked against kafka-clients 4.4.0's
generated classes (compat_tests/test_java_schemas.py).
"""

from pybroker.wire.messages.common_structs import error_fields
from pybroker.wire.schema import F, api, declare

DELETE_SHARE_GROUP_OFFSETS = declare(
    api(
        92,
        "DeleteShareGroupOffsets",
        versions="0",
        flexible="0+",
        request=[
            F("group_id", "string", "0+"),
            F(
                "topics",
                "[]DeleteShareGroupOffsetsRequestTopic",
                "0+",
                F("topic_name", "string", "0+"),
            ),
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            *error_fields(),
            F(
                "responses",
                "[]DeleteShareGroupOffsetsResponseTopic",
                "0+",
                F("topic_name", "string", "0+"),
                F("topic_id", "uuid", "0+"),
                *error_fields(),
            ),
        ],
    )
)
