"""SaslHandshake (key 17): request and response layouts, versions 0-1 (never flexible).

v0 is followed by bare SASL tokens (size-prefixed, no Kafka header); v1 by
SaslAuthenticate requests (KIP-152)."""

from pybroker.wire.schema import F, api, declare

SASL_HANDSHAKE = declare(
    api(
        17,
        "SaslHandshake",
        versions="0-1",
        flexible="none",
        request=[F("mechanism", "string", "0+")],
        response=[
            F("error_code", "int16", "0+"),
            F("mechanisms", "[]string", "0+"),
        ],
    )
)
