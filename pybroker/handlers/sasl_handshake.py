"""SaslHandshake (key 17), versions 0-1.

Starts a SASL exchange on a SASL listener (security/sasl.py): the mechanism must be one of the
listener's sasl.enabled.mechanisms, else UNSUPPORTED_SASL_MECHANISM with the enabled ones and
the connection is closed, as Kafka does.  v0 is followed by bare SASL tokens, v1 by
SaslAuthenticate.  On a listener without SASL, or once authenticated, ILLEGAL_SASL_STATE
(closing the connection), except a KIP-368 re-authentication: v1, connections.max.reauth.ms
set, the same mechanism.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.exchange import new_server


def _refuse(ctx: RequestContext, code: int, why: str, mechanisms=()) -> dict:
    if ctx.session is not None:
        ctx.session.close_after_response = why
    return {"error_code": code, "mechanisms": list(mechanisms)}


@handler(17, 0, 1)
async def sasl_handshake(ctx: RequestContext, req: dict) -> dict:
    s = ctx.session
    if s is None or s.sasl is None:
        return _refuse(
            ctx, ErrorCode.ILLEGAL_SASL_STATE, "SaslHandshake on a listener without SASL"
        )
    enabled = s.sasl.mechanisms
    mechanism = req["mechanism"]
    if s.server is not None:
        return _refuse(ctx, ErrorCode.ILLEGAL_SASL_STATE, "a second SaslHandshake", enabled)
    if s.authenticated:
        if ctx.version < 1 or s.sasl.reauth_ms <= 0 or mechanism != s.mechanism:
            return _refuse(ctx, ErrorCode.ILLEGAL_SASL_STATE, "SaslHandshake after login", enabled)
        s.reauthenticating = True
    if mechanism not in enabled:
        return _refuse(
            ctx,
            ErrorCode.UNSUPPORTED_SASL_MECHANISM,
            f"unsupported SASL mechanism {mechanism!r}",
            enabled,
        )
    s.mechanism = mechanism
    s.server = new_server(s, mechanism, await ctx.services.scram_fake_salt_key())
    s.raw_tokens = ctx.version == 0
    return {"error_code": ErrorCode.NONE, "mechanisms": list(enabled)}
