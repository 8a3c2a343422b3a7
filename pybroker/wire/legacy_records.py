"""Message format v0 and v1 (magic 0 and 1): the message sets of clients before Kafka 0.11,
parsed, built, and down-converted from record batches v2 (sans-I/O), streaming (one chunk and
one message held).

Byte layout of a message set (entries back to back, all integers big-endian)::

    offset        int64    absolute; inside a v1 compressed wrapper: relative (0, 1, ...)
    message_size  int32    bytes of the message below (at least 14)
    message:
      crc         uint32   CRC-32 (zlib's, not CRC-32C) of magic .. end of the message
      magic       int8     0 or 1
      attributes  int8     bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4),
                           bit 3 timestamp type (v1 only: 1 = LogAppendTime)
      timestamp   int64    v1 only; -1 = none
      key_length  int32    -1 = null
      key
      value_length int32   -1 = null
      value

Wrappers, codecs and error codes: docs/internals.md ("pybroker/wire/legacy_records.py").
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from pybroker.errors import ErrorCode
from pybroker.wire.compression import decompressed_chunks
from pybroker.wire.record_walker import fields, walk_batch
from pybroker.wire.records import (
    COMPRESSION_LZ4,
    COMPRESSION_MASK,
    COMPRESSION_NONE,
    COMPRESSION_ZSTD,
    CREATE_TIME,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_MASK,
    InvalidRecordError,
    compress,
    unpack_header,
)

MAGIC_V0 = 0
MAGIC_V1 = 1
NO_TIMESTAMP = -1
HEADER_SIZE_V0 = 6  # crc, magic, attributes
HEADER_SIZE_V1 = 14  # + timestamp
RECORD_OVERHEAD_V0 = HEADER_SIZE_V0 + 8  # + key and value lengths: 14, the smallest message
RECORD_OVERHEAD_V1 = HEADER_SIZE_V1 + 8  # 22

_ENTRY = struct.Struct(">qi")
_V0 = struct.Struct(">IbB")
_V1 = struct.Struct(">IbBq")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")


class LegacyMessage(NamedTuple):
    """One message of a v0/v1 message set (a record, or a compressed wrapper)."""

    offset: int
    magic: int
    attributes: int
    timestamp: int  # -1 for magic 0
    key: bytes | None
    value: bytes | None
    crc: int
    valid_crc: bool

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        if self.magic > MAGIC_V0 and self.attributes & TIMESTAMP_TYPE_MASK:
            return LOG_APPEND_TIME
        return CREATE_TIME


def _corrupt(why: str) -> InvalidRecordError:
    return InvalidRecordError(ErrorCode.CORRUPT_MESSAGE, why)


def _invalid(why: str) -> InvalidRecordError:
    return InvalidRecordError(ErrorCode.INVALID_RECORD, why)


def _blob(msg: memoryview, pos: int, what: str) -> tuple[bytes | None, int]:
    if pos + 4 > len(msg):
        raise _corrupt(f"message ends before its {what} length")
    (n,) = _INT32.unpack_from(msg, pos)
    pos += 4
    if n < 0:
        return None, pos
    if pos + n > len(msg):
        raise _corrupt(f"{what} of {n} bytes runs past the message")
    return bytes(msg[pos : pos + n]), pos + n


def parse_message(offset: int, msg: memoryview) -> LegacyMessage:
    """One message (the bytes after offset and size).  Its CRC is compared, not enforced
    (``valid_crc``): Kafka checks an inner message's CRC only after its magic."""
    if len(msg) < RECORD_OVERHEAD_V0:
        raise _corrupt(
            f"Record is corrupt (crc could not be retrieved as the record is too small, size = {len(msg)})"
        )
    magic = msg[4]
    if magic == MAGIC_V0:
        crc, _, attributes = _V0.unpack_from(msg, 0)
        timestamp, pos = NO_TIMESTAMP, HEADER_SIZE_V0
    elif magic == MAGIC_V1:
        if len(msg) < RECORD_OVERHEAD_V1:
            raise _corrupt(f"v1 message of {len(msg)} bytes")
        crc, _, attributes, timestamp = _V1.unpack_from(msg, 0)
        pos = HEADER_SIZE_V1
    else:
        raise _corrupt(f"Invalid magic found in record: {magic}")
    valid = zlib.crc32(msg[4:]) == crc
    if not valid:  # lengths of a corrupt message mean nothing: parse no further
        return LegacyMessage(offset, magic, attributes, timestamp, None, None, crc, False)
    key, pos = _blob(msg, pos, "key")
    value, pos = _blob(msg, pos, "value")
    return LegacyMessage(offset, magic, attributes, timestamp, key, value, crc, True)


def entry_magics(buf: bytes | bytearray | memoryview) -> list[int]:
    """The magic of every entry of a record set (v0/v1 messages and v2 batches share the
    offset, size, magic-at-16 framing).  CORRUPT_MESSAGE when the framing is torn."""
    mv = memoryview(buf).cast("B")
    out = []
    pos = 0
    while pos < len(mv):
        if len(mv) - pos < LOG_OVERHEAD + 5:
            raise _corrupt(f"{len(mv) - pos} trailing bytes at {pos}")
        _, size = _ENTRY.unpack_from(mv, pos)
        if size < RECORD_OVERHEAD_V0:
            raise _corrupt(
                f"Record size {size} is less than the minimum record overhead ({RECORD_OVERHEAD_V0})"
            )
        if pos + LOG_OVERHEAD + size > len(mv):
            raise _corrupt(f"entry at {pos} needs {LOG_OVERHEAD + size} bytes")
        out.append(mv[pos + 16])
        pos += LOG_OVERHEAD + size
    return out


def iter_entries(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, memoryview]]:
    """(offset, message bytes) of each whole entry; stops at an incomplete tail, as Kafka's
    DataLogInputStream does for a wrapper's inner messages.  A size below 14 is
    CORRUPT_MESSAGE."""
    mv = memoryview(buf).cast("B")
    pos = 0
    while len(mv) - pos >= LOG_OVERHEAD:
        offset, size = _ENTRY.unpack_from(mv, pos)
        if size < RECORD_OVERHEAD_V0:
            raise _corrupt(
                f"Record size is less than the minimum record overhead ({RECORD_OVERHEAD_V0})"
            )
        end = pos + LOG_OVERHEAD + size
        if end > len(mv):
            return
        yield offset, mv[pos + LOG_OVERHEAD : end]
        pos = end


def parse_message_set(buf: bytes | bytearray | memoryview) -> list[LegacyMessage]:
    """The outer messages of a produced v0/v1 message set: every entry whole, CRCs checked
    (CORRUPT_MESSAGE), as Kafka's analyzeAndValidateRecords checks each outer "batch"."""
    entry_magics(buf)  # whole entries only (a torn tail is refused, as for v2 batches)
    out = []
    for offset, msg in iter_entries(buf):
        m = parse_message(offset, msg)
        if not m.valid_crc:
            raise _corrupt(
                f"Record is corrupt (stored crc = {m.crc}, computed crc = {zlib.crc32(msg[4:])})"
            )
        out.append(m)
    return out


# --------------------------------------------------------------------------- LZ4 framing

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32, for the LZ4 frame descriptor's header checksum (a few bytes)."""
    n = len(data)
    pos = 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while pos + 16 <= n:
            for i in range(4):
                (lane,) = struct.unpack_from("<I", data, pos)
                v[i] = (_rotl((v[i] + lane * _P2) & _M32, 13) * _P1) & _M32
                pos += 4
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        (word,) = struct.unpack_from("<I", data, pos)
        h = (_rotl((h + word * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        h = (_rotl((h + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    return h ^ (h >> 16)


_LZ4_MAGIC = b"\x04\x22\x4d\x18"


def _lz4_hc_position(frame: bytes) -> int | None:
    """Index of the frame descriptor's HC byte, or None for something that is no LZ4 frame."""
    if len(frame) < 7 or frame[:4] != _LZ4_MAGIC:
        return None
    flg = frame[4]
    pos = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    return pos if pos < len(frame) else None


def _lz4_set_hc(frame: bytes, broken: bool) -> bytes:
    """The frame with its header checksum recomputed: the correct one, or (``broken``) the
    one Kafka's magic-0 writer computes over the magic number too."""
    pos = _lz4_hc_position(frame)
    if pos is None:
        return frame
    hc = (xxh32(frame[0 if broken else 4 : pos]) >> 8) & 0xFF
    return frame[:pos] + bytes([hc]) + frame[pos + 1 :]


def compress_legacy(codec: int, data: bytes, magic: int) -> bytes:
    """A wrapper's value: ``data`` (an inner message set) compressed as Kafka writes it for
    ``magic``."""
    if codec == COMPRESSION_ZSTD:
        raise InvalidRecordError(
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            "Down-conversion of zstandard-compressed batches is not supported",
        )
    out = compress(codec, data)
    if codec == COMPRESSION_LZ4 and magic == MAGIC_V0:
        out = _lz4_set_hc(out, broken=True)
    return out


def inner_chunks(wrapper: LegacyMessage, limit: int) -> Iterator[bytes]:
    """A wrapper's inner message set decompressed, chunk by chunk, at most ``limit`` bytes
    (MESSAGE_TOO_LARGE above); INVALID_RECORD for a zstd wrapper or no value."""
    codec = wrapper.compression
    if codec == COMPRESSION_ZSTD:
        raise _invalid(
            f"Invalid wrapper compressionType found in legacy deep record iterator {wrapper.magic}"
        )
    if codec > COMPRESSION_ZSTD:
        raise InvalidRecordError(
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"compression codec {codec}"
        )
    value = wrapper.value
    if value is None:
        raise _invalid(
            f"Found invalid compressed record set with null value (magic = {wrapper.magic})"
        )
    if codec == COMPRESSION_LZ4 and wrapper.magic == MAGIC_V0:
        value = _lz4_set_hc(value, broken=False)  # Kafka ignores magic 0's checksum
    return decompressed_chunks(codec, value, limit)


def stream_entries(chunks: Iterator[bytes]) -> Iterator[tuple[int, bytes]]:
    """(offset, message bytes) of each whole entry of a message set arriving in chunks (a
    wrapper's inner set: at most one entry and one chunk held); stops at an incomplete tail
    as Kafka's DataLogInputStream; a size below 14 is CORRUPT_MESSAGE."""
    buf = bytearray()
    pos = 0
    try:
        for chunk in chunks:
            buf += chunk
            while len(buf) - pos >= LOG_OVERHEAD:
                offset, size = _ENTRY.unpack_from(buf, pos)
                if size < RECORD_OVERHEAD_V0:
                    raise _corrupt(
                        "Record size is less than the minimum record overhead "
                        f"({RECORD_OVERHEAD_V0})"
                    )
                end = pos + LOG_OVERHEAD + size
                if end > len(buf):
                    break
                yield offset, bytes(buf[pos + LOG_OVERHEAD : end])
                pos = end
            if pos:
                del buf[:pos]
                pos = 0
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


def inner_messages(wrapper: LegacyMessage, limit: int) -> list[LegacyMessage]:
    """The messages of compressed ``wrapper``, with absolute offsets and (v1) the wrapper's
    timestamp when it is LogAppendTime: Kafka's DeepRecordsIterator (for tests and tools: the
    broker's conversion streams them, pybroker/log/legacy_validator.py).  Inner CRCs are left
    to the caller (``valid_crc``)."""
    inner: list[LegacyMessage] = []
    for offset, msg in stream_entries(inner_chunks(wrapper, limit)):
        m = parse_message(offset, memoryview(msg))
        if m.magic == MAGIC_V1 and wrapper.timestamp_type == LOG_APPEND_TIME:
            m = m._replace(timestamp=wrapper.timestamp)
        inner.append(m)
    if not inner:
        raise _invalid("Found invalid compressed record set with no inner records")
    if wrapper.magic == MAGIC_V1:
        base = wrapper_base_offset(wrapper, inner[-1].offset)
        inner = [m._replace(offset=base + m.offset) for m in inner]
    for m in inner:
        if m.compression != COMPRESSION_NONE:
            raise _invalid("Inner messages must not be compressed")
    return inner


def wrapper_base_offset(wrapper: LegacyMessage, last_inner_offset: int) -> int:
    """A v1 wrapper's base for its relative inner offsets (INVALID_RECORD when the wrapper's
    offset is below the last inner one and not 0, which some librdkafka versions write)."""
    if wrapper.offset == 0:
        return 0
    if wrapper.offset < last_inner_offset:
        raise _invalid(
            "Found invalid wrapper offset in compressed v1 message set, wrapper offset "
            f"'{wrapper.offset}' is less than the last inner message offset "
            f"'{last_inner_offset}' and it is not zero."
        )
    return wrapper.offset - last_inner_offset


# --------------------------------------------------------------------------- building


def _message(
    magic: int, attributes: int, timestamp: int, key: bytes | None, value: bytes | None
) -> bytes:
    body = bytearray()
    body.append(magic)
    body.append(attributes)
    if magic > MAGIC_V0:
        body += struct.pack(">q", timestamp)
    for blob in (key, value):
        if blob is None:
            body += b"\xff\xff\xff\xff"
        else:
            body += _INT32.pack(len(blob)) + blob
    return _UINT32.pack(zlib.crc32(body)) + bytes(body)


def _entry(offset: int, message: bytes) -> bytes:
    return _ENTRY.pack(offset, len(message)) + message


class LegacyRecord(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


class MessageSetBuilder:
    """Kafka's MemoryRecordsBuilder for magic 0/1: records appended one at a time (absolute
    offsets, ascending); uncompressed, one message each; compressed, one wrapper (offset of
    the last record; v1: relative inner offsets, timestamp the largest or the log append
    time).  With LogAppendTime every v1 message carries ``log_append_time`` and timestamp type
    bit 3.  A negative timestamp other than -1 is written as -1."""

    def __init__(
        self,
        magic: int,
        compression: int = COMPRESSION_NONE,
        timestamp_type: int = CREATE_TIME,
        log_append_time: int = NO_TIMESTAMP,
    ) -> None:
        if magic not in (MAGIC_V0, MAGIC_V1):
            raise ValueError(f"magic {magic}")
        self.magic = magic
        self.compression = compression
        lat = magic > MAGIC_V0 and timestamp_type == LOG_APPEND_TIME
        self._lat_time = log_append_time if lat else None
        self._type_bit = TIMESTAMP_TYPE_MASK if lat else 0
        self._out = bytearray()  # the message set, or the wrapper's inner set
        self._base: int | None = None
        self._last = -1
        self._max_ts = NO_TIMESTAMP

    def __len__(self) -> int:
        """Bytes written so far (uncompressed: of the message set)."""
        return len(self._out)

    def _stamp(self, ts: int) -> int:
        if self._lat_time is not None:
            ts = self._lat_time
        return ts if ts >= 0 else NO_TIMESTAMP

    def append(self, offset: int, timestamp: int, key: bytes | None, value: bytes | None) -> None:
        if self._base is None:
            self._base = offset
        inner_offset = offset
        if self.compression != COMPRESSION_NONE and self.magic > MAGIC_V0:
            inner_offset = offset - self._base
        self._out += _entry(
            inner_offset, _message(self.magic, self._type_bit, self._stamp(timestamp), key, value)
        )
        self._last = offset
        self._max_ts = max(self._max_ts, timestamp)

    def build(self) -> bytes:
        if self._base is None:
            return b""
        if self.compression == COMPRESSION_NONE:
            return bytes(self._out)
        value = compress_legacy(self.compression, bytes(self._out), self.magic)
        attributes = self.compression | self._type_bit
        wrapper = _message(self.magic, attributes, self._stamp(self._max_ts), None, value)
        return _entry(self._last, wrapper)


def build_message_set(
    records: Sequence[LegacyRecord],
    *,
    magic: int,
    compression: int = COMPRESSION_NONE,
    timestamp_type: int = CREATE_TIME,
    log_append_time: int = NO_TIMESTAMP,
) -> bytes:
    """A v0/v1 message set holding ``records`` (absolute offsets): MessageSetBuilder."""
    builder = MessageSetBuilder(magic, compression, timestamp_type, log_append_time)
    for r in records:
        builder.append(r.offset, r.timestamp, r.key, r.value)
    return builder.build()


# --------------------------------------------------------------------------- down-conversion

MAX_READ_SIZE = 128 * 1024  # LazyDownConversionRecordsSend's chunk of stored batches
MIN_OVERFLOW_MESSAGE_LENGTH = LOG_OVERHEAD
READ_MAX_UNCOMPRESSED_BYTES = 100 * 1024 * 1024  # what a stored batch could inflate to


def _v2_batches(data: bytes) -> list[bytes]:
    """The whole v2 batches of a stored region (the log hands whole batches)."""
    out = []
    pos = 0
    while len(data) - pos >= HEADER_SIZE:
        (length,) = _INT32.unpack_from(data, pos + 8)
        end = pos + LOG_OVERHEAD + length
        if length < MIN_BATCH_LENGTH or end > len(data):
            break
        out.append(data[pos:end])
        pos = end
    return out


def convert_batch(
    batch: bytes,
    to_magic: int,
    first_offset: int,
    enough: int | None = None,
    max_uncompressed_bytes: int = READ_MAX_UNCOMPRESSED_BYTES,
) -> bytes:
    """One stored v2 batch as a ``to_magic`` message set (RecordsUtil.downConvert): control
    batches vanish, headers are dropped, the codec is kept (zstd: UNSUPPORTED_COMPRESSION_TYPE),
    and an uncompressed batch loses its records before ``first_offset``.  Records are walked
    as a stream and written as they come (an uncompressed batch's conversion stops once it has
    ``enough`` bytes: the rest would be cut).  A stored batch that cannot be walked:
    CORRUPT_MESSAGE."""

    h = unpack_header(batch)
    if h.is_control:
        return b""
    if h.compression == COMPRESSION_ZSTD:
        raise InvalidRecordError(
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            "Down-conversion of zstandard-compressed batches is not supported",
        )
    lat = h.timestamp_type == LOG_APPEND_TIME
    builder = MessageSetBuilder(
        to_magic, h.compression, h.timestamp_type, h.max_timestamp if lat else NO_TIMESTAMP
    )
    uncompressed = h.compression == COMPRESSION_NONE

    def visit(buf: Any, _i: int, off: int, ts: int, _k: int, at: int, _end: int) -> bool:
        offset = h.base_offset + off
        if uncompressed and offset < first_offset:
            return False
        f = fields(buf, at)
        stamp = h.max_timestamp if lat else h.base_timestamp + ts
        builder.append(offset, stamp, f.key(buf), f.value(buf))
        return uncompressed and enough is not None and len(builder) >= enough

    try:
        walk_batch(
            batch,
            h._replace(position=0),
            max_record_bytes=max_uncompressed_bytes,
            max_uncompressed_bytes=max_uncompressed_bytes,
            gaps=True,
            visit=visit,
        )
    except InvalidRecordError as e:
        if e.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE:
            raise
        raise InvalidRecordError(ErrorCode.CORRUPT_MESSAGE, f"stored batch: {e}") from e
    return builder.build()


def _overflow(remaining: int) -> bytes:
    """LazyDownConversionRecordsSend.buildOverflowBatch, as much of it as fits: a batch header
    claiming more bytes than the response holds, which clients skip as a partial message."""
    size = max(MIN_OVERFLOW_MESSAGE_LENGTH, min(remaining + 1, MAX_READ_SIZE))
    head = _ENTRY.pack(-1, max(remaining + 1, HEADER_SIZE))
    return (head + bytes(max(size - len(head), 0)))[:remaining]


def down_convert(
    data: bytes, to_magic: int, first_offset: int, stored_size: int | None = None
) -> bytes:
    """The records a Fetch v0-3 answer carries for stored v2 ``data`` (whole batches): exactly
    the bytes Kafka's LazyDownConversionRecords sends.  Its size is the stored size
    (``stored_size``: Kafka's slice, which may end in a partial batch; default len(data)), or
    the first non-empty converted batch's if larger (so a fetch always makes progress);
    converted messages past it are cut (clients skip a trailing partial message) and a
    shortfall is filled with an overflow header.  UNSUPPORTED_COMPRESSION_TYPE when a zstd
    batch comes before any convertible one; a later one ends the converted part there."""
    batches = _v2_batches(data)
    index = 0
    first = b""
    while index < len(batches) and not first:
        first = convert_batch(batches[index], to_magic, first_offset)
        index += 1
    if not first:
        return b"" if not batches else _overflow(MIN_OVERFLOW_MESSAGE_LENGTH)
    size = max(len(data) if stored_size is None else max(stored_size, len(data)), len(first))
    out = bytearray(first[:size])
    while len(out) < size and index < len(batches):
        chunk = [batches[index]]  # as the Send groups batches: up to MAX_READ_SIZE each time
        read = len(batches[index])
        index += 1
        while index < len(batches) and read + len(batches[index]) <= MAX_READ_SIZE:
            chunk.append(batches[index])
            read += len(batches[index])
            index += 1
        try:
            converted = bytearray()
            for b in chunk:  # (converting no more than the answer can hold)
                if len(out) + len(converted) < size:
                    left = size - len(out) - len(converted)
                    converted += convert_batch(b, to_magic, first_offset, left)
                elif unpack_header(b).compression == COMPRESSION_ZSTD:
                    convert_batch(b, to_magic, first_offset, 0)  # Kafka fails the chunk
        except InvalidRecordError as e:
            if e.code != ErrorCode.UNSUPPORTED_COMPRESSION_TYPE:
                raise
            break  # Kafka pads from here; the client then fetches the zstd batch and fails
        out += converted[: size - len(out)]
    while len(out) < size:
        out += _overflow(size - len(out))
    return bytes(out)
