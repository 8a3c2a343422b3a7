"""One SASL exchange step for a connection's Session (used by SaslAuthenticate and by the
connection for SaslHandshake v0's bare tokens)."""

from __future__ import annotations

from typing import Any

from pybroker.security.plain import PlainServer
from pybroker.security.sasl import Session
from pybroker.security.scram import MECHANISMS as SCRAM
from pybroker.security.scram import AuthenticationFailed, ScramServer


def new_server(session: Session, mechanism: str, fake_salt_key: bytes) -> Any:
    if mechanism == "PLAIN":
        assert session.sasl is not None
        return PlainServer(session.sasl.plain_users)
    return ScramServer(mechanism, lambda user: None, fake_salt_key)


def scram_user(first: bytes) -> str | None:
    """The user named in a SCRAM client-first message, if it is well-formed enough."""
    try:
        bare = first.decode("utf-8").split(",", 2)[2]
        attr = bare.split(",", 1)[0]
    except (UnicodeDecodeError, IndexError):
        return None
    if not attr.startswith("n="):
        return None
    return attr[2:].replace("=2C", ",").replace("=3D", "=")


async def step(session: Session, token: bytes, credentials: Any, now_ms: int) -> bytes:
    """Feed one client token; returns the server's token.  Raises AuthenticationFailed.
    When the exchange completes the session is authenticated (and its lifetime set)."""
    server = session.server
    if server is None:
        raise AuthenticationFailed("no SASL exchange under way")
    if session.mechanism in SCRAM and isinstance(server, ScramServer):
        if server.principal is None and server.awaiting_client_first:
            user = scram_user(token)
            server.use_credential(await credentials.get(user, session.mechanism) if user else None)
    out = server.step(token)
    if server.complete:
        name = server.principal
        if session.reauthenticating and session.principal != f"User:{name}":
            raise AuthenticationFailed("Cannot change principals during re-authentication")
        session.principal = f"User:{name}"
        session.authenticated = True
        session.reauthenticating = False
        session.server = None
        session.raw_tokens = False
        reauth = session.sasl.reauth_ms if session.sasl is not None else 0
        session.expires_at_ms = now_ms + reauth if reauth > 0 else None
    return out
