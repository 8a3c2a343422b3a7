"""Kafka's LogValidator for a produced message set of format v0/v1 (magic 0 or 1, Produce
v0-v2): checked as Kafka checks it and converted to one record batch v2, which the broker then
validates and appends like any other batch (Kafka 3.x logs hold v2 only: message.format.version
is 3.0 whatever a topic says).

The checks, in Kafka's order (UnifiedLog.analyzeAndValidateRecords, then LogValidator's
convertAndAssignOffsetsNonCompressed / validateMessagesAndAssignOffsetsCompressed), with the
error the partition is answered with:

* an outer message larger than max.message.bytes (12 + its size): MESSAGE_TOO_LARGE
* a torn entry, a message under 14 bytes, a CRC-32 mismatch: CORRUPT_MESSAGE
* messages of different magics: INVALID_RECORD
* a compressed message with others beside it (a compressed set is one wrapper), a wrapper
  with no value or no inner messages, compressed inner messages, a v1 wrapper offset below
  its last inner offset, a zstd wrapper: INVALID_RECORD (codec 5-7:
  UNSUPPORTED_COMPRESSION_TYPE)
* an inner message of another magic than its wrapper: INVALID_RECORD; an inner CRC mismatch:
  CORRUPT_MESSAGE
* a message (or wrapper) whose timestamp type is LogAppendTime, unless the topic is CreateTime
  and the message has a timestamp: INVALID_TIMESTAMP (Kafka's validateTimestamp)
* inflating beyond ``max_uncompressed_bytes``: MESSAGE_TOO_LARGE

The batch: the messages' keys, values and timestamps (magic 0 has none: -1; a v1 wrapper with
LogAppendTime gives its inner messages its own), offsets 0..n-1, CreateTime (a LogAppendTime
topic stamps it at append, as for any batch), no producer id, the wrapper's codec or none.
Offsets the producer wrote are dropped: the broker assigns them.  Pure and thread-safe.
"""

from __future__ import annotations

import zlib

from pybroker.errors import ErrorCode
from pybroker.wire.legacy_records import (
    LegacyMessage,
    entry_magics,
    inner_messages,
    iter_entries,
    parse_message,
)
from pybroker.wire.records import (
    COMPRESSION_NONE,
    CREATE_TIME,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    InvalidRecordError,
    build_batch,
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


def _crc_error(m: LegacyMessage, msg: memoryview) -> InvalidRecordError:
    return InvalidRecordError(
        ErrorCode.CORRUPT_MESSAGE,
        f"Record is corrupt (stored crc = {m.crc}, computed crc = {zlib.crc32(msg[4:])})",
    )


def up_convert(
    buf: bytes | bytearray | memoryview,
    *,
    max_message_bytes: int,
    max_uncompressed_bytes: int,
    create_time: bool,
) -> bytes:
    """One v2 batch holding the records of v0/v1 message set ``buf``; raises
    InvalidRecordError with Kafka's code (see the module docstring).  ``create_time``: the
    topic's message.timestamp.type is CreateTime."""
    magics = entry_magics(buf)
    if not magics:
        raise InvalidRecordError(ErrorCode.INVALID_RECORD, "Record batch has no batches at all")
    outer: list[LegacyMessage] = []
    for offset, msg in iter_entries(buf):
        size = LOG_OVERHEAD + len(msg)
        if size > max_message_bytes:
            raise InvalidRecordError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"The record batch size in the append is {size} bytes which exceeds the "
                f"maximum configured value of {max_message_bytes}.",
            )
        m = parse_message(offset, msg)
        if not m.valid_crc:
            raise _crc_error(m, msg)
        outer.append(m)
    first = outer[0]
    for m in outer:
        if m.magic != first.magic:
            raise InvalidRecordError(
                ErrorCode.INVALID_RECORD,
                f"Batch magic {m.magic} is not the same as the first batch's magic byte "
                f"{first.magic}",
            )
    codec = COMPRESSION_NONE
    for m in outer:
        if m.compression != COMPRESSION_NONE:
            codec = m.compression
    # (message, the "batch" Kafka checks its timestamp type against)
    records: list[tuple[LegacyMessage, LegacyMessage]]
    wrong_magic: list[str] = []
    if codec == COMPRESSION_NONE:
        records = [(m, m) for m in outer]
    else:
        if len(outer) > 1:
            raise InvalidRecordError(
                ErrorCode.INVALID_RECORD, "Compressed outer record has more than one batch"
            )
        records = []
        for m in inner_messages(first, max_uncompressed_bytes):
            if m.magic != first.magic:
                wrong_magic.append(
                    f"Record {_describe(m)}'s magic does not match outer magic {first.magic}"
                )
                continue
            if not m.valid_crc:
                raise InvalidRecordError(
                    ErrorCode.CORRUPT_MESSAGE, f"Record is corrupt (stored crc = {m.crc})"
                )
            records.append((m, first))
    timestamp_errors = [
        f"Invalid timestamp type in message {_describe(m)}. Producer should not set timestamp "
        "type to LogAppendTime."
        for m, batch in records
        if batch.timestamp_type == LOG_APPEND_TIME and not (create_time and m.timestamp != -1)
    ]
    if timestamp_errors:
        raise InvalidRecordError(ErrorCode.INVALID_TIMESTAMP, timestamp_errors[0])
    if wrong_magic:
        raise InvalidRecordError(ErrorCode.INVALID_RECORD, wrong_magic[0])
    return build_batch(
        [(m.key, m.value, [], m.timestamp) for m, _ in records],
        timestamp=NO_TIMESTAMP,
        compression=codec,
        timestamp_type=CREATE_TIME,
    )
