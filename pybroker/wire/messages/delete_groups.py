"""DeleteGroups (key 42): request and response layouts, versions 0-2.

Kafka's spec: validVersions 0-2.
"""

from pybroker.wire.schema import F, api, declare

DELETE_GROUPS = declare(
    api(
        42,
        "DeleteGroups",
        versions="0-2",
        flexible="2+",
        request=[
            F("groups_names", "[]string", "0+"),
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            F(
                "results",
                "[]DeletableGroupResult",
                "0+",
                F("group_id", "string", "0+"),
                F("error_code", "int16", "0+"),
            ),
        ],
    )
)
