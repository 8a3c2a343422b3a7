"""Kafka 3.9's topic configs (LogConfig's ConfigDef, TopicConfig, ServerTopicConfigSynonyms):
every key Kafka defines, declared once with its type, default, validator and broker synonyms.

- :data:`TOPIC_CONFIG` is the ConfigDef; documentation comes from Kafka itself
  (pybroker/kafka_topic_configs.py, which tests/test_config_model.py checks these
  declarations against).
- ``TopicConfigKey.synonyms``: the broker settings a key falls back to, first set one wins,
  with the unit conversion (``log.roll.hours`` -> ms); :func:`broker_defaults` is Kafka's
  ``KafkaConfig.extractLogConfigMap`` over a lookup of the broker's current values.
- :func:`validate` is ``LogConfig.validate`` as a ZooKeeper-mode Kafka 3.9 broker without
  tiered storage runs it on CreateTopics and (Incremental)AlterConfigs: unknown names, types
  and validators over the broker defaults plus the topic's settings, ``validateValues``, the
  remote-storage rules.
- :func:`effective` gives every key's typed value for a topic (its overrides over the broker
  defaults); pybroker's log, produce path, replication and flusher read these.
- ``TopicConfigKey.effect``: None when pybroker applies the key; else why it is accepted and
  has no effect (README lists them).

Pure (no I/O); sits under log and coord, which both import it.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pybroker.configdef import (
    BOOLEAN,
    DOUBLE,
    INT,
    LIST,
    LONG,
    LONG_MAX,
    STRING,
    Check,
    ConfigDef,
    ConfigException,
    ConfigKey,
    Type,
    Validator,
    ValidList,
    ValidString,
    at_least,
    between,
    invalid_configuration,
    java_split,
)
from pybroker.errors import KafkaError
from pybroker.kafka_topic_configs import METADATA_VERSIONS, TOPIC_DEFINITIONS

log = logging.getLogger(__name__)

HOURS = 3_600_000
MINUTES = 60_000


@dataclass(frozen=True)
class Synonym:
    """A broker setting a topic key falls back to (ServerTopicConfigSynonyms' ConfigSynonym):
    its value times ``factor`` (hours and minutes to milliseconds)."""

    name: str
    factor: int = 1


@dataclass(frozen=True)
class TopicConfigKey(ConfigKey):
    synonyms: tuple[Synonym, ...] = ()
    effect: str | None = None  # None: applied; else why it is accepted without effect


# -- validators of Kafka's own kinds --------------------------------------------------------


def _gzip_level(value: Any) -> str | None:
    if value > 9 or (value < 1 and value != -1):
        return "Value must be between 1 and 9 or equal to -1"
    return None


def _metadata_version(value: Any) -> str | None:
    """MetadataVersionValidator: MetadataVersion.fromVersionString accepts it."""
    parts = java_split(value, ".")
    segments = 3 if value.startswith("0.") else 2
    key = value if segments >= len(parts) else ".".join(parts[:segments])
    return None if key in METADATA_VERSIONS else f"Version {value} is not a valid version"


class _ThrottledReplicas(Validator):
    """ThrottledReplicaListValidator: ``*``, or ``partition:broker`` items (empty ones too)."""

    def __call__(self, name: str, value: Any) -> None:
        items = [v.strip() for v in value]
        if not (all(re.fullmatch(r"([0-9]+:[0-9]+)?", i) for i in items) or "".join(items) == "*"):
            raise ConfigException(
                name,
                value,
                f"{name} must be the literal '*' or a list of replicas in the following format:"
                " [partitionId]:[brokerId],[partitionId]:[brokerId],...",
            )

    def __str__(self) -> str:
        return "[partitionId]:[brokerId],[partitionId]:[brokerId],..."


# why each key that has no meaning for pybroker is accepted anyway
_NO_TIERED_STORAGE = (
    "tiered storage (KIP-405) is not implemented: every segment stays local, and"
    " remote.storage.enable=true is refused as Kafka refuses it when"
    " remote.log.storage.system.enable is false"
)
_NO_PREALLOCATE = (
    "segment files grow as records are appended (Kafka preallocates them only to speed up"
    " appends on some file systems; the log's contents are the same)"
)
_FORMAT_IGNORED = (
    "ignored, as Kafka 3.x ignores it (inter.broker.protocol.version 3.0 and newer always"
    " write message format v2)"
)
_NO_DOWNCONVERSION = (
    "pybroker does not down-convert records for old Fetch versions (it serves Fetch v4 and"
    " newer, which read message format v2), so there is nothing to turn off"
)


def _key(
    name: str,
    type_: Type,
    default: Any,
    validator: Validator | None = None,
    synonyms: tuple[Synonym, ...] = (),
    effect: str | None = None,
) -> TopicConfigKey:
    doc = TOPIC_DEFINITIONS[name][4] if name in TOPIC_DEFINITIONS else ""
    return TopicConfigKey(name, type_, default, validator, doc, synonyms, effect)


def _log(name: str, factor: int = 1) -> Synonym:
    return Synonym("log." + name, factor)


TOPIC_CONFIG = ConfigDef(
    [
        _key("segment.bytes", INT, 1024 * 1024 * 1024, at_least(14), (_log("segment.bytes"),)),
        _key(
            "segment.ms",
            LONG,
            7 * 24 * HOURS,
            at_least(1),
            (_log("roll.ms"), _log("roll.hours", HOURS)),
        ),
        _key(
            "segment.jitter.ms",
            LONG,
            0,
            at_least(0),
            (_log("roll.jitter.ms"), _log("roll.jitter.hours", HOURS)),
        ),
        _key(
            "segment.index.bytes",
            INT,
            10 * 1024 * 1024,
            at_least(4),
            (_log("index.size.max.bytes"),),
        ),
        _key("flush.messages", LONG, LONG_MAX, at_least(1), (_log("flush.interval.messages"),)),
        _key(
            "flush.ms",
            LONG,
            LONG_MAX,
            at_least(0),
            (_log("flush.interval.ms"), _log("flush.scheduler.interval.ms")),
        ),
        _key("retention.bytes", LONG, -1, None, (_log("retention.bytes"),)),
        _key(
            "retention.ms",
            LONG,
            7 * 24 * HOURS,
            at_least(-1),
            (
                _log("retention.ms"),
                _log("retention.minutes", MINUTES),
                _log("retention.hours", HOURS),
            ),
        ),
        _key(
            "max.message.bytes", INT, 1024 * 1024 + 12, at_least(0), (Synonym("message.max.bytes"),)
        ),
        _key("index.interval.bytes", INT, 4096, at_least(0), (_log("index.interval.bytes"),)),
        _key(
            "delete.retention.ms",
            LONG,
            24 * HOURS,
            at_least(0),
            (_log("cleaner.delete.retention.ms"),),
        ),
        _key(
            "min.compaction.lag.ms",
            LONG,
            0,
            at_least(0),
            (_log("cleaner.min.compaction.lag.ms"),),
        ),
        _key(
            "max.compaction.lag.ms",
            LONG,
            LONG_MAX,
            at_least(1),
            (_log("cleaner.max.compaction.lag.ms"),),
        ),
        _key(
            "file.delete.delay.ms",
            LONG,
            60_000,
            at_least(0),
            (_log("segment.delete.delay.ms"),),
        ),
        _key(
            "min.cleanable.dirty.ratio",
            DOUBLE,
            0.5,
            between(0, 1),
            (_log("cleaner.min.cleanable.ratio"),),
        ),
        _key(
            "cleanup.policy",
            LIST,
            ["delete"],
            ValidList("compact", "delete"),
            (_log("cleanup.policy"),),
        ),
        _key(
            "unclean.leader.election.enable",
            BOOLEAN,
            False,
            None,
            (Synonym("unclean.leader.election.enable"),),
        ),
        _key("min.insync.replicas", INT, 1, at_least(1), (Synonym("min.insync.replicas"),)),
        _key(
            "compression.type",
            STRING,
            "producer",
            ValidString("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
            (Synonym("compression.type"),),
        ),
        _key(
            "compression.gzip.level",
            INT,
            -1,
            Check(_gzip_level, "[1,...,9] or -1"),
            (Synonym("compression.gzip.level"),),
        ),
        _key(
            "compression.lz4.level",
            INT,
            9,
            between(1, 17),
            (Synonym("compression.lz4.level"),),
        ),
        _key(
            "compression.zstd.level",
            INT,
            3,
            between(-131072, 22),
            (Synonym("compression.zstd.level"),),
        ),
        _key("preallocate", BOOLEAN, False, None, (_log("preallocate"),), _NO_PREALLOCATE),
        _key(
            "message.format.version",
            STRING,
            "3.0-IV1",
            # MetadataVersionValidator, described as Kafka does (every version, in order)
            Check(_metadata_version, TOPIC_DEFINITIONS["message.format.version"][2] or ""),
            (_log("message.format.version"),),
            _FORMAT_IGNORED,
        ),
        _key(
            "message.timestamp.type",
            STRING,
            "CreateTime",
            ValidString("CreateTime", "LogAppendTime"),
            (_log("message.timestamp.type"),),
        ),
        _key(
            "message.timestamp.difference.max.ms",
            LONG,
            LONG_MAX,
            at_least(0),
            (_log("message.timestamp.difference.max.ms"),),
        ),
        _key(
            "message.timestamp.before.max.ms",
            LONG,
            LONG_MAX,
            at_least(0),
            (_log("message.timestamp.before.max.ms"),),
        ),
        _key(
            "message.timestamp.after.max.ms",
            LONG,
            LONG_MAX,
            at_least(0),
            (_log("message.timestamp.after.max.ms"),),
        ),
        _key("leader.replication.throttled.replicas", LIST, [], _ThrottledReplicas()),
        _key("follower.replication.throttled.replicas", LIST, [], _ThrottledReplicas()),
        _key(
            "message.downconversion.enable",
            BOOLEAN,
            True,
            None,
            (_log("message.downconversion.enable"),),
            _NO_DOWNCONVERSION,
        ),
        _key("remote.storage.enable", BOOLEAN, False, None, (), _NO_TIERED_STORAGE),
        _key(
            "local.retention.ms",
            LONG,
            -2,
            at_least(-2),
            (_log("local.retention.ms"),),
            _NO_TIERED_STORAGE,
        ),
        _key(
            "local.retention.bytes",
            LONG,
            -2,
            at_least(-2),
            (_log("local.retention.bytes"),),
            _NO_TIERED_STORAGE,
        ),
        _key("remote.log.copy.disable", BOOLEAN, False, None, (), _NO_TIERED_STORAGE),
        _key("remote.log.delete.on.disable", BOOLEAN, False, None, (), _NO_TIERED_STORAGE),
    ]
)

KEYS: dict[str, TopicConfigKey] = {k.name: k for k in TOPIC_CONFIG.values()}  # type: ignore[misc]


def broker_synonym(name: str) -> str | None:
    """ServerTopicConfigSynonyms.TOPIC_CONFIG_SYNONYMS: the broker setting of highest
    precedence a topic key falls back to (None: no server default)."""
    synonyms = KEYS[name].synonyms
    return synonyms[0].name if synonyms else None


def _broker_value(key: TopicConfigKey, broker_value: Callable[[str], str | None]) -> str | None:
    for synonym in key.synonyms:
        value = broker_value(synonym.name)
        if value is None:
            continue
        if synonym.factor != 1:
            n = int(value) * synonym.factor
            value = str(-1 if key.name == "retention.ms" and n < 0 else n)
        return value
    return None


def broker_defaults(broker_value: Callable[[str], str | None]) -> dict[str, str]:
    """KafkaConfig.extractLogConfigMap: each topic key's value from the broker's settings
    (``broker_value(key)`` is the current value of a broker key as a string, None when unset),
    the first set synonym winning, hours and minutes converted to milliseconds (a negative
    retention is -1).  Keys without a server default are left out."""
    out: dict[str, str] = {}
    for key in KEYS.values():
        value = _broker_value(key, broker_value)
        if value is not None:
            out[key.name] = value
    return out


@functools.lru_cache(maxsize=4096)
def _parsed(name: str, raw: str) -> Any:
    value = KEYS[name].parse(raw)
    return tuple(value) if isinstance(value, list) else value


def value(name: str, overrides: Mapping[str, str], defaults: Mapping[str, str]) -> Any:
    """One key's typed value for a topic (lists as tuples): its override, else the broker
    default (``defaults``: :func:`broker_defaults`), else Kafka's; parses are cached, for the
    produce path.  An override that does not parse (written by another program) is logged and
    skipped."""
    raw = overrides.get(name)
    if raw is not None:
        try:
            return _parsed(name, raw)
        except ConfigException as e:
            log.error("topic config ignored: %s", e)
    default = defaults.get(name)
    if default is not None:
        return _parsed(name, default)
    key = KEYS[name]
    return tuple(key.default) if isinstance(key.default, list) else key.default


def validate(props: Mapping[str, str | None], defaults: Mapping[str, str]) -> dict[str, str]:
    """Kafka 3.9's LogConfig.validate as a ZooKeeper-mode broker without tiered storage calls
    it, over ``defaults`` (:func:`broker_defaults`): returns ``props`` as stored (the strings
    given).  Raises ``KafkaError(INVALID_CONFIG)`` for what Kafka raises as
    InvalidConfigurationException (unknown names, null values, min.compaction.lag.ms above
    max.compaction.lag.ms, remote.log.* under ZooKeeper) and :class:`ConfigException` for the
    rest (types, validators, remote.storage.enable=true), which callers word as Kafka does for
    their API (:func:`create_error`, :func:`alter_error`)."""
    nulls = [k for k, v in props.items() if v is None]
    if nulls:
        raise invalid_configuration(
            f"Null value not supported for topic configs: {','.join(nulls)}"
        )
    for name in props:
        if name not in KEYS:
            raise invalid_configuration(f"Unknown topic config name: {name}")
    given: dict[str, str] = {k: v for k, v in props.items() if v is not None}
    values = TOPIC_CONFIG.parse({**defaults, **given})
    if values["min.compaction.lag.ms"] > values["max.compaction.lag.ms"]:
        raise invalid_configuration(
            f"conflict topic config setting min.compaction.lag.ms"
            f" ({values['min.compaction.lag.ms']}) > max.compaction.lag.ms"
            f" ({values['max.compaction.lag.ms']})"
        )
    if values["remote.log.delete.on.disable"] or values["remote.log.copy.disable"]:
        raise invalid_configuration(
            "It is invalid to set `remote.log.delete.on.disable` or `remote.log.copy.disable`"
            " under Zookeeper's mode."
        )
    if values["remote.storage.enable"]:
        raise ConfigException(
            "Tiered Storage functionality is disabled in the broker. Topic cannot be configured"
            " with remote log storage.",
            bare=True,
        )
    return given


def effective(overrides: Mapping[str, str], defaults: Mapping[str, str]) -> dict[str, Any]:
    """Every topic key's typed value for a topic (see :func:`value`), in Kafka's order."""
    return {name: value(name, overrides, defaults) for name in KEYS}


def create_error(e: ConfigException | KafkaError) -> KafkaError:
    """How CreateTopics answers a config error (ZkAdminManager.createTopics)."""
    if isinstance(e, KafkaError):
        return e
    return invalid_configuration(str(e))


def alter_error(e: ConfigException | KafkaError, topic: str) -> KafkaError:
    """How (Incremental)AlterConfigs answers one: a ConfigException is prefixed with the
    resource, as ZkAdminManager.alterConfigs words it."""
    if isinstance(e, KafkaError):
        return e
    return invalid_configuration(
        f"Invalid config value for resource ConfigResource(type=TOPIC, name='{topic}'): {e}"
    )
