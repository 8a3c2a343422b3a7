"""SASL on a listener, configured with Kafka's names, and a connection's authentication state.

Per listener (``listener.name.<name>.`` prefix over the plain key, name in lower case):

* ``sasl.enabled.mechanisms``: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (Kafka's default GSSAPI,
  and OAUTHBEARER, are refused naming the key: pybroker has neither).
* ``listener.name.<name>.<mechanism>.sasl.jaas.config``: PLAIN's users are its
  ``user_<name>="<password>"`` options; ``username`` / ``password`` are what this broker
  logs in with when the listener is the inter-broker one (``sasl.mechanism.inter.broker.protocol``).
  SCRAM users are in the metadata store (security/credentials.py).
* ``connections.max.reauth.ms`` (KIP-368, default 0: never): the session lifetime answered in
  SaslAuthenticate v1+; past it a connection that has not re-authenticated is closed at its
  next request.

``Session`` is one connection's state (driven by the SaslHandshake / SaslAuthenticate
handlers and the connection): before authentication only ApiVersions and the SASL requests are
allowed; ``principal`` is Kafka's KafkaPrincipal as "User:<name>" (ANONYMOUS on PLAINTEXT, the
certificate's mapped distinguished name on SSL with a client certificate).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from pybroker.security.jaas import JaasError, parse_jaas
from pybroker.security.scram import MECHANISMS as SCRAM_MECHANISMS

SUPPORTED = ("PLAIN", *SCRAM_MECHANISMS)
ANONYMOUS = "User:ANONYMOUS"


class SaslConfigError(ValueError):
    def __init__(self, key: str, why: str) -> None:
        super().__init__(f"invalid value for configuration key {key!r}: {why}")
        self.key = key


def _setting(settings: Mapping[str, str], listener: str, key: str) -> tuple[str, str | None]:
    """(the key that was read, its value): the listener-prefixed key wins."""
    prefixed = f"listener.name.{listener.lower()}.{key}"
    if prefixed in settings:
        return prefixed, settings[prefixed]
    return key, settings.get(key)


@dataclass(frozen=True)
class ListenerSasl:
    listener: str
    mechanisms: tuple[str, ...]
    plain_users: dict[str, str] = field(default_factory=dict)
    # mechanism -> (username, password) of the JAAS entry: the broker's own login
    logins: dict[str, tuple[str, str]] = field(default_factory=dict)
    reauth_ms: int = 0


def listener_sasl(settings: Mapping[str, str], listener: str) -> ListenerSasl:
    key, raw = _setting(settings, listener, "sasl.enabled.mechanisms")
    names = [m.strip().upper() for m in (raw if raw is not None else "GSSAPI").split(",")]
    names = [m for m in names if m]
    if not names:
        raise SaslConfigError(key, f"no SASL mechanism enabled on listener {listener}")
    for m in names:
        if m not in SUPPORTED:
            raise SaslConfigError(
                key,
                f"SASL mechanism {m} is not supported by this broker "
                f"(listener {listener}; supported: {', '.join(SUPPORTED)})",
            )
    users: dict[str, str] = {}
    logins: dict[str, tuple[str, str]] = {}
    for m in names:
        jkey = f"listener.name.{listener.lower()}.{m.lower()}.sasl.jaas.config"
        text = settings.get(jkey)
        if text is None:
            if m == "PLAIN":
                raise SaslConfigError(
                    jkey, f"listener {listener} enables PLAIN but has no JAAS configuration"
                )
            continue
        try:
            module, _, options = parse_jaas(text)
        except JaasError as e:
            raise SaslConfigError(jkey, str(e)) from None
        expected = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if m == "PLAIN"
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        if module != expected:
            raise SaslConfigError(jkey, f"{m} needs {expected}, not {module}")
        if m == "PLAIN":
            users = {k[5:]: v for k, v in options.items() if k.startswith("user_") and k[5:]}
        if "username" in options and "password" in options:
            logins[m] = (options["username"], options["password"])
    rkey, rraw = _setting(settings, listener, "connections.max.reauth.ms")
    try:
        reauth = int(rraw) if rraw is not None else 0
    except ValueError:
        raise SaslConfigError(rkey, f"not an integer: {rraw!r}") from None
    if reauth < 0:
        raise SaslConfigError(rkey, "must be >= 0")
    return ListenerSasl(listener, tuple(names), users, logins, reauth)


# -- TLS client certificates -> principal (ssl.principal.mapping.rules) ---------------------

_SHORT = {
    "commonName": "CN",
    "organizationalUnitName": "OU",
    "organizationName": "O",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "countryName": "C",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def _escape_dn_value(v: str) -> str:
    out = re.sub(r'([,+"\\<>;])', r"\\\1", v)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out


def distinguished_name(cert: Mapping[str, object]) -> str:
    """RFC 2253 form of a peer certificate's subject (``ssl.SSLSocket.getpeercert()``), as
    Java's X500Principal.getName() gives it: the last RDN first."""
    rdns = []
    for rdn in reversed(cert.get("subject", ())):  # type: ignore[call-overload]
        rdns.append("+".join(f"{_SHORT.get(k, k)}={_escape_dn_value(str(v))}" for k, v in rdn))
    return ",".join(rdns)


_RULE = re.compile(r"RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU])?(?:,|$)")


def parse_mapping_rules(text: str) -> list[tuple[re.Pattern[str], str, str] | None]:
    """Kafka's ssl.principal.mapping.rules: RULE:pattern/replacement/[L|U] entries and
    DEFAULT (None), in order; raises ValueError."""
    rules: list[tuple[re.Pattern[str], str, str] | None] = []
    rest = text.strip()
    while rest:
        rest = rest.lstrip(", \n\t")
        if not rest:
            break
        if rest.startswith("DEFAULT"):
            rules.append(None)
            rest = rest[len("DEFAULT") :]
            continue
        m = _RULE.match(rest)
        if m is None:
            raise ValueError(f"invalid rule: {rest!r}")
        java_repl = m.group(3)
        repl = re.sub(r"\$(\d)", r"\\\1", java_repl)
        rules.append((re.compile(m.group(1)), repl, m.group(5) or ""))
        rest = rest[m.end() :]
    return rules


def map_principal(dn: str, rules: list[tuple[re.Pattern[str], str, str] | None]) -> str:
    for rule in rules or [None]:
        if rule is None:
            return dn
        pattern, repl, case = rule
        if pattern.fullmatch(dn):
            name = pattern.sub(repl, dn)
            return name.lower() if case == "L" else name.upper() if case == "U" else name
    return dn  # Kafka: no rule matched -> the DN itself


# -- a connection's state ---------------------------------------------------------------------


@dataclass
class Session:
    """Authentication state of one connection."""

    sasl: ListenerSasl | None = None  # None: the listener has no SASL
    principal: str = ANONYMOUS
    authenticated: bool = True
    mechanism: str | None = None
    server: object | None = None  # the exchange under way (PlainServer / ScramServer)
    raw_tokens: bool = False  # SaslHandshake v0: the next frames are bare SASL tokens
    expires_at_ms: int | None = None  # connections.max.reauth.ms: the session's end
    reauthenticating: bool = False
    close_after_response: str | None = None  # a reason: close once the answer is sent

    @classmethod
    def for_listener(cls, sasl: ListenerSasl | None, tls_principal: str | None) -> Session:
        if sasl is not None:
            return cls(sasl=sasl, authenticated=False)
        return cls(principal=f"User:{tls_principal}" if tls_principal else ANONYMOUS)

    def expired(self, now_ms: int) -> bool:
        return self.expires_at_ms is not None and now_ms >= self.expires_at_ms
