"""Shared by the topic-facing handlers: topic configs, name checks, leader log lookup,
auto-creation.

Topic configs are Kafka 3.9's, every one of them (pybroker/topic_config.py: declarations,
validation, broker synonyms); each falls back to the broker setting Kafka derives it from
(``Config.setting``, dynamic values included).  The functions below read them for the log,
the flusher and DescribeConfigs / CreateTopics (the produce path: replica_manager.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pybroker import topic_config
from pybroker.config import Config
from pybroker.configdef import convert_to_string
from pybroker.coord.metadata.model import TopicInfo
from pybroker.coord.metadata.placement import INTERNAL_TOPICS, OFFSETS_TOPIC
from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers.context import RequestContext
from pybroker.log import LogConfig

# DescribeConfigsResponse.ConfigSource ids
TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5


def check_configs(config: Config, configs: Mapping[str, str | None]) -> dict[str, str]:
    """Kafka's checks of a topic's configs over this broker's defaults (LogConfig.validate):
    the configs to store.  Raises ConfigException or KafkaError(INVALID_CONFIG); callers word
    them for their API (topic_config.create_error / alter_error)."""
    return topic_config.validate(configs, config.topic_defaults())


def topic_value(config: Config, topic_configs: Mapping[str, str], name: str) -> Any:
    """One topic config's typed value (lists as tuples)."""
    return topic_config.value(name, topic_configs, config.topic_defaults())


def topic_config_entries(
    ctx: RequestContext,
    overrides: Mapping[str, str],
    *,
    with_synonyms: bool,
    documentation: bool,
) -> list[dict]:
    """ConfigHelper.createTopicConfigEntry for every topic config: the effective value as
    Kafka prints it, the topic override (if any) then the broker setting's synonyms with their
    sources (dynamic per broker, dynamic default, static, default), the first of them giving
    the source; DescribeConfigs and CreateTopics v5+ answer these."""
    dynamic = ctx.services.dynamic
    values = topic_config.effective(overrides, ctx.services.config.topic_defaults())
    out = []
    for name, key in topic_config.KEYS.items():
        value = convert_to_string(values[name], key.type)
        broker_key = topic_config.broker_synonym(name)
        synonyms = dynamic.synonyms(broker_key) if broker_key is not None else []
        if name in overrides:
            synonyms.insert(0, {"name": name, "value": value, "source": TOPIC_CONFIG})
        source = synonyms[0]["source"] if synonyms else DEFAULT_CONFIG
        out.append(
            {
                "name": name,
                "value": value,
                "read_only": False,
                "config_source": source,
                "is_default": source == DEFAULT_CONFIG,
                "is_sensitive": False,
                "synonyms": synonyms if with_synonyms else [],
                "config_type": int(key.type),
                "documentation": key.doc if documentation else None,
            }
        )
    return out


def log_config(config: Config, topic_configs: Mapping[str, str]) -> LogConfig:
    v = topic_config.effective(topic_configs, config.topic_defaults())
    return LogConfig(
        segment_bytes=v["segment.bytes"],
        roll_ms=v["segment.ms"],
        roll_jitter_ms=v["segment.jitter.ms"],
        retention_ms=v["retention.ms"],
        retention_bytes=v["retention.bytes"],
        index_interval_bytes=v["index.interval.bytes"],
        max_index_bytes=v["segment.index.bytes"],
        file_delete_delay_ms=v["file.delete.delay.ms"],
        cleanup_policy=",".join(v["cleanup.policy"]),
        delete_retention_ms=v["delete.retention.ms"],
        min_cleanable_dirty_ratio=v["min.cleanable.dirty.ratio"],
        min_compaction_lag_ms=v["min.compaction.lag.ms"],
        max_compaction_lag_ms=v["max.compaction.lag.ms"],
        message_timestamp_type=v["message.timestamp.type"],
    )


def flush_policy(config: Config, topic_configs: Mapping[str, str]) -> tuple[int, int]:
    """(flush.messages, flush.ms) in effect for a topic."""
    return (
        topic_value(config, topic_configs, "flush.messages"),
        topic_value(config, topic_configs, "flush.ms"),
    )


async def auto_create(ctx: RequestContext, topic: str) -> TopicInfo:
    """Create ``topic`` with the broker defaults (auto.create.topics.enable).  An internal
    topic gets its own settings, as Kafka's AutoTopicCreationManager gives them: the
    coordinator's InternalTopic creates it with the internal-topic storages; otherwise
    (pybroker keeps offsets and transaction state in the metadata store) it is not created:
    UNKNOWN_TOPIC_OR_PARTITION."""
    cfg = ctx.services.config
    if topic in INTERNAL_TOPICS:
        services = ctx.services
        internal = services.offsets_topic if topic == OFFSETS_TOPIC else services.txn_topic
        if internal is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        await internal.ensure()
        info = services.cluster.topics.get(topic)
        if info is None:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE)
        return info
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
