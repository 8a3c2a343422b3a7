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
import operator
import sys
import zlib
from collections.abc import Iterable

#: offsets.topic.num.partitions (and transaction.state.log.num.partitions): Kafka's default.
#: pybroker has no __consumer_offsets log, but keeps its partitioning: a group's coordinator
#: is the owner of the group's offsets partition, so every group of one partition has the same
#: coordinator, as in Kafka, and a transaction marker for (__consumer_offsets, p) has one
#: destination.
OFFSETS_PARTITIONS = 50
OFFSETS_TOPIC = "__consumer_offsets"


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
    """Kafka's partitionFor: Utils.abs(key.hashCode) % partitions."""
    h = java_string_hash(key)
    return (0 if h == -(2**31) else abs(h)) % partitions


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
