"""AlterUserScramCredentials (key 51): request and response layouts, version 0."""

from pybroker.wire.schema import F, api, declare

ALTER_USER_SCRAM_CREDENTIALS = declare(
    api(
        51,
        "AlterUserScramCredentials",
        versions="0",
        flexible="0+",
        request=[
            F(
                "deletions",
                "[]ScramCredentialDeletion",
                "0+",
                F("name", "string", "0+"),
                F("mechanism", "int8", "0+"),
            ),
            F(
                "upsertions",
                "[]ScramCredentialUpsertion",
                "0+",
                F("name", "string", "0+"),
                F("mechanism", "int8", "0+"),
                F("iterations", "int32", "0+"),
                F("salt", "bytes", "0+"),
                F("salted_password", "bytes", "0+"),
            ),
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            F(
                "results",
                "[]AlterUserScramCredentialsResult",
                "0+",
                F("user", "string", "0+"),
                F("error_code", "int16", "0+"),
                F("error_message", "string", "0+", nullable="0+"),
            ),
        ],
    )
)
