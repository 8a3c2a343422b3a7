"""AlterConfigs (key 33): request and response layouts, versions 0-2.

Kafka's spec: validVersions 0-2.
"""

from pybroker.wire.schema import F, api, declare

ALTER_CONFIGS = declare(
    api(
        33,
        "AlterConfigs",
        versions="0-2",
        flexible="2+",
        request=[
            F(
                "resources",
                "[]AlterConfigsResource",
                "0+",
                F("resource_type", "int8", "0+"),
                F("resource_name", "string", "0+"),
                F(
                    "configs",
                    "[]AlterableConfig",
                    "0+",
                    F("name", "string", "0+"),
                    F("value", "string", "0+", nullable="0+"),
                ),
            ),
            F("validate_only", "bool", "0+"),
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            F(
                "responses",
                "[]AlterConfigsResourceResponse",
                "0+",
                F("error_code", "int16", "0+"),
                F("error_message", "string", "0+", nullable="0+"),
                F("resource_type", "int8", "0+"),
                F("resource_name", "string", "0+"),
            ),
        ],
    )
)
