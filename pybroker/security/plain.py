"""SASL/PLAIN (RFC 4616) as Kafka's PlainServerCallbackHandler serves it: the users are the
``user_<name>="<password>"`` options of the listener's PlainLoginModule JAAS entry.

One message from the client, ``[authzid] NUL authcid NUL passwd`` (UTF-8); an authzid other
than the user is refused.  Passwords are compared in constant time, and an unknown user is
compared against a dummy, so the failure takes the same time as a wrong password.
"""

from __future__ import annotations

import hashlib
import hmac

from pybroker.security.scram import AuthenticationFailed

_DUMMY = hashlib.sha256(b"pybroker-no-such-user").digest()


class PlainServer:
    mechanism = "PLAIN"

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self.principal: str | None = None
        self.complete = False

    def step(self, message: bytes) -> bytes:
        if self.complete:
            raise AuthenticationFailed("PLAIN exchange already complete")
        parts = message.split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        expected = self._users.get(user)
        want = hashlib.sha256(expected.encode()).digest() if expected is not None else _DUMMY
        ok = hmac.compare_digest(hashlib.sha256(password.encode()).digest(), want)
        if not ok or expected is None:
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        self.principal = user
        self.complete = True
        return b""
