"""Every Kafka 3.9 topic config through Kafka's own tools (issue 25, point 1): kafka-topics
creates a topic with all of them, kafka-configs describes them with their sources, and bad
values get Kafka's INVALID_CONFIG messages (TopicCommand and ConfigCommand print them)."""

from __future__ import annotations

import re
import uuid

import pytest

from pybroker.kafka_topic_configs import TOPIC_DEFINITIONS
from pybroker.testing import java

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(not java.java_available(), reason="java not found (OpenJDK 17 expected)"),
    pytest.mark.shared_broker,  # a broker per backend and overrides: each test has its topics
]

CONFIG_COMMAND = "kafka.admin.ConfigCommand"

# a valid value for every topic config of Kafka 3.9, none of them the default
EVERY_TOPIC_CONFIG = {
    "segment.bytes": "1048576",
    "segment.ms": "3600000",
    "segment.jitter.ms": "60000",
    "segment.index.bytes": "1048576",
    "flush.messages": "100000",
    "flush.ms": "60000",
    "retention.bytes": "1073741824",
    "retention.ms": "86400000",
    "max.message.bytes": "2097152",
    "index.interval.bytes": "8192",
    "delete.retention.ms": "3600000",
    "min.compaction.lag.ms": "1000",
    "max.compaction.lag.ms": "86400000",
    "file.delete.delay.ms": "30000",
    "min.cleanable.dirty.ratio": "0.25",
    "cleanup.policy": "compact,delete",
    "unclean.leader.election.enable": "true",
    "min.insync.replicas": "2",
    "compression.type": "gzip",
    "compression.gzip.level": "5",
    "compression.lz4.level": "10",
    "compression.zstd.level": "7",
    "preallocate": "true",
    "message.format.version": "2.8",
    "message.timestamp.type": "LogAppendTime",
    "message.timestamp.difference.max.ms": "86400000",
    "message.timestamp.before.max.ms": "86400000",
    "message.timestamp.after.max.ms": "3600000",
    "leader.replication.throttled.replicas": "0:0",
    "follower.replication.throttled.replicas": "*",
    "message.downconversion.enable": "false",
    "remote.storage.enable": "false",
    "local.retention.ms": "3600000",
    "local.retention.bytes": "1048576",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
}


@pytest.fixture(scope="module")
def java_cp() -> str:
    with java.deps_or_fail():
        return java.classpath()


def tool(main: str, broker, *args: str) -> java.JavaResult:
    return java.run_main(main, ["--bootstrap-server", broker.bootstrap, *args], timeout=120)


def described(broker, topic: str, *, all_configs: bool = False) -> dict[str, tuple[str, str]]:
    """kafka-configs --describe: {name: (value, synonyms text)}."""
    args = ["--describe", "--entity-type", "topics", "--entity-name", topic]
    r = tool(CONFIG_COMMAND, broker, *args, *(["--all"] if all_configs else []))
    assert r.ok, r.describe()
    out = {}
    for line in r.stdout.splitlines():
        m = re.fullmatch(r"\s+([a-z0-9.]+)=(.*) sensitive=false synonyms=\{(.*)\}", line)
        if m:
            out[m.group(1)] = (m.group(2), m.group(3))
    return out


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_every_kafka_topic_config_created_and_described(java_cp, broker):
    assert set(EVERY_TOPIC_CONFIG) == set(TOPIC_DEFINITIONS)  # all of Kafka 3.9's
    topic = unique("all-configs")
    args = ["--create", "--topic", topic, "--partitions", "1", "--replication-factor", "1"]
    for name, value in EVERY_TOPIC_CONFIG.items():
        args += ["--config", f"{name}={value}"]
    r = tool(java.TOPIC_COMMAND, broker, *args)
    assert r.ok and f"Created topic {topic}." in r.stdout, r.describe()

    overrides = described(broker, topic)
    assert {k: v for k, (v, _) in overrides.items()} == EVERY_TOPIC_CONFIG
    value, synonyms = overrides["file.delete.delay.ms"]
    assert synonyms == (
        "DYNAMIC_TOPIC_CONFIG:file.delete.delay.ms=30000, "
        "DEFAULT_CONFIG:log.segment.delete.delay.ms=60000"
    )
    r = tool(java.TOPIC_COMMAND, broker, "--describe", "--topic", topic)
    assert r.ok and "segment.jitter.ms=60000" in r.stdout, r.describe()


@pytest.mark.broker_overrides(
    {"log.segment.delete.delay.ms": "45000", "log.roll.jitter.hours": "1"}
)
def test_defaults_described_with_their_broker_sources(java_cp, broker):
    topic = unique("defaults")
    r = tool(java.TOPIC_COMMAND, broker, "--create", "--topic", topic, "--partitions", "1")
    assert r.ok, r.describe()
    every = described(broker, topic, all_configs=True)
    assert set(every) == set(TOPIC_DEFINITIONS)
    assert every["file.delete.delay.ms"] == (
        "45000",
        "STATIC_BROKER_CONFIG:log.segment.delete.delay.ms=45000, "
        "DEFAULT_CONFIG:log.segment.delete.delay.ms=60000",
    )
    # Kafka keeps only the synonyms from the first broker name on: log.roll.jitter.ms is unset
    assert every["segment.jitter.ms"] == ("3600000", "")
    assert every["preallocate"] == ("false", "DEFAULT_CONFIG:log.preallocate=false")
    assert every["remote.storage.enable"] == ("false", "")
    assert every["message.format.version"][0] == "3.0-IV1"


def test_bad_values_get_kafkas_messages(java_cp, broker):
    topic = unique("bad")
    bad = {
        "segment.jitter.ms=-1": "Invalid value -1 for configuration segment.jitter.ms: Value must"
        " be at least 0",
        "preallocate=maybe": "Invalid value maybe for configuration preallocate: Expected value to"
        " be either true or false",
        "remote.storage.enable=true": "Tiered Storage functionality is disabled in the broker."
        " Topic cannot be configured with remote log storage.",
        "file.delete.delay=5": "Unknown topic config name: file.delete.delay",
    }
    for config, message in bad.items():
        r = tool(java.TOPIC_COMMAND, broker, "--create", "--topic", topic, "--config", config)
        assert r.returncode == 1 and message in r.stdout + r.stderr, r.describe()
    r = tool(java.TOPIC_COMMAND, broker, "--create", "--topic", topic)
    assert r.ok, r.describe()
    r = tool(
        CONFIG_COMMAND, broker, "--alter", "--entity-type", "topics", "--entity-name", topic,
        "--add-config", "compression.zstd.level=30",
    )  # fmt: skip
    assert r.returncode != 0, r.describe()
    assert (
        f"Invalid config value for resource ConfigResource(type=TOPIC, name='{topic}'): Invalid"
        " value 30 for configuration compression.zstd.level: Value must be no more than 22"
    ) in r.stdout + r.stderr, r.describe()
