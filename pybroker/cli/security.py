"""Client security settings of the admin CLI: TLS and SASL (PLAIN, SCRAM-SHA-256/512), from
``--command-config FILE`` (a Kafka client properties file) and ``-X key=value`` (kcat's), the
latter winning; both Kafka's and librdkafka's names are read (security.protocol,
sasl.mechanism(s), sasl.username / sasl.password or sasl.jaas.config, ssl.ca.location, client
certificates, ssl.endpoint.identification.algorithm...).  ``batch.size`` and
``isolation.level`` are read by the commands they concern.  Any other key is a usage error
naming it.  The table of keys: docs/cli.md and docs/internals.md ("pybroker/cli/security.py").
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from pybroker.cli.client import UsageError
from pybroker.config import parse_properties
from pybroker.security.jaas import JaasError, parse_jaas

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
ALIASES = {
    "sasl.mechanisms": "sasl.mechanism",
    "ssl.truststore.location": "ssl.ca.location",
    "ssl.keystore.location": "ssl.certificate.location",
}
KNOWN = {
    "security.protocol",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
    "sasl.jaas.config",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "ssl.truststore.type",
    "ssl.keystore.type",
    "ssl.endpoint.identification.algorithm",
    "enable.ssl.certificate.verification",
    "client.id",  # accepted and ignored, as in Kafka's --command-config files
    "request.timeout.ms",
}
#: client settings a command reads itself (ClientSettings.commands)
COMMAND_SETTINGS = {"batch.size", "isolation.level"}


@dataclass(frozen=True)
class Security:
    ssl: ssl.SSLContext | None = None
    check_hostname: bool = True
    sasl: tuple[str, str, str] | None = None  # mechanism, username, password


@dataclass(frozen=True)
class ClientSettings:
    security: Security
    timeout_s: float | None  # request.timeout.ms, if set
    commands: dict[str, str]  # COMMAND_SETTINGS given


def load(command_config: str | None, overrides: list[str]) -> ClientSettings:
    """The client settings of ``--command-config`` and ``-X`` (the latter winning)."""
    settings: dict[str, str] = {}
    if command_config:
        try:
            settings.update(parse_properties(Path(command_config).read_text()))
        except OSError as e:
            raise UsageError(f"--command-config: {e}") from e
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"-X expects key=value, got {item!r}")
        settings[key.strip()] = value.strip()
    normal: dict[str, str] = {}
    for key, value in settings.items():
        key = ALIASES.get(key, key)
        if key not in KNOWN and key not in COMMAND_SETTINGS:
            raise UsageError(f"unknown client setting {key!r} (see docs/cli.md)")
        normal[key] = value
    timeout = None
    if "request.timeout.ms" in normal:
        timeout = positive_int("request.timeout.ms", normal["request.timeout.ms"]) / 1000
    commands = {k: normal.pop(k) for k in COMMAND_SETTINGS if k in normal}
    return ClientSettings(_security(normal), timeout, commands)


def positive_int(key: str, value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n <= 0:
        raise UsageError(f"{key} must be a positive integer: {value!r}")
    return n


def _security(s: dict[str, str]) -> Security:
    protocol = s.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise UsageError(f"security.protocol must be one of {', '.join(PROTOCOLS)}: {protocol}")
    for key in ("ssl.truststore.type", "ssl.keystore.type"):
        if s.get(key, "PEM").upper() != "PEM":
            raise UsageError(f"{key}: only PEM files are read")
    context = None
    check_hostname = True
    if protocol in ("SSL", "SASL_SSL"):
        context = ssl.create_default_context(cafile=s.get("ssl.ca.location"))
        if s.get("ssl.certificate.location"):
            context.load_cert_chain(
                s["ssl.certificate.location"],
                s.get("ssl.key.location"),
                s.get("ssl.key.password"),
            )
        if s.get("ssl.endpoint.identification.algorithm", "https") == "":
            context.check_hostname = False
            check_hostname = False
        if s.get("enable.ssl.certificate.verification", "true").lower() == "false":
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            check_hostname = False
    sasl = None
    if protocol.startswith("SASL_"):
        mechanism = s.get("sasl.mechanism", "PLAIN").upper()
        if mechanism not in MECHANISMS:
            raise UsageError(f"sasl.mechanism must be one of {', '.join(MECHANISMS)}: {mechanism}")
        user, password = s.get("sasl.username"), s.get("sasl.password")
        if "sasl.jaas.config" in s:
            try:
                _module, _flag, options = parse_jaas(s["sasl.jaas.config"])
            except JaasError as e:
                raise UsageError(f"sasl.jaas.config: {e}") from e
            user = user or options.get("username")
            password = password or options.get("password")
        if not user or password is None:
            raise UsageError(f"{protocol} needs sasl.username and sasl.password")
        sasl = (mechanism, user, password)
    return Security(ssl=context, check_hostname=check_hostname, sasl=sasl)
