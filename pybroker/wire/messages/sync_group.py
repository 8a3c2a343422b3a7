"""SyncGroup (key 14): request and response layouts, versions 0-5.

Kafka's spec: validVersions 0-5.
"""

from pybroker.wire.schema import F, api, declare

SYNC_GROUP = declare(
    api(
        14,
        "SyncGroup",
        versions="0-5",
        flexible="4+",
        request=[
            F("group_id", "string", "0+"),
            F("generation_id", "int32", "0+"),
            F("member_id", "string", "0+"),
            F("group_instance_id", "string", "3+", nullable="3+", default=None),
            F("protocol_type", "string", "5+", nullable="5+", default=None),
            F("protocol_name", "string", "5+", nullable="5+", default=None),
            F(
                "assignments",
                "[]SyncGroupRequestAssignment",
                "0+",
                F("member_id", "string", "0+"),
                F("assignment", "bytes", "0+"),
            ),
        ],
        response=[
            F("throttle_time_ms", "int32", "1+"),
            F("error_code", "int16", "0+"),
            F("protocol_type", "string", "5+", nullable="5+", default=None),
            F("protocol_name", "string", "5+", nullable="5+", default=None),
            F("assignment", "bytes", "0+"),
        ],
    )
)
