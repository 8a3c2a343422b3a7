"""SaslAuthenticate (key 36), versions 0-2.

One token of the exchange SaslHandshake v1 started (PLAIN: one round; SCRAM: two).  A failed
login answers SASL_AUTHENTICATION_FAILED with Kafka's message and the connection is closed
after the answer.  On success v1+ answers the session lifetime (connections.max.reauth.ms,
0: none, KIP-368).  Without a handshake first, or on a listener without SASL:
ILLEGAL_SASL_STATE and the connection is closed.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.exchange import step
from pybroker.security.scram import AuthenticationFailed


def _answer(code: int, message: str | None, token: bytes = b"", lifetime: int = 0) -> dict:
    return {
        "error_code": code,
        "error_message": message,
        "auth_bytes": token,
        "session_lifetime_ms": lifetime,
    }


@handler(36, 0, 2)
async def sasl_authenticate(ctx: RequestContext, req: dict) -> dict:
    s = ctx.session
    if s is None or s.sasl is None or s.server is None or s.raw_tokens:
        if s is not None:
            s.close_after_response = "SaslAuthenticate out of order"
        return _answer(ErrorCode.ILLEGAL_SASL_STATE, "Unexpected SaslAuthenticate request")
    now = ctx.services.clock.time_ms()
    try:
        token = await step(s, bytes(req["auth_bytes"]), ctx.services.credentials, now)
    except AuthenticationFailed as e:
        s.close_after_response = "authentication failed"
        return _answer(ErrorCode.SASL_AUTHENTICATION_FAILED, str(e))
    lifetime = 0
    if s.authenticated and s.expires_at_ms is not None:
        lifetime = s.expires_at_ms - now
    return _answer(ErrorCode.NONE, None, token, lifetime)
