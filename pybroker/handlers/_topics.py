"""Shared by the topic-facing handlers: topic configs, name checks, leader log lookup,
auto-creation.

Topic-level configs use Kafka's names; each falls back to the broker setting Kafka derives it
from.  Only configs whose behaviour pybroker implements are accepted: anything else is
INVALID_CONFIG rather than silently ignored.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pybroker.config import Config
from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers.context import RequestContext
from pybroker.log.partition_log import LogConfig, PartitionLog

_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
MAX_TOPIC_NAME = 249


def validate_topic_name(name: str | None) -> None:
    """Kafka's Topic.validate: INVALID_TOPIC_EXCEPTION for a bad name."""
    if not name or name in (".", "..") or len(name) > MAX_TOPIC_NAME or not _LEGAL.fullmatch(name):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"invalid topic name {name!r}")


def _int_at_least(lo: int) -> Callable[[str], Any]:
    def parse(s: str) -> int:
        v = int(s)
        if v < lo:
            raise ValueError(f"must be >= {lo}")
        return v

    return parse


def _one_of(*choices: str) -> Callable[[str], Any]:
    def parse(s: str) -> str:
        if s not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return s

    return parse


# name -> (parser, broker default as a string)
TOPIC_CONFIGS: dict[str, tuple[Callable[[str], Any], Callable[[Config], str]]] = {
    "cleanup.policy": (_one_of("delete"), lambda c: "delete"),
    "compression.type": (_one_of("producer"), lambda c: "producer"),
    "retention.ms": (_int_at_least(-1), lambda c: str(c.retention_ms)),
    "retention.bytes": (_int_at_least(-1), lambda c: str(c.log_retention_bytes)),
    "segment.bytes": (_int_at_least(14), lambda c: str(c.log_segment_bytes)),
    "segment.ms": (_int_at_least(1), lambda c: str(c.roll_ms)),
    "segment.index.bytes": (_int_at_least(4), lambda c: str(c.log_index_size_max_bytes)),
    "index.interval.bytes": (_int_at_least(0), lambda c: str(c.log_index_interval_bytes)),
    "max.message.bytes": (_int_at_least(0), lambda c: str(c.message_max_bytes)),
    "message.timestamp.type": (
        _one_of("CreateTime"),
        lambda c: "CreateTime",
    ),
    "min.insync.replicas": (_int_at_least(1), lambda c: str(c.min_insync_replicas)),
    "unclean.leader.election.enable": (
        _one_of("true", "false"),
        lambda c: str(c.unclean_leader_election_enable).lower(),
    ),
}


def validate_topic_configs(configs: dict[str, str | None]) -> dict[str, str]:
    out = {}
    for name, value in configs.items():
        spec = TOPIC_CONFIGS.get(name)
        if spec is None:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"unknown or unsupported topic config {name}"
            )
        if value is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"null value for topic config {name}")
        try:
            spec[0](value)
        except ValueError as e:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"invalid value {value!r} for {name}: {e}"
            ) from None
        out[name] = value
    return out


def effective_topic_configs(
    config: Config, topic_configs: dict[str, str]
) -> dict[str, tuple[str, bool]]:
    """Every topic config: (value, is_default)."""
    return {
        name: (topic_configs[name], False) if name in topic_configs else (default(config), True)
        for name, (_, default) in TOPIC_CONFIGS.items()
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
    )


def max_message_bytes(config: Config, topic_configs: dict[str, str]) -> int:
    v = topic_configs.get("max.message.bytes")
    return int(v) if v is not None else config.message_max_bytes


def partition_state(ctx: RequestContext, topic: str, partition: int) -> Any:
    info = ctx.services.cluster.topics.get(topic)
    if info is None or partition not in info.partitions:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    return info.partitions[partition]


def leader_log(
    ctx: RequestContext, topic: str, partition: int, current_leader_epoch: int = -1
) -> PartitionLog:
    """The local log of a partition this broker leads, or the Kafka error a client expects."""
    services = ctx.services
    state = partition_state(ctx, topic, partition)
    if state.leader != services.config.broker_id:
        raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    if current_leader_epoch >= 0:
        if current_leader_epoch < state.leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)
        if current_leader_epoch > state.leader_epoch:
            raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)
    return services.partition_log(topic, partition)


async def auto_create(ctx: RequestContext, topic: str) -> Any:
    """Create ``topic`` with the broker defaults (auto.create.topics.enable)."""
    cfg = ctx.services.config
    validate_topic_name(topic)
    try:
        return await ctx.services.cluster.create_topic(
            topic, cfg.num_partitions, cfg.default_replication_factor, {}
        )
    except KafkaError as e:
        if e.code == ErrorCode.TOPIC_ALREADY_EXISTS:
            return ctx.services.cluster.topics.get(topic)
        raise
