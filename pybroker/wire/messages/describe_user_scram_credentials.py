"""DescribeUserScramCredentials (key 50): request and response layouts, version 0."""

from pybroker.wire.schema import F, api, declare

DESCRIBE_USER_SCRAM_CREDENTIALS = declare(
    api(
        50,
        "DescribeUserScramCredentials",
        versions="0",
        flexible="0+",
        request=[
            F("users", "[]UserName", "0+", F("name", "string", "0+"), nullable="0+"),
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            F("error_code", "int16", "0+"),
            F("error_message", "string", "0+", nullable="0+"),
            F(
                "results",
                "[]DescribeUserScramCredentialsResult",
                "0+",
                F("user", "string", "0+"),
                F("error_code", "int16", "0+"),
                F("error_message", "string", "0+", nullable="0+"),
                F(
                    "credential_infos",
                    "[]CredentialInfo",
                    "0+",
                    F("mechanism", "int8", "0+"),
                    F("iterations", "int32", "0+"),
                ),
            ),
        ],
    )
)
