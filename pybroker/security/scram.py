"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka serves them (KIP-84).

Credentials are what Kafka stores: salt, StoredKey = H(HMAC(SaltedPassword, "Client Key")),
ServerKey = HMAC(SaltedPassword, "Server Key") and the iteration count, never the password;
``credential_to_string`` / ``credential_from_string`` are Kafka's ScramCredentialUtils text
form (``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``).

``ScramServer`` is one server-side exchange (sans-I/O): ``step(client message)`` returns the
next server message, and after the client-final message ``principal`` names the user.  Any
failure raises ``AuthenticationFailed`` with Kafka's message.  An unknown user gets a
server-first message built from a salt derived from the name (same shape and work as a real
one) and fails at the proof like a wrong password, so the answers and their timing do not tell
whether the user exists.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka's ScramMechanism type ids (AlterUserScramCredentials, DescribeUserScramCredentials)
MECHANISM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384
DEFAULT_ITERATIONS = 4096
SALT_BYTES = 24  # what clients generate (kafka-python; the Java admin's are ~26)


class AuthenticationFailed(Exception):
    pass


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def _unb64(s: str) -> bytes:
    return base64.b64decode(s.encode(), validate=True)


def salted_password(mechanism: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism], password, salt, iterations)


def credential_from_salted(mechanism: str, salted: bytes, salt: bytes, iterations: int):
    h = MECHANISMS[mechanism]
    client_key = hmac.new(salted, b"Client Key", h).digest()
    stored_key = hashlib.new(h, client_key).digest()
    server_key = hmac.new(salted, b"Server Key", h).digest()
    return ScramCredential(salt, stored_key, server_key, iterations)


def make_credential(
    mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    salt = salt if salt is not None else secrets.token_bytes(SALT_BYTES)
    salted = salted_password(mechanism, password.encode(), salt, iterations)
    return credential_from_salted(mechanism, salted, salt, iterations)


def credential_to_string(c: ScramCredential) -> str:
    return (
        f"salt={_b64(c.salt)},stored_key={_b64(c.stored_key)},"
        f"server_key={_b64(c.server_key)},iterations={c.iterations}"
    )


def credential_from_string(s: str) -> ScramCredential:
    fields = dict(part.split("=", 1) for part in s.split(","))
    return ScramCredential(
        _unb64(fields["salt"]),
        _unb64(fields["stored_key"]),
        _unb64(fields["server_key"]),
        int(fields["iterations"]),
    )


def _sasl_name(s: str) -> str:
    """RFC 5802 saslname: '=2C' is ',' and '=3D' is '='; any other '=' is malformed."""
    out, i = [], 0
    while i < len(s):
        if s[i] == "=":
            code = s[i + 1 : i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise AuthenticationFailed("Invalid username in SCRAM client message")
            i += 3
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def _attrs(msg: str) -> list[tuple[str, str]]:
    out = []
    for part in msg.split(","):
        if len(part) < 2 or part[1] != "=":
            raise AuthenticationFailed("Invalid SCRAM message")
        out.append((part[0], part[2:]))
    return out


def _failed(mechanism: str) -> AuthenticationFailed:
    return AuthenticationFailed(
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


class ScramServer:
    """One SCRAM exchange: client-first -> server-first, client-final -> server-final."""

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], ScramCredential | None],
        fake_salt_key: bytes,
    ) -> None:
        self.mechanism = mechanism
        self._h = MECHANISMS[mechanism]
        self._lookup = lookup
        self._fake_salt_key = fake_salt_key
        self._state = "first"
        self.principal: str | None = None
        self.complete = False

    @property
    def awaiting_client_first(self) -> bool:
        return self._state == "first"

    def use_credential(self, cred: ScramCredential | None) -> None:
        """The client's credential, looked up ahead (an async store) of its client-first."""
        self._lookup = lambda _user: cred

    def step(self, message: bytes) -> bytes:
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SCRAM client message: not UTF-8") from None
        if self._state == "first":
            return self._client_first(text)
        if self._state == "final":
            return self._client_final(text)
        raise AuthenticationFailed("SCRAM exchange already complete")

    def _credential(self, user: str) -> tuple[ScramCredential, bool]:
        cred = self._lookup(user)
        if cred is not None:
            return cred, True
        # same shape as a real credential; the proof can never match (random keys)
        salt = hmac.new(self._fake_salt_key, user.encode(), "sha256").digest()[:SALT_BYTES]
        return (
            ScramCredential(
                salt,
                secrets.token_bytes(hashlib.new(self._h).digest_size),
                secrets.token_bytes(hashlib.new(self._h).digest_size),
                DEFAULT_ITERATIONS,
            ),
            False,
        )

    def _client_first(self, text: str) -> bytes:
        # gs2-header: cbind-flag "," [authzid] ","
        parts = text.split(",", 2)
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SCRAM client first message")
        cbind, authzid, bare = parts
        if cbind not in ("n", "y"):
            raise AuthenticationFailed("SCRAM channel binding is not supported")
        attrs = _attrs(bare)
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise AuthenticationFailed("Invalid SCRAM client first message")
        user = _sasl_name(attrs[0][1])
        for k, v in attrs[2:]:
            if k == "m":
                raise AuthenticationFailed("SCRAM mandatory extensions are not supported")
            if (k, v) == ("t", "tokenauth=true"):
                raise AuthenticationFailed("delegation tokens are not supported")
        if authzid:
            if not authzid.startswith("a=") or _sasl_name(authzid[2:]) != user:
                raise AuthenticationFailed(
                    "Authentication failed: Client requested an authorization id that is "
                    "different from username"
                )
        self._user = user
        self._gs2_header = f"{cbind},{authzid},"
        self._client_first_bare = bare
        self._cred, self._known = self._credential(user)
        self._nonce = attrs[1][1] + secrets.token_urlsafe(24)
        self._server_first = f"r={self._nonce},s={_b64(self._cred.salt)},i={self._cred.iterations}"
        self._state = "final"
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        self._state = "done"
        attrs = _attrs(text)
        if len(attrs) < 3 or attrs[0][0] != "c" or attrs[1][0] != "r" or attrs[-1][0] != "p":
            raise AuthenticationFailed("Invalid SCRAM client final message")
        # Kafka 3.8.1+ (ScramSaslServer): the nonce must END with the server-first nonce, so
        # librdkafka < 2.6.1's r=<client nonce><server nonce> (its own nonce twice) logs in
        if not attrs[1][1].endswith(self._nonce):
            raise AuthenticationFailed("Invalid SCRAM client final message: nonce mismatch")
        try:
            binding = _unb64(attrs[0][1])
            proof = _unb64(attrs[-1][1])
        except ValueError:
            raise AuthenticationFailed("Invalid SCRAM client final message") from None
        if binding != self._gs2_header.encode():
            raise AuthenticationFailed("Invalid SCRAM client final message: channel binding")
        without_proof = text[: text.rindex(",p=")]
        auth_message = (f"{self._client_first_bare},{self._server_first},{without_proof}").encode()
        signature = hmac.new(self._cred.stored_key, auth_message, self._h).digest()
        if len(proof) != len(signature):
            raise _failed(self.mechanism)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        computed = hashlib.new(self._h, client_key).digest()
        if not hmac.compare_digest(computed, self._cred.stored_key) or not self._known:
            raise _failed(self.mechanism)
        server_signature = hmac.new(self._cred.server_key, auth_message, self._h).digest()
        self.principal = self._user
        self.complete = True
        return f"v={_b64(server_signature)}".encode()


class ScramClient:
    """The client side (brokers authenticating to each other over a SCRAM listener)."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.mechanism = mechanism
        self._h = MECHANISMS[mechanism]
        self._user = username.replace("=", "=3D").replace(",", "=2C")
        self._password = password.encode()
        self._nonce = secrets.token_urlsafe(24)

    def first(self) -> bytes:
        self._bare = f"n={self._user},r={self._nonce}"
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = bytes(server_first).decode()
        attrs = dict(_attrs(text))
        nonce, salt, iterations = attrs["r"], _unb64(attrs["s"]), int(attrs["i"])
        if not nonce.startswith(self._nonce):
            raise AuthenticationFailed("SCRAM server nonce does not extend ours")
        salted = salted_password(self.mechanism, self._password, salt, iterations)
        cred = credential_from_salted(self.mechanism, salted, salt, iterations)
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        client_key = hmac.new(salted, b"Client Key", self._h).digest()
        signature = hmac.new(cred.stored_key, auth_message, self._h).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._expected = hmac.new(cred.server_key, auth_message, self._h).digest()
        return f"{without_proof},p={_b64(proof)}".encode()

    def check(self, server_final: bytes) -> None:
        attrs = dict(_attrs(bytes(server_final).decode()))
        if "e" in attrs or not hmac.compare_digest(_unb64(attrs.get("v", "")), self._expected):
            raise AuthenticationFailed(f"SCRAM server signature invalid: {server_final!r}")
