"""JoinGroup (key 11): request and response layouts, versions 0-9.

Kafka's spec: validVersions 0-9.
"""

from pybroker.wire.schema import F, api, declare

JOIN_GROUP = declare(
    api(
        11,
        "JoinGroup",
        versions="0-9",
        flexible="6+",
        request=[
            F("group_id", "string", "0+"),
            F("session_timeout_ms", "int32", "0+"),
            F("rebalance_timeout_ms", "int32", "1+", default=-1),
            F("member_id", "string", "0+"),
            F("group_instance_id", "string", "5+", nullable="5+", default=None),
            F("protocol_type", "string", "0+"),
            F(
                "protocols",
                "[]JoinGroupRequestProtocol",
                "0+",
                F("name", "string", "0+"),
                F("metadata", "bytes", "0+"),
            ),
            F("reason", "string", "8+", nullable="8+", default=None),
        ],
        response=[
            F("throttle_time_ms", "int32", "2+"),
            F("error_code", "int16", "0+"),
            F("generation_id", "int32", "0+", default=-1),
            F("protocol_type", "string", "7+", nullable="7+", default=None),
            F("protocol_name", "string", "0+", nullable="7+"),
            F("leader", "string", "0+"),
            F("skip_assignment", "bool", "9+", default=False),
            F("member_id", "string", "0+"),
            F(
                "members",
                "[]JoinGroupResponseMember",
                "0+",
                F("member_id", "string", "0+"),
                F("group_instance_id", "string", "5+", nullable="5+", default=None),
                F("metadata", "bytes", "0+"),
            ),
        ],
    )
)
