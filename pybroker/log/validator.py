"""Kafka's LogValidator: the records a client produces, validated before they are appended.
Pure functions over bytes and a :class:`ValidationConfig` (the topic's settings), no I/O and
no clock: the replica manager (pybroker/replica_manager.py) decides where each runs (the event
loop or a worker thread) and appends the result.  In the replica manager's order:
:func:`analyze_records` (whole batches, CRC, sizes), :func:`check_batch_size`,
:func:`validate_records` (one bounded walk of every record: malformed records, sizes, keys on
compacted topics, timestamps), :func:`recompress` (the topic's codec).  A decompression bomb
costs at most ``max_uncompressed_bytes`` of work.  Steps and error codes: docs/internals.md
("pybroker/log/validator.py").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from pybroker.errors import ErrorCode
from pybroker.log.compacted_records import read_records, rebuild_batch
from pybroker.wire.record_walker import walk_batch
from pybroker.wire.records import (
    COMPRESSION_MASK,
    CREATE_TIME,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    BatchHeader,
    InvalidRecordError,
    parse_batches,
    set_max_timestamp,
)

# Reading a stored batch (ListOffsets): Kafka's default socket.request.max.bytes, the most a
# batch could inflate to when it was validated with the defaults.
READ_MAX_UNCOMPRESSED_BYTES = 100 * 1024 * 1024
LONG_MAX = 2**63 - 1
Buffer = bytearray | memoryview  # writable: offsets, epochs and max timestamps are patched in it


@dataclass(frozen=True, slots=True)
class ValidationConfig:
    """What LogValidator takes from the topic's configs (and the broker's), for one append."""

    topic_partition: str  # "topic-partition", in Kafka's messages
    max_message_bytes: int  # max.message.bytes: a batch's size and a record's length
    max_uncompressed_bytes: int  # socket.request.max.bytes: what a batch may inflate to
    target_codec: int | None = None  # compression.type; None: the producer's
    target_level: int | None = None  # compression.<target codec>.level (gzip, lz4, zstd)
    compacted: bool = False  # cleanup.policy holds compact: records need keys
    log_append_time: bool = False  # message.timestamp.type=LogAppendTime
    timestamp_before_max_ms: int = LONG_MAX
    timestamp_after_max_ms: int = LONG_MAX


class ValidationResult(NamedTuple):
    records: int
    max_timestamp: int  # the largest record timestamp (CreateTime)
    uncompressed_bytes: int


class RecordValidationError(InvalidRecordError):
    """Kafka's RecordValidationException: the partition's error code (INVALID_TIMESTAMP or
    INVALID_RECORD) with ``record_errors``, ``(batchIndex, message)`` per rejected record."""

    def __init__(self, code: ErrorCode, record_errors: list[tuple[int, str]]) -> None:
        if code == ErrorCode.INVALID_TIMESTAMP:
            message = "One or more records have been rejected due to invalid timestamp"
        else:
            message = record_errors_message(record_errors)
        super().__init__(code, message)
        self.record_errors = record_errors


def record_errors_message(errors: list[tuple[int, str]]) -> str:
    """Kafka's RecordValidationException message for the partition's error_message."""
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return (
        f"One or more records have been rejected due to {len(errors)} record errors in total,"
        f" and only showing the first three errors at most: [{shown}]"
    )


def analyze_records(records: bytes | bytearray | memoryview) -> tuple[Buffer, list[BatchHeader]]:
    """A Produce's raw records as a buffer of whole v2 batches and their headers (checked as
    parse_batches checks them); the buffer is the one the log writes, so the batches' offsets
    and leader epochs are patched in it.  InvalidRecordError with Kafka's code, CORRUPT_MESSAGE
    for no records at all."""
    if records is None or len(records) == 0:
        raise InvalidRecordError(ErrorCode.CORRUPT_MESSAGE, "no record batch in the request")
    buf = bytearray(records) if isinstance(records, bytes) else records  # (a frame's: writable)
    return buf, parse_batches(buf)


def check_batch_size(h: BatchHeader, config: ValidationConfig) -> None:
    """MESSAGE_TOO_LARGE for a batch above max.message.bytes (Kafka's RecordTooLargeException)."""
    if h.size > config.max_message_bytes:
        raise InvalidRecordError(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"batch of {h.size} bytes exceeds max.message.bytes={config.max_message_bytes}",
        )


def validate_batch(
    batch: bytes | bytearray | memoryview,
    h: BatchHeader,
    *,
    max_record_bytes: int,
    max_uncompressed_bytes: int,
) -> ValidationResult:
    """Walk every record of batch ``h`` (structure only); raises InvalidRecordError with
    Kafka's code."""
    n, max_delta, _ = walk_batch(
        batch, h, max_record_bytes=max_record_bytes, max_uncompressed_bytes=max_uncompressed_bytes
    )
    return ValidationResult(n, h.base_timestamp + max_delta, h.size - HEADER_SIZE)


def validate_records(
    buf: Buffer,
    batches: list[BatchHeader],
    config: ValidationConfig,
    now: int,
    *,
    max_uncompressed_bytes: int | None = None,
) -> list[BatchHeader]:
    """Step 2 of the module docstring over every batch (``max_uncompressed_bytes``: a lower
    inflation budget than the config's, for a first try on the event loop; past it
    DecompressedSizeError).  Sets CreateTime batches' maxTimestamp in ``buf``; returns the
    headers as they are now.  Raises InvalidRecordError / RecordValidationError."""
    cap = (
        config.max_uncompressed_bytes if max_uncompressed_bytes is None else max_uncompressed_bytes
    )
    before, after = config.timestamp_before_max_ms, config.timestamp_after_max_ms
    bounded = not config.log_append_time and (before != LONG_MAX or after != LONG_MAX)
    key_errors: list[tuple[int, str]] = []
    ts_errors: list[tuple[int, str]] = []
    out = []
    for h in batches:
        visit = None
        producer_lat = h.timestamp_type == LOG_APPEND_TIME
        if config.compacted or bounded or producer_lat:
            visit = _record_checks(h, config, now, bounded, producer_lat, key_errors, ts_errors)
        n, max_delta, _ = walk_batch(
            buf,
            h,
            max_record_bytes=config.max_message_bytes,
            max_uncompressed_bytes=cap,
            visit=visit,
        )
        max_ts = h.base_timestamp + max_delta
        if h.timestamp_type == CREATE_TIME and max_ts != h.max_timestamp:
            set_max_timestamp(buf, h.position, CREATE_TIME, max_ts)
            h = h._replace(max_timestamp=max_ts)
        out.append(h)
    if ts_errors:
        raise RecordValidationError(ErrorCode.INVALID_TIMESTAMP, ts_errors)
    if key_errors:
        raise RecordValidationError(ErrorCode.INVALID_RECORD, key_errors)
    return out


def _record_checks(
    h: BatchHeader,
    config: ValidationConfig,
    now: int,
    bounded: bool,
    producer_lat: bool,
    key_errors: list[tuple[int, str]],
    ts_errors: list[tuple[int, str]],
) -> Callable[..., None]:
    """The per-record part of Kafka's validateRecord (validateKey, validateTimestamp), as a
    record walker visit."""
    create_time = not config.log_append_time
    before, after = config.timestamp_before_max_ms, config.timestamp_after_max_ms
    base_offset = h.base_offset
    base_ts = h.max_timestamp if producer_lat else h.base_timestamp
    no_key = (
        "Compacted topic cannot accept message without key in topic partition"
        f" {config.topic_partition}."
    )
    compacted = config.compacted

    def visit(_buf: object, i: int, off: int, ts_delta: int, klen: int, *_: int) -> None:
        if compacted and klen < 0:
            key_errors.append((i, no_key))
        ts = base_ts if producer_lat else base_ts + ts_delta
        diff = now - ts
        if create_time and ts != -1 and (diff > before or -diff > after):
            ts_errors.append(
                (
                    i,
                    f"Timestamp {ts} of message with offset {base_offset + off} is out of"
                    f" range. The timestamp should be within [{now - before},"
                    f" {now + after}]",
                )
            )
        elif producer_lat:
            ts_errors.append(
                (
                    i,
                    f"Invalid timestamp type in message (offset={base_offset + off},"
                    f" timestamp={ts}). Producer should not set timestamp type to"
                    " LogAppendTime.",
                )
            )

    return visit


def recompress(
    buf: Buffer, batches: list[BatchHeader], codec: int, level: int | None = None
) -> tuple[bytearray, list[BatchHeader]]:
    """Batches whose codec differs from the topic's ``codec`` rebuilt in it at ``level`` (Kafka's
    buildRecordsAndAssignOffsets with the producer fields kept); the others as they are."""
    mv = memoryview(buf)
    out = bytearray()
    for h in batches:
        raw = bytes(mv[h.position : h.position + h.size])
        if h.compression == codec:
            out += raw
            continue
        _, recs = read_records(raw)
        attrs = (h.attributes & ~COMPRESSION_MASK) | codec
        out += rebuild_batch(h._replace(attributes=attrs), recs, level=level)
    return out, parse_batches(out)


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
