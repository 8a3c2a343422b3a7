"""Kafka's LogValidator for a produced message set of format v0/v1 (magic 0 or 1, Produce
v0-v2): checked as Kafka checks it and converted to one record batch v2, which the broker then
validates and appends like any other batch (Kafka 3.x logs hold v2 only).  Offsets the
producer wrote are dropped: the broker assigns them.  Pure and thread-safe; memory stays at
the batch being built (bounded by ``max_uncompressed_bytes``) plus one chunk, never a Python
object per record.  The checks, in Kafka's order, and the batch: docs/internals.md
("pybroker/log/legacy_validator.py").
"""

from __future__ import annotations

import zlib

from pybroker.errors import ErrorCode
from pybroker.wire.legacy_records import (
    MAGIC_V1,
    LegacyMessage,
    entry_magics,
    inner_chunks,
    iter_entries,
    parse_message,
    stream_entries,
    wrapper_base_offset,
)
from pybroker.wire.records import (
    COMPRESSION_MASK,
    COMPRESSION_NONE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    InvalidRecordError,
    encode_record,
    seal_batch,
)

_CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def _describe(m: LegacyMessage) -> str:
    """Kafka's LegacyRecord.toString (the messages of its record errors)."""
    ts = ""
    if m.magic > 0:
        kind = "LogAppendTime" if m.timestamp_type == LOG_APPEND_TIME else "CreateTime"
        ts = f", {kind}={m.timestamp}"
    return (
        f"Record(magic={m.magic}, attributes={m.attributes}, "
        f"compression={_CODEC_NAMES.get(m.compression, m.compression)}, crc={m.crc}{ts}, "
        f"key={len(m.key or b'')} bytes, value={len(m.value or b'')} bytes)"
    )


class _Batch:
    """The v2 batch being built, record by record (offset deltas 0, 1, ...)."""

    def __init__(self) -> None:
        self.body = bytearray()
        self.count = 0
        self.first_ts = 0
        self.max_ts = -(2**63)

    def append(self, m: LegacyMessage) -> None:
        if self.count == 0:
            self.first_ts = m.timestamp
        encode_record(self.body, m.timestamp - self.first_ts, self.count, m.key, m.value)
        self.count += 1
        self.max_ts = max(self.max_ts, m.timestamp)


class _Errors:
    """Kafka's per-record errors, in order: the first fatal one (raised at once by Kafka's
    per-record pass), and the collected INVALID_TIMESTAMP / INVALID_RECORD ones."""

    def __init__(self, create_time: bool) -> None:
        self.create_time = create_time
        self.fatal: InvalidRecordError | None = None
        self.timestamp: str | None = None
        self.record: str | None = None

    def check(self, m: LegacyMessage, batch: LegacyMessage) -> bool:
        """Kafka's validateRecord for ``m`` of ``batch`` (the wrapper, or ``m`` itself): True
        when it is fine so far."""
        if self.fatal is not None:
            return False
        if m.magic != batch.magic:
            self.record = self.record or (
                f"Record {_describe(m)}'s magic does not match outer magic {batch.magic}"
            )
            return False
        if not m.valid_crc:
            self.fatal = InvalidRecordError(
                ErrorCode.CORRUPT_MESSAGE, f"Record is corrupt (stored crc = {m.crc})"
            )
            return False
        if batch.timestamp_type == LOG_APPEND_TIME and not (self.create_time and m.timestamp != -1):
            self.timestamp = self.timestamp or (
                f"Invalid timestamp type in message {_describe(m)}. Producer should not set "
                "timestamp type to LogAppendTime."
            )
            return False
        return self.timestamp is None and self.record is None

    def raise_any(self) -> None:
        if self.fatal is not None:
            raise self.fatal
        if self.timestamp is not None:
            raise InvalidRecordError(ErrorCode.INVALID_TIMESTAMP, self.timestamp)
        if self.record is not None:
            raise InvalidRecordError(ErrorCode.INVALID_RECORD, self.record)


def up_convert(
    buf: bytes | bytearray | memoryview,
    *,
    max_message_bytes: int,
    max_uncompressed_bytes: int,
    create_time: bool,
) -> bytes:
    """One v2 batch holding the records of v0/v1 message set ``buf``; raises
    InvalidRecordError with Kafka's code (see the module docstring).  ``create_time``: the
    topic's message.timestamp.type is CreateTime.  Streams: no more than the batch being built
    (at most ``max_uncompressed_bytes`` of records), one message and one decompressed chunk
    are held."""
    entry_magics(buf)  # whole entries only (CORRUPT_MESSAGE)
    # Kafka's analyzeAndValidateRecords over the outer messages: size, then CRC-32
    first_magic = -1
    codec = COMPRESSION_NONE
    count = 0
    for _, msg in iter_entries(buf):
        size = LOG_OVERHEAD + len(msg)
        if size > max_message_bytes:
            raise InvalidRecordError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"The record batch size in the append is {size} bytes which exceeds the "
                f"maximum configured value of {max_message_bytes}.",
            )
        stored_crc = int.from_bytes(msg[:4], "big")
        if zlib.crc32(msg[4:]) != stored_crc:
            raise InvalidRecordError(
                ErrorCode.CORRUPT_MESSAGE,
                f"Record is corrupt (stored crc = {stored_crc}, computed crc = "
                f"{zlib.crc32(msg[4:])})",
            )
        magic, attributes = msg[4], msg[5]
        if first_magic < 0:
            first_magic = magic
        if attributes & COMPRESSION_MASK:
            codec = attributes & COMPRESSION_MASK
        count += 1
    if count == 0:
        raise InvalidRecordError(ErrorCode.INVALID_RECORD, "Record batch has no batches at all")
    if codec != COMPRESSION_NONE and count > 1:
        raise InvalidRecordError(
            ErrorCode.INVALID_RECORD, "Compressed outer record has more than one batch"
        )
    batch = _Batch()
    errors = _Errors(create_time)
    if codec == COMPRESSION_NONE:
        # each message is a batch of its own: Kafka checks its magic against the first one's,
        # then its record, and fails at the first batch with an error
        for offset, msg in iter_entries(buf):
            m = parse_message(offset, msg)
            if m.magic != first_magic:
                raise InvalidRecordError(
                    ErrorCode.INVALID_RECORD,
                    f"Batch magic {m.magic} is not the same as the first batch's magic byte "
                    f"{first_magic}",
                )
            if not errors.check(m, m):
                errors.raise_any()
            batch.append(m)
    else:
        offset, msg = next(iter_entries(buf))
        wrapper = parse_message(offset, msg)
        last = None
        for inner_offset, inner in stream_entries(inner_chunks(wrapper, max_uncompressed_bytes)):
            m = parse_message(inner_offset, inner)
            last = m.offset
            if m.compression != COMPRESSION_NONE and errors.fatal is None:
                errors.fatal = InvalidRecordError(
                    ErrorCode.INVALID_RECORD, "Inner messages must not be compressed"
                )
            if m.magic == MAGIC_V1 and wrapper.timestamp_type == LOG_APPEND_TIME:
                m = m._replace(timestamp=wrapper.timestamp)
            if errors.check(m, wrapper):
                batch.append(m)
        if last is None:
            raise InvalidRecordError(
                ErrorCode.INVALID_RECORD,
                "Found invalid compressed record set with no inner records",
            )
        if wrapper.magic == MAGIC_V1:
            wrapper_base_offset(wrapper, last)
    errors.raise_any()
    return seal_batch(batch.body, batch.count, batch.first_ts, batch.max_ts, compression=codec)
