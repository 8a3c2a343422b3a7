"""ShareGroupHeartbeat (key 76): request and response layouts, version 1 (KIP-932).

Kafka's spec: validVersions 1 (v0 was Kafka 4.0's early access, removed in 4.1), flexible from
0.  Layout checked against kafka-clients 4.4.0's generated classes
(compat_tests/test_java_schemas.py).
"""

from pybroker.wire.messages.common_structs import group_heartbeat_response
from pybroker.wire.schema import F, api, declare

SHARE_GROUP_HEARTBEAT = declare(
    api(
        76,
        "ShareGroupHeartbeat",
        versions="1",
        flexible="0+",
        request=[
            F("group_id", "string", "0+"),
            F("member_id", "string", "0+"),
            F("member_epoch", "int32", "0+"),
            F("rack_id", "string", "0+", nullable="0+", default=None),
            F("subscribed_topic_names", "[]string", "0+", nullable="0+", default=None),
        ],
        response=group_heartbeat_response(),
    )
)
