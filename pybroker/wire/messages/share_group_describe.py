"""ShareGroupDescribe (key 77): request and response layouts, version 1 (KIP-932).

Kafka's spec: validVersions 1, flexible from 0.  Layout checked against kafka-clients 4.4.0's
generated classes (compat_tests/test_java_schemas.py).
"""

from pybroker.wire.messages.common_structs import (
    assignment,
    describe_groups_request,
    described_groups,
)
from pybroker.wire.schema import F, api, declare

SHARE_GROUP_DESCRIBE = declare(
    api(
        77,
        "ShareGroupDescribe",
        versions="1",
        flexible="0+",
        request=describe_groups_request(),
        response=[
            F("throttle_time_ms", "int32", "0+"),
            described_groups(
                F("member_id", "string", "0+"),
                F("rack_id", "string", "0+", nullable="0+", default=None),
                F("member_epoch", "int32", "0+"),
                F("client_id", "string", "0+"),
                F("client_host", "string", "0+"),
                F("subscribed_topic_names", "[]string", "0+"),
                assignment(topic_names=True),
            ),
        ],
    )
)
