"""AlterClientQuotas (key 49): request and response layouts, versions 0-1 (KIP-546)."""

from pybroker.wire.schema import F, api, declare

ALTER_CLIENT_QUOTAS = declare(
    api(
        49,
        "AlterClientQuotas",
        versions="0-1",
        flexible="1+",
        request=[
            F(
                "entries",
                "[]EntryData",
                "0+",
                F(
                    "entity",
                    "[]EntityData",
                    "0+",
                    F("entity_type", "string", "0+"),
                    F("entity_name", "string", "0+", nullable="0+"),
                ),
                F(
                    "ops",
                    "[]OpData",
                    "0+",
                    F("key", "string", "0+"),
                    F("value", "float64", "0+"),
                    F("remove", "bool", "0+"),
                ),
            ),
            F("validate_only", "bool", "0+"),
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            F(
                "entries",
                "[]EntryData",
                "0+",
                F("error_code", "int16", "0+"),
                F("error_message", "string", "0+", nullable="0+"),
                F(
                    "entity",
                    "[]EntityData",
                    "0+",
                    F("entity_type", "string", "0+"),
                    F("entity_name", "string", "0+", nullable="0+"),
                ),
            ),
        ],
    )
)
