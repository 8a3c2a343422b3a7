"""TLS for SSL listeners, configured with Kafka's ``ssl.*`` names (PEM stores only), per listener
``listener.name.<name>.ssl.<key>`` over ``ssl.<key>``: the key store (``ssl.keystore.*``,
``ssl.key.password``), the trust store (``ssl.truststore.*``), ``ssl.client.auth``,
``ssl.enabled.protocols`` and ``ssl.cipher.suites``.  :func:`server_context` raises
:class:`TlsConfigError` naming the key at fault; the broker builds every context at start, so a
bad setting stops it before it listens.  The keys: docs/internals.md
("pybroker/security/tls.py").
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Mapping
from typing import Any

PROTOCOLS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


class TlsConfigError(ValueError):
    def __init__(self, key: str, why: str, *, missing: bool = False) -> None:
        what = "missing configuration key" if missing else "invalid value for configuration key"
        super().__init__(f"{what} {key!r}: {why}")
        self.key = key


def listener_settings(settings: Mapping[str, str], listener: str) -> dict[str, str]:
    """The ``ssl.*`` settings of one listener: ``listener.name.<name>.ssl.*`` over
    ``ssl.*``."""
    out = {k: v for k, v in settings.items() if k.startswith("ssl.")}
    prefix = f"listener.name.{listener.lower()}."
    for k, v in settings.items():
        if k.startswith(prefix) and k[len(prefix) :].startswith("ssl."):
            out[k[len(prefix) :]] = v
    return out


def _load_pem_text(ctx: ssl.SSLContext, text: str, password: str | None, key: str) -> None:
    """load_cert_chain reads files only: the PEM text goes through a private temp file."""
    fd, path = tempfile.mkstemp(prefix="pybroker-keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        ctx.load_cert_chain(path, password=password)
    except (ssl.SSLError, OSError) as e:
        raise TlsConfigError(key, f"cannot load the key and certificate chain: {e}") from None
    finally:
        os.unlink(path)


def _load_key_store(
    ctx: ssl.SSLContext, cfg: Mapping[str, str], key: Any, listener: str, *, required: bool
) -> None:
    """The PEM key store (file or text) into ``ctx``; a server must have one."""
    password = cfg.get("ssl.key.password") or None
    location = cfg.get("ssl.keystore.location")
    inline_key = cfg.get("ssl.keystore.key")
    chain = cfg.get("ssl.keystore.certificate.chain")
    if not (location or inline_key or chain):
        if required:
            raise TlsConfigError(
                key("ssl.keystore.location"),
                f"the {listener} listener uses TLS and needs its key and certificate chain: "
                "ssl.keystore.location (one PEM file with both), or ssl.keystore.key and "
                "ssl.keystore.certificate.chain (the PEM text), with ssl.keystore.type=PEM",
                missing=True,
            )
        return
    store_type = cfg.get("ssl.keystore.type", "JKS").upper()
    if store_type != "PEM":
        raise TlsConfigError(
            key("ssl.keystore.type"),
            f"{store_type} key stores are not supported: use ssl.keystore.type=PEM",
        )
    if location and (inline_key or chain):
        raise TlsConfigError(
            key("ssl.keystore.location"),
            "give either ssl.keystore.location or ssl.keystore.key and "
            "ssl.keystore.certificate.chain, not both",
        )
    if location:
        try:
            ctx.load_cert_chain(location, password=password)
        except (ssl.SSLError, OSError) as e:
            raise TlsConfigError(
                key("ssl.keystore.location"), f"cannot load {location}: {e}"
            ) from None
    elif inline_key and chain:
        _load_pem_text(
            ctx, f"{inline_key.strip()}\n{chain.strip()}\n", password, key("ssl.keystore.key")
        )
    else:
        missing = "ssl.keystore.certificate.chain" if inline_key else "ssl.keystore.key"
        raise TlsConfigError(
            key(missing), "the key and its certificate chain go together", missing=True
        )


def _load_trust(ctx: ssl.SSLContext, cfg: Mapping[str, str], key: Any) -> bool:
    """The PEM trust store into ``ctx``; False when there is none."""
    trust_type = cfg.get("ssl.truststore.type", "JKS").upper()
    trust_location = cfg.get("ssl.truststore.location")
    trust_text = cfg.get("ssl.truststore.certificates")
    if not (trust_location or trust_text):
        return False
    if trust_type != "PEM":
        raise TlsConfigError(
            key("ssl.truststore.type"),
            f"{trust_type} trust stores are not supported: use ssl.truststore.type=PEM",
        )
    try:
        if trust_location:
            ctx.load_verify_locations(cafile=trust_location)
        else:
            ctx.load_verify_locations(cadata=trust_text)
    except (ssl.SSLError, OSError) as e:
        which = "ssl.truststore.location" if trust_location else "ssl.truststore.certificates"
        raise TlsConfigError(key(which), f"cannot load the trusted certificates: {e}") from None
    return True


def _set_protocols(ctx: ssl.SSLContext, cfg: Mapping[str, str], key: Any) -> None:
    names = [p.strip() for p in cfg.get("ssl.enabled.protocols", "TLSv1.2,TLSv1.3").split(",")]
    names = [n for n in names if n]
    unknown = [n for n in names if n not in PROTOCOLS]
    if unknown or not names:
        raise TlsConfigError(
            key("ssl.enabled.protocols"), f"unknown {unknown or names}; known {list(PROTOCOLS)}"
        )
    versions = sorted(PROTOCOLS[n] for n in names)
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    ciphers = cfg.get("ssl.cipher.suites", "").strip()
    if ciphers:
        try:
            ctx.set_ciphers(":".join(c.strip() for c in ciphers.split(",") if c.strip()))
        except ssl.SSLError as e:
            raise TlsConfigError(
                key("ssl.cipher.suites"), f"no usable cipher (OpenSSL names): {e}"
            ) from None


def server_context(settings: Mapping[str, str], listener: str) -> ssl.SSLContext:
    """The SSLContext of an SSL listener, from its ssl.* settings."""

    def key(name: str) -> str:
        override = f"listener.name.{listener.lower()}.{name}"
        return override if override in settings else name

    cfg = listener_settings(settings, listener)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # (a missing key store is named before its type: Kafka's default type, JKS, is not
    # the fault when there is no store at all)
    _load_key_store(ctx, cfg, key, listener, required=True)
    trusted = _load_trust(ctx, cfg, key)
    auth = cfg.get("ssl.client.auth", "none").strip().lower()
    if auth not in CLIENT_AUTH:
        raise TlsConfigError(key("ssl.client.auth"), "one of none, requested, required")
    if auth != "none" and not trusted:
        raise TlsConfigError(
            key("ssl.client.auth"), f"{auth} needs ssl.truststore.* to check client certificates"
        )
    ctx.verify_mode = CLIENT_AUTH[auth]
    _set_protocols(ctx, cfg, key)
    return ctx


def client_context(settings: Mapping[str, str], listener: str) -> ssl.SSLContext:
    """The client SSLContext a broker uses towards the other brokers' ``listener`` (the
    inter-broker one), from that listener's ssl.* settings as Kafka uses them on its own
    client side: the trust store checks the peers (the system's CAs without one),
    ``ssl.endpoint.identification.algorithm`` (default ``https``; empty turns it off) checks
    their host names, and the key store, if any, is presented (mutual TLS)."""

    def key(name: str) -> str:
        override = f"listener.name.{listener.lower()}.{name}"
        return override if override in settings else name

    cfg = listener_settings(settings, listener)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _load_trust(ctx, cfg, key)
    if not (cfg.get("ssl.truststore.location") or cfg.get("ssl.truststore.certificates")):
        ctx.load_default_certs()
    algorithm = cfg.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if algorithm not in ("", "https"):
        raise TlsConfigError(key("ssl.endpoint.identification.algorithm"), "https or empty")
    ctx.check_hostname = algorithm == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    _load_key_store(ctx, cfg, key, listener, required=False)
    _set_protocols(ctx, cfg, key)
    return ctx
