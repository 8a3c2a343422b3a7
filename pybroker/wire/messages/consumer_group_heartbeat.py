"""ConsumerGroupHeartbeat (key 68): request and response layouts, versions 0-1 (KIP-848).

Kafka's spec: validVersions 0-1, flexible from 0; v1 (Kafka 4.0) adds subscribed_topic_regex
and lets the client choose its member id (KIP-1082).  Layouts checked against the generated
classes of kafka-clients 3.9.0 (v0) and 4.1.1 (v1).
"""

from pybroker.wire.messages.common_structs import group_heartbeat_response, topic_partitions
from pybroker.wire.schema import F, api, declare

CONSUMER_GROUP_HEARTBEAT = declare(
    api(
        68,
        "ConsumerGroupHeartbeat",
        versions="0-1",
        flexible="0+",
        request=[
            F("group_id", "string", "0+"),
            F("member_id", "string", "0+"),
            F("member_epoch", "int32", "0+"),
            F("instance_id", "string", "0+", nullable="0+", default=None),
            F("rack_id", "string", "0+", nullable="0+", default=None),
            F("rebalance_timeout_ms", "int32", "0+", default=-1),
            F("subscribed_topic_names", "[]string", "0+", nullable="0+", default=None),
            F("subscribed_topic_regex", "string", "1+", nullable="1+", default=None),
            F("server_assignor", "string", "0+", nullable="0+", default=None),
            topic_partitions(nullable=True),
        ],
        response=group_heartbeat_response(),
    )
)
