"""Kafka record batches, format v2 (magic 2): a sans-I/O view over the 61-byte batch header.

Byte layout of one batch (all integers big-endian)::

    offset  size  field
         0     8  baseOffset            int64   assigned by the broker (patched in place)
         8     4  batchLength           int32   bytes after this field; whole batch = 12 + batchLength
        12     4  partitionLeaderEpoch  int32   set by the broker, NOT covered by the CRC
        16     1  magic                 int8    2 (v0/v1 messages have their magic at 16 too)
        17     4  crc                   uint32  CRC-32C (Castagnoli) of bytes 21 .. end of batch
        21     2  attributes            int16   bits 0-2 compression (0 none, 1 gzip, 2 snappy,
                                                3 lz4, 4 zstd), bit 3 timestamp type (1 =
                                                LogAppendTime), bit 4 transactional, bit 5 control
        23     4  lastOffsetDelta       int32
        27     8  baseTimestamp         int64
        35     8  maxTimestamp          int64
        43     8  producerId            int64   -1 = not idempotent
        51     2  producerEpoch         int16
        53     4  baseSequence          int32
        57     4  recordsCount          int32
        61     -  records (compressed as one blob when the codec is not 0)

One record (inside the possibly compressed records section)::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint (-1 = null) | key | valueLength varint | value |
    headerCount varint | headers: (keyLength varint | key utf-8 | valueLength varint | value)*

Readers, builders and the validation error codes: docs/internals.md ("pybroker/wire/records.py").
"""

from __future__ import annotations

import gzip
import struct
import time
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from crc32c import crc32c

from pybroker.errors import ErrorCode
from pybroker.wire.primitives import write_varint

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49
MAGIC = 2
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
PARTITION_LEADER_EPOCH_OFFSET = 12

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
COMPRESSION_MASK = 0x07
# compression.type's values (Kafka's BrokerCompressionType) and the codec each asks stored
# batches to have; producer: the batch's own
COMPRESSION_TYPES: dict[str, int | None] = {
    "producer": None,
    "uncompressed": COMPRESSION_NONE,
    "gzip": COMPRESSION_GZIP,
    "snappy": COMPRESSION_SNAPPY,
    "lz4": COMPRESSION_LZ4,
    "zstd": COMPRESSION_ZSTD,
}
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
INT32_MAX = 2**31 - 1

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_LEN = struct.Struct(">qi")


class InvalidRecordError(Exception):
    """A record set a broker must refuse; ``code`` is the Kafka error code to answer with."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


class BatchHeader(NamedTuple):
    """The 61-byte v2 header of one batch, and where it sits in the buffer it came from."""

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        """The sequence of the last record; wraps past 2**31 - 1 to 0 as Kafka does."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)


def increment_sequence(sequence: int, increment: int) -> int:
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def unpack_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Unpack the header at ``position`` with no checks (caller made sure 61 bytes are there)."""
    return BatchHeader(position, *HEADER.unpack_from(buf, position))


def _check_batch(
    mv: memoryview, pos: int, end: int, verify_crc: bool, allow_control: bool
) -> BatchHeader:
    remaining = end - pos
    if remaining < 17:
        raise InvalidRecordError(ErrorCode.CORRUPT_MESSAGE, f"{remaining} trailing bytes at {pos}")
    _, batch_length = _LEN.unpack_from(mv, pos)
    magic = mv[pos + 16]
    if magic in (0, 1):
        raise InvalidRecordError(
            ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, f"message format v{magic} is not supported"
        )
    if magic != MAGIC:
        raise InvalidRecordError(ErrorCode.CORRUPT_MESSAGE, f"unknown magic {magic} at {pos}")
    if batch_length < MIN_BATCH_LENGTH:
        raise InvalidRecordError(ErrorCode.CORRUPT_MESSAGE, f"batch length {batch_length} < 49")
    if batch_length > remaining - LOG_OVERHEAD:
        raise InvalidRecordError(
            ErrorCode.CORRUPT_MESSAGE, f"batch at {pos} needs {batch_length + 12} bytes"
        )
    h = BatchHeader(pos, *HEADER.unpack_from(mv, pos))
    batch_end = pos + LOG_OVERHEAD + batch_length
    if verify_crc and crc32c(mv[pos + ATTRIBUTES_OFFSET : batch_end]) != h.crc:
        raise InvalidRecordError(ErrorCode.CORRUPT_MESSAGE, f"CRC mismatch in batch at {pos}")
    if h.attributes & COMPRESSION_MASK > COMPRESSION_ZSTD:
        raise InvalidRecordError(
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"compression codec {h.compression}"
        )
    if allow_control:
        # written by a broker (recovery, a leader's log): log compaction leaves batches with
        # fewer records than offsets, even none (Kafka's empty batches that keep a producer's
        # last sequence), so only 0 <= count <= last offset delta + 1 holds
        bad_count = h.last_offset_delta < 0 or not 0 <= h.records_count <= h.last_offset_delta + 1
    else:
        bad_count = (
            h.records_count <= 0
            or h.last_offset_delta < 0
            or h.records_count != h.last_offset_delta + 1
        )
    if bad_count:
        raise InvalidRecordError(
            ErrorCode.INVALID_RECORD,
            f"records count {h.records_count} vs last offset delta {h.last_offset_delta}",
        )
    if h.attributes & CONTROL_MASK and not allow_control:
        raise InvalidRecordError(ErrorCode.INVALID_RECORD, "clients may not write control batches")
    if h.producer_id > NO_PRODUCER_ID and h.base_sequence < 0 and not h.attributes & CONTROL_MASK:
        # (a transaction marker carries its producer with base sequence -1)
        raise InvalidRecordError(
            ErrorCode.INVALID_RECORD, f"producer {h.producer_id} with sequence {h.base_sequence}"
        )
    return h


def parse_batches(
    buf: bytes | bytearray | memoryview, *, verify_crc: bool = True, allow_control: bool = False
) -> list[BatchHeader]:
    """Validate a record set of whole v2 batches back to back and return their headers.

    Raises InvalidRecordError (see the module docstring for the codes).  ``allow_control``
    admits what only a broker writes (recovery, a leader's batches to a follower): control
    batches (transaction markers) and batches that compaction left with fewer records than
    offsets."""
    mv = memoryview(buf).cast("B")
    end = len(mv)
    if end == 0:
        raise InvalidRecordError(ErrorCode.INVALID_RECORD, "empty record set")
    out: list[BatchHeader] = []
    pos = 0
    while pos < end:
        h = _check_batch(mv, pos, end, verify_crc, allow_control)
        out.append(h)
        pos += LOG_OVERHEAD + h.batch_length
    return out


def scan_batches(buf: bytes | bytearray | memoryview, start: int = 0) -> Iterator[BatchHeader]:
    """Lenient walk for recovery: yield valid batches (CRC checked) from ``start`` and stop
    silently at the first incomplete or invalid one."""
    mv = memoryview(buf).cast("B")
    end = len(mv)
    pos = start
    while pos < end:
        try:
            h = _check_batch(mv, pos, end, True, True)
        except InvalidRecordError:
            return
        yield h
        pos += LOG_OVERHEAD + h.batch_length


def set_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Assign the batch's base offset in place (not covered by the CRC)."""
    _INT64.pack_into(buf, position, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, position: int, epoch: int) -> None:
    _INT32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_max_timestamp(
    buf: bytearray | memoryview, position: int, timestamp_type: int, timestamp: int
) -> None:
    """Set the timestamp type bit and maxTimestamp (LogAppendTime topics) and recompute the
    CRC, as Kafka's DefaultRecordBatch.setMaxTimestamp does.  Both fields are CRC-covered."""
    (batch_length,) = _INT32.unpack_from(buf, position + 8)
    (attributes,) = _INT16.unpack_from(buf, position + ATTRIBUTES_OFFSET)
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    else:
        attributes &= ~TIMESTAMP_TYPE_MASK
    _INT16.pack_into(buf, position + ATTRIBUTES_OFFSET, attributes)
    _INT64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, timestamp)
    end = position + LOG_OVERHEAD + batch_length
    crc = crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET : end])
    _UINT32.pack_into(buf, position + CRC_OFFSET, crc)


# ---------------------------------------------------------------------------------------------
# Record format and codecs: test/tool helpers, never on the broker's append path.


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


_XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024


def compress(codec: int, data: bytes, level: int | None = None) -> bytes:
    """Compress a records section the way Kafka clients do; ``level`` is Kafka's
    compression.<codec>.level for gzip, lz4 and zstd (None: this module's default)."""
    if codec == COMPRESSION_NONE:
        return data
    if codec == COMPRESSION_GZIP:
        # mtime 0, as Java's GZIPOutputStream writes it: the same records give the same bytes
        # (a batch the cleaner rewrites is the same on every replica and every run).  Kafka's
        # -1 is zlib's default level, 6.
        if level is None:
            return gzip.compress(data, mtime=0)
        return gzip.compress(data, compresslevel=6 if level == -1 else level, mtime=0)
    if codec == COMPRESSION_SNAPPY:
        # Java's producer (snappy-java SnappyOutputStream) and kafka-python write xerial framing:
        # a 16-byte header then (int32 length, raw snappy block) per 32 KiB of input.
        import cramjam

        out = bytearray(_XERIAL_HEADER)
        for i in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK]))
            out += struct.pack(">i", len(block)) + block
        return bytes(out)
    if codec == COMPRESSION_LZ4:
        import lz4.frame

        # Kafka only supports independent LZ4 blocks (KafkaLZ4BlockOutputStream).  Its level 9
        # (the default) is LZ4's fast compressor, any other the high-compression one at that
        # level (lz4.frame's 3..16).
        hc = 0 if level is None or level == 9 else min(max(level, 3), 16)
        return lz4.frame.compress(data, compression_level=hc, block_linked=False, store_size=False)
    if codec == COMPRESSION_ZSTD:
        import zstandard

        return zstandard.ZstdCompressor(level=3 if level is None else level).compress(data)
    raise InvalidRecordError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"codec {codec}")


def decompress(codec: int, data: bytes) -> bytes:
    """Inverse of :func:`compress`; also accepts raw (unframed) snappy as librdkafka sends."""
    if codec == COMPRESSION_NONE:
        return data
    try:
        if codec == COMPRESSION_GZIP:
            return gzip.decompress(data)
        if codec == COMPRESSION_SNAPPY:
            import cramjam

            if len(data) > 16 and data[:8] == _XERIAL_HEADER[:8]:
                out = bytearray()
                pos, end = 16, len(data)
                while pos < end:
                    (n,) = struct.unpack_from(">i", data, pos)
                    pos += 4
                    if n < 0 or pos + n > end:
                        raise ValueError("torn xerial block")
                    out += bytes(cramjam.snappy.decompress_raw(data[pos : pos + n]))
                    pos += n
                return bytes(out)
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec == COMPRESSION_LZ4:
            import lz4.frame

            return lz4.frame.decompress(data)
        if codec == COMPRESSION_ZSTD:
            import zstandard

            # Java's zstd-jni stream omits the content size, so decompress as a stream.
            return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    except InvalidRecordError:
        raise
    except Exception as e:  # every codec library has its own error types
        raise InvalidRecordError(ErrorCode.CORRUPT_MESSAGE, f"cannot decompress: {e}") from e
    raise InvalidRecordError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"codec {codec}")


RecordSpec = tuple  # (key, value, headers) or (key, value, headers, timestamp)


def encode_record(
    out: bytearray,
    timestamp_delta: int,
    offset_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> None:
    """Append one record (length-prefixed, attributes 0) to a records section."""
    r = bytearray(b"\x00")
    write_varint(r, timestamp_delta)
    write_varint(r, offset_delta)
    for blob in (key, value):
        if blob is None:
            write_varint(r, -1)
        else:
            write_varint(r, len(blob))
            r += blob
    write_varint(r, len(headers))
    for hk, hv in headers:
        hkb = hk.encode()
        write_varint(r, len(hkb))
        r += hkb
        if hv is None:
            write_varint(r, -1)
        else:
            write_varint(r, len(hv))
            r += hv
    write_varint(out, len(r))
    out += r


def seal_batch(
    records_section: bytes | bytearray,
    count: int,
    base_timestamp: int,
    max_timestamp: int,
    **options: Any,
) -> bytes:
    """One v2 batch around an uncompressed records section of ``count`` records with offset
    deltas 0..count-1 (compressed with ``compression``), its CRC-32C computed (``options``:
    ``sealed_batch``'s keywords)."""
    return bytes(sealed_batch(records_section, count, base_timestamp, max_timestamp, **options))


def sealed_batch(
    records_section: bytes | bytearray,
    count: int,
    base_timestamp: int,
    max_timestamp: int,
    *,
    base_offset: int = 0,
    compression: int = COMPRESSION_NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: int = CREATE_TIME,
    partition_leader_epoch: int = -1,
) -> bytearray:
    """``seal_batch``'s batch in a bytearray of its own (the caller may patch its offsets)."""
    payload = (
        records_section
        if compression == COMPRESSION_NONE
        else compress(compression, bytes(records_section))
    )
    attributes = compression
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    buf = bytearray(HEADER_SIZE) + payload
    _seal_header(
        buf,
        base_offset,
        partition_leader_epoch,
        attributes,
        count,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
    )
    return buf


def _seal_header(
    buf: bytearray,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    count: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
) -> None:
    """Pack a v2 batch's header into the room left at the front of ``buf`` (the records
    after it) and its CRC."""
    HEADER.pack_into(
        buf,
        0,
        base_offset,
        len(buf) - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        count - 1,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    _UINT32.pack_into(buf, CRC_OFFSET, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))


def build_batch(records: Sequence[RecordSpec], **options: Any) -> bytes:
    """Build one v2 batch.  Each record is ``(key, value, headers)`` with headers a list of
    ``(str, bytes | None)``; a 4th element sets that record's timestamp (default: ``timestamp``,
    or now).  Offset deltas are 0..n-1.  ``options``: ``build_batch_buffer``'s keywords."""
    return bytes(build_batch_buffer(records, **options))


def build_keyed_batch(
    records: Sequence[tuple[bytes, bytes | None]],
    timestamp: int,
    *,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    partition_leader_epoch: int = -1,
) -> bytearray:
    """``build_batch_buffer`` for a coordinator's records: (key, value or None for a
    tombstone), no headers, one timestamp, no compression, base offset 0; the same bytes,
    built in one buffer (the records written after the header's room, the header packed in
    place), as every OffsetCommit's append builds one."""
    if not records:
        raise ValueError("a batch needs at least one record")
    buf = bytearray(HEADER_SIZE)
    for delta, (key, value) in enumerate(records):
        r = bytearray(b"\x00\x00")  # attributes, timestamp delta 0
        write_varint(r, delta)
        write_varint(r, len(key))
        r += key
        if value is None:
            r.append(1)  # varint -1
        else:
            write_varint(r, len(value))
            r += value
        r.append(0)  # no headers
        write_varint(buf, len(r))
        buf += r
    _seal_header(
        buf,
        0,
        partition_leader_epoch,
        TRANSACTIONAL_MASK if is_transactional else 0,
        len(records),
        timestamp,
        timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
    )
    return buf


def build_batch_buffer(
    records: Sequence[RecordSpec],
    *,
    base_offset: int = 0,
    timestamp: int | None = None,
    compression: int = COMPRESSION_NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: int = CREATE_TIME,
    partition_leader_epoch: int = -1,
) -> bytearray:
    """``build_batch``'s batch in a bytearray of its own, for a caller that appends it (the
    log patches its base offset in place)."""
    if not records:
        raise ValueError("a batch needs at least one record")
    if timestamp is None:
        timestamp = int(time.time() * 1000)
    stamps = [r[3] if len(r) > 3 and r[3] is not None else timestamp for r in records]
    first_ts = stamps[0]
    body = bytearray()
    for delta, (rec, ts) in enumerate(zip(records, stamps, strict=True)):
        encode_record(body, ts - first_ts, delta, rec[0], rec[1], rec[2] or [])
    return sealed_batch(
        body,
        len(records),
        first_ts,
        max(stamps),
        base_offset=base_offset,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        is_control=is_control,
        timestamp_type=timestamp_type,
        partition_leader_epoch=partition_leader_epoch,
    )
