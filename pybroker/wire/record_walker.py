"""The one walker over the records inside a v2 batch (Kafka's DefaultRecord.readFrom and the
batch's record iterators): the produce validator, log compaction, ListOffsets by timestamp,
the console's browser and the test/tool decoder all read records through it.  It reads a
stream of decompressed chunks (at most one record plus one chunk in memory), checks each
record strictly with Kafka's error codes (INVALID_RECORD, MESSAGE_TOO_LARGE) and, without a
``visit`` callback, makes no Python call per record.

Record layout (inside the possibly compressed records section; varints are zig-zag)::

    length          varint   bytes after this field (at most 5 bytes)
    attributes      int8     unused
    timestampDelta  varlong  record timestamp - batch baseTimestamp (at most 10 bytes)
    offsetDelta     varint   record offset - batch baseOffset
    keyLength       varint   -1: null key
    key             bytes
    valueLength     varint   -1: null value (a tombstone)
    value           bytes
    headerCount     varint
    headers         (keyLength varint, key utf-8, valueLength varint (-1: null), value)*

The checks and ``visit``: docs/internals.md ("pybroker/wire/record_walker.py").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from pybroker.errors import ErrorCode
from pybroker.wire.compression import decompressed_chunks
from pybroker.wire.primitives import DecodeError, varint_at
from pybroker.wire.records import (
    COMPRESSION_NONE,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC,
    MIN_BATCH_LENGTH,
    BatchHeader,
    InvalidRecordError,
    Record,
    decompress,
    unpack_header,
)

# attributes(1) timestampDelta(1) offsetDelta(1) keyLength(1) valueLength(1) headerCount(1)
MIN_RECORD_BODY = 6

# visit(buf, index, offset_delta, timestamp_delta, key_length, fields_pos, end) -> stop?
#   ``fields_pos`` is the position of the keyLength varint in ``buf``, ``end`` the record's end
Visit = Callable[[Any, int, int, int, int, int, int], Any]


class RecordError(InvalidRecordError):
    """A malformed record: INVALID_RECORD (Kafka's InvalidRecordException)."""

    def __init__(self, why: str, code: ErrorCode = ErrorCode.INVALID_RECORD) -> None:
        super().__init__(code, why)


class Walked(NamedTuple):
    records: int  # records walked (all of them unless visit stopped the walk)
    max_timestamp_delta: int  # the largest timestamp delta among them (-2**63 for none)
    stopped: bool  # visit ended the walk


def _varint(buf: Any, pos: int, max_bytes: int) -> tuple[int, int]:
    try:
        return varint_at(buf, pos, len(buf), max_bytes)
    except DecodeError as e:
        if "truncated" in str(e):
            raise IndexError from None  # the caller's "record truncated"
        raise RecordError(str(e)) from None


def _check_headers(buf: Any, pos: int, end: int) -> None:
    """The header count and headers at ``pos``, which must end the record at ``end``."""
    count, pos = _varint(buf, pos, 5)
    if count < 0:
        raise RecordError(f"header count {count}")
    for _ in range(count):
        n, pos = _varint(buf, pos, 5)
        if n < 0:
            raise RecordError(f"header key length {n}")
        pos += n
        n, pos = _varint(buf, pos, 5)
        if n > 0:
            pos += n
        elif n < -1:
            raise RecordError(f"header value length {n}")
        if pos > end:
            break
    if pos != end:
        raise RecordError(f"record fields take {pos - end:+d} bytes beyond its declared length")


def walk(
    chunks: Iterable[bytes],
    count: int,
    *,
    max_record_bytes: int,
    gaps_up_to: int | None = None,
    visit: Visit | None = None,
) -> Walked:
    """Walk ``count`` records from ``chunks`` (the decompressed records section, in pieces);
    ``gaps_up_to``: the batch's last offset delta when offset deltas may have gaps (a stored
    batch).  Raises RecordError / InvalidRecordError (see the module docstring)."""
    source: Iterator[bytes] = iter(chunks)
    gaps = gaps_up_to is not None
    last_delta = gaps_up_to if gaps_up_to is not None else -1
    buf: bytes = b""
    n = 0
    pos = 0
    more = True
    need = 0
    index = 0
    prev = -1
    max_delta = -(2**63)
    try:
        while True:
            # -- records wholly inside ``buf`` (the hot loop) ---------------------------------
            while index < count:
                if pos + 5 > n and more:
                    need = 5
                    break
                b = buf[pos]
                if b < 0x80:
                    length = (b >> 1) ^ -(b & 1)
                    p = pos + 1
                else:
                    b2 = buf[pos + 1]
                    if b2 < 0x80:
                        z = (b & 0x7F) | (b2 << 7)
                        length = (z >> 1) ^ -(z & 1)
                        p = pos + 2
                    else:
                        length, p = _varint(buf, pos, 5)
                if length < MIN_RECORD_BODY:
                    raise RecordError(f"record length {length}")
                if length > max_record_bytes:
                    raise RecordError(
                        f"record of {length} bytes exceeds max.message.bytes={max_record_bytes}",
                        ErrorCode.MESSAGE_TOO_LARGE,
                    )
                end = p + length
                if end > n:
                    if more:
                        need = end - pos
                        break
                    raise RecordError(f"record {index} truncated")
                # timestampDelta (p is the attributes byte)
                b = buf[p + 1]
                if b < 0x80:
                    ts = (b >> 1) ^ -(b & 1)
                    q = p + 2
                else:
                    ts, q = _varint(buf, p + 1, 10)
                # offsetDelta
                b = buf[q]
                if b < 0x80:
                    off = (b >> 1) ^ -(b & 1)
                    q += 1
                else:
                    b2 = buf[q + 1]
                    if b2 < 0x80:
                        z = (b & 0x7F) | (b2 << 7)
                        off = (z >> 1) ^ -(z & 1)
                        q += 2
                    else:
                        off, q = _varint(buf, q, 5)
                if (not prev < off <= last_delta) if gaps else off != index:
                    raise RecordError(f"record {index} has offset delta {off}")
                prev = off
                # keyLength, key
                fields = q
                b = buf[q]
                if b < 0x80:
                    klen = (b >> 1) ^ -(b & 1)
                    q += 1
                else:
                    b2 = buf[q + 1]
                    if b2 < 0x80:
                        z = (b & 0x7F) | (b2 << 7)
                        klen = (z >> 1) ^ -(z & 1)
                        q += 2
                    else:
                        klen, q = _varint(buf, q, 5)
                if klen > 0:
                    q += klen
                elif klen < -1:
                    raise RecordError(f"key length {klen}")
                # valueLength, value
                b = buf[q]
                if b < 0x80:
                    vlen = (b >> 1) ^ -(b & 1)
                    q += 1
                else:
                    b2 = buf[q + 1]
                    if b2 < 0x80:
                        z = (b & 0x7F) | (b2 << 7)
                        vlen = (z >> 1) ^ -(z & 1)
                        q += 2
                    else:
                        vlen, q = _varint(buf, q, 5)
                if vlen > 0:
                    q += vlen
                elif vlen < -1:
                    raise RecordError(f"value length {vlen}")
                # headers: almost always none ("0" ending the record)
                if q + 1 != end or buf[q] != 0:
                    _check_headers(buf, q, end)
                if ts > max_delta:
                    max_delta = ts
                pos = end
                index += 1
                if visit is not None and visit(buf, index - 1, off, ts, klen, fields, end):
                    return Walked(index, max_delta, True)
            if index >= count:
                break
            # -- the next record reaches past ``buf``: move it to the front, read on --------
            parts = [buf[pos:]] if pos < n else []
            have = n - pos
            while have < need:
                chunk = next(source, None)
                if chunk is None:
                    more = False
                    break
                parts.append(chunk)
                have += len(chunk)
            # (one piece is used as it is: an uncompressed batch is walked in place)
            buf = parts[0] if len(parts) == 1 else b"".join(parts)
            n = len(buf)
            pos = 0
            if pos >= n and not more:
                raise RecordError(f"{count} records declared, {index} found")
        if pos < n or (more and any(source)):
            raise RecordError(f"bytes after the last of {count} records")
    except IndexError:
        raise RecordError("record truncated") from None
    return Walked(count, max_delta, False)


def walk_batch(
    batch: bytes | bytearray | memoryview,
    h: BatchHeader,
    *,
    max_record_bytes: int,
    max_uncompressed_bytes: int,
    gaps: bool = False,
    visit: Visit | None = None,
) -> Walked:
    """:func:`walk` over batch ``h`` of ``batch`` (decompressing its records section as a
    stream: at most ``max_uncompressed_bytes``, else DecompressedSizeError, MESSAGE_TOO_LARGE;
    an undecodable payload is CORRUPT_MESSAGE)."""
    start = h.position + HEADER_SIZE
    payload: Any = memoryview(batch)[start : h.position + h.size]
    if h.compression != COMPRESSION_NONE:
        payload = bytes(payload)  # (what the codec libraries take)
    chunks = decompressed_chunks(h.compression, payload, max_uncompressed_bytes)
    try:
        return walk(
            chunks,
            h.records_count,
            max_record_bytes=max_record_bytes,
            gaps_up_to=h.last_offset_delta if gaps else None,
            visit=visit,
        )
    finally:
        chunks.close()


class Fields(NamedTuple):
    """Where a visited record's fields are in the walked buffer (lengths: -1 = null)."""

    key_pos: int
    key_len: int
    value_pos: int
    value_len: int
    headers_pos: int  # the header count

    def key(self, buf: Any) -> bytes | None:
        return bytes(buf[self.key_pos : self.key_pos + self.key_len]) if self.key_len >= 0 else None

    def value(self, buf: Any) -> bytes | None:
        if self.value_len < 0:
            return None
        return bytes(buf[self.value_pos : self.value_pos + self.value_len])


def fields(buf: Any, fields_pos: int) -> Fields:
    """The key, value and headers' positions of a visited record (``fields_pos`` as visit got
    it; the walk has checked them)."""
    klen, p = _varint(buf, fields_pos, 5)
    kpos = p
    p += max(klen, 0)
    vlen, p = _varint(buf, p, 5)
    return Fields(kpos, klen, p, vlen, p + max(vlen, 0))


def headers(buf: Any, pos: int) -> list[tuple[bytes, bytes | None]]:
    """The headers at ``pos`` (the header count) of a visited record, keys as raw bytes."""
    count, pos = _varint(buf, pos, 5)
    out = []
    for _ in range(count):
        n, pos = _varint(buf, pos, 5)
        name = bytes(buf[pos : pos + n])
        pos += n
        n, pos = _varint(buf, pos, 5)
        out.append((name, bytes(buf[pos : pos + n]) if n >= 0 else None))
        pos += max(n, 0)
    return out


def walk_stored(payload: bytes, h: BatchHeader, visit: Visit) -> None:
    """Every record of a stored batch's whole decompressed ``payload`` through ``visit`` (offset
    deltas may have gaps, as in a compacted log).  Malformed: InvalidRecordError(CORRUPT_MESSAGE)."""
    try:
        walk(
            (payload,),
            h.records_count,
            max_record_bytes=len(payload),
            gaps_up_to=h.last_offset_delta,
            visit=visit,
        )
    except InvalidRecordError as e:
        raise InvalidRecordError(ErrorCode.CORRUPT_MESSAGE, str(e)) from e


def decode_records(batch: bytes | bytearray | memoryview) -> list[Record]:
    """Decode the records of one whole batch (decompressing it) with the record walker
    (offset deltas may have gaps, as in a compacted log).
    Raises InvalidRecordError (CORRUPT_MESSAGE) on malformed data."""
    data = bytes(batch)
    if len(data) < HEADER_SIZE:
        raise InvalidRecordError(ErrorCode.CORRUPT_MESSAGE, "short batch")
    h = unpack_header(data)
    if h.magic != MAGIC:
        raise InvalidRecordError(ErrorCode.CORRUPT_MESSAGE, f"magic {h.magic}")
    end = LOG_OVERHEAD + h.batch_length
    if end > len(data) or h.batch_length < MIN_BATCH_LENGTH:
        raise InvalidRecordError(ErrorCode.CORRUPT_MESSAGE, "batch length")
    payload = decompress(h.compression, data[HEADER_SIZE:end])
    log_append = h.timestamp_type == LOG_APPEND_TIME
    out: list[Record] = []

    def collect(buf: bytes, _i: int, off: int, ts: int, _klen: int, at: int, _end: int) -> None:
        f = fields(buf, at)
        hs = [(k.decode(), v) for k, v in headers(buf, f.headers_pos)]
        stamp = h.max_timestamp if log_append else h.base_timestamp + ts
        out.append(Record(h.base_offset + off, stamp, f.key(buf), f.value(buf), hs))

    try:
        walk_stored(payload, h, collect)
    except UnicodeDecodeError as e:
        raise InvalidRecordError(ErrorCode.CORRUPT_MESSAGE, "header key is not UTF-8") from e
    return out
