"""The config model (pybroker/configdef.py, pybroker/config/, pybroker/topic_config.py):
pybroker's declarations held to Kafka 3.9's own (pybroker/kafka_*_configs.py, dumped from
Kafka's jars), Kafka's parsing and validation messages, IncrementalAlterConfigs' APPEND /
SUBTRACT with ConfigAdminManager's exact semantics, and the unknown-key suggestions."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading

import pytest

from pybroker import topic_config
from pybroker.config import FIELDS, KEYS, Config, ConfigError, build_config, describe_settings
from pybroker.configdef import (
    APPEND,
    DELETE,
    SET,
    SUBTRACT,
    ConfigException,
    Type,
    did_you_mean,
    incremental,
    java_double,
    java_split,
    parse_type,
)
from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers._topics import log_config
from pybroker.kafka_broker_configs import DEFINITIONS, DYNAMIC_MODES, KAFKA_CONFIG_NAMES
from pybroker.kafka_topic_configs import TOPIC_DEFINITIONS

# -- the declarations against Kafka's ---------------------------------------------------------


def test_every_kafka_topic_config_is_declared_as_kafka_declares_it():
    assert list(topic_config.KEYS) == list(TOPIC_DEFINITIONS)  # all of them, Kafka's order
    for name, key in topic_config.KEYS.items():
        kind, default, validator, synonyms, doc = TOPIC_DEFINITIONS[name]
        assert key.type.name == kind, name
        assert key.default_string == default, name
        assert (str(key.validator) if key.validator else None) == validator, name
        assert tuple(s.name for s in key.synonyms) == synonyms, name
        assert key.doc == doc, name


# Kafka broker keys whose declaration differs from Kafka 3.9's on purpose: (what differs, why)
BROKER_DEVIATIONS = {
    "broker.id": ({"default", "validator"}, "no generated ids: 0 by default, and >= 0"),
    "listeners": ({"default"}, "the loopback interface by default, not every interface"),
    "log.dir": ({"default"}, "the CLI's ./pybroker-data, not /tmp/kafka-logs"),
    "default.replication.factor": ({"validator"}, "checked at start, not at first use"),
    "group.initial.rebalance.delay.ms": ({"validator"}, "a negative delay is refused"),
    "group.coordinator.rebalance.protocols": (
        {"default", "validator"},
        "Kafka 4.0's default (classic,consumer); share groups: group.share.enable",
    ),
    "group.consumer.assignors": ({"default"}, "the assignors' names (the class names work too)"),
    "group.consumer.migration.policy": (
        {"default", "validator"},
        "Kafka 4.0's default (bidirectional), checked (any case) by its converter",
    ),
    "log.flush.offset.checkpoint.interval.ms": ({"validator"}, "0 would spin (Kafka fails)"),
    "num.recovery.threads.per.data.dir": (
        {"default"},
        "8 threads per dir close the logs at shutdown (fsync-bound); Kafka's default is 1",
    ),
    "controlled.shutdown.max.retries": ({"validator"}, "a negative count is refused"),
    "controlled.shutdown.retry.backoff.ms": ({"validator"}, "a negative backoff is refused"),
    "leader.imbalance.per.broker.percentage": ({"validator"}, "a negative share is refused"),
    "authorizer.class.name": ({"validator"}, "only the authorizers pybroker has"),
    # share groups (KIP-932) as Kafka 4.2+ declares them (3.9's were early access)
    "group.share.enable": ({"default"}, "on, as share groups are in Kafka 4.2+"),
    "group.share.max.size": ({"type", "validator"}, "Kafka 4.2+'s: INT in [1,...,1000]"),
    "group.share.record.lock.duration.ms": ({"validator"}, "Kafka 4.2+'s [1000,...,3600000]"),
    "group.share.partition.max.record.locks": ({"default"}, "Kafka 4.2+'s default 2000"),
}


def test_broker_keys_are_declared_as_kafka_declares_them():
    for name, key in KEYS.items():
        if name not in DEFINITIONS:
            assert name not in KAFKA_CONFIG_NAMES
            assert key.doc, f"{name}: pybroker's own keys document themselves"
            continue
        kind, default, validator, doc = DEFINITIONS[name]
        differs, _why = BROKER_DEVIATIONS.get(name, (set(), ""))
        if "type" not in differs:
            assert key.type.name == kind, name
        else:
            assert key.type.name != kind, f"{name} no longer deviates: drop it"
        assert key.doc == doc, name
        if "default" not in differs:
            assert key.default_string == default, name
        else:
            assert key.default_string != default, f"{name} no longer deviates: drop it"
        ours = str(key.validator) if key.validator else None
        if "validator" not in differs:
            assert ours == validator, name
        else:
            assert ours != validator, f"{name} no longer deviates: drop it"
        assert key.dynamic == DYNAMIC_MODES.get(name), name


def test_every_broker_synonym_of_a_topic_config_is_declared():
    """DescribeConfigs' topic sources and synonyms need every broker key a topic key falls
    back to, and CreateTopics' defaults come from them."""
    for key in topic_config.KEYS.values():
        for synonym in key.synonyms:
            assert synonym.name in KEYS, (key.name, synonym.name)


def test_defaults_round_trip_to_the_attributes():
    """A key's default, printed as Kafka prints it and parsed again, is the attribute a
    Config starts with: the declaration is the one place a default is written."""
    cfg = Config()
    for name, key in KEYS.items():
        if key.default_string is None:
            assert getattr(cfg, FIELDS[name]) is None, name
        else:
            assert key.parse_attribute(key.default_string) == getattr(cfg, FIELDS[name]), name
            assert cfg.setting(name) == key.default_string, name


def test_broker_defaults_of_topic_configs_follow_the_synonyms():
    cfg = build_config(
        {
            "log.dirs": "/tmp/x",
            "log.roll.hours": "2",
            "log.retention.minutes": "3",
            "log.roll.jitter.hours": "1",
            "log.segment.delete.delay.ms": "5",
            "log.flush.scheduler.interval.ms": "700",
        }
    )
    defaults = cfg.topic_defaults()
    assert defaults["segment.ms"] == str(2 * 3600_000)
    assert defaults["retention.ms"] == str(3 * 60_000)
    assert defaults["segment.jitter.ms"] == str(3600_000)
    assert defaults["file.delete.delay.ms"] == "5"
    assert defaults["flush.ms"] == "700"  # log.flush.interval.ms unset: the scheduler's
    assert defaults["cleanup.policy"] == "delete"
    assert "remote.storage.enable" not in defaults  # no server default
    negative = build_config({"log.dirs": "/tmp/x", "log.retention.hours": "-5"})
    assert negative.topic_defaults()["retention.ms"] == "-1"  # KafkaConfig.logRetentionTimeMillis


def test_the_log_gets_every_topic_config_it_applies(tmp_path):
    """handlers/_topics.log_config: the topic's overrides over the broker's defaults, among
    them file.delete.delay.ms and segment.jitter.ms (log/partition_log.py applies both)."""
    cfg = build_config(
        {
            "log.dirs": str(tmp_path),
            "log.segment.delete.delay.ms": "2000",
            "log.roll.jitter.ms": "5",
        }
    )
    lc = log_config(cfg, {})
    assert (lc.file_delete_delay_ms, lc.roll_jitter_ms) == (2000, 5)
    lc = log_config(cfg, {"file.delete.delay.ms": "300", "segment.jitter.ms": "70"})
    assert (lc.file_delete_delay_ms, lc.roll_jitter_ms) == (300, 70)
    lc = log_config(cfg, {"cleanup.policy": "", "segment.ms": "100", "retention.bytes": "9"})
    assert (lc.cleanup_policy, lc.compact, lc.delete) == ("", False, False)
    assert (lc.roll_ms, lc.retention_bytes) == (100, 9)


# -- parsing and validation, Kafka's words ---------------------------------------------------


@pytest.mark.parametrize(
    "text, kind, expected",
    [
        (" 42 ", Type.INT, 42),
        ("+7", Type.LONG, 7),
        ("TRUE", Type.BOOLEAN, True),
        (" compact ,  delete ", Type.LIST, ["compact", "delete"]),
        ("", Type.LIST, []),
        ("compact,", Type.LIST, ["compact", ""]),
        ("1e3", Type.DOUBLE, 1000.0),
        ("0.5d", Type.DOUBLE, 0.5),
    ],
)
def test_parse_type_as_kafka(text, kind, expected):
    assert parse_type("k", text, kind) == expected


@pytest.mark.parametrize(
    "text, kind, message",
    [
        ("1_000", Type.INT, "Invalid value 1_000 for configuration k: Not a number of type INT"),
        ("2147483648", Type.INT, "Not a number of type INT"),
        ("5.0", Type.LONG, "Not a number of type LONG"),
        ("yes", Type.BOOLEAN, "Expected value to be either true or false"),
        ("1,5", Type.DOUBLE, "Not a number of type DOUBLE"),
    ],
)
def test_parse_errors_as_kafka(text, kind, message):
    with pytest.raises(ConfigException, match=message):
        parse_type("k", text, kind)


def test_java_text():
    assert [java_double(x) for x in (0.5, 2.0, 1e7, 1.5e-5, 123.25)] == [
        "0.5",
        "2.0",
        "1.0E7",
        "1.5E-5",
        "123.25",
    ]
    assert java_split("a,,b,,") == ["a", "", "b"]
    assert java_split("") == [""]
    assert java_split(",") == []


@pytest.mark.parametrize(
    "props, message",
    [
        (
            {"segment.ms": "0"},
            "Invalid value 0 for configuration segment.ms: Value must be at least 1",
        ),
        (
            {"min.cleanable.dirty.ratio": "2"},
            "Invalid value 2.0 for configuration min.cleanable.dirty.ratio: Value must be no more"
            " than 1",
        ),
        (
            {"compression.type": "brotli"},
            "Invalid value brotli for configuration compression.type: String must be one of:"
            " uncompressed, zstd, lz4, snappy, gzip, producer",
        ),
        (
            {"message.format.version": "2.9"},
            "Invalid value 2.9 for configuration message.format.version: Version 2.9 is not a"
            " valid version",
        ),
        (
            {"compression.gzip.level": "10"},
            "Invalid value 10 for configuration compression.gzip.level: Value must be between 1"
            " and 9 or equal to -1",
        ),
        (
            {"remote.storage.enable": "true"},
            "Tiered Storage functionality is disabled in the broker. Topic cannot be configured"
            " with remote log storage.",
        ),
    ],
)
def test_topic_config_config_exceptions(props, message):
    with pytest.raises(ConfigException) as e:
        topic_config.validate(props, {})
    assert str(e.value) == message


@pytest.mark.parametrize(
    "props, message",
    [
        ({"file.delete.delay": "1"}, "Unknown topic config name: file.delete.delay"),
        ({"retention.ms": None}, "Null value not supported for topic configs: retention.ms"),
        (
            {"remote.log.copy.disable": "true"},
            "It is invalid to set `remote.log.delete.on.disable` or `remote.log.copy.disable`"
            " under Zookeeper's mode.",
        ),
    ],
)
def test_topic_config_invalid_configuration(props, message):
    with pytest.raises(KafkaError) as e:
        topic_config.validate(props, {})
    assert (e.value.code, str(e.value)) == (ErrorCode.INVALID_CONFIG, message)


def test_compaction_lags_are_checked_over_the_broker_defaults():
    """LogConfig.validateValues runs on the broker's values with the topic's on top."""
    topic_config.validate({"max.compaction.lag.ms": "5"}, {})
    with pytest.raises(KafkaError, match=r"min.compaction.lag.ms \(10\) > max.compaction"):
        topic_config.validate({"max.compaction.lag.ms": "5"}, {"min.compaction.lag.ms": "10"})


def test_every_topic_config_accepted_with_a_valid_value():
    values = {
        name: key.default_string for name, key in topic_config.KEYS.items() if key.default_string
    }
    values.update({"preallocate": "true", "file.delete.delay.ms": "1", "cleanup.policy": ""})
    assert topic_config.validate(values, {}) == values


# -- IncrementalAlterConfigs: ConfigAdminManager.prepareIncrementalConfigs -----------------


def op(name, kind, value=None):
    return {"name": name, "config_operation": kind, "value": value}


def topic_keys(name):
    key = topic_config.KEYS.get(name)
    return (key.type, key.default_string) if key else None


def broker_keys(name):
    d = DEFINITIONS.get(name)
    return (Type[d[0]], d[1]) if d else None


def test_append_starts_from_kafkas_default():
    """No stored value: the list starts from the key's ConfigDef default, for brokers too
    (before: a broker APPEND started from nothing, a topic's from the broker's setting)."""
    assert incremental([op("log.cleanup.policy", APPEND, "compact")], {}, broker_keys) == {
        "log.cleanup.policy": "delete,compact"
    }
    assert incremental([op("cleanup.policy", APPEND, "compact")], {}, topic_keys) == {
        "cleanup.policy": "delete,compact"
    }
    assert incremental([op("cleanup.policy", APPEND, "delete")], {}, topic_keys) == {
        "cleanup.policy": "delete"
    }


def test_subtract_removes_one_occurrence_per_item():
    """Scala's List.diff (before: a broker SUBTRACT removed every occurrence)."""
    stored = {"log.cleanup.policy": "compact,delete,compact"}
    assert incremental([op("log.cleanup.policy", SUBTRACT, "compact")], stored, broker_keys) == {
        "log.cleanup.policy": "delete,compact"
    }
    stored = {"cleanup.policy": "compact,delete,compact"}
    assert incremental([op("cleanup.policy", SUBTRACT, "compact,compact")], stored, topic_keys) == {
        "cleanup.policy": "delete"
    }


def test_items_split_as_java_splits_them():
    """Trailing empty items are dropped, inner ones kept (before: a topic APPEND kept a
    trailing empty item, a broker one dropped inner ones)."""
    assert incremental([op("cleanup.policy", APPEND, "compact,")], {}, topic_keys) == {
        "cleanup.policy": "delete,compact"
    }
    stored = {"log.cleanup.policy": "compact,,delete"}
    assert incremental([op("log.cleanup.policy", APPEND, "x")], stored, broker_keys) == {
        "log.cleanup.policy": "compact,,delete,x"
    }
    # an empty stored value is no items for APPEND; SUBTRACT of an absent key stores ""
    assert incremental(
        [op("cleanup.policy", APPEND, "compact")], {"cleanup.policy": ""}, topic_keys
    ) == {"cleanup.policy": "compact"}
    assert incremental(
        [op("leader.replication.throttled.replicas", SUBTRACT, "0:1")], {}, topic_keys
    ) == {"leader.replication.throttled.replicas": ""}


def test_set_delete_and_errors():
    got = incremental(
        [op("retention.ms", SET, "5"), op("segment.ms", DELETE), op("retention.bytes", SET, "7")],
        {"segment.ms": "9"},
        topic_keys,
    )
    assert got == {"retention.ms": "5", "retention.bytes": "7"}
    with pytest.raises(KafkaError) as e:
        incremental([op("retention.ms", SUBTRACT, "5")], {}, topic_keys)
    assert (e.value.code, str(e.value)) == (
        ErrorCode.INVALID_CONFIG,
        "Config value subtract is not allowed for config key: retention.ms",
    )
    with pytest.raises(KafkaError) as e:
        incremental([op("no.such.key", APPEND, "5")], {}, topic_keys)
    assert e.value.code == ErrorCode.UNKNOWN  # Kafka's Scala map lookup throws
    with pytest.raises(KafkaError) as e:
        incremental([op("retention.ms", 9, "5")], {}, topic_keys)
    assert (e.value.code, str(e.value)) == (ErrorCode.INVALID_REQUEST, "Unknown operations type 9")


# -- server.properties --------------------------------------------------------------------


def test_unknown_keys_suggest_the_nearest_known_one(tmp_path):
    cfg = build_config(
        {
            "log.dirs": str(tmp_path),
            "log.retention.hourz": "5",
            "num.io.threads": "8",
            "completely.unrelated.thing": "1",
            "leader.replication.throttled.rate": "100",
            "retention.ms": "1000",
        }
    )
    assert (
        "configuration key 'retention.ms' is a topic config, ignored here; its broker default is"
        " 'log.retention.ms'" in cfg.warnings
    )
    assert (
        "configuration key 'leader.replication.throttled.rate' ignored: it is set dynamically"
        " only (kafka-configs --entity-type brokers)" in cfg.warnings
    )
    assert (
        "unknown configuration key 'log.retention.hourz' ignored: did you mean"
        " 'log.retention.hours'?" in cfg.warnings
    )
    assert "configuration key 'num.io.threads' (Kafka's) has no effect in pybroker" in cfg.warnings
    assert "unknown configuration key 'completely.unrelated.thing' ignored" in cfg.warnings
    assert cfg.log_retention_hours == 168  # unknown keys stay warnings, as Kafka's
    assert did_you_mean("segment.jiter.ms", topic_config.KEYS) == "segment.jitter.ms"


def test_a_bad_value_names_the_key_with_kafkas_reason(tmp_path):
    with pytest.raises(ConfigError) as e:
        build_config({"log.dirs": str(tmp_path), "num.partitions": "0"})
    assert str(e.value) == (
        "invalid value '0' for configuration key 'num.partitions': Value must be at least 1"
    )
    with pytest.raises(ConfigError, match="'log.roll.jitter.hours'.*Value must be at least 0"):
        build_config({"log.dirs": str(tmp_path), "log.roll.jitter.hours": "-1"})


def test_describe_settings_lists_every_key_read_from_the_file(tmp_path):
    cfg = build_config({"log.dirs": str(tmp_path), "log.segment.delete.delay.ms": "7"})
    described = {k: (v, explicit) for k, v, explicit in describe_settings(cfg)}
    assert described["log.segment.delete.delay.ms"] == ("7", True)
    assert described["log.roll.jitter.hours"] == ("0", False)
    assert "leader.replication.throttled.rate" not in described  # dynamic only
    assert set(described) == {k for k, key in KEYS.items() if not key.dynamic_only}


def test_config_stays_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Config().num_partitions = 3  # type: ignore[misc]


def test_serve_logs_the_suggestion(tmp_path):
    """What an operator sees for a misspelt --override: a warning naming the key it meant, and
    a broker that starts (Kafka only warns about unknown keys)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pybroker", "serve", "--override", f"log.dirs={tmp_path}",
         "--override", "listeners=PLAINTEXT://127.0.0.1:0",
         "--override", "log.retention.hourz=5"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    killer = threading.Timer(60, proc.kill)
    killer.start()
    seen = []
    try:
        for line in proc.stderr:  # type: ignore[union-attr]
            seen.append(line)
            if line.startswith("pybroker started"):
                break
    finally:
        killer.cancel()
        proc.terminate()
        proc.wait(timeout=60)
    text = "".join(seen)
    assert "unknown configuration key 'log.retention.hourz' ignored: did you mean" in text, text
    assert "'log.retention.hours'?" in text and "pybroker started" in text, text
