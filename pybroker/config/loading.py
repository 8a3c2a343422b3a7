"""From server.properties and --override to a validated :class:`Config`: Java properties
parsing, each key parsed by its declaration, unknown keys as warnings, and the checks across
keys (:func:`validate`, also run on each dynamic change)."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from pybroker import topic_config
from pybroker.config import values as conv
from pybroker.config.keys import FIELDS, KEYS, Config
from pybroker.config.values import DEFAULT_PROTOCOL_MAP, ConfigError
from pybroker.configdef import ConfigException, did_you_mean
from pybroker.kafka_broker_configs import KAFKA_CONFIG_NAMES
from pybroker.security import listeners as listener_security
from pybroker.security.sasl import SaslConfigError
from pybroker.security.tls import TlsConfigError

# Keys of Kafka's security settings that only act on an SSL or SASL listener: accepted (and
# said to be inert) while every listener is PLAINTEXT.  Keys that ask for security whatever the
# listeners (an authorizer, secure replication) are refused by validate().
_INERT_WITHOUT_SECURE_LISTENER = ("ssl.", "sasl.", "listener.name.", "principal.builder.class")


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties: key=value or key:value or key value; # and ! comments; \\ continues."""
    out: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", logical)
        if m:
            out[m.group(1)] = m.group(2)
        elif logical:
            out[logical] = ""
        logical = ""
    return out


def _listener_protocols(settings: Mapping[str, str]) -> set[str]:
    try:
        listeners = conv.listeners(settings.get("listeners", "PLAINTEXT://127.0.0.1:9092").strip())
        protocols = dict(
            conv.protocol_map(settings.get("listener.security.protocol.map", DEFAULT_PROTOCOL_MAP))
        )
    except ValueError:
        return set()  # reported with its key below
    return {protocols.get(e.listener, "") for e in listeners}


def unknown_key_warning(key: str) -> str:
    """What the broker says about a key it does not read: a Kafka key is said to have no
    effect here; anything else is unknown, with the nearest known key suggested."""
    if key in KEYS:  # Kafka's DynamicConfig.Broker keys: not KafkaConfig ones
        return (
            f"configuration key {key!r} ignored: it is set dynamically only"
            " (kafka-configs --entity-type brokers)"
        )
    if key in KAFKA_CONFIG_NAMES:
        return f"configuration key {key!r} (Kafka's) has no effect in pybroker"
    if key in topic_config.KEYS:
        broker_key = topic_config.broker_synonym(key)
        hint = f"; its broker default is {broker_key!r}" if broker_key else ""
        return f"configuration key {key!r} is a topic config, ignored here{hint}"
    near = did_you_mean(key, [*KEYS, *KAFKA_CONFIG_NAMES])
    hint = f": did you mean {near!r}?" if near else ""
    return f"unknown configuration key {key!r} ignored{hint}"


def build_config(settings: Mapping[str, str]) -> Config:
    values: dict[str, Any] = {}
    warnings = []
    protocols = _listener_protocols(settings)
    ssl_served = bool(protocols & {"SSL", "SASL_SSL"})
    sasl_served = bool(protocols & {"SASL_PLAINTEXT", "SASL_SSL"})
    security: list[tuple[str, str]] = []
    for key, raw in settings.items():
        if key.startswith(("ssl.", "sasl.", "listener.name.", "connections.max.reauth.ms")):
            security.append((key, raw))
            if ssl_served and ".ssl." in f".{key}":
                continue  # read by pybroker/security/tls.py for the SSL listeners
            if sasl_served and (".sasl." in f".{key}" or key.endswith("connections.max.reauth.ms")):
                continue  # read by pybroker/security/sasl.py for the SASL listeners
        spec = KEYS.get(key)
        if spec is None or spec.dynamic_only:
            if key.startswith(_INERT_WITHOUT_SECURE_LISTENER):
                # every listener is PLAINTEXT (or validate refuses the configuration), and on
                # PLAINTEXT listeners Kafka does not use these either
                warnings.append(f"configuration key {key!r} has no effect: no SSL or SASL listener")
            else:
                warnings.append(unknown_key_warning(key))
            continue
        try:
            values[FIELDS[key]] = spec.parse_attribute(raw)
        except ConfigException as e:
            raise ConfigError(
                f"invalid value {raw!r} for configuration key {key!r}: {e.reason}"
            ) from None
    explicit = frozenset(k for k in settings if k in KEYS and not KEYS[k].dynamic_only)
    cfg = Config(
        **values,
        warnings=tuple(warnings),
        explicit_keys=explicit,
        security_settings=tuple(security),
    )
    validate(cfg)
    return cfg


def _validate_security(cfg: Config) -> None:
    """Every listener's security protocol comes from listener.security.protocol.map (a name
    missing there is refused, as Kafka refuses it); what a secured listener needs (TLS keys,
    SASL mechanisms and their JAAS entries) must be there, or the broker refuses to start,
    naming the key: never served unsecured."""
    for key, endpoints in (("listeners", cfg.listeners), ("advertised.listeners", cfg.advertised)):
        for e in endpoints:
            proto = cfg.security_protocol(e.listener)
            if proto is None:
                raise ConfigError(
                    f"invalid value for configuration key 'listener.security.protocol.map': "
                    f"no security protocol for listener {e.listener} (named in {key!r})"
                )
    if cfg.inter_broker_listener_name is not None:
        if "security.inter.broker.protocol" in cfg.explicit_keys:
            raise ConfigError(
                "Only one of inter.broker.listener.name and security.inter.broker.protocol "
                "should be set."
            )
    names = [e.listener for e in cfg.advertised]
    try:
        listener_security.check(cfg)
    except (TlsConfigError, SaslConfigError) as e:
        raise ConfigError(str(e)) from None
    except ValueError as e:
        raise ConfigError(
            f"invalid value for configuration key 'ssl.principal.mapping.rules': {e}"
        ) from None
    if cfg.inter_broker_listener not in names:
        key = (
            "inter.broker.listener.name"
            if cfg.inter_broker_listener_name is not None
            else "security.inter.broker.protocol"
        )
        raise ConfigError(
            f"invalid value for configuration key {key!r}: inter.broker.listener.name must be "
            f"a listener name defined in advertised.listeners. The valid options based on "
            f"currently configured listeners are {','.join(names)}"
        )


def validate(cfg: Config) -> None:
    """The checks across keys (each key's own went through its validator when it was
    parsed): raises ConfigError naming the key."""

    def need(cond: bool, key: str, why: str) -> None:
        if not cond:
            raise ConfigError(f"invalid value for configuration key {key!r}: {why}")

    _validate_security(cfg)
    need(
        cfg.max_connections_per_ip > 0 or bool(cfg.max_connections_per_ip_overrides),
        "max.connections.per.ip",
        "0 needs max.connections.per.ip.overrides (it would refuse every connection)",
    )
    need(
        cfg.group_consumer_heartbeat_interval_ms < cfg.group_consumer_session_timeout_ms,
        "group.consumer.heartbeat.interval.ms",
        "must be below group.consumer.session.timeout.ms",
    )
    need(cfg.roll_ms >= 1, "log.roll.ms", "must be >= 1")
    for key, value, lo, hi in (  # group.share.*: each default within its min and max
        ("group.share.session.timeout.ms", cfg.group_share_session_timeout_ms,
         cfg.group_share_min_session_timeout_ms, cfg.group_share_max_session_timeout_ms),
        ("group.share.heartbeat.interval.ms", cfg.group_share_heartbeat_interval_ms,
         cfg.group_share_min_heartbeat_interval_ms, cfg.group_share_max_heartbeat_interval_ms),
        ("group.share.record.lock.duration.ms", cfg.group_share_record_lock_duration_ms,
         cfg.group_share_min_record_lock_duration_ms,
         cfg.group_share_max_record_lock_duration_ms),
        ("group.share.delivery.count.limit", cfg.group_share_delivery_count_limit,
         cfg.group_share_min_delivery_count_limit, cfg.group_share_max_delivery_count_limit),
        ("group.share.partition.max.record.locks", cfg.group_share_partition_max_record_locks,
         cfg.group_share_min_partition_max_record_locks,
         cfg.group_share_max_partition_max_record_locks),
    ):  # fmt: skip
        need(lo <= value <= hi, key, f"must be within its min and max ({lo}, {hi})")
    need(
        cfg.group_share_heartbeat_interval_ms < cfg.group_share_session_timeout_ms,
        "group.share.heartbeat.interval.ms",
        "must be below group.share.session.timeout.ms",
    )
    if cfg.metrics_listener is not None and cfg.metrics_listener.port:
        clash = [str(e) for e in cfg.listeners if e.port == cfg.metrics_listener.port]
        need(not clash, "metrics.listener", f"its port is the Kafka listener's: {clash}")
    need(
        0 < cfg.group_min_session_timeout_ms <= cfg.group_max_session_timeout_ms,
        "group.min.session.timeout.ms",
        "must be > 0 and <= group.max.session.timeout.ms",
    )
    if cfg.log_cleaner_enable and cfg.log_cleaner_threads > 0:
        # Kafka's Cleaner: the offset map of each thread (24 bytes an entry: a 16-byte key
        # hash and an 8-byte offset) must hold more than one entry at its load factor
        slots = cfg.log_cleaner_dedupe_buffer_size // cfg.log_cleaner_threads // 24
        need(
            slots * cfg.log_cleaner_io_buffer_load_factor > 1,
            "log.cleaner.dedupe.buffer.size",
            "the offset map is too small to fit in even a single message; increase"
            " log.cleaner.dedupe.buffer.size or decrease log.cleaner.threads",
        )
    names = [e.listener for e in cfg.listeners]
    need(len(set(names)) == len(names), "listeners", "listener names must be unique")
    if cfg.zookeeper_connect is not None:
        for hp in cfg.zookeeper_connect.split("/")[0].split(","):
            u = urlsplit("//" + hp.strip())
            need(
                bool(u.hostname) and u.port is not None,
                "zookeeper.connect",
                "host:port[,..][/chroot]",
            )


def with_defaults_for_cli(cfg: Config, default_dir: str) -> Config:
    """`pybroker serve` with no log.dirs keeps data in a local directory it names on start."""
    if cfg.log_dirs is None and cfg.log_dir is None:
        return dataclasses.replace(cfg, log_dirs=os.path.abspath(default_dir))
    return cfg


def describe_settings(cfg: Config) -> list[tuple[str, str | None, bool]]:
    """(Kafka key, value as Kafka prints it, set explicitly?) for every key read from
    server.properties (the dynamic-only ones are described when set, by dynamic_config)."""
    return [
        (key, cfg.value_string(key), key in cfg.explicit_keys)
        for key, spec in KEYS.items()
        if not spec.dynamic_only
    ]
