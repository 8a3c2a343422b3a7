"""The subscription half of the consumer embedded protocol (ConsumerProtocolSubscription.json),
as the group coordinator reads it: only the v0 prefix that every version starts with
(int16 version, the topics as an array of strings, nullable user data bytes).  Later fields
(owned partitions, generation id, rack id) are never needed here and are not read, exactly as
Kafka's GroupMetadata.computeSubscribedTopics parses every version with the v0 layout.
"""

from __future__ import annotations

import struct

PROTOCOL_TYPE = "consumer"  # ConsumerProtocol.PROTOCOL_TYPE

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def subscription_topics(metadata: bytes) -> list[str]:
    """The topics of one member's subscription metadata.  Raises ValueError when it does not
    follow the schema (a negative version, a negative or short array or string)."""
    buf = memoryview(metadata)
    pos = 0

    def take(n: int) -> memoryview:
        nonlocal pos
        if n < 0 or pos + n > len(buf):
            raise ValueError("consumer subscription metadata is truncated")
        out = buf[pos : pos + n]
        pos += n
        return out

    (version,) = _I16.unpack(take(2))
    if version < 0:
        raise ValueError(f"unsupported subscription version {version}")
    (count,) = _I32.unpack(take(4))
    if count < 0:
        raise ValueError("null topic array in consumer subscription metadata")
    topics = []
    for _ in range(count):
        (length,) = _I16.unpack(take(2))
        if length < 0:
            raise ValueError("null topic name in consumer subscription metadata")
        topics.append(bytes(take(length)).decode("utf-8"))
    (user_data,) = _I32.unpack(take(4))
    if user_data >= 0:
        take(user_data)
    return topics
