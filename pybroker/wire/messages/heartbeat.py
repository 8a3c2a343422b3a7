"""Heartbeat (key 12): request and response layouts, versions 0-4.

Kafka's spec: validVersions 0-4.
"""

from pybroker.wire.schema import F, api, declare

HEARTBEAT = declare(
    api(
        12,
        "Heartbeat",
        versions="0-4",
        flexible="4+",
        request=[
            F("group_id", "string", "0+"),
            F("generation_id", "int32", "0+"),
            F("member_id", "string", "0+"),
            F("group_instance_id", "string", "3+", nullable="3+", default=None),
        ],
        response=[
            F("throttle_time_ms", "int32", "1+"),
            F("error_code", "int16", "0+"),
        ],
    )
)
