"""The subscription half of the consumer embedded protocol (ConsumerProtocolSubscription.json),
as the group coordinator reads it: only the v0 prefix that every version starts with
(int16 version, the topics as an array of strings, nullable user data bytes).  Later fields
(owned partitions, generation id, rack id) are never needed here and are not read, exactly as
Kafka's GroupMetadata.computeSubscribedTopics parses every version with the v0 layout.
"""

from __future__ import annotations

from pybroker.wire.primitives import DecodeError, Reader

PROTOCOL_TYPE = "consumer"  # ConsumerProtocol.PROTOCOL_TYPE


def subscription_topics(metadata: bytes) -> list[str]:
    """The topics of one member's subscription metadata.  Raises ValueError (DecodeError) when
    it does not follow the schema (a negative version, a null or short array or string)."""
    r = Reader(metadata)
    version = r.int16()
    if version < 0:
        raise DecodeError(f"unsupported subscription version {version}")
    count = r.array_length(2)
    if count < 0:
        raise DecodeError("null topic array in consumer subscription metadata")
    topics = [r.string() for _ in range(count)]
    r.nullable_bytes()
    return topics
