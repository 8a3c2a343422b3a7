"""ConsumerGroupDescribe (key 69): request and response layouts, versions 0-1 (KIP-848).

Kafka's spec: validVersions 0-1, flexible from 0; v1 (KIP-1099) adds each member's type.
Layouts checked against the generated classes of kafka-clients 3.9.0 (v0) and 4.1.1 (v1).
"""

from pybroker.wire.messages.common_structs import (
    assignment,
    describe_groups_request,
    described_groups,
)
from pybroker.wire.schema import F, api, declare

CONSUMER_GROUP_DESCRIBE = declare(
    api(
        69,
        "ConsumerGroupDescribe",
        versions="0-1",
        flexible="0+",
        request=describe_groups_request(),
        response=[
            F("throttle_time_ms", "int32", "0+"),
            described_groups(
                F("member_id", "string", "0+"),
                F("instance_id", "string", "0+", nullable="0+", default=None),
                F("rack_id", "string", "0+", nullable="0+", default=None),
                F("member_epoch", "int32", "0+"),
                F("client_id", "string", "0+"),
                F("client_host", "string", "0+"),
                F("subscribed_topic_names", "[]string", "0+"),
                F("subscribed_topic_regex", "string", "0+", nullable="0+", default=None),
                assignment("assignment", topic_names=True),
                assignment("target_assignment", topic_names=True),
                F("member_type", "int8", "1+", default=-1),
            ),
        ],
    )
)
