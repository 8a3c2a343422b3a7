"""Dynamic broker configuration (KIP-226), Kafka 3.9's DynamicBrokerConfig for pybroker.  The
broker's one ``Config`` stays the object every component reads; ``update`` sets its attributes
in place.  Precedence per key: per-broker dynamic > cluster-wide default > static > Kafka's
default, a key at a higher level removing its synonyms below (Kafka's ``overrideProps``).
``validate`` answers Kafka's INVALID_REQUEST messages; ``describe`` builds DescribeConfigs
entries with Kafka's sources and synonyms.  The reactions to a change are the broker's.
Contract: docs/internals.md ("pybroker/dynamic_config.py").
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from pybroker import config as config_module
from pybroker.config import FIELDS, KEYS, Config, ConfigError
from pybroker.configdef import ConfigException, Type
from pybroker.errors import ErrorCode, KafkaError
from pybroker.kafka_broker_configs import DEFINITIONS, DYNAMIC_MODES, KAFKA_CONFIG_NAMES

log = logging.getLogger(__name__)

# DescribeConfigsResponse.ConfigSource ids
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# The replication quotas (QuotaConfigs.brokerQuotaConfigs): dynamic only, Long.MAX = none.
# Stored and set on Config; the throttling reads them at use time.
QUOTA_FIELDS = {k: FIELDS[k] for k, key in KEYS.items() if key.dynamic_only}

# The configs Kafka can change dynamically that pybroker applies live (the rest of
# DYNAMIC_MODES is refused: UNSUPPORTED).
LOG_CONFIGS = frozenset(
    {
        "log.segment.bytes",
        "log.roll.ms",
        "log.roll.jitter.ms",
        "log.segment.delete.delay.ms",
        "log.retention.ms",
        "log.retention.bytes",
        "log.index.interval.bytes",
        "log.index.size.max.bytes",
        "log.flush.interval.messages",
        "log.flush.interval.ms",
        "log.cleanup.policy",
        "log.cleaner.delete.retention.ms",
        "log.cleaner.min.cleanable.ratio",
        "log.cleaner.min.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
        "message.max.bytes",
        "compression.type",
        "log.message.timestamp.type",
        "log.message.timestamp.difference.max.ms",
        "log.message.timestamp.before.max.ms",
        "log.message.timestamp.after.max.ms",
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
        "log.message.downconversion.enable",  # Fetch v0-3 (handlers/_down_conversion.py)
        # accepted, with no effect on pybroker's logs (README: topic configs without effect)
        "log.preallocate",
        "log.local.retention.ms",
        "log.local.retention.bytes",
    }
)
CLEANER_CONFIGS = frozenset(
    {
        "log.cleaner.threads",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.io.buffer.size",
        "log.cleaner.io.buffer.load.factor",
        "log.cleaner.backoff.ms",
    }
)
CONNECTION_CONFIGS = frozenset(
    {"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides"}
)
# per broker: the endpoints this broker registers (its /brokers/ids/<id> is rewritten)
LISTENER_CONFIGS = frozenset({"advertised.listeners"})
SUPPORTED = (
    LOG_CONFIGS | CLEANER_CONFIGS | CONNECTION_CONFIGS | LISTENER_CONFIGS | frozenset(QUOTA_FIELDS)
)
assert SUPPORTED <= set(DYNAMIC_MODES) | set(QUOTA_FIELDS)

# DynamicBrokerConfig.DynamicSecurityConfigs (SslConfigs.RECONFIGURABLE_CONFIGS): only with a
# listener prefix
SECURITY_BASE_CONFIGS = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.truststore.certificates",
    }
)
# ClusterLevelListenerConfigs: listener-prefixed but settable at the default level
_CLUSTER_LEVEL_LISTENER_CONFIGS = frozenset(
    {"max.connections", "max.connection.creation.rate", "num.network.threads"}
)
_LISTENER_PREFIX = "listener.name."
# the TLS settings of an SSL listener that can change at run time (per broker, with the listener
# prefix, as Kafka's): new connections get a context built from them; open ones keep theirs
TLS_LISTENER_CONFIGS = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.certificates",
        "ssl.client.auth",
        "ssl.enabled.protocols",
        "ssl.cipher.suites",
    }
)
# Kafka stores these encrypted with password.encoder.secret, which pybroker does not implement
PASSWORD_CONFIGS = frozenset(
    {"ssl.keystore.password", "ssl.key.password", "ssl.truststore.password"}
)


_SYNONYM_GROUPS = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)


def _synonyms(name: str) -> list[str]:
    """DynamicBrokerConfig.brokerConfigSynonyms (without listener overrides), highest first."""
    for group in _SYNONYM_GROUPS:
        if name in group:
            return list(group)
    if name == "log.flush.interval.ms":  # the scheduler interval is its default
        return ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"]
    return [name]


def _listener_base(name: str) -> str | None:
    if not name.startswith(_LISTENER_PREFIX):
        return None
    rest = name[len(_LISTENER_PREFIX) :]
    return rest.split(".", 1)[1] if "." in rest else None


def is_kafka_dynamic(name: str) -> bool:
    """Kafka 3.9 can change this broker config dynamically (read_only=False)."""
    base = _listener_base(name)
    return name in DYNAMIC_MODES or name in QUOTA_FIELDS or base is not None


def _listener_name(name: str) -> str:
    return name[len(_LISTENER_PREFIX) :].split(".", 1)[0].upper()


def _scala_set(names: Iterable[str]) -> str:
    return f"Set({', '.join(sorted(names))})"


def _bad(message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_REQUEST, message)


# the keys whose values dynamic configs may move: the supported keys and their synonyms
_APPLIED = sorted({s for k in SUPPORTED for s in _synonyms(k) if s in KEYS})


def _parse(key: str, value: str) -> Any:
    """The key's attribute, parsed and validated with Kafka's messages."""
    try:
        return KEYS[key].parse_attribute(value)
    except ConfigException as e:
        raise _bad(str(e)) from None


class DynamicBrokerConfig:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.static: dict[str, str] = {}
        self.defaults: dict[str, str] = {}
        for key, spec in KEYS.items():
            if spec.dynamic_only:
                continue  # not KafkaConfig keys: no static value, no default to describe
            if key in config.explicit_keys:
                value = config.value_string(key)
                if value is not None:
                    self.static[key] = value
            if spec.default_string is not None:
                self.defaults[key] = spec.default_string
        self.static_security = dict(config.security_settings)
        self.per_broker: dict[str, str] = {}
        self.cluster_default: dict[str, str] = {}

    # -- validation ---------------------------------------------------------------------
    def validate(self, props: Mapping[str, str], per_broker: bool) -> None:
        """Kafka's validateConfigs + the new config's own checks; KafkaError(INVALID_REQUEST)."""
        names = set(props)
        static_only = {n for n in names if n in KAFKA_CONFIG_NAMES and not is_kafka_dynamic(n)}
        if static_only:
            raise _bad(f"Cannot update these configs dynamically: {_scala_set(static_only)}")
        security = names & SECURITY_BASE_CONFIGS
        if security:
            raise _bad(
                "These security configs can be dynamically updated only per-listener using the"
                f" listener prefix: {_scala_set(security)}"
            )
        for key in sorted(names & SUPPORTED):
            _parse(key, props[key])  # Kafka's validateConfigTypes, and each key's validator
        if not per_broker:
            per = {
                n
                for n in names
                if DYNAMIC_MODES.get(n) == "per-broker"
                or (
                    _listener_base(n) is not None
                    and _listener_base(n) not in _CLUSTER_LEVEL_LISTENER_CONFIGS
                )
            }
            if per:
                raise _bad(
                    "Cannot update these configs at default cluster level, broker id must be"
                    f" specified: {_scala_set(per)}"
                )
        passwords = {n for n in names if (_listener_base(n) or n) in PASSWORD_CONFIGS}
        if passwords:
            # ZkAdminManager: toPersistentProps encrypts passwords with password.encoder.secret
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                f"Invalid config value for resource ConfigResource(type=BROKER, name='"
                f"{self.config.broker_id if per_broker else ''}'): Password encoder secret not"
                " configured",
            )
        unsupported = {n for n in names if is_kafka_dynamic(n) and not self.supported(n)}
        if unsupported:
            raise _bad(
                f"Cannot update these configs dynamically in pybroker: {_scala_set(unsupported)}"
                " (docs/operations.md lists the dynamic broker configs it applies)"
            )
        unknown = {n for n in names if not self.supported(n)} - unsupported
        if unknown:
            raise _bad(f"Unknown dynamic broker configs: {_scala_set(unknown)}")
        if per_broker:
            candidate = self._values(props, self.cluster_default)
        else:
            candidate = self._values(self.per_broker, props)
        new = self._replaced(candidate)
        if new.advertised_listeners is not None:
            listeners = {e.listener for e in new.listeners}
            advertised = {e.listener for e in new.advertised_listeners}
            if not advertised <= listeners:
                # DynamicListenerConfig.validateReconfiguration
                raise _bad(
                    f"Advertised listeners '{_listener_names(advertised)}' must be a subset of"
                    f" listeners '{_listener_names(listeners)}'"
                )
        try:
            config_module.validate(new)
        except ConfigError as e:
            raise _bad(str(e)) from None

    def supported(self, name: str) -> bool:
        """pybroker applies this key live (a TLS key only for one of this broker's SSL
        listeners)."""
        if name in SUPPORTED:
            return True
        return (
            _listener_base(name) in TLS_LISTENER_CONFIGS
            and _listener_name(name) in self.config.ssl_listeners
        )

    # -- applying -----------------------------------------------------------------------
    def _clean(self, stored: Mapping[str, str], per_broker: bool) -> dict[str, str]:
        """fromPersistentProps: drop (and log) what cannot apply."""
        out = {}
        for key, value in stored.items():
            per_broker_only = DYNAMIC_MODES.get(key) == "per-broker" or key.startswith(
                _LISTENER_PREFIX
            )
            if not self.supported(key) or (not per_broker and per_broker_only):
                log.error("dynamic broker config %s=%s is ignored: not applicable", key, value)
                continue
            try:
                if key in SUPPORTED:
                    _parse(key, value)
            except KafkaError as e:
                log.error("dynamic broker config ignored: %s", e)
                continue
            out[key] = value
        return out

    def _values(self, per_broker: Mapping[str, str], default: Mapping[str, str]) -> dict[str, Any]:
        props = dict(self.static)
        for layer in (default, per_broker):
            for key, value in layer.items():
                for synonym in _synonyms(key):
                    props.pop(synonym, None)
                props[key] = value
        values: dict[str, Any] = {}
        for key in _APPLIED:
            default_value = KEYS[key].attribute(KEYS[key].default)
            values[FIELDS[key]] = _parse(key, props[key]) if key in props else default_value
        security = dict(self.static_security)
        security.update({k: v for k, v in props.items() if k.startswith(_LISTENER_PREFIX)})
        values["security_settings"] = tuple(security.items())
        return values

    def _replaced(self, values: Mapping[str, Any]) -> Config:
        import dataclasses

        return dataclasses.replace(self.config, **values)

    def update(
        self, per_broker: Mapping[str, str] | None, default: Mapping[str, str] | None
    ) -> set[str]:
        """Apply the stored sets (None: unchanged); returns the Kafka keys whose values moved."""
        if per_broker is not None:
            self.per_broker = self._clean(per_broker, True)
        if default is not None:
            self.cluster_default = self._clean(default, False)
        values = self._values(self.per_broker, self.cluster_default)
        try:
            config_module.validate(self._replaced(values))
        except ConfigError as e:
            log.error("dynamic broker configs not applied: %s", e)
            return set()
        changed = set()
        for key in _APPLIED:
            field = FIELDS[key]
            if getattr(self.config, field) != values[field]:
                object.__setattr__(self.config, field, values[field])  # Config is frozen
                changed.add(key)
        old_security = dict(self.config.security_settings)
        new_security = dict(values["security_settings"])
        if old_security != new_security:
            object.__setattr__(self.config, "security_settings", values["security_settings"])
            changed |= {
                k
                for k in old_security.keys() | new_security.keys()
                if old_security.get(k) != new_security.get(k)
            }
        if changed:
            object.__setattr__(self.config, "revision", self.config.revision + 1)
            log.info(
                "dynamic broker configs applied: %s",
                ", ".join(
                    f"{k}={self.config.value_string(k)}" if k in _APPLIED else k
                    for k in sorted(changed)
                ),
            )
        return changed

    # -- DescribeConfigs ----------------------------------------------------------------
    def synonyms(self, name: str, per_broker: bool = True) -> list[dict]:
        """ConfigHelper.configSynonyms: by source (per-broker, default, static, Kafka's
        default), each source's synonyms in precedence order, then from ``name`` on."""
        out = []
        layers = (
            (self.per_broker, DYNAMIC_BROKER_CONFIG),
            (self.cluster_default, DYNAMIC_DEFAULT_BROKER_CONFIG),
            ({**self.static, **self.static_security}, STATIC_BROKER_CONFIG),
            (self.defaults, DEFAULT_CONFIG),
        )
        base = _listener_base(name)
        names = [name, base] if base is not None else _synonyms(name)  # matchListenerOverride
        for layer, source in layers:
            for synonym in names:
                if synonym in layer:
                    out.append({"name": synonym, "value": layer[synonym], "source": source})
        while out and out[0]["name"] != name:
            out.pop(0)
        if not per_broker:
            out = [s for s in out if s["source"] == DYNAMIC_DEFAULT_BROKER_CONFIG]
        return out

    def entry(
        self, name: str, value: str | None, per_broker: bool, documentation: bool
    ) -> dict[str, Any]:
        synonyms = self.synonyms(name, per_broker)
        kind, doc = config_type(name), documentation_of(name)
        return {
            "name": name,
            "value": value,
            "read_only": not is_kafka_dynamic(name),
            "config_source": synonyms[0]["source"] if synonyms else DEFAULT_CONFIG,
            "is_default": not synonyms or synonyms[0]["source"] == DEFAULT_CONFIG,
            "is_sensitive": kind == Type.PASSWORD,
            "synonyms": synonyms,
            "config_type": kind if kind is not None else _guess_type(value),
            "documentation": doc if documentation else None,
        }

    def describe_broker(self, documentation: bool) -> list[dict[str, Any]]:
        """Every setting this broker honours (and the quotas set dynamically), per broker."""
        out = []
        for key, value, _ in config_module.describe_settings(self.config):
            out.append(self.entry(key, value, True, documentation))
        for key in sorted(k for k in self.per_broker if k.startswith(_LISTENER_PREFIX)):
            out.append(self.entry(key, self.per_broker[key], True, documentation))
        for key in QUOTA_FIELDS:
            if key in self.per_broker or key in self.cluster_default:
                out.append(self.entry(key, self.config.value_string(key), True, documentation))
        return out

    def describe_default(self, documentation: bool) -> list[dict[str, Any]]:
        """The cluster-wide defaults stored (resource name "")."""
        return [
            self.entry(key, value, False, documentation)
            for key, value in sorted(self.cluster_default.items())
        ]


def _listener_names(names: set[str]) -> str:
    return ",".join(sorted(names))


def config_type(name: str) -> Type | None:
    """KafkaConfig.configType: the key's type, a listener-prefixed key's base key's."""
    if name in KEYS:
        return KEYS[name].type
    for candidate in (name, _listener_base(name)):
        if candidate in DEFINITIONS:
            return Type[DEFINITIONS[candidate][0]]
    return None


def documentation_of(name: str) -> str | None:
    if name in KEYS:
        return KEYS[name].doc
    return DEFINITIONS[name][3] if name in DEFINITIONS else None


def _guess_type(value: str | None) -> int:
    """The type of a key neither Kafka nor pybroker defines, from its value."""
    if value in ("true", "false"):
        return Type.BOOLEAN
    if (value or "").lstrip("-").isdigit():
        return Type.INT
    try:
        float(value or "x")
        return Type.DOUBLE
    except ValueError:
        return Type.STRING
