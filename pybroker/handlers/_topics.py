"""Shared by the topic-facing handlers: topic configs, name checks, leader log lookup,
auto-creation.

Topic-level configs use Kafka's names; each falls back to the broker setting Kafka derives it
from.  Only configs whose behaviour pybroker implements are accepted: anything else is
INVALID_CONFIG rather than silently ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pybroker.config import Config
from pybroker.errors import ErrorCode, KafkaError
from pybroker.flusher import NEVER
from pybroker.handlers.context import RequestContext
from pybroker.log import LogConfig
from pybroker.wire.records import COMPRESSION_TYPES

# compression.type values and the codec id each means (producer: the batch's own).
CODECS = COMPRESSION_TYPES

# Kafka's ConfigType codes (DescribeConfigs v3+).
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7


@dataclass(frozen=True)
class TopicConfigDef:
    default: Callable[[Config], str]  # the broker setting it falls back to
    broker_key: str  # that setting's name (the synonym DescribeConfigs reports)
    config_type: int
    allowed: frozenset[str] | None = None  # None: any value Kafka accepts


# The topic configs whose behaviour pybroker implements.  Kafka's own value checks run in
# pybroker.coord.metadata.topic_rules.validate_topic_configs when the topic is created.
TOPIC_CONFIGS: dict[str, TopicConfigDef] = {
    # compact, delete or both (either order): Kafka's list check in coord/metadata/topic_rules.py
    "cleanup.policy": TopicConfigDef(lambda c: c.log_cleanup_policy, "log.cleanup.policy", LIST),
    "delete.retention.ms": TopicConfigDef(
        lambda c: str(c.log_cleaner_delete_retention_ms), "log.cleaner.delete.retention.ms", LONG
    ),
    "min.cleanable.dirty.ratio": TopicConfigDef(
        lambda c: str(c.log_cleaner_min_cleanable_ratio), "log.cleaner.min.cleanable.ratio", DOUBLE
    ),
    "min.compaction.lag.ms": TopicConfigDef(
        lambda c: str(c.log_cleaner_min_compaction_lag_ms),
        "log.cleaner.min.compaction.lag.ms",
        LONG,
    ),
    "max.compaction.lag.ms": TopicConfigDef(
        lambda c: str(c.log_cleaner_max_compaction_lag_ms),
        "log.cleaner.max.compaction.lag.ms",
        LONG,
    ),
    "compression.type": TopicConfigDef(
        lambda c: c.compression_type,
        "compression.type",
        STRING,
        frozenset(CODECS),
    ),
    "retention.ms": TopicConfigDef(lambda c: str(c.retention_ms), "log.retention.ms", LONG),
    "retention.bytes": TopicConfigDef(
        lambda c: str(c.log_retention_bytes), "log.retention.bytes", LONG
    ),
    "segment.bytes": TopicConfigDef(lambda c: str(c.log_segment_bytes), "log.segment.bytes", INT),
    "segment.ms": TopicConfigDef(lambda c: str(c.roll_ms), "log.roll.ms", LONG),
    "segment.index.bytes": TopicConfigDef(
        lambda c: str(c.log_index_size_max_bytes), "log.index.size.max.bytes", INT
    ),
    "index.interval.bytes": TopicConfigDef(
        lambda c: str(c.log_index_interval_bytes), "log.index.interval.bytes", INT
    ),
    "max.message.bytes": TopicConfigDef(
        lambda c: str(c.message_max_bytes), "message.max.bytes", INT
    ),
    "message.timestamp.type": TopicConfigDef(
        lambda c: c.log_message_timestamp_type,
        "log.message.timestamp.type",
        STRING,
        frozenset({"CreateTime", "LogAppendTime"}),
    ),
    # KIP-937: before/after fall back to the deprecated difference.max.ms while at Long.MAX
    "message.timestamp.difference.max.ms": TopicConfigDef(
        lambda c: str(c.log_message_timestamp_difference_max_ms),
        "log.message.timestamp.difference.max.ms",
        LONG,
    ),
    "message.timestamp.before.max.ms": TopicConfigDef(
        lambda c: str(c.log_message_timestamp_before_max_ms),
        "log.message.timestamp.before.max.ms",
        LONG,
    ),
    "message.timestamp.after.max.ms": TopicConfigDef(
        lambda c: str(c.log_message_timestamp_after_max_ms),
        "log.message.timestamp.after.max.ms",
        LONG,
    ),
    "flush.messages": TopicConfigDef(
        lambda c: str(c.log_flush_interval_messages or NEVER),
        "log.flush.interval.messages",
        LONG,
    ),
    "flush.ms": TopicConfigDef(
        lambda c: str(c.log_flush_interval_ms or NEVER), "log.flush.interval.ms", LONG
    ),
    "min.insync.replicas": TopicConfigDef(
        lambda c: str(c.min_insync_replicas), "min.insync.replicas", INT
    ),
    # replication throttles (replication/throttle.py); no broker synonym in Kafka
    "leader.replication.throttled.replicas": TopicConfigDef(lambda c: "", "", LIST),
    "follower.replication.throttled.replicas": TopicConfigDef(lambda c: "", "", LIST),
    "unclean.leader.election.enable": TopicConfigDef(
        lambda c: str(c.unclean_leader_election_enable).lower(),
        "unclean.leader.election.enable",
        BOOLEAN,
    ),
}


def check_supported_configs(configs: dict[str, str | None]) -> dict[str, str | None]:
    """INVALID_CONFIG for a config pybroker does not implement (rather than ignoring it)."""
    for name, value in configs.items():
        spec = TOPIC_CONFIGS.get(name)
        if spec is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"topic config {name} is not supported")
        if name == "cleanup.policy" and value is not None and not value.strip(" ,"):
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                "cleanup.policy must name compact, delete or both (an empty policy is not"
                " supported)",
            )
        allowed = spec.allowed
        if allowed is not None and value is not None and value not in allowed:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                f"{name}={value} is not supported (supported: {', '.join(sorted(allowed))})",
            )
    return configs


def effective_topic_configs(
    config: Config, topic_configs: dict[str, str]
) -> dict[str, tuple[str, bool]]:
    """Every topic config: (value, is_default)."""
    return {
        name: (topic_configs[name], False) if name in topic_configs else (d.default(config), True)
        for name, d in TOPIC_CONFIGS.items()
    }


def log_config(config: Config, topic_configs: dict[str, str]) -> LogConfig:
    eff = {k: v for k, (v, _) in effective_topic_configs(config, topic_configs).items()}
    return LogConfig(
        segment_bytes=int(eff["segment.bytes"]),
        roll_ms=int(eff["segment.ms"]),
        retention_ms=int(eff["retention.ms"]),
        retention_bytes=int(eff["retention.bytes"]),
        index_interval_bytes=int(eff["index.interval.bytes"]),
        max_index_bytes=int(eff["segment.index.bytes"]),
        cleanup_policy=",".join(i.strip() for i in eff["cleanup.policy"].split(",") if i.strip()),
        delete_retention_ms=int(eff["delete.retention.ms"]),
        min_cleanable_dirty_ratio=float(eff["min.cleanable.dirty.ratio"]),
        min_compaction_lag_ms=int(eff["min.compaction.lag.ms"]),
        max_compaction_lag_ms=int(eff["max.compaction.lag.ms"]),
        message_timestamp_type=eff["message.timestamp.type"],
    )


def flush_policy(config: Config, topic_configs: dict[str, str]) -> tuple[int, int]:
    """(flush.messages, flush.ms) in effect for a topic."""
    eff = effective_topic_configs(config, topic_configs)
    return int(eff["flush.messages"][0]), int(eff["flush.ms"][0])


async def auto_create(ctx: RequestContext, topic: str) -> Any:
    """Create ``topic`` with the broker defaults (auto.create.topics.enable)."""
    cfg = ctx.services.config
    try:
        return await ctx.services.cluster.create_topic(
            topic, cfg.num_partitions, cfg.default_replication_factor, {}
        )
    except KafkaError as e:
        if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            raise
        info = ctx.services.cluster.topics.get(topic)
        if info is None:
            # another broker created it a moment ago and our cache has not caught up: Kafka
            # answers LEADER_NOT_AVAILABLE while a topic's creation is in progress
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE) from None
        return info
