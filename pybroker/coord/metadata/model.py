"""What the metadata cache holds: brokers, topics with their partitions' states, and the events
it sends its listeners (metadata/cache.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class BrokerInfo:
    id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: list[tuple[str, str, int]] = field(default_factory=list)  # (listener, host, port)

    def endpoint(self, listener: str | None) -> tuple[str, int] | None:
        """(host, port) of the broker's advertised ``listener``, None if it has no such
        listener (Kafka: the broker is then left out of what clients of that listener see).
        ``listener`` None: the first endpoint."""
        if listener is None or not self.endpoints:
            return self.host, self.port
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None


@dataclass(frozen=True)
class PartitionState:
    leader: int  # -1: no leader
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    controller_epoch: int = 0
    # the state znode's version as read (the partition epoch; -1: unknown / no znode).  Left out
    # of equality: two states with the same content compare equal whatever version they were
    # read at (the cache still tracks it: see MetadataCache._update_topic).
    zk_version: int = field(default=-1, compare=False)
    # a reassignment in progress (KIP-455, the topic znode's adding_replicas /
    # removing_replicas): ``replicas`` is then the full set, original plus target
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def being_reassigned(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionState]
    configs: dict[str, str]
    # the topic znode's version the assignment was read at (or a local write made): a read
    # that started before a local reassignment write never puts the older assignment back
    assignment_version: int = field(default=-1, compare=False)


class ClusterEvent(NamedTuple):
    # "BROKERS_CHANGED" | "CONTROLLER_CHANGED" | "TOPIC_CHANGED" | "TOPIC_DELETED"
    # | "BROKER_CONFIG_CHANGED" (topic: the entity, "<default>" or our id: ``broker_configs``)
    # | "ENTITY_CONFIG_CHANGED" (topic: the entity path of another type, e.g. "clients/x")
    kind: str
    topic: str | None = None


class ClusterError(Exception):
    pass


class BrokerIdInUseError(ClusterError):
    """broker.id is registered by another live broker (another store session)."""


Listener = Callable[[ClusterEvent], object]
