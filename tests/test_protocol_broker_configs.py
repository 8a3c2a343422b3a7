"""BROKER and BROKER_LOGGER resources over TCP (Kafka 3.9 in ZooKeeper mode as the spec):
validate_only, resource names, Kafka's errors, AlterConfigs' full replace, DescribeConfigs'
sources per version (v0 is_default, v1+ synonyms, v3+ types and documentation), log levels."""

from __future__ import annotations

import logging

from broker_fixture import INVALID_CONFIG, INVALID_REQUEST, NONE, unique_topic, wait_until

DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 44
BROKER, BROKER_LOGGER = 4, 8
SET, DELETE, APPEND = 0, 1, 2
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG = 2, 3, 4
DEFAULT_CONFIG, DYNAMIC_BROKER_LOGGER_CONFIG = 5, 6


def incremental(c, rtype, name, ops, validate_only=False, version=1):
    body = c.request(
        INCREMENTAL_ALTER_CONFIGS,
        version,
        {
            "resources": [
                {
                    "resource_type": rtype,
                    "resource_name": name,
                    "configs": [
                        {"name": k, "config_operation": op, "value": v} for k, op, v in ops
                    ],
                }
            ],
            "validate_only": validate_only,
        },
    )
    (r,) = body["responses"]
    return r["error_code"], r["error_message"]


def describe(c, rtype, name, keys=None, version=4, documentation=False):
    body = c.request(
        DESCRIBE_CONFIGS,
        version,
        {
            "resources": [
                {"resource_type": rtype, "resource_name": name, "configuration_keys": keys}
            ],
            "include_synonyms": True,
            "include_documentation": documentation,
        },
    )
    (r,) = body["results"]
    return r["error_code"], r["error_message"], {e["name"]: e for e in r["configs"]}


def test_validate_only_and_resource_names(start_broker):
    b = start_broker(**{"message.max.bytes": "50000"})
    with b.client() as c:
        ops = [("message.max.bytes", SET, "100")]
        assert incremental(c, BROKER, "0", ops, validate_only=True) == (NONE, None)
        _, _, e = describe(c, BROKER, "0", ["message.max.bytes"])
        assert (e["message.max.bytes"]["value"], e["message.max.bytes"]["config_source"]) == (
            "50000",
            STATIC_BROKER_CONFIG,
        )
        assert incremental(c, BROKER, "7", ops) == (
            INVALID_REQUEST,
            "Unexpected broker id, expected 0, but received 7",
        )
        assert incremental(c, BROKER, "x", ops) == (
            INVALID_REQUEST,
            "Node id must be an integer, but it is: x",
        )
        assert describe(c, BROKER, "7")[:2] == (
            INVALID_REQUEST,
            "Unexpected broker id, expected 0 or empty string, but received 7",
        )
        assert describe(c, BROKER_LOGGER, "")[:2] == (
            INVALID_REQUEST,
            "Broker id must not be empty",
        )
        assert incremental(c, BROKER, "", [("log.dirs", SET, "/x")]) == (
            INVALID_REQUEST,
            "Cannot update these configs dynamically: Set(log.dirs)",
        )


def test_default_and_per_broker_sources_and_legacy_replace(start_broker):
    b = start_broker()
    with b.client() as c:
        assert incremental(c, BROKER, "", [("log.retention.ms", SET, "5000")]) == (NONE, None)
        assert incremental(c, BROKER, "0", [("min.insync.replicas", SET, "1")]) == (NONE, None)
        code, _, default = describe(c, BROKER, "")
        assert code == NONE and list(default) == ["log.retention.ms"]
        e = default["log.retention.ms"]
        assert (e["value"], e["config_source"], e["read_only"]) == (
            "5000",
            DYNAMIC_DEFAULT_BROKER_CONFIG,
            False,
        )
        _, _, own = describe(c, BROKER, "0", documentation=True)
        assert own["log.retention.ms"]["config_source"] == DYNAMIC_DEFAULT_BROKER_CONFIG
        assert own["min.insync.replicas"]["config_source"] == DYNAMIC_BROKER_CONFIG
        assert own["log.retention.ms"]["config_type"] == 5  # LONG
        assert "log" in own["log.retention.ms"]["documentation"]
        assert own["broker.id"]["read_only"] is True
        # v0: is_default instead of a source
        _, _, v0 = describe(c, BROKER, "0", ["log.retention.hours", "min.insync.replicas"], 0)
        assert v0["log.retention.hours"]["is_default"] is True
        assert v0["min.insync.replicas"]["is_default"] is False
        # AlterConfigs replaces the entity's whole set
        body = c.request(
            ALTER_CONFIGS,
            2,
            {
                "resources": [
                    {
                        "resource_type": BROKER,
                        "resource_name": "0",
                        "configs": [{"name": "message.max.bytes", "value": "4000"}],
                    },
                    {"resource_type": BROKER_LOGGER, "resource_name": "0", "configs": []},
                ],
                "validate_only": False,
            },
        )
        assert [(r["error_code"], r["error_message"]) for r in body["responses"]] == [
            (NONE, None),
            (INVALID_REQUEST, "Unknown resource type 8"),
        ]
        _, _, own = describe(c, BROKER, "0", ["min.insync.replicas", "message.max.bytes"])
        assert own["min.insync.replicas"]["config_source"] == DEFAULT_CONFIG
        assert own["message.max.bytes"]["value"] == "4000"


def test_broker_logger_levels(start_broker):
    b = start_broker()
    name = "pybroker.coord.metadata.cluster"
    with b.client() as c:
        code, _, loggers = describe(c, BROKER_LOGGER, "0")
        assert code == NONE and "root" in loggers and name in loggers
        assert loggers[name]["config_source"] == DYNAMIC_BROKER_LOGGER_CONFIG
        try:
            assert incremental(c, BROKER_LOGGER, "0", [(name, SET, "TRACE")]) == (NONE, None)
            assert describe(c, BROKER_LOGGER, "0", [name])[2][name]["value"] == "TRACE"
            assert logging.getLogger(name).level == 5  # the broker runs in this process
            assert incremental(c, BROKER_LOGGER, "0", [(name, APPEND, "INFO")])[0] == (
                INVALID_REQUEST
            )
            assert incremental(c, BROKER_LOGGER, "0", [("nope", SET, "INFO")]) == (
                INVALID_CONFIG,
                "Logger nope does not exist!",
            )
            assert incremental(c, BROKER_LOGGER, "1", [(name, SET, "INFO")]) == (
                INVALID_REQUEST,
                "Unexpected node id. Expected 0, but received 0",  # sic, Kafka 3.9
            )
            assert incremental(c, BROKER_LOGGER, "0", [(name, DELETE, None)]) == (NONE, None)
            root = describe(c, BROKER_LOGGER, "0", ["root"])[2]["root"]["value"]
            assert describe(c, BROKER_LOGGER, "0", [name])[2][name]["value"] == root
        finally:
            logging.getLogger(name).setLevel(logging.NOTSET)


def test_list_operations_follow_kafkas_config_admin_manager(start_broker):
    """APPEND with nothing stored starts from Kafka's default, SUBTRACT removes one
    occurrence per item named (configdef.incremental; both differed before)."""
    b = start_broker()
    SUBTRACT = 3
    with b.client() as c:
        assert incremental(c, BROKER, "0", [("log.cleanup.policy", APPEND, "compact")]) == (
            NONE,
            None,
        )
        _, _, e = describe(c, BROKER, "0", ["log.cleanup.policy"])
        assert e["log.cleanup.policy"]["value"] == "delete,compact"
        ops = [("log.cleanup.policy", SET, "compact,delete,compact")]
        assert incremental(c, BROKER, "0", ops) == (NONE, None)
        assert incremental(c, BROKER, "0", [("log.cleanup.policy", SUBTRACT, "compact")]) == (
            NONE,
            None,
        )
        _, _, e = describe(c, BROKER, "0", ["log.cleanup.policy"])
        assert e["log.cleanup.policy"]["value"] == "delete,compact"
        assert b.broker.config.log_cleanup_policy == "delete,compact"
        # not a list, and a name Kafka does not define (its lookup throws: no message)
        assert incremental(c, BROKER, "0", [("message.max.bytes", APPEND, "5")]) == (
            INVALID_CONFIG,
            "Config value append is not allowed for config key: message.max.bytes",
        )
        assert incremental(c, BROKER, "0", [("no.such.key", APPEND, "5")]) == (-1, None)


def test_topic_configs_follow_dynamic_broker_defaults(start_broker):
    """A topic config without override takes the broker's value, whatever its level: a
    cluster-wide dynamic log.segment.delete.delay.ms is described as the topic's
    file.delete.delay.ms (DYNAMIC_DEFAULT_BROKER_CONFIG, Kafka's synonyms) and applied to the
    open log at once."""
    b = start_broker(**{"log.segment.delete.delay.ms": "45000"})
    TOPIC = 2
    with b.client() as c:
        topic = unique_topic("dd")
        c.create_topic(topic)
        _, _, e = describe(c, TOPIC, topic, ["file.delete.delay.ms", "segment.jitter.ms"])
        got = e["file.delete.delay.ms"]
        assert (got["value"], got["config_source"]) == ("45000", STATIC_BROKER_CONFIG)
        ops = [("log.segment.delete.delay.ms", SET, "1234"), ("log.roll.jitter.ms", SET, "77")]
        assert incremental(c, BROKER, "", ops) == (NONE, None)
        _, _, e = describe(c, TOPIC, topic, ["file.delete.delay.ms", "segment.jitter.ms"])
        got = e["file.delete.delay.ms"]
        assert (got["value"], got["config_source"]) == ("1234", DYNAMIC_DEFAULT_BROKER_CONFIG)
        assert [(s["name"], s["value"], s["source"]) for s in got["synonyms"]] == [
            ("log.segment.delete.delay.ms", "1234", DYNAMIC_DEFAULT_BROKER_CONFIG),
            ("log.segment.delete.delay.ms", "45000", STATIC_BROKER_CONFIG),
            ("log.segment.delete.delay.ms", "60000", DEFAULT_CONFIG),
        ]
        got = e["segment.jitter.ms"]
        assert (got["value"], got["config_source"]) == ("77", DYNAMIC_DEFAULT_BROKER_CONFIG)
        log = b.broker.logs.get(topic, 0)
        wait_until(lambda: log.config.file_delete_delay_ms == 1234)
        assert log.config.roll_jitter_ms == 77
