"""OffsetCommit (key 8) v0-9 decoded and its answer encoded in one function each (issue 28:
W18 sends one OffsetCommit per poll, and the generic plan's nested array readers, Reader
object and header pass were ~20% of the commit's Python path).

Both give exactly what the generic codec (codec.py, driven by messages/offset_commit.py)
gives, or ``None`` to hand the request or answer to it: these functions take the common
shape only (empty tagged-field sections, well-formed bytes, dict
entries) and leave everything else, errors included, to the generic code, so the generic
codec stays the one definition of the format.  tests/test_offset_commit_codec.py compares
the two over every version and random inputs.
"""

from __future__ import annotations

import struct
from typing import Any

from pybroker.wire.primitives import DecodeError, uvarint_at, write_uvarint

VERSIONS = range(0, 10)
_FLEXIBLE = 8  # v8+: compact strings and arrays, tagged-field sections
_HEAD = struct.Struct(">hhih")  # api key, version, correlation id, client id's length
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_SIZE_AND_CORRELATION = struct.Struct(">ii")
_ANSWER_PARTITION = struct.Struct(">ih")  # partition_index, error_code
# a request partition's fixed-width fields: partition_index, committed_offset, then v1's
# commit_timestamp or v6+'s committed_leader_epoch
_PARTITION = {v: struct.Struct(">iqq" if v == 1 else ">iqi" if v >= 6 else ">iq") for v in VERSIONS}


class _Generic(Exception):
    """Not the common shape: the generic codec decodes (or refuses) it."""


def _string(buf: Any, p: int, end: int, flexible: bool, nullable: bool) -> tuple[Any, int]:
    if flexible:
        n = buf[p] - 1
        if n < 0x7F:
            p += 1
        else:  # a multi-byte length
            n, p = uvarint_at(buf, p, end)
            n -= 1
    else:
        (n,) = _I16.unpack_from(buf, p)
        p += 2
    if n < 0:
        if nullable:
            return None, p
        raise _Generic
    e = p + n
    if e > end:
        raise _Generic
    return str(buf[p:e], "utf-8"), e


def _count(buf: Any, p: int, end: int, flexible: bool) -> tuple[int, int]:
    if flexible:
        n = buf[p] - 1
        if n < 0x7F:
            p += 1
        else:
            n, p = uvarint_at(buf, p, end)
            n -= 1
    else:
        (n,) = _I32.unpack_from(buf, p)
        p += 4
    if n < 0 or n > end - p:  # null (not allowed here), or more entries than bytes
        raise _Generic
    return n, p


def decode_request(buf: Any, version: int) -> tuple[dict, dict] | None:
    """(header, body) of an OffsetCommit request frame (without its size prefix), as
    codec.decode_request gives them, or None: decode it with the generic codec."""
    if version not in VERSIONS:  # (a version declared later: the generic codec's)
        return None
    try:
        return _decode(buf, version)
    except (_Generic, DecodeError, struct.error, IndexError, UnicodeDecodeError):
        return None


def _decode(buf: Any, v: int) -> tuple[dict, dict]:
    end = len(buf)
    flexible = v >= _FLEXIBLE
    api_key, api_version, correlation_id, n = _HEAD.unpack_from(buf, 0)
    p = 10
    if n < 0:
        client_id = None
    else:  # a classic nullable string in header v1 and v2 alike
        e = p + n
        if e > end:
            raise _Generic
        client_id = str(buf[p:e], "utf-8")
        p = e
    if flexible:
        if buf[p]:  # header v2's tagged fields
            raise _Generic
        p += 1
    header = {
        "request_api_key": api_key,
        "request_api_version": api_version,
        "correlation_id": correlation_id,
        "client_id": client_id,
    }
    # (the compact strings' common case, a one-byte length, inline: five per commit)
    b = buf[p]
    if flexible and 0 < b < 0x80 and (e := p + b) <= end:
        group_id, p = str(buf[p + 1 : e], "utf-8"), e
    else:
        group_id, p = _string(buf, p, end, flexible, False)
    body: dict[str, Any] = {"group_id": group_id}
    if v >= 1:
        (body["generation_id_or_member_epoch"],) = _I32.unpack_from(buf, p)
        p += 4
        b = buf[p]
        if flexible and 0 < b < 0x80 and (e := p + b) <= end:
            body["member_id"], p = str(buf[p + 1 : e], "utf-8"), e
        else:
            body["member_id"], p = _string(buf, p, end, flexible, False)
    if v >= 7:
        body["group_instance_id"], p = _string(buf, p, end, flexible, True)
    if 2 <= v <= 4:
        (body["retention_time_ms"],) = _I64.unpack_from(buf, p)
        p += 8
    fixed = _PARTITION[v]
    size = fixed.size
    topics = []
    n, p = _count(buf, p, end, flexible)
    for _ in range(n):
        b = buf[p]
        if flexible and 0 < b < 0x80 and (e := p + b) <= end:
            name, p = str(buf[p + 1 : e], "utf-8"), e
        else:
            name, p = _string(buf, p, end, flexible, False)
        m, p = _count(buf, p, end, flexible)
        partitions = []
        for _ in range(m):
            values = fixed.unpack_from(buf, p)
            p += size
            partition = {"partition_index": values[0], "committed_offset": values[1]}
            if v >= 6:
                partition["committed_leader_epoch"] = values[2]
            elif v == 1:
                partition["commit_timestamp"] = values[2]
            b = buf[p]
            if flexible and 0 < b < 0x80 and (e := p + b) <= end:
                partition["committed_metadata"], p = str(buf[p + 1 : e], "utf-8"), e
            else:
                partition["committed_metadata"], p = _string(buf, p, end, flexible, True)
            if flexible:
                if buf[p]:
                    raise _Generic
                p += 1
            partitions.append(partition)
        if flexible:
            if buf[p]:
                raise _Generic
            p += 1
        topics.append({"name": name, "partitions": partitions})
    body["topics"] = topics
    if flexible and buf[p]:  # (bytes after the body are ignored, as the generic codec does)
        raise _Generic
    return header, body


def encode_response(version: int, correlation_id: int, body: dict) -> list[bytes] | None:
    """The answer's frame (size prefix included) as codec.encode_response gives it, or None:
    encode it with the generic codec (which also raises what it raises for bad values)."""
    if version not in VERSIONS:
        return None
    try:
        return [_encode(version, correlation_id, body)]
    except (_Generic, struct.error, AttributeError, TypeError, ValueError):
        return None


def _encode(v: int, correlation_id: int, body: dict) -> bytes:
    flexible = v >= _FLEXIBLE
    buf = bytearray(_SIZE_AND_CORRELATION.pack(0, correlation_id))
    if flexible:
        buf.append(0)  # header v1's tagged fields
    if type(body) is not dict:
        raise _Generic
    if v >= 3:
        throttle = body.get("throttle_time_ms")
        buf += _I32.pack(0 if throttle is None else throttle)
    topics = body.get("topics")
    if topics is None:
        topics = []
    _length(buf, len(topics), flexible)
    for topic in topics:
        if type(topic) is not dict:  # (an Encoded struct, say)
            raise _Generic
        name = topic.get("name")
        raw = ("" if name is None else name).encode()
        if flexible:
            write_uvarint(buf, len(raw) + 1)
        else:
            buf += _I16.pack(len(raw))
        buf += raw
        partitions = topic.get("partitions")
        if partitions is None:
            partitions = []
        _length(buf, len(partitions), flexible)
        for partition in partitions:
            if type(partition) is not dict:
                raise _Generic
            index, code = partition.get("partition_index"), partition.get("error_code")
            buf += _ANSWER_PARTITION.pack(
                0 if index is None else index, 0 if code is None else code
            )
            if flexible:
                buf.append(0)
        if flexible:
            buf.append(0)
    if flexible:
        buf.append(0)
    _I32.pack_into(buf, 0, len(buf) - 4)
    return bytes(buf)


def _length(buf: bytearray, n: int, flexible: bool) -> None:
    if flexible:
        write_uvarint(buf, n + 1)
    else:
        buf += _I32.pack(n)
