"""Kafka's rules for a topic: its name (Topic.validate, collisions between "." and "_"), its
config overrides (LogConfig.validate: pybroker/topic_config.py) and where its replicas go
(AdminUtils.assignReplicasToBrokersRackUnaware).  Pure functions; errors are KafkaError with
Kafka's codes and messages."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator

from pybroker import topic_config
from pybroker.configdef import ConfigException
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


def validate_topic_configs(configs: dict[str, str | None]) -> dict[str, str]:
    """Kafka's checks of a topic's configs (pybroker/topic_config.py, over Kafka's defaults:
    the handlers check them over the broker's first); raises INVALID_CONFIG.  Returns the
    configs as given (Kafka stores the strings the client sent)."""
    try:
        return topic_config.validate(configs, {})
    except ConfigException as e:
        raise topic_config.create_error(e) from None


def _check_assignment(num_partitions: int, replication_factor: int, brokers: int) -> None:
    """AdminUtils.assignReplicasToBrokers' checks before either assignment."""
    if num_partitions <= 0:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
        )
    if replication_factor <= 0:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
        )
    if replication_factor > brokers:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: {brokers}.",
        )


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
    _check_assignment(num_partitions, replication_factor, len(broker_ids))
    brokers = sorted(broker_ids)
    n = len(brokers)
    result: dict[int, list[int]] = {}
    for p, first, next_replica_shift in _rounds(
        n, num_partitions, rng, fixed_start_index, start_partition_id
    ):
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            shift = 1 + (next_replica_shift + j) % (n - 1)
            replicas.append(brokers[(first + shift) % n])
        result[p] = replicas
    return result


def _rounds(
    n: int,
    num_partitions: int,
    rng: random.Random | None,
    fixed_start_index: int,
    start_partition_id: int,
) -> Iterator[tuple[int, int, int]]:
    """Both assignments' walk: each partition id from ``start_partition_id`` on, with the index
    of its first replica in the (n) brokers' list and nextReplicaShift (random start index and
    shift unless ``fixed_start_index``; the shift grows by one every n partitions)."""
    rng = rng or random.Random()
    start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    next_replica_shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    current = max(0, start_partition_id)
    for _ in range(num_partitions):
        if current > 0 and current % n == 0:
            next_replica_shift += 1
        yield current, (current + start_index) % n, next_replica_shift
        current += 1


def assign_replicas(
    broker_racks: dict[int, str | None],
    num_partitions: int,
    replication_factor: int,
    rng: random.Random | None = None,
    *,
    start_partition_id: int = -1,
) -> dict[int, list[int]]:
    """kafka.admin.AdminUtils.assignReplicasToBrokers for live brokers with their racks
    (``broker.rack``): rack-aware when every broker has a rack, rack-unaware when none has,
    and, when only some have, rack-unaware too (Kafka's RackAwareMode.Safe, the mode of its
    automatic topic creation; Enforced would refuse).  A multi-core node gives each of its
    broker processes the node's rack, so no partition has two replicas on one machine while
    there are machines enough (docs/multicore.md)."""
    if replication_factor > len(broker_racks) or not broker_racks:
        return assign_replicas_to_brokers(
            list(broker_racks), num_partitions, replication_factor, rng
        )
    if any(r is None for r in broker_racks.values()):
        return assign_replicas_to_brokers(
            list(broker_racks),
            num_partitions,
            replication_factor,
            rng,
            start_partition_id=start_partition_id,
        )
    return assign_replicas_rack_aware(
        {b: r for b, r in broker_racks.items() if r is not None},
        num_partitions,
        replication_factor,
        rng,
        start_partition_id=start_partition_id,
    )


def rack_alternated_brokers(broker_racks: dict[int, str]) -> list[int]:
    """AdminUtils.getRackAlternatedBrokerList: one broker of each rack in turn (racks and
    each rack's brokers in sorted order), e.g. a:0,1 b:2 c:3,4 -> 0,2,3,1,4."""
    by_rack: dict[str, list[int]] = {}
    for b, r in sorted(broker_racks.items()):
        by_rack.setdefault(r, []).append(b)
    iters = [iter(by_rack[r]) for r in sorted(by_rack)]
    out: list[int] = []
    i = 0
    while len(out) < len(broker_racks):
        b = next(iters[i], None)
        if b is not None:
            out.append(b)
        i = (i + 1) % len(iters)
    return out


def assign_replicas_rack_aware(
    broker_racks: dict[int, str],
    num_partitions: int,
    replication_factor: int,
    rng: random.Random | None = None,
    *,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
) -> dict[int, list[int]]:
    """AdminUtils.assignReplicasToBrokersRackAware: leaders go round the rack-alternated
    broker list; each follower is the next broker (shifted as in the rack-unaware case, by
    whole rounds of racks) whose rack holds no replica yet, unless every rack does, and that
    holds none itself, unless every broker does.  So a partition has one replica per rack
    while racks remain, and leaders and followers spread evenly."""
    _check_assignment(num_partitions, replication_factor, len(broker_racks))
    arranged = rack_alternated_brokers(broker_racks)
    n = len(arranged)
    num_racks = len(set(broker_racks.values()))
    result: dict[int, list[int]] = {}
    for p, first, next_replica_shift in _rounds(
        n, num_partitions, rng, fixed_start_index, start_partition_id
    ):
        leader = arranged[first]
        replicas = [leader]
        racks_used = {broker_racks[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                shift = 1 + (next_replica_shift * num_racks + k) % (n - 1)
                broker = arranged[(first + shift) % n]
                rack = broker_racks[broker]
                k += 1
                if (rack not in racks_used or len(racks_used) == num_racks) and (
                    broker not in brokers_used or len(brokers_used) == n
                ):
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
        result[p] = replicas
    return result
