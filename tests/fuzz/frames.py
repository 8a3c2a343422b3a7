"""Valid requests from pybroker's own schemas, and structural mutations of them (sans-I/O).

``valid_request(pair, rng, pool)`` builds the body of a plausible request for one (api key,
version) from the declarations in ``pybroker.wire.schema`` (existing fuzz topics, partitions
0..2, small timeouts, valid record batches in every codec) and encodes it with the project's
codec.  ``layout(frame)`` walks the encoded frame with the same declarations, independently of
the codec, and returns every field's byte span (``Span``), so mutations know field boundaries:

========================  ==================================================================
mutation                  what it does
========================  ==================================================================
valid                     the frame unchanged
truncate                  cut the frame at a field boundary (size prefix matches the cut)
length                    a string/bytes length or array count set to -1, 0, max, +-1, huge
int                       a fixed-width integer set to a boundary value (min, max, -1, 0, +-1)
varint                    an unsigned varint made over-long (10+ bytes) or unterminated
bitflip                   1-4 random bits flipped (mostly in the body)
tagged                    a tagged-field section with unknown / huge / duplicate tags
frame_size                the 4-byte size prefix off by one, -1, 0 or huge (sent half-closed)
batch_crc                 a record batch with a wrong CRC-32C
batch_header              a batch header field (count, lastOffsetDelta, length, magic,
                          attributes, producer fields) broken, CRC recomputed
poison_records            records inside a batch broken (over-long varint, wrong length,
                          truncated, garbage, corrupt compressed payload), CRC recomputed
bomb                      a small compressed batch inflating to hundreds of MiB
(legacy)                  Produce v0-2 carry a message set of format v0/v1 half of the time
                          (every codec); the batch mutations then break it (bytes, lengths,
                          cuts, CRC-32 recomputed) or make it a wrapper of zeros
pipeline                  20-40 valid requests back to back; answers must keep their order
name                      a valid request whose resource names (topics, groups, transactional
                          ids, members, users, quota entities, config and ACL resources, the
                          client id) are hostile: "", ".", "..", "/", "a/b", NUL, unicode,
                          very long (``HOSTILE_NAMES``); each must get a Kafka error code or
                          work, never reach a traceback
========================  ==================================================================

Every frame is a pure function of (seed, index): ``make_frame(seed, index, pairs, pool)``.
"""

from __future__ import annotations

import functools
import gzip
import random
import struct
import zlib
from dataclasses import dataclass
from typing import Any

from pybroker.wire import codec
from pybroker.wire.legacy_records import LegacyRecord, _entry, _message, build_message_set
from pybroker.wire.primitives import Reader, Writer
from pybroker.wire.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    build_batch,
    compress,
)
from pybroker.wire.schema import REQUEST_HEADER, SCHEMAS, Field, Message

CLIENT_ID = "fuzz"
BATCH_KINDS = ("batch_crc", "batch_header", "poison_records", "bomb")

MUTATIONS: dict[str, int] = {  # kind -> weight
    "valid": 4,
    "truncate": 14,
    "length": 14,
    "int": 14,
    "varint": 6,
    "bitflip": 14,
    "tagged": 5,
    "frame_size": 3,
    "batch_crc": 4,
    "batch_header": 8,
    "poison_records": 8,
    "bomb": 1,
    "pipeline": 2,
    "name": 10,
}

# Names a client may send where a resource is named; the broker turns some into store paths.
HOSTILE_NAMES: tuple[str, ...] = (
    "",
    ".",
    "..",
    "/",
    "a/b",
    "../x",
    "./a",
    "a/",
    "/a",
    "a//b",
    "%",
    "%2F",
    "%2E",
    "+",
    " ",
    "*",
    "<default>",
    "a\x00b",
    "grüße",
    "名前/データ",
    "\u202e",
    "x" * 300,
    "y" * 5000,
    "__consumer_offsets",
    "zookeeper",
    "-",
    "\x7f",
    "\ue000",
    "\ue000" * 10000,
    "z" * 32000,
)
# String fields that name a resource (request field name, whatever the message)
NAME_FIELDS = frozenset({
    "name", "topic", "topic_names", "topic_name", "subscribed_topic_names",
    "group_id", "key", "groups", "groups_names", "group_ids", "coordinator_keys",
    "transactional_id", "transactional_ids", "v3_and_below_transactional_id",
    "member_id", "group_instance_id", "instance_id",
    "entity_name", "match", "resource_name", "resource_name_filter", "principal",
})  # fmt: skip
# resource types with names: configs (2 topic, 4 broker, 8 broker logger, 16 client metrics,
# 32 group) and ACLs (2 topic, 3 group, 4 cluster, 5 transactional id, 6 token, 7 user)
HOSTILE_RESOURCE_TYPES = (2, 3, 4, 5, 6, 7, 8, 16, 32)


@dataclass(frozen=True)
class Pool:
    """Names the generated requests use (never the canary topic's)."""

    topics: tuple[str, ...] = ("fuzz-0", "fuzz-1", "fuzz-2")
    partitions: int = 3
    groups: tuple[str, ...] = ("fuzz-g0", "fuzz-g1")


# -- layout: field spans of an encoded frame ------------------------------------------------


@dataclass(frozen=True)
class Span:
    start: int  # offsets in the frame body (after the 4-byte size prefix)
    end: int
    kind: str  # int | uint | len16 | len32 | ulen | count32 | ucount | data | records | uuid
    #            | float | nullmark | tagcount | tagid | tagsize
    path: str
    width: int = 0  # bytes of a fixed-width integer


def layout(body: bytes | bytearray) -> list[Span]:
    """Every field's span in one request frame body (header included), read from the schemas
    without the codec.  Raises on bytes that do not follow the declarations."""
    r = Reader(body)
    api_key, version = r.int16(), r.int16()
    r.pos = 0
    spans: list[Span] = []
    hv = codec.request_header_version(api_key, version)
    _walk_message(REQUEST_HEADER, hv, r, spans, "header")
    _walk_message(SCHEMAS.by_key[api_key].request, version, r, spans, "")
    if r.pos != len(body):
        raise ValueError(f"layout ends at {r.pos} of {len(body)} bytes")
    return spans


def _walk_message(m: Message, version: int, r: Reader, spans: list[Span], path: str) -> None:
    _walk_struct(m.fields, version, version in m.flexible, r, spans, path)


_WIDTH = {"int8": 1, "int16": 2, "uint16": 2, "int32": 4, "int64": 8}


def _walk_struct(
    fields: tuple[Field, ...], version: int, flexible: bool, r: Reader, spans: list[Span], path: str
) -> None:
    tagged: dict[int, Field] = {}
    for f in fields:
        if version not in f.versions:
            continue
        fx = flexible if f.flexible_versions is None else version in f.flexible_versions
        if fx and f.tag is not None and version in f.tagged:
            tagged[f.tag] = f
            continue
        _walk_field(f, version, fx, r, spans, f"{path}.{f.name}" if path else f.name)
    if not flexible:
        return
    p = r.pos
    n = r.uvarint()
    spans.append(Span(p, r.pos, "tagcount", f"{path}.<tags>"))
    for _ in range(n):
        p = r.pos
        tag = r.uvarint()
        spans.append(Span(p, r.pos, "tagid", f"{path}.<tag>"))
        p = r.pos
        size = r.uvarint()
        spans.append(Span(p, r.pos, "tagsize", f"{path}.<tag {tag} size>"))
        f = tagged.get(tag)
        if f is None:
            spans.append(Span(r.pos, r.pos + size, "data", f"{path}.<tag {tag}>"))
            r.raw(size)
        else:
            sub = Reader(r.buf, r.pos, r.pos + size)
            _walk_field(f, version, True, sub, spans, f"{path}.{f.name}")
            r.pos = sub.pos


def _walk_field(
    f: Field, version: int, flexible: bool, r: Reader, spans: list[Span], path: str
) -> None:
    if f.is_array:
        p = r.pos
        if flexible:
            n = r.uvarint() - 1
            spans.append(Span(p, r.pos, "ucount", path))
        else:
            n = r.int32()
            spans.append(Span(p, r.pos, "count32", path, 4))
        for i in range(max(n, 0)):
            _walk_element(f, version, flexible, r, spans, f"{path}[{i}]")
        return
    if f.is_struct and version in f.nullable:
        p = r.pos
        marker = r.int8()
        spans.append(Span(p, r.pos, "nullmark", path, 1))
        if marker < 0:
            return
    _walk_element(f, version, flexible, r, spans, path)


def _walk_element(
    f: Field, version: int, flexible: bool, r: Reader, spans: list[Span], path: str
) -> None:
    if f.is_struct:
        _walk_struct(f.fields, version, flexible, r, spans, path)
        return
    t = f.element_type
    p = r.pos
    if t in _WIDTH:
        r.raw(_WIDTH[t])
        spans.append(Span(p, r.pos, "uint" if t == "uint16" else "int", path, _WIDTH[t]))
    elif t == "bool":
        r.raw(1)
        spans.append(Span(p, r.pos, "int", path, 1))
    elif t == "float64":
        r.raw(8)
        spans.append(Span(p, r.pos, "float", path))
    elif t == "uuid":
        r.raw(16)
        spans.append(Span(p, r.pos, "uuid", path))
    else:  # string, bytes, records
        if flexible:
            n = r.uvarint() - 1
            spans.append(Span(p, r.pos, "ulen", path))
        elif t == "string":
            n = r.int16()
            spans.append(Span(p, r.pos, "len16", path, 2))
        else:
            n = r.int32()
            spans.append(Span(p, r.pos, "len32", path, 4))
        if n > 0:
            d = r.pos
            r.raw(n)
            spans.append(Span(d, r.pos, "records" if t == "records" else "data", path))


# -- valid requests -------------------------------------------------------------------------

CONFIG_VALUES = {
    "retention.ms": ["604800000", "86400000", "-1"],
    "retention.bytes": ["-1", "1073741824"],
    "segment.bytes": ["1073741824", "104857600"],
    "max.message.bytes": ["1048588", "2097152"],
    "cleanup.policy": ["delete"],
    "min.insync.replicas": ["1"],
    "flush.messages": ["9223372036854775807"],
    "compression.type": ["producer"],
}
CODECS = (COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD)


BASE_TIMESTAMP = 1_763_800_000_000  # fixed, so that frames depend on (seed, index) only


def deterministic_compress(codec_id: int, data: bytes) -> bytes:
    """records.compress, but gzip without the time in its header."""
    if codec_id == COMPRESSION_GZIP:
        return gzip.compress(data, mtime=0)
    return compress(codec_id, data)


def record_batch(rng: random.Random, compression: int | None = None, n: int | None = None) -> bytes:
    n = n or rng.randint(1, 4)
    if compression is None:
        compression = rng.choice(CODECS)
    records = [
        (
            None if rng.random() < 0.3 else f"k{i}".encode(),
            rng.randbytes(rng.randint(0, 40)),
            [("h", b"v")] if rng.random() < 0.2 else [],
        )
        for i in range(n)
    ]
    plain = build_batch(records, timestamp=BASE_TIMESTAMP + rng.randrange(10**6))
    if compression == COMPRESSION_NONE:
        return plain
    h = list(HEADER.unpack_from(plain, 0))
    h[5] |= compression
    return _rebuild(h, deterministic_compress(compression, plain[HEADER_SIZE:]))


class _Gen:
    def __init__(self, rng: random.Random, pool: Pool, hostile: bool = False) -> None:
        self.rng = rng
        self.pool = pool
        self.hostile = hostile  # resource names from HOSTILE_NAMES, half of the time
        self.hostile_used: list[str] = []

    def _hostile(self) -> str:
        name = self.rng.choice(HOSTILE_NAMES)
        self.hostile_used.append(name)
        return name

    def struct(self, fields: tuple[Field, ...], version: int, ctx: str) -> dict:
        out: dict[str, Any] = {}
        for f in fields:
            if version in f.versions:
                out[f.name] = self.field(f, version, ctx)
        if "resource_type" in out and "resource_name" in out:  # configs / ACL resources
            if self.hostile and self.rng.random() < 0.7:
                out["resource_type"] = self.rng.choice(HOSTILE_RESOURCE_TYPES)
                out["resource_name"] = self._hostile()
            elif self.rng.random() < 0.25:
                out["resource_type"], out["resource_name"] = 4, "0"  # the broker
            else:
                out["resource_type"], out["resource_name"] = 2, self.topic()
        if "name" in out and "value" in out and ctx.endswith("Config"):
            key = self.rng.choice(list(CONFIG_VALUES))
            out["name"], out["value"] = key, self.rng.choice(CONFIG_VALUES[key])
        return out

    def topic(self) -> str:
        return self.rng.choice(self.pool.topics)

    def partition(self) -> int:
        return self.rng.randrange(self.pool.partitions)

    def field(self, f: Field, version: int, ctx: str) -> Any:
        rng = self.rng
        if f.is_array:
            if version in f.nullable and rng.random() < 0.1:
                return None
            n = rng.choice((0, 1, 1, 1, 2, 3))
            elem = Field(f.name, f.element_type, f.versions, f.nullable, None, f.tagged, None,
                         f.fields)  # fmt: skip
            return [self.value(elem, version, f.element_type) for _ in range(n)]
        if version in f.nullable and not f.is_struct and rng.random() < 0.1:
            return None
        return self.value(f, version, ctx)

    def value(self, f: Field, version: int, ctx: str) -> Any:  # noqa: C901
        rng = self.rng
        if f.is_struct:
            return self.struct(f.fields, version, f.element_type)
        name, t = f.name, f.element_type
        if t == "records":
            return record_batch(rng)
        if t == "string":
            if self.hostile and name in NAME_FIELDS and "Config" not in ctx:
                if rng.random() < 0.5:
                    return self._hostile()
            if name in ("entity_type",):
                return rng.choice(("user", "client-id", "ip"))
            if name in ("name", "topic", "topic_names") and "Config" not in ctx:
                return self.topic()
            if name in ("group_id", "key", "groups", "groups_names", "coordinator_keys"):
                return rng.choice(self.pool.groups)
            if name in ("member_id", "group_instance_id", "transactional_id"):
                return "" if name == "member_id" else None if version in f.nullable else ""
            if name == "protocol_type":
                return "consumer"
            if name in ("protocol_name",):
                return "range"
            if name in ("principal", "principal_filter"):
                return "User:fuzz"
            if name in ("host", "host_filter"):
                return "*"
            return rng.choice(("", "fuzz", "x" * rng.randint(1, 20)))
        if t == "bytes":
            if name == "metadata":  # a consumer subscription: version 0, [topic], null user data
                w = Writer()
                w.int16(0)
                w.int32(1)
                w.string(self.topic())
                w.int32(-1)
                return w.getvalue()
            return rng.randbytes(rng.randint(0, 8))
        if t == "bool":
            return name in ("validate_only",) and rng.random() < 0.5 or rng.random() < 0.2
        if t == "uuid":
            return None
        if t == "float64":
            return 0.0
        return self.integer(name, t)

    def integer(self, name: str, t: str) -> int:
        rng = self.rng
        if name in ("partition_index", "partition", "index", "partitions", "partition_indexes"):
            return self.partition()
        if name == "acks":
            return rng.choice((-1, -1, 1, 0))
        if name in ("max_wait_ms",):
            return rng.randint(0, 20)
        if name in ("min_bytes",):
            return rng.choice((0, 1))
        if name in ("max_bytes", "partition_max_bytes"):
            return 1 << 20
        if name == "rebalance_timeout_ms":  # a JoinGroup waits up to this for the others
            return rng.choice((0, 20, 100))
        if name.endswith("timeout_ms") and name != "session_timeout_ms":
            return rng.choice((0, 100, 1000))
        if name == "session_timeout_ms":  # the fuzz broker's group.min.session.timeout.ms: 100
            return rng.choice((100, 500))
        if name in ("replica_id", "producer_id", "generation_id", "member_epoch", "session_epoch"):
            return -1
        if name in ("producer_epoch", "current_leader_epoch", "leader_epoch", "last_fetched_epoch"):
            return -1
        if name == "timestamp":
            return rng.choice((-1, -2, -3, 0, BASE_TIMESTAMP))
        if name in ("fetch_offset", "offset", "committed_offset"):
            return rng.choice((0, 1, 5, -1))
        if name == "num_partitions":
            return rng.choice((1, 2, 3, -1))
        if name == "count":
            return rng.randint(1, 6)
        if name == "replication_factor":
            return rng.choice((1, -1))
        if name in ("resource_type", "resource_type_filter"):
            return rng.choice((2, 4, 1))
        if name in ("operation", "permission_type", "pattern_type_filter"):
            return rng.randint(1, 3)
        if name == "resource_pattern_type":
            return 3
        if name == "key_type":
            return 0
        if name == "isolation_level":
            return rng.choice((0, 1))
        if name == "config_operation":
            return rng.randint(0, 3)
        return rng.choice((0, 0, 1, -1))


LEGACY_CODECS = (COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4)


def legacy_message_set(rng: random.Random) -> bytes:
    """A message set of format v0 or v1, as clients before Kafka 0.11 write them."""
    recs = [
        LegacyRecord(
            i,
            BASE_TIMESTAMP + rng.randrange(10**6),
            None if rng.random() < 0.3 else f"k{i}".encode(),
            rng.randbytes(rng.randint(0, 40)),
        )
        for i in range(rng.randint(1, 4))
    ]
    return build_message_set(recs, magic=rng.choice((0, 1)), compression=rng.choice(LEGACY_CODECS))


def mutate_legacy(rng: random.Random, ms: bytes) -> tuple[bytes, str]:
    """A v0/v1 message set broken: a byte flipped, a length changed, cut or bytes inserted,
    the first message's CRC-32 recomputed most of the time (so the broker looks deeper); or
    a wrapper inflating to zeros."""
    if rng.random() < 0.05:
        zeros = bomb_payload(COMPRESSION_GZIP, "zeros")
        return _entry(
            0, _message(1, COMPRESSION_GZIP, BASE_TIMESTAMP, None, zeros)
        ), "v1 zeros bomb"
    b = bytearray(ms)
    how = rng.choice(("flip", "length", "cut", "insert"))
    pos = rng.randrange(len(b))
    if how == "flip":
        b[pos] ^= 1 << rng.randrange(8)
    elif how == "length":
        pos = min(pos, len(b) - 4)
        struct.pack_into(">i", b, pos, rng.choice((-2, -1, 0, 1, 13, 14, 1 << 30)))
    elif how == "cut":
        del b[pos:]
    else:
        b[pos:pos] = rng.randbytes(rng.randint(1, 8))
    if rng.random() < 0.8 and len(b) >= 17:
        (size,) = struct.unpack_from(">i", b, 8)
        if 14 <= size <= len(b) - 12:
            struct.pack_into(">I", b, 12, zlib.crc32(b[16 : 12 + size]))
    return bytes(b), f"v{ms[16]} message set: {how} at {pos}"


def valid_body(api_key: int, version: int, rng: random.Random, pool: Pool) -> dict:
    body = _Gen(rng, pool).struct(SCHEMAS.by_key[api_key].request.fields, version, "")
    if api_key == 0 and version <= 2:  # Produce v0-2: message format v0/v1 half of the time
        fields: list = []
        _records_fields(body, fields)
        for holder, key in fields:
            if rng.random() < 0.5:
                holder[key] = legacy_message_set(rng)
    return body


def hostile_body(api_key: int, version: int, rng: random.Random, pool: Pool) -> tuple[dict, list]:
    """A valid request with hostile resource names; (body, the names used)."""
    gen = _Gen(rng, pool, hostile=True)
    body = gen.struct(SCHEMAS.by_key[api_key].request.fields, version, "")
    return body, gen.hostile_used


def encode(api_key: int, version: int, corr: int, body: dict, client_id: str = CLIENT_ID) -> bytes:
    """The frame body (no size prefix)."""
    return codec.encode_request(api_key, version, corr, client_id, body)[4:]


# -- mutations ------------------------------------------------------------------------------


@dataclass
class Frame:
    index: int
    api_key: int
    version: int
    mutation: str
    detail: str
    data: bytes  # the whole frame as sent, size prefix included
    half_close: bool = False  # shut our write side after sending (a size prefix that lies)
    # pipeline: (api key, version, correlation id) of each request, in the order sent
    requests: tuple[tuple[int, int, int], ...] = ()

    def describe(self) -> str:
        name = SCHEMAS.by_key[self.api_key].name
        return f"#{self.index} {name} v{self.version} {self.mutation} ({self.detail})"


def _sized(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _uvarint(v: int) -> bytes:
    w = Writer()
    w.uvarint(v)
    return w.getvalue()


_INT_EDGES = {
    1: (-128, -1, 0, 1, 127),
    2: (-32768, -1, 0, 1, 32767),
    4: (-(2**31), -1, 0, 1, 2**31 - 1, 2**30),
    8: (-(2**63), -1, 0, 1, 2**63 - 1, 2**62),
}
_OVERLONG = (b"\xff" * 9 + b"\x7f", b"\xff" * 10 + b"\x01", b"\x80" * 12 + b"\x00", b"\xff" * 64)


def _replace(body: bytes, s: Span, new: bytes) -> bytes:
    return body[: s.start] + new + body[s.end :]


def _pick(rng: random.Random, spans: list[Span], kinds: tuple[str, ...]) -> Span | None:
    cands = [s for s in spans if s.kind in kinds]
    return rng.choice(cands) if cands else None


def _records_fields(body: Any, out: list) -> None:
    """(container, key) of every records value in a request dict."""
    if isinstance(body, dict):
        for k, v in body.items():
            if k == "records" and isinstance(v, bytes | bytearray):
                out.append((body, k))
            else:
                _records_fields(v, out)
    elif isinstance(body, list):
        for v in body:
            _records_fields(v, out)


def _fix_crc(b: bytearray) -> bytes:
    from crc32c import crc32c

    struct.pack_into(">I", b, CRC_OFFSET, crc32c(memoryview(b)[ATTRIBUTES_OFFSET:]))
    return bytes(b)


def _rebuild(header_fields: list, payload: bytes) -> bytes:
    b = bytearray(HEADER_SIZE) + payload
    header_fields[1] = len(b) - LOG_OVERHEAD
    HEADER.pack_into(b, 0, *header_fields)
    return _fix_crc(b)


def mutate_batch_header(rng: random.Random, batch: bytes) -> tuple[bytes, str]:
    h = list(HEADER.unpack_from(batch, 0))
    # base_offset, length, ple, magic, crc, attributes, last_delta, base_ts, max_ts, pid,
    # epoch, base_seq, count
    choice = rng.choice(
        ("count", "last_delta", "length", "magic", "attributes", "producer", "timestamps")
    )
    b = bytearray(batch)
    if choice == "count":
        h[12] = rng.choice((-1, 0, h[12] + 1, h[12] - 1, 2**31 - 1, 1 << 20))
    elif choice == "last_delta":
        h[6] = rng.choice((-1, h[6] + 1, 2**31 - 1, -(2**31)))
    elif choice == "length":
        new_len = rng.choice((h[1] + 1, h[1] - 1, 48, 0, -1, 2**31 - 1))
        struct.pack_into(">i", b, 8, new_len)
        return bytes(b), f"batchLength {h[1]} -> {new_len}"
    elif choice == "magic":
        h[3] = rng.choice((-1, 0, 1, 3, 127))
    elif choice == "attributes":
        # an invalid codec (5-7), or a flag added to the batch's own codec; a valid codec
        # swapped under the payload is a poison batch (mutate_records)
        if rng.random() < 0.5:
            h[5] = rng.choice((5, 6, 7, -1, 0x7FFF))
        else:
            h[5] = (h[5] & 7) | rng.choice((0x08, 0x10, 0x20, 0x30, 0x40))
    elif choice == "producer":
        h[9], h[10], h[11] = rng.choice(
            ((1, 0, -1), (-1, 0, 5), (2**63 - 1, 32767, 2**31 - 1), (-5, -5, -5), (7, 0, 0))
        )
    else:
        h[7], h[8] = rng.choice(((-1, -1), (2**63 - 1, -(2**63)), (-(2**63), 2**63 - 1)))
    HEADER.pack_into(b, 0, *h)
    return _fix_crc(b), f"{choice} changed, CRC recomputed"


def _varint(v: int) -> bytes:
    return _uvarint((v << 1) ^ (v >> 63))


def mutate_records(rng: random.Random, batch: bytes) -> tuple[bytes, str]:
    """Break the records inside a batch, keep its header consistent and its CRC right."""
    h = list(HEADER.unpack_from(batch, 0))
    codec_id = h[5] & 7
    payload = batch[HEADER_SIZE:]
    choice = rng.choice(
        (
            "overlong_varint",
            "length_mismatch",
            "truncated",
            "garbage",
            "extra_records",
            "corrupt_compressed",
            "codec_swap",
        )
    )
    raw = bytes(payload)
    if codec_id:
        from pybroker.wire.records import decompress

        raw = decompress(codec_id, payload)
    if choice == "overlong_varint":
        raw = b"\xff" * 10 + b"\x01" + raw[1:]
    elif choice == "length_mismatch":
        raw = _varint(rng.choice((len(raw) + 5, 0, -1, 2**31 - 1))) + raw[1:]
    elif choice == "truncated":
        raw = raw[: rng.randrange(1, max(2, len(raw)))]
    elif choice == "garbage":
        raw = rng.randbytes(rng.randint(1, 64))
    elif choice == "extra_records":
        raw = raw * rng.choice((2, 50))  # more records than recordsCount declares
    if choice == "codec_swap":  # another codec's bits over the same payload
        h[5] = (h[5] & ~7) | rng.choice([c for c in CODECS if c != codec_id])
        return _rebuild(h, bytes(payload)), f"codec {codec_id} -> {h[5] & 7}, CRC recomputed"
    if choice == "corrupt_compressed":
        if codec_id == 0:
            h[5] = (h[5] & ~7) | rng.choice((1, 2, 3, 4))
        payload = _corrupt_compressed(rng, h[5] & 7, raw)
    else:
        payload = deterministic_compress(codec_id, raw)
    return _rebuild(h, payload), f"{choice} (codec {h[5] & 7}), CRC recomputed"


def _corrupt_compressed(rng: random.Random, codec_id: int, raw: bytes) -> bytes:
    good = deterministic_compress(codec_id, raw)
    how = rng.choice(("flip", "truncate", "magic_then_garbage"))
    if how == "flip" and len(good) > 4:
        b = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        return bytes(b)
    if how == "truncate" and len(good) > 2:
        return good[: rng.randrange(1, len(good))]
    magic = {
        1: b"\x1f\x8b\x08\x00",
        2: b"\x82SNAPPY\x00",
        3: b"\x04\x22\x4d\x18",
        4: b"\x28\xb5\x2f\xfd",
    }
    return magic.get(codec_id, b"") + rng.randbytes(rng.randint(8, 64))


BOMB_BYTES = 256 << 20


@functools.lru_cache(maxsize=8)
def bomb_payload(codec_id: int, kind: str) -> bytes:
    """A small compressed payload inflating to BOMB_BYTES (64 MiB for lz4, whose ratio is
    lower): zeros, or one small valid record repeated."""
    total = BOMB_BYTES if codec_id != COMPRESSION_LZ4 else 64 << 20
    if kind == "zeros":
        chunk = bytes(1 << 20)
    else:
        one = build_batch([(None, b"x", [])], timestamp=BASE_TIMESTAMP)[HEADER_SIZE:]
        chunk = one * ((1 << 20) // len(one))
    if codec_id == COMPRESSION_GZIP:
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        parts = [c.compress(chunk) for _ in range(total // len(chunk))]
        return b"".join(parts) + c.flush()
    if codec_id == COMPRESSION_ZSTD:
        import zstandard

        c = zstandard.ZstdCompressor(level=3).compressobj()
        parts = [c.compress(chunk) for _ in range(total // len(chunk))]
        return b"".join(parts) + c.flush()
    if codec_id == COMPRESSION_LZ4:
        import lz4.frame

        c = lz4.frame.LZ4FrameCompressor(compression_level=9)
        parts = [c.begin()] + [c.compress(chunk) for _ in range(total // len(chunk))]
        return b"".join(parts) + c.flush()
    raise ValueError(codec_id)


def bomb_batch(rng: random.Random) -> tuple[bytes, str]:
    codec_id = rng.choice((COMPRESSION_GZIP, COMPRESSION_ZSTD, COMPRESSION_LZ4))
    kind = rng.choice(("zeros", "records"))
    base = build_batch([(None, b"x", [])], timestamp=BASE_TIMESTAMP, compression=codec_id)
    h = list(HEADER.unpack_from(base, 0))
    return _rebuild(h, bomb_payload(codec_id, kind)), f"{kind} bomb, codec {codec_id}"


def make_frame(seed: int, index: int, pairs: list[tuple[int, int]], pool: Pool,
               kinds: dict[str, int] | None = None) -> Frame:  # fmt: skip
    """Frame ``index`` of the run with ``seed``: a pure function of its arguments."""
    rng = random.Random(f"{seed}/{index}")
    api_key, version = pairs[index % len(pairs)]
    kinds = kinds or MUTATIONS
    names = list(kinds)
    if "pipeline" in kinds and rng.random() < kinds["pipeline"] / sum(kinds.values()):
        return _pipeline(rng, index, pairs, pool)
    names = [k for k in names if k != "pipeline"]
    body = valid_body(api_key, version, rng, pool)
    corr = index & 0x3FFFFFFF
    records = []
    _records_fields(body, records)
    if not records:  # this request carries no record batch
        names = [k for k in names if k not in BATCH_KINDS]
    elif rng.random() < 0.5:  # it does: break the batch half of the time
        names = [k for k in names if k in BATCH_KINDS] or names
    kind = rng.choices(names, weights=[kinds[k] for k in names])[0]
    detail = ""
    if kind in BATCH_KINDS:
        holder, key = rng.choice(records)
        batch = holder[key]
        if batch[16] < 2:  # a v0/v1 message set
            holder[key], detail = mutate_legacy(rng, batch)
        elif kind == "batch_crc":
            b = bytearray(batch)
            b[CRC_OFFSET + rng.randrange(4)] ^= 1 << rng.randrange(8)
            holder[key], detail = bytes(b), "CRC-32C flipped"
        elif kind == "batch_header":
            holder[key], detail = mutate_batch_header(rng, batch)
        elif kind == "poison_records":
            holder[key], detail = mutate_records(rng, batch)
        else:
            holder[key], detail = bomb_batch(rng)
        return Frame(
            index, api_key, version, kind, detail, _sized(encode(api_key, version, corr, body))
        )
    if kind == "name":
        body, used = hostile_body(api_key, version, rng, pool)
        client_id = rng.choice(HOSTILE_NAMES) if rng.random() < 0.2 else CLIENT_ID
        if client_id != CLIENT_ID:
            used.append(client_id)
        if used:
            detail = "names " + ", ".join(repr(n if len(n) < 40 else n[:8] + "...") for n in used)
            data = _sized(encode(api_key, version, corr, body, client_id))
            return Frame(index, api_key, version, kind, detail, data)
        kind = "valid"  # this request names nothing
    body_bytes = encode(api_key, version, corr, body)
    if kind == "valid":
        return Frame(index, api_key, version, kind, "unchanged", _sized(body_bytes))
    spans = layout(body_bytes)
    out, detail, half_close = mutate_structure(rng, kind, body_bytes, spans)
    if out is None:  # nothing of that kind in this frame (no varint, no tagged fields)
        kind = rng.choice(("truncate", "length", "int", "bitflip"))
        out, detail, half_close = mutate_structure(rng, kind, body_bytes, spans)
    data = out if kind == "frame_size" else _sized(out)
    return Frame(index, api_key, version, kind, detail, data, half_close)


def _pipeline(rng: random.Random, index: int, pairs: list[tuple[int, int]], pool: Pool) -> Frame:
    """20-40 valid requests back to back (more than the broker queues before it pauses
    reading); their answers must come in the order sent."""
    data, requests = b"", []
    for j in range(rng.randint(20, 40)):
        api_key, version = rng.choice(pairs)
        corr = ((index & 0xFFFFFF) << 6) | j
        body = valid_body(api_key, version, rng, pool)
        data += _sized(encode(api_key, version, corr, body))
        requests.append((api_key, version, corr))
    first = requests[0]
    return Frame(index, first[0], first[1], "pipeline", f"{len(requests)} valid requests",
                 data, requests=tuple(requests))  # fmt: skip


def mutate_structure(  # noqa: C901
    rng: random.Random, kind: str, body: bytes, spans: list[Span]
) -> tuple[bytes | None, str, bool]:
    if kind == "truncate":
        cuts = sorted({s.start for s in spans} | {s.end for s in spans})
        cuts = [c for c in cuts if 0 < c < len(body)] or [len(body) // 2]
        cut = rng.choice(cuts)
        return body[:cut], f"cut at {cut} of {len(body)}", False
    if kind == "length":
        s = _pick(rng, spans, ("len16", "len32", "count32", "ulen", "ucount"))
        if s is None:
            return None, "", False
        if s.kind in ("ulen", "ucount"):
            cur = Reader(body, s.start).uvarint()
            v = rng.choice((0, 1, cur + 1, max(cur - 1, 0), 2**31, 2**32 + 1, 2**63 - 1))
            return _replace(body, s, _uvarint(v)), f"{s.path} {s.kind} {cur} -> {v}", False
        width = 2 if s.kind == "len16" else 4
        fmt = ">h" if width == 2 else ">i"
        cur = struct.unpack(fmt, body[s.start : s.end])[0]
        top = 2 ** (8 * width - 1) - 1
        v = rng.choice((-1, -2, 0, top, cur + 1, cur - 1, -top - 1))
        v = max(-top - 1, min(top, v))
        return _replace(body, s, struct.pack(fmt, v)), f"{s.path} {s.kind} {cur} -> {v}", False
    if kind == "int":
        s = _pick(rng, spans, ("int", "uint"))
        if s is None:
            return None, "", False
        edges = _INT_EDGES[s.width]
        fmt = {1: ">b", 2: ">h", 4: ">i", 8: ">q"}[s.width]
        cur = struct.unpack(fmt, body[s.start : s.end])[0]
        v = rng.choice(edges + (cur + 1, cur - 1))
        lo, hi = edges[0], -edges[0] - 1
        v = max(lo, min(hi, v))
        return _replace(body, s, struct.pack(fmt, v)), f"{s.path} {cur} -> {v}", False
    if kind == "varint":
        s = _pick(rng, spans, ("ulen", "ucount", "tagcount", "tagid", "tagsize"))
        if s is None:
            return None, "", False
        if rng.random() < 0.3:  # unterminated: continuation bits up to the end of the frame
            return body[: s.start] + b"\x80" * rng.randint(1, 12), f"{s.path} unterminated", False
        new = rng.choice(_OVERLONG)
        return _replace(body, s, new), f"{s.path} {s.kind} over-long ({len(new)} bytes)", False
    if kind == "bitflip":
        b = bytearray(body)
        flips = []
        for _ in range(rng.randint(1, 4)):
            pos = (
                rng.randrange(8, len(b))
                if len(b) > 8 and rng.random() < 0.9
                else rng.randrange(len(b))
            )
            bit = rng.randrange(8)
            b[pos] ^= 1 << bit
            flips.append(f"{pos}.{bit}")
        return bytes(b), "bits " + ",".join(flips), False
    if kind == "tagged":
        s = _pick(rng, spans, ("tagcount",))
        if s is None:
            return None, "", False
        how = rng.choice(("unknown", "huge_size", "past_end", "duplicate", "huge_count"))
        if how == "unknown":
            new = _uvarint(1) + _uvarint(rng.choice((5, 99, 2**20))) + _uvarint(3) + b"abc"
        elif how == "huge_size":
            new = _uvarint(1) + _uvarint(0) + _uvarint(2**31 - 1)
        elif how == "past_end":
            new = _uvarint(1) + _uvarint(0) + _uvarint(len(body) + 10)
        elif how == "duplicate":
            new = _uvarint(2) + (_uvarint(0) + _uvarint(1) + b"\x00") * 2
        else:
            new = _uvarint(2**31)
        return _replace(body, s, new), f"{s.path} {how}", False
    if kind == "frame_size":
        n = len(body)
        v = rng.choice((n + 1, n - 1, -1, 0, 7, 2**31 - 1, 100 * 1024 * 1024 + 1))
        return struct.pack(">i", v) + body, f"size {n} -> {v}", True
    raise ValueError(kind)
