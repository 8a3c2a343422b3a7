"""What a broker's listeners need for security, built from its Config: the TLS contexts of
SSL / SASL_SSL listeners (security/tls.py), their SASL settings (security/sasl.py), the
certificate-DN -> principal mapping, and this broker's own side of the inter-broker listener.

The Config holds the settings as given (``Config.security_settings``: ``ssl.*``, ``sasl.*``,
``listener.name.*``); only this module turns them into objects.  Errors name the key at fault
(``TlsConfigError``, ``SaslConfigError``); pybroker/config/ calls these once while it
validates a configuration, so a bad setting stops the start before anything listens.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING

from pybroker.security import sasl, tls

if TYPE_CHECKING:  # pybroker.config imports this module
    from pybroker.config import Config

SSL_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


def ssl_context(cfg: Config, listener: str) -> ssl.SSLContext:
    """The server context of an SSL listener (its ``listener.name.<l>.ssl.*`` over
    ``ssl.*``)."""
    return tls.server_context(dict(cfg.security_settings), listener)


def inter_broker_ssl_context(cfg: Config) -> ssl.SSLContext | None:
    """The client context replication and marker requests use when the inter-broker listener
    has TLS (its ssl.* settings, as Kafka configures a broker's own client side); else None."""
    if cfg.security_protocol(cfg.inter_broker_listener) not in SSL_PROTOCOLS:
        return None
    return tls.client_context(dict(cfg.security_settings), cfg.inter_broker_listener)


def listener_sasl(cfg: Config, listener: str) -> sasl.ListenerSasl:
    """A SASL listener's mechanisms, PLAIN users and logins."""
    return sasl.listener_sasl(dict(cfg.security_settings), listener)


def principal_mapper(cfg: Config) -> Callable[[str], str]:
    """ssl.principal.mapping.rules as a function of a certificate's DN (ValueError for bad
    rules)."""
    rules = sasl.parse_mapping_rules(
        dict(cfg.security_settings).get("ssl.principal.mapping.rules", "DEFAULT")
    )
    return lambda dn: sasl.map_principal(dn, rules)


def inter_broker_sasl(cfg: Config) -> tuple[str, str, str] | None:
    """(mechanism, username, password) this broker logs in with on the inter-broker listener,
    when it is a SASL one; else None."""
    listener = cfg.inter_broker_listener
    if cfg.security_protocol(listener) not in SASL_PROTOCOLS:
        return None
    settings = dict(cfg.security_settings)
    mech = settings.get("sasl.mechanism.inter.broker.protocol", "GSSAPI").upper()
    conf = listener_sasl(cfg, listener)
    if mech not in conf.mechanisms:
        raise sasl.SaslConfigError(
            "sasl.mechanism.inter.broker.protocol",
            f"{mech} is not enabled on the inter-broker listener {listener}",
        )
    if mech not in conf.logins:
        raise sasl.SaslConfigError(
            f"listener.name.{listener.lower()}.{mech.lower()}.sasl.jaas.config",
            "the inter-broker mechanism's JAAS entry needs username and password",
        )
    user, password = conf.logins[mech]
    return mech, user, password


def check(cfg: Config) -> None:
    """Build everything above once (what the broker builds at start): raises TlsConfigError,
    SaslConfigError or ValueError (ssl.principal.mapping.rules) naming the key."""
    for listener in cfg.ssl_listeners:
        ssl_context(cfg, listener)
    inter_broker_ssl_context(cfg)
    for listener in cfg.sasl_listeners:
        listener_sasl(cfg, listener)
    if cfg.inter_broker_listener in [e.listener for e in cfg.advertised]:
        inter_broker_sasl(cfg)  # (else config.py refuses it, naming the listener)
    principal_mapper(cfg)
