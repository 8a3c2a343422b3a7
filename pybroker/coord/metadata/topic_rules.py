"""Kafka's rules for a topic: its name (Topic.validate, collisions between "." and "_"), its
config overrides (LogConfig's types, ranges and cross-checks) and where its replicas go
(AdminUtils.assignReplicasToBrokersRackUnaware).  Pure functions; errors are KafkaError with
Kafka's codes and messages."""

from __future__ import annotations

import random
import re
from typing import Any

from pybroker.errors import ErrorCode, KafkaError

MAX_TOPIC_NAME_LENGTH = 249

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: str) -> None:
    """org.apache.kafka.common.internals.Topic.validate: raises INVALID_TOPIC_EXCEPTION."""

    def bad(msg: str) -> KafkaError:
        return KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, msg)

    if not name:
        raise bad("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise bad('Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise bad(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} "
            f"characters, topic name: {name}"
        )
    if not _LEGAL_TOPIC.match(name):
        raise bad(
            f'Topic name "{name}" is illegal, it contains a character other than '
            "ASCII alphanumerics, '.', '_' and '-'"
        )


def has_collision_chars(name: str) -> bool:
    return "." in name or "_" in name


def unify_collision_chars(name: str) -> str:
    return name.replace(".", "_")


_I32 = (-(2**31), 2**31 - 1)
_I64 = (-(2**63), 2**63 - 1)
# name -> (type, constraint): Kafka's topic-level configs (LogConfig / TopicConfig, 3.x)
TOPIC_CONFIGS: dict[str, tuple[str, Any]] = {
    "cleanup.policy": ("list", {"compact", "delete"}),
    "compression.type": (
        "choice",
        {"uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"},
    ),
    "compression.gzip.level": ("int", (-1, 9)),
    "compression.lz4.level": ("int", (1, 17)),
    "compression.zstd.level": ("int", (-131072, 22)),
    "delete.retention.ms": ("long", (0, None)),
    "file.delete.delay.ms": ("long", (0, None)),
    "flush.messages": ("long", (1, None)),
    "flush.ms": ("long", (0, None)),
    "follower.replication.throttled.replicas": ("list", None),
    "index.interval.bytes": ("int", (0, None)),
    "leader.replication.throttled.replicas": ("list", None),
    "local.retention.bytes": ("long", (-2, None)),
    "local.retention.ms": ("long", (-2, None)),
    "max.compaction.lag.ms": ("long", (1, None)),
    "max.message.bytes": ("int", (0, None)),
    "message.downconversion.enable": ("bool", None),
    "message.format.version": ("string", None),
    "message.timestamp.after.max.ms": ("long", (0, None)),
    "message.timestamp.before.max.ms": ("long", (0, None)),
    "message.timestamp.difference.max.ms": ("long", (0, None)),
    "message.timestamp.type": ("choice", {"CreateTime", "LogAppendTime"}),
    "min.cleanable.dirty.ratio": ("double", (0.0, 1.0)),
    "min.compaction.lag.ms": ("long", (0, None)),
    "min.insync.replicas": ("int", (1, None)),
    "preallocate": ("bool", None),
    "remote.storage.enable": ("bool", None),
    "remote.log.copy.disable": ("bool", None),
    "remote.log.delete.on.disable": ("bool", None),
    "retention.bytes": ("long", (None, None)),
    "retention.ms": ("long", (-1, None)),
    "segment.bytes": ("int", (14, None)),
    "segment.index.bytes": ("int", (4, None)),
    "segment.jitter.ms": ("long", (0, None)),
    "segment.ms": ("long", (1, None)),
    "unclean.leader.election.enable": ("bool", None),
}


def validate_topic_configs(configs: dict[str, str | None]) -> dict[str, str]:
    """Kafka's checks for CreateTopics configs; raises INVALID_CONFIG.  Returns the configs as
    given (Kafka stores the strings the client sent)."""

    def bad(msg: str) -> KafkaError:
        return KafkaError(ErrorCode.INVALID_CONFIG, msg)

    nulls = [k for k, v in configs.items() if v is None]
    if nulls:
        raise bad(f"Null value not supported for topic configs: {','.join(nulls)}")
    for key, value in configs.items():
        if key not in TOPIC_CONFIGS:
            raise bad(f"Unknown topic config name: {key}")
        kind, constraint = TOPIC_CONFIGS[key]
        v = str(value).strip()

        def invalid(reason: str, key: str = key, value: Any = value) -> KafkaError:
            return bad(f"Invalid value {value} for configuration {key}: {reason}")

        if kind in ("int", "long"):
            try:
                n = int(v)
            except ValueError:
                raise invalid(f"Not a number of type {kind.upper()}") from None
            lo_type, hi_type = _I32 if kind == "int" else _I64
            if not lo_type <= n <= hi_type:
                raise invalid(f"Not a number of type {kind.upper()}")
            lo, hi = constraint
            if lo is not None and n < lo:
                raise invalid(f"Value must be at least {lo}")
            if hi is not None and n > hi:
                raise invalid(f"Value must be no more than {hi}")
        elif kind == "double":
            try:
                d = float(v)
            except ValueError:
                raise invalid("Not a number of type DOUBLE") from None
            lo, hi = constraint
            if not lo <= d <= hi:
                raise invalid(f"Value must be between {lo} and {hi}")
        elif kind == "bool":
            if v.lower() not in ("true", "false"):
                raise invalid("Expected value to be either true or false")
        elif kind == "choice":
            if v not in constraint:
                raise invalid(f"String must be one of: {', '.join(sorted(constraint))}")
        elif kind == "list" and constraint is not None:
            items = [s.strip() for s in v.split(",") if s.strip()]
            wrong = [s for s in items if s not in constraint]
            if wrong:
                raise invalid(f"[{', '.join(wrong)}] are not in [{', '.join(sorted(constraint))}]")
    for key in ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas"):
        value = configs.get(key)
        if value is not None and not _valid_throttled_replicas(str(value)):
            # Kafka's ThrottledReplicaListValidator
            raise bad(
                f"Invalid value {value} for configuration {key}: Must be the literal '*' or a "
                "list of replicas in the following format: "
                "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
            )
    lag_min, lag_max = configs.get("min.compaction.lag.ms"), configs.get("max.compaction.lag.ms")
    if lag_min is not None and lag_max is not None and int(lag_min) > int(lag_max):
        # Kafka's LogConfig.validateValues
        raise bad(
            f"conflict topic config setting min.compaction.lag.ms ({int(lag_min)}) >"
            f" max.compaction.lag.ms ({int(lag_max)})"
        )
    return {k: str(v) for k, v in configs.items()}


def _valid_throttled_replicas(value: str) -> bool:
    """``*``, empty, or ``[partitionId]:[brokerId],...``."""
    items = [i.strip() for i in value.split(",")]
    if not value.strip() or items == ["*"]:
        return True
    for item in items:
        p, sep, b = item.partition(":")
        if not sep or not p.strip().isdigit() or not b.strip().isdigit():
            return False
    return True


def assign_replicas_to_brokers(
    broker_ids: list[int],
    num_partitions: int,
    replication_factor: int,
    rng: random.Random | None = None,
    *,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
) -> dict[int, list[int]]:
    """kafka.admin.AdminUtils.assignReplicasToBrokersRackUnaware: the first replica of
    partition p is broker[(p + start) % n]; followers are shifted by nextReplicaShift, which
    grows by one every n partitions, so replicas spread evenly."""
    if num_partitions <= 0:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
        )
    if replication_factor <= 0:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
        )
    if replication_factor > len(broker_ids):
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(broker_ids)}.",
        )
    rng = rng or random.Random()
    brokers = sorted(broker_ids)
    n = len(brokers)
    start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    next_replica_shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    current = max(0, start_partition_id)
    result: dict[int, list[int]] = {}
    for _ in range(num_partitions):
        if current > 0 and current % n == 0:
            next_replica_shift += 1
        first = (current + start_index) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            shift = 1 + (next_replica_shift + j) % (n - 1)
            replicas.append(brokers[(first + shift) % n])
        result[current] = replicas
        current += 1
    return result
