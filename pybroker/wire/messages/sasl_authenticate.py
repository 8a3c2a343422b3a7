"""SaslAuthenticate (key 36): request and response layouts, versions 0-2 (flexible from 2);
v1 adds the session lifetime (KIP-368)."""

from pybroker.wire.schema import F, api, declare

SASL_AUTHENTICATE = declare(
    api(
        36,
        "SaslAuthenticate",
        versions="0-2",
        flexible="2+",
        request=[F("auth_bytes", "bytes", "0+")],
        response=[
            F("error_code", "int16", "0+"),
            F("error_message", "string", "0+", nullable="0+"),
            F("auth_bytes", "bytes", "0+"),
            F("session_lifetime_ms", "int64", "1+", default=0),
        ],
    )
)
