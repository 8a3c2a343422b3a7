"""Dynamic broker configs (pybroker/dynamic_config.py): precedence per-broker > cluster default >
static > Kafka's default, reverting on delete, synonyms, Kafka's validation messages and the
DescribeConfigs sources; and the change-notification znodes (coord/metadata/config_changes.py)
on the embedded store."""

from __future__ import annotations

import asyncio
import logging

import pytest

from pybroker.config import LONG_MAX, build_config
from pybroker.coord.metadata import config_changes, paths
from pybroker.coord.metadata.local import LocalStore
from pybroker.dynamic_config import (
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    STATIC_BROKER_CONFIG,
    DynamicBrokerConfig,
)
from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers import _broker_loggers


def make(**static: str) -> DynamicBrokerConfig:
    settings = {"log.dirs": "/tmp/x", **{k.replace("__", "."): v for k, v in static.items()}}
    return DynamicBrokerConfig(build_config(settings))


def entry(dyn: DynamicBrokerConfig, name: str) -> dict:
    return {e["name"]: e for e in dyn.describe_broker(documentation=True)}[name]


def test_precedence_per_broker_over_default_over_static_over_default():
    dyn = make(message__max__bytes="5000")
    cfg = dyn.config
    assert cfg.message_max_bytes == 5000
    assert entry(dyn, "message.max.bytes")["config_source"] == STATIC_BROKER_CONFIG

    assert dyn.update({}, {"message.max.bytes": "4000"}) == {"message.max.bytes"}
    assert cfg.message_max_bytes == 4000
    e = entry(dyn, "message.max.bytes")
    assert (e["value"], e["config_source"]) == ("4000", DYNAMIC_DEFAULT_BROKER_CONFIG)

    dyn.update({"message.max.bytes": "3000"}, None)
    e = entry(dyn, "message.max.bytes")
    assert cfg.message_max_bytes == 3000
    assert (e["value"], e["config_source"]) == ("3000", DYNAMIC_BROKER_CONFIG)
    assert [(s["source"], s["value"]) for s in e["synonyms"]] == [
        (DYNAMIC_BROKER_CONFIG, "3000"),
        (DYNAMIC_DEFAULT_BROKER_CONFIG, "4000"),
        (STATIC_BROKER_CONFIG, "5000"),
        (DEFAULT_CONFIG, "1048588"),
    ]

    dyn.update({}, None)  # the per-broker value deleted: back to the default level
    assert cfg.message_max_bytes == 4000
    dyn.update(None, {})  # and that one too: the static value
    assert cfg.message_max_bytes == 5000
    assert entry(dyn, "message.max.bytes")["config_source"] == STATIC_BROKER_CONFIG


def test_kafka_default_when_nothing_is_set():
    dyn = make()
    e = entry(dyn, "message.max.bytes")
    assert (e["value"], e["config_source"], e["is_default"]) == ("1048588", DEFAULT_CONFIG, True)
    assert e["read_only"] is False  # Kafka can change it dynamically
    assert e["config_type"] == 3  # INT
    assert e["documentation"].startswith("The largest record batch size allowed by Kafka")
    assert entry(dyn, "broker.id")["read_only"] is True
    assert entry(dyn, "advertised.listeners")["read_only"] is False  # Kafka's per-broker config


def test_dynamic_retention_ms_beats_a_static_retention_hours_and_reverts():
    dyn = make(log__retention__hours="5")
    cfg = dyn.config
    assert cfg.retention_ms == 5 * 3600_000
    dyn.update({"log.retention.ms": "60000"}, {})
    assert cfg.retention_ms == 60000
    e = entry(dyn, "log.retention.ms")
    assert e["config_source"] == DYNAMIC_BROKER_CONFIG
    assert [(s["name"], s["source"]) for s in e["synonyms"]] == [
        ("log.retention.ms", DYNAMIC_BROKER_CONFIG),
        ("log.retention.hours", STATIC_BROKER_CONFIG),
        ("log.retention.hours", DEFAULT_CONFIG),
    ]
    dyn.update({}, {})
    assert cfg.retention_ms == 5 * 3600_000
    assert entry(dyn, "log.retention.ms")["synonyms"] == []  # Kafka drops the hours synonyms


def test_validation_messages_are_kafkas():
    dyn = make()

    def refused(props: dict, per_broker: bool = True) -> str:
        with pytest.raises(KafkaError) as e:
            dyn.validate(props, per_broker)
        assert e.value.code == ErrorCode.INVALID_REQUEST
        return str(e.value)

    assert refused({"log.dirs": "/y"}) == "Cannot update these configs dynamically: Set(log.dirs)"
    assert refused({"log.retention.hours": "1"}) == (
        "Cannot update these configs dynamically: Set(log.retention.hours)"
    )
    assert refused({"ssl.keystore.location": "/k"}) == (
        "These security configs can be dynamically updated only per-listener using the listener"
        " prefix: Set(ssl.keystore.location)"
    )
    assert refused({"message.max.bytes": "abc"}) == (
        "Invalid value abc for configuration message.max.bytes: Not a number of type INT"
    )
    assert refused({"unclean.leader.election.enable": "maybe"}) == (
        "Invalid value maybe for configuration unclean.leader.election.enable: Expected value to"
        " be either true or false"
    )
    assert refused({"advertised.listeners": "PLAINTEXT://h:1"}, per_broker=False) == (
        "Cannot update these configs at default cluster level, broker id must be specified:"
        " Set(advertised.listeners)"
    )
    assert "num.io.threads" in refused({"num.io.threads": "4"})
    assert "foo.bar" in refused({"foo.bar": "1"})
    assert "log.segment.bytes" in refused({"log.segment.bytes": "3"})  # pybroker's own check
    assert "Value must be at least 0" in refused({"leader.replication.throttled.rate": "-1"})
    dyn.validate({"message.max.bytes": "100", "leader.replication.throttled.rate": "10"}, True)
    dyn.validate({"log.retention.ms": "1000"}, False)


def test_replication_quotas_are_dynamic_only_and_long_max_by_default():
    dyn = make()
    cfg = dyn.config
    assert cfg.leader_replication_throttled_rate == LONG_MAX
    assert "leader.replication.throttled.rate" not in {
        e["name"] for e in dyn.describe_broker(False)
    }
    dyn.update(
        {"leader.replication.throttled.rate": "1000"},
        {"follower.replication.throttled.rate": "2000"},
    )
    assert cfg.leader_replication_throttled_rate == 1000
    assert cfg.follower_replication_throttled_rate == 2000
    assert entry(dyn, "follower.replication.throttled.rate")["config_source"] == (
        DYNAMIC_DEFAULT_BROKER_CONFIG
    )
    dyn.update({}, {})
    assert cfg.leader_replication_throttled_rate == LONG_MAX


def test_stored_values_that_cannot_apply_are_ignored(caplog):
    dyn = make()
    with caplog.at_level(logging.ERROR):
        changed = dyn.update(
            {"message.max.bytes": "x", "log.dirs": "/z", "min.insync.replicas": "2"}, {}
        )
    assert changed == {"min.insync.replicas"}
    assert dyn.config.message_max_bytes == 1048588
    assert "ignored" in caplog.text


def test_default_resource_describes_only_the_stored_defaults():
    dyn = make(message__max__bytes="5000")
    dyn.update({"message.max.bytes": "1"}, {"message.max.bytes": "2", "log.retention.ms": "9"})
    entries = dyn.describe_default(documentation=False)
    assert [(e["name"], e["value"], e["config_source"]) for e in entries] == [
        ("log.retention.ms", "9", DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("message.max.bytes", "2", DYNAMIC_DEFAULT_BROKER_CONFIG),
    ]
    assert all(s["source"] == DYNAMIC_DEFAULT_BROKER_CONFIG for e in entries for s in e["synonyms"])


def test_kafka_level_names():
    assert _broker_loggers.kafka_level(logging.WARNING) == "WARN"
    assert _broker_loggers.kafka_level(logging.CRITICAL) == "FATAL"
    assert _broker_loggers.kafka_level(5) == "TRACE"
    assert _broker_loggers.kafka_level(logging.CRITICAL + 10) == "OFF"
    with pytest.raises(KafkaError) as e:
        _broker_loggers.validate([{"name": "root", "value": "OFF", "config_operation": 0}])
    assert str(e.value) == (
        "Cannot set the log level of root to OFF as it is not a supported log level. Valid log"
        " levels are DEBUG, ERROR, FATAL, INFO, TRACE, WARN"
    )
    with pytest.raises(KafkaError) as e:
        _broker_loggers.validate([{"name": "root", "value": None, "config_operation": 1}])
    assert e.value.code == ErrorCode.INVALID_REQUEST
    with pytest.raises(KafkaError) as e:
        _broker_loggers.validate([{"name": "no.such", "value": "INFO", "config_operation": 0}])
    assert (e.value.code, str(e.value)) == (
        ErrorCode.INVALID_CONFIG,
        "Logger no.such does not exist!",
    )


def test_entity_config_write_and_notification_in_the_embedded_store(tmp_path):
    async def run() -> None:
        store = LocalStore(tmp_path)
        await store.start()
        try:
            for p in paths.PERSISTENT_PATHS:
                await store.ensure_path(p)
            old, new = await config_changes.write_entity_config(
                store, "brokers/<default>", lambda c: {**c, "message.max.bytes": "10"}
            )
            assert (old, new) == ({}, {"message.max.bytes": "10"})
            await config_changes.write_entity_config(
                store, "brokers/<default>", lambda c: {}, validate_only=True
            )
            data, _ = await store.get("/config/brokers/<default>")
            assert paths.decode_topic_config(data) == {"message.max.bytes": "10"}
            assert data == b'{"version":1,"config":{"message.max.bytes":"10"}}'
            children = await store.get_children(paths.CONFIG_CHANGES)
            assert len(children) == 1 and children[0].startswith("config_change_")
            assert len(children[0]) == len("config_change_") + 10
            data, _ = await store.get(f"{paths.CONFIG_CHANGES}/{children[0]}")
            assert data == b'{"version":2,"entity_path":"brokers/<default>"}'
            cursor = config_changes.ChangeCursor()
            assert cursor.unseen(children) == children
            cursor.last = config_changes.sequence_of(children[0])
            assert cursor.unseen(children) == []
        finally:
            await store.close()

    asyncio.run(run())


def test_connections_per_ip_settings():
    dyn = make(max__connections__per__ip="10")
    cfg = dyn.config
    dyn.update({}, {"max.connections.per.ip.overrides": "127.0.0.1:5,[::1]:7,db.example:2"})
    assert cfg.max_connections_per_ip_overrides == (
        ("127.0.0.1", 5),
        ("::1", 7),
        ("db.example", 2),
    )
    assert entry(dyn, "max.connections.per.ip.overrides")["value"] == (
        "127.0.0.1:5,::1:7,db.example:2"
    )
    assert entry(dyn, "max.connections.per.ip")["config_source"] == STATIC_BROKER_CONFIG
    with pytest.raises(KafkaError) as e:
        dyn.validate({"max.connections.per.ip.overrides": "nohost"}, False)
    assert e.value.code == ErrorCode.INVALID_REQUEST
    with pytest.raises(KafkaError):
        dyn.validate({"max.connections.per.ip": "0"}, False)  # would refuse everyone
    dyn.validate({"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "h:1"}, False)


def test_topic_defaults_follow_dynamic_changes():
    """Topic configs fall back to the broker's current values: a dynamic change reaches
    them (Config.topic_defaults is recomputed at each revision)."""
    dyn = make(log__segment__delete__delay__ms="5")
    cfg = dyn.config
    assert cfg.topic_defaults()["file.delete.delay.ms"] == "5"
    assert dyn.update({}, {"log.segment.delete.delay.ms": "7", "log.roll.jitter.ms": "9"}) == {
        "log.segment.delete.delay.ms",
        "log.roll.jitter.ms",
    }
    assert cfg.topic_defaults()["file.delete.delay.ms"] == "7"
    assert cfg.topic_defaults()["segment.jitter.ms"] == "9"
    e = entry(dyn, "log.segment.delete.delay.ms")
    assert (e["value"], e["config_source"]) == ("7", DYNAMIC_DEFAULT_BROKER_CONFIG)
