"""Kafka's LogValidator for the records a client produces: every record of a batch is walked
(decompressing a compressed batch as a stream) before the batch is appended.

The checks, per batch (after pybroker.wire.records.parse_batches has checked the header, sizes
and CRC-32C), with the error code the partition is answered with:

* the records section cannot be decompressed: CORRUPT_MESSAGE (2)
* a record's length varint, or any varint inside it, is longer than 5 bytes (10 for the
  timestamp delta), truncated, or the record's fields do not fill exactly its declared length;
  a negative length, key length < -1, value length < -1, header count < 0, header key length
  < 0 or header value length < -1; a field past the end of the records: INVALID_RECORD (87)
* a record's offset delta is not its position in the batch (0, 1, ...): INVALID_RECORD.  Kafka
  rebuilds such a compressed batch instead; pybroker stores batches as received, and no v2
  client writes other deltas.
* fewer or more records than the header's recordsCount, or bytes after the last record:
  INVALID_RECORD
* one record longer than the partition's max.message.bytes, or records inflating beyond
  ``max_uncompressed_bytes`` (the broker passes socket.request.max.bytes: a batch may not hold
  more than a client could have sent uncompressed in one request): MESSAGE_TOO_LARGE (10).  The
  walk stops at the first violation, so a decompression bomb costs at most that many bytes of
  work, and memory stays below one record plus one decompressed chunk (64 KiB).

Pure and thread-safe: the produce handler runs it on the event loop for small batches and in a
worker thread for large ones (see pybroker/handlers/produce.py).  :func:`find_record` walks a
stored batch the same way for ListOffsets by timestamp.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from pybroker.errors import ErrorCode
from pybroker.wire.compression import decompressed_chunks
from pybroker.wire.records import HEADER_SIZE, BatchHeader, InvalidRecordError

# Reading a stored batch (ListOffsets): Kafka's default socket.request.max.bytes, the most a
# batch could inflate to when it was validated with the defaults.
READ_MAX_UNCOMPRESSED_BYTES = 100 * 1024 * 1024

# attributes(1) timestampDelta(1) offsetDelta(1) keyLength(1) valueLength(1) headerCount(1)
MIN_RECORD_BODY = 6


class ValidationResult(NamedTuple):
    records: int
    max_timestamp: int  # the largest record timestamp (CreateTime)
    uncompressed_bytes: int


def _invalid(why: str) -> InvalidRecordError:
    return InvalidRecordError(ErrorCode.INVALID_RECORD, why)


def _varint(buf: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
    """Zig-zag varint at ``pos`` (the caller handled the one-byte case)."""
    result = 0
    shift = 0
    for i in range(max_bytes):
        b = buf[pos + i]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos + i + 1
        shift += 7
    raise _invalid(f"varint longer than {max_bytes} bytes")


def _check_headers(buf: bytes, pos: int, end: int) -> None:
    """Check the header count and headers at ``pos``, which must end the record at ``end``."""
    b = buf[pos]
    if b < 0x80:
        headers, pos = (b >> 1) ^ -(b & 1), pos + 1
    else:
        headers, pos = _varint(buf, pos, 5)
    if headers < 0:
        raise _invalid(f"header count {headers}")
    for _ in range(headers):
        n, pos = _varint(buf, pos, 5)
        if n < 0:
            raise _invalid(f"header key length {n}")
        pos += n
        n, pos = _varint(buf, pos, 5)
        if n > 0:
            pos += n
        elif n < -1:
            raise _invalid(f"header value length {n}")
        if pos > end:
            break
    if pos != end:
        raise _invalid(f"record fields take {pos - end:+d} bytes beyond its declared length")


def _walk(
    batch: bytes | bytearray | memoryview,
    h: BatchHeader,
    max_record_bytes: int,
    max_uncompressed_bytes: int,
    wanted: Callable[[int, int], bool] | None,
    gaps: bool = False,
) -> tuple[int, int, tuple[int, int] | None]:
    """Walk the records of batch ``h``: (records, largest timestamp delta, the first
    (offset delta, timestamp delta) ``wanted`` accepts, which ends the walk early).  Offset
    deltas must be 0..n-1 (a produced batch), or with ``gaps`` (a stored batch, which the log
    cleaner may have thinned) ascending within 0..last offset delta."""
    last_delta = h.last_offset - h.base_offset
    prev_delta = -1
    start = h.position + HEADER_SIZE
    payload = bytes(memoryview(batch)[start : h.position + h.size])
    chunks = decompressed_chunks(h.compression, payload, max_uncompressed_bytes)
    buf = b""
    pos = 0
    more = True
    max_delta = -(2**63)
    index = 0

    def fill(need: int) -> None:
        nonlocal buf, pos, more
        parts = [buf[pos:]]
        have = len(parts[0])
        while have < need and more:
            chunk = next(chunks, None)
            if chunk is None:
                more = False
                break
            parts.append(chunk)
            have += len(chunk)
        buf, pos = b"".join(parts), 0

    try:
        for index in range(h.records_count):  # noqa: B007 (index is reported below)
            if len(buf) - pos < 5 and more:
                fill(5)
            if pos >= len(buf):
                raise _invalid(f"{h.records_count} records declared, {index} found")
            b = buf[pos]
            if b < 0x80:
                length, p = (b >> 1) ^ -(b & 1), pos + 1
            else:
                length, p = _varint(buf, pos, 5)
            if length < MIN_RECORD_BODY:
                raise _invalid(f"record length {length}")
            if length > max_record_bytes:
                raise InvalidRecordError(
                    ErrorCode.MESSAGE_TOO_LARGE,
                    f"record of {length} bytes exceeds max.message.bytes={max_record_bytes}",
                )
            end = p + length
            if end > len(buf):
                moved = pos
                fill(end - pos)  # moves the record to the front of buf
                p -= moved
                end -= moved
                if end > len(buf):
                    raise _invalid(f"record {index} truncated")
            # the record body; one-byte varints inline (almost every field of real records)
            b = buf[p + 1]
            if b < 0x80:
                ts_delta, q = (b >> 1) ^ -(b & 1), p + 2
            else:
                ts_delta, q = _varint(buf, p + 1, 10)
            b = buf[q]
            if b < 0x80:
                off_delta, q = (b >> 1) ^ -(b & 1), q + 1
            else:
                off_delta, q = _varint(buf, q, 5)
            b = buf[q]
            if b < 0x80:
                n, q = (b >> 1) ^ -(b & 1), q + 1
            else:
                n, q = _varint(buf, q, 5)
            if n > 0:
                q += n
            elif n < -1:
                raise _invalid(f"key length {n}")
            b = buf[q]
            if b < 0x80:
                n, q = (b >> 1) ^ -(b & 1), q + 1
            else:
                n, q = _varint(buf, q, 5)
            if n > 0:
                q += n
            elif n < -1:
                raise _invalid(f"value length {n}")
            if q + 1 != end or buf[q] != 0:  # not "no headers, record ends here"
                _check_headers(buf, q, end)
            if off_delta != index and not (gaps and prev_delta < off_delta <= last_delta):
                raise _invalid(f"record {index} has offset delta {off_delta}")
            prev_delta = off_delta
            if ts_delta > max_delta:
                max_delta = ts_delta
            pos = end
            if wanted is not None and wanted(off_delta, ts_delta):
                return index + 1, max_delta, (off_delta, ts_delta)
        if pos < len(buf) or (more and any(chunks)):
            raise _invalid(f"bytes after the last of {h.records_count} records")
    except IndexError:
        raise _invalid("record truncated") from None
    finally:
        chunks.close()
    return h.records_count, max_delta, None


def validate_batch(
    batch: bytes | bytearray | memoryview,
    h: BatchHeader,
    *,
    max_record_bytes: int,
    max_uncompressed_bytes: int,
) -> ValidationResult:
    """Walk every record of batch ``h``; raises InvalidRecordError with Kafka's code."""
    n, max_delta, _ = _walk(batch, h, max_record_bytes, max_uncompressed_bytes, None)
    return ValidationResult(n, h.base_timestamp + max_delta, h.size - HEADER_SIZE)


def find_record(
    batch: bytes | bytearray | memoryview,
    h: BatchHeader,
    wanted: Callable[[int, int], bool],
    *,
    max_uncompressed_bytes: int = READ_MAX_UNCOMPRESSED_BYTES,
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record of stored batch ``h`` for which
    ``wanted(offset, timestamp)``, or None.  Timestamps are the record's own (CreateTime) or
    the batch's maxTimestamp (LogAppendTime).  Raises InvalidRecordError on a malformed batch."""
    base_offset, base_ts = h.base_offset, h.base_timestamp
    if h.timestamp_type == 1:  # LogAppendTime: every record has the batch's maxTimestamp
        base_ts = h.max_timestamp

        def accept(off_delta: int, _ts_delta: int) -> bool:
            return wanted(base_offset + off_delta, base_ts)
    else:

        def accept(off_delta: int, ts_delta: int) -> bool:
            return wanted(base_offset + off_delta, base_ts + ts_delta)

    _, _, found = _walk(batch, h, max_uncompressed_bytes, max_uncompressed_bytes, accept, gaps=True)
    if found is None:
        return None
    off_delta, ts_delta = found
    return base_offset + off_delta, base_ts if h.timestamp_type == 1 else base_ts + ts_delta
