"""ApiVersions (key 18): request and response layouts, versions 0-4."""

from pybroker.wire.schema import F, api, declare

API_VERSIONS = declare(
    api(
        18,
        "ApiVersions",
        versions="0-4",
        flexible="3+",
        request=[
            F("client_software_name", "string", "3+"),
            F("client_software_version", "string", "3+"),
        ],
        response=[
            F("error_code", "int16"),
            F(
                "api_keys",
                "[]ApiVersion",
                "0+",
                F("api_key", "int16"),
                F("min_version", "int16"),
                F("max_version", "int16"),
            ),
            F("throttle_time_ms", "int32", "1+"),
            F(
                "supported_features",
                "[]SupportedFeatureKey",
                "3+",
                F("name", "string", "3+"),
                F("min_version", "int16", "3+"),
                F("max_version", "int16", "3+"),
                tag=0,
            ),
            F("finalized_features_epoch", "int64", "3+", tag=1, default=-1),
            F(
                "finalized_features",
                "[]FinalizedFeatureKey",
                "3+",
                F("name", "string", "3+"),
                F("max_version_level", "int16", "3+"),
                F("min_version_level", "int16", "3+"),
                tag=2,
            ),
            F("zk_migration_ready", "bool", "3+", tag=3, default=False),
        ],
    )
)
