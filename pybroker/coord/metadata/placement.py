"""Coordinator placement: which broker coordinates a group id or a transactional.id.

Kafka maps a key to a partition of its internal topic (``partitionFor``: abs(String.hashCode)
% 50) and the leader of that partition coordinates every key of it.  pybroker has no
__consumer_offsets log, but keeps that partitioning, so every group of one offsets partition
has the same coordinator and a transaction marker for (__consumer_offsets, p) has one
destination.  The owner of partition p is chosen by rendezvous hashing over the live brokers
registered under /brokers/ids (the live broker id with the highest hash of (p, broker id)):
every broker computes the same answer from the same input, it needs no extra state, and when a
broker joins or leaves only the partitions it wins or held move.  Transactional ids use the
same mapping, so a transaction's coordinator moves exactly as group coordination does.
"""

from __future__ import annotations

import array
import functools
import operator
import sys
import zlib
from collections.abc import Callable, Iterable
from typing import Protocol

#: offsets.topic.num.partitions (and transaction.state.log.num.partitions): Kafka's default.
#: pybroker has no __consumer_offsets log, but keeps its partitioning: a group's coordinator
#: is the owner of the group's offsets partition, so every group of one partition has the same
#: coordinator, as in Kafka, and a transaction marker for (__consumer_offsets, p) has one
#: destination.
OFFSETS_PARTITIONS = 50
OFFSETS_TOPIC = "__consumer_offsets"
TXN_STATE_TOPIC = "__transaction_state"
#: Kafka's Topic.INTERNAL_TOPICS (Metadata's is_internal; written by the coordinators only)
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TXN_STATE_TOPIC})


_HASH_CHUNK = 4096
_POWERS_31 = [pow(31, k, 1 << 32) for k in range(_HASH_CHUNK + 1)]
_UTF16 = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"


def java_string_hash(s: str) -> int:
    """java.lang.String.hashCode (over UTF-16 code units), as a signed 32-bit int:
    sum(c[i] * 31**(n-1-i)) mod 2**32, a chunk of code units at a time (C-level loops)."""
    units = array.array("H", s.encode(_UTF16, "surrogatepass"))
    h = 0
    for start in range(0, len(units), _HASH_CHUNK):
        chunk = units[start : start + _HASH_CHUNK]
        m = len(chunk)
        h = (h * _POWERS_31[m] + sum(map(operator.mul, chunk, _POWERS_31[m - 1 :: -1]))) & (
            0xFFFFFFFF
        )
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, partitions: int = OFFSETS_PARTITIONS) -> int:
    """Kafka's partitionFor: Utils.abs(key.hashCode) % partitions (asked several times per
    group request: the answers for the short keys seen last are remembered, a bounded few
    MiB at most)."""
    if len(key) <= _CACHED_KEY_CHARS:
        return _cached_partition_for(key, partitions)
    return _partition_for(key, partitions)


_CACHED_KEY_CHARS = 255


def _partition_for(key: str, partitions: int) -> int:
    h = java_string_hash(key)
    return (0 if h == -(2**31) else abs(h)) % partitions


_cached_partition_for = functools.lru_cache(maxsize=16384)(_partition_for)


def partition_coordinator(partition: int, broker_ids: Iterable[int]) -> int:
    """Rendezvous hashing of an offsets partition over the live brokers; -1 when none is."""
    best, best_id = -1, -1
    for b in broker_ids:
        h = zlib.crc32(f"{partition}\x00{b}".encode())
        if (h, b) > (best, best_id):
            best, best_id = h, b
    return best_id


def coordinator_for(key: str, broker_ids: Iterable[int]) -> int:
    """The coordinator of a group id (or transactional.id): its partition's owner."""
    return partition_coordinator(partition_for(key), broker_ids)


class Placement(Protocol):
    """Who coordinates the keys of each partition of an internal topic, as this broker sees
    it now.  ``epoch`` moves whenever any partition's owner may have changed (a coordinator
    holds what it cached about a key only while the epoch stays)."""

    partitions: int

    def epoch(self) -> int: ...

    def owner(self, partition: int) -> int:
        """The broker id coordinating ``partition``; -1 when none does."""
        ...

    def term(self, partition: int) -> object:
        """A token that changes whenever this broker's coordination of ``partition`` may have
        been interrupted (what it cached about the partition's keys is then stale)."""
        ...


def terms(placement: Placement) -> list[object]:
    """Every partition's term now."""
    return [placement.term(p) for p in range(placement.partitions)]


def moved(placement: Placement, before: list[object]) -> tuple[list[object], set[int]]:
    """The terms now, and the partitions whose term is not the one in ``before``."""
    now = terms(placement)
    return now, {p for p, t in enumerate(now) if t != before[p]}


class Rendezvous:
    """The metadata-store storages' placement (module docstring): ``membership()`` gives
    (the cluster's membership epoch, the live broker ids)."""

    partitions = OFFSETS_PARTITIONS

    def __init__(self, membership: Callable[[], tuple[int, Iterable[int]]]) -> None:
        self._membership = membership

    def epoch(self) -> int:
        return self._membership()[0]

    def owner(self, partition: int) -> int:
        return partition_coordinator(partition, self._membership()[1])

    def term(self, partition: int) -> object:
        return self.epoch()  # any change of the live brokers may move any partition


class SingleBroker:
    """One broker that coordinates everything (tests, and a coordinator without a cluster)."""

    partitions = OFFSETS_PARTITIONS

    def __init__(self, broker_id: int = 0) -> None:
        self.broker_id = broker_id

    def epoch(self) -> int:
        return 0

    def owner(self, partition: int) -> int:
        return self.broker_id

    def term(self, partition: int) -> object:
        return 0
