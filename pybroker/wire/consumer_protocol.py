"""The consumer embedded protocol (ConsumerProtocolSubscription.json and
ConsumerProtocolAssignment.json): the member metadata and assignments classic consumers put in
JoinGroup and SyncGroup, as the group coordinator reads and writes them.

Subscription, versions 0-3 (no flexible versions): int16 version, topics (array of strings),
user data (nullable bytes), then v1+ owned partitions (array of topic + int32 array), v2+
generation id (int32), v3+ rack id (nullable string).  A reader of version N reads the fields
it knows and ignores what follows (ConsumerProtocol.deserializeSubscription does the same for
newer versions).  Assignment, versions 0-3: int16 version, assigned partitions (array of
topic + int32 array), user data (nullable bytes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pybroker.wire.primitives import DecodeError, Reader, Writer

PROTOCOL_TYPE = "consumer"  # ConsumerProtocol.PROTOCOL_TYPE


def _version(r: Reader) -> int:
    version = r.int16()
    if version < 0:
        raise DecodeError(f"unsupported consumer protocol version {version}")
    return version


def _topics(r: Reader) -> list[str]:
    count = r.array_length(2)
    if count < 0:
        raise DecodeError("null topic array in consumer subscription metadata")
    return [r.string() for _ in range(count)]


def _partitions(r: Reader) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    count = r.array_length(6)
    for _ in range(max(count, 0)):
        topic = r.string()
        n = r.array_length(4)
        out.setdefault(topic, []).extend(r.int32() for _ in range(max(n, 0)))
    return out


def subscription_topics(metadata: bytes) -> list[str]:
    """The topics of one member's subscription metadata (the v0 prefix every version starts
    with, as Kafka's GroupMetadata.computeSubscribedTopics reads it).  Raises ValueError
    (DecodeError) when it does not follow the schema."""
    r = Reader(metadata)
    _version(r)
    topics = _topics(r)
    r.nullable_bytes()
    return topics


@dataclass
class Subscription:
    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: dict[str, list[int]] = field(default_factory=dict)
    generation_id: int = -1
    rack_id: str | None = None


def parse_subscription(metadata: bytes) -> Subscription:
    """Every field of a subscription.  Raises ValueError (DecodeError)."""
    r = Reader(metadata)
    version = _version(r)
    topics = _topics(r)
    user_data = r.nullable_bytes()
    sub = Subscription(topics, bytes(user_data) if user_data is not None else None)
    if version >= 1:
        sub.owned_partitions = _partitions(r)
    if version >= 2:
        sub.generation_id = r.int32()
    if version >= 3:
        sub.rack_id = r.nullable_string()
    return sub


def parse_assignment(data: bytes) -> dict[str, list[int]]:
    """The partitions of an assignment; empty bytes (no assignment yet) is none.  Raises
    ValueError (DecodeError)."""
    if not data:
        return {}
    r = Reader(data)
    _version(r)
    return _partitions(r)


def encode_assignment(partitions: Mapping[str, Iterable[int]], version: int = 0) -> bytes:
    """An assignment without user data, at ``version`` (0-3 share one layout)."""
    w = Writer()
    w.int16(min(max(version, 0), 3))
    topics = [(t, sorted(ps)) for t, ps in sorted(partitions.items()) if ps]
    w.int32(len(topics))
    for topic, ps in topics:
        w.string(topic)
        w.int32(len(ps))
        for p in ps:
            w.int32(p)
    w.int32(-1)  # user data: null
    return w.getvalue()
