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

from pybroker.wire.record_walker import walk_batch
from pybroker.wire.records import HEADER_SIZE, LOG_APPEND_TIME, BatchHeader

# Reading a stored batch (ListOffsets): Kafka's default socket.request.max.bytes, the most a
# batch could inflate to when it was validated with the defaults.
READ_MAX_UNCOMPRESSED_BYTES = 100 * 1024 * 1024


class ValidationResult(NamedTuple):
    records: int
    max_timestamp: int  # the largest record timestamp (CreateTime)
    uncompressed_bytes: int


def validate_batch(
    batch: bytes | bytearray | memoryview,
    h: BatchHeader,
    *,
    max_record_bytes: int,
    max_uncompressed_bytes: int,
) -> ValidationResult:
    """Walk every record of batch ``h``; raises InvalidRecordError with Kafka's code."""
    n, max_delta, _ = walk_batch(
        batch, h, max_record_bytes=max_record_bytes, max_uncompressed_bytes=max_uncompressed_bytes
    )
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
    log_append_time = h.timestamp_type == LOG_APPEND_TIME
    if log_append_time:  # every record has the batch's maxTimestamp
        base_ts = h.max_timestamp
    found: list[tuple[int, int]] = []

    def accept(_buf: object, _i: int, off_delta: int, ts_delta: int, *_: int) -> bool:
        record = (base_offset + off_delta, base_ts if log_append_time else base_ts + ts_delta)
        if wanted(*record):
            found.append(record)
            return True
        return False

    walk_batch(
        batch,
        h,
        max_record_bytes=max_uncompressed_bytes,
        max_uncompressed_bytes=max_uncompressed_bytes,
        gaps=True,
        visit=accept,
    )
    return found[0] if found else None
