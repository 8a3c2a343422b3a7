"""log/validator.py as pure functions (Kafka's LogValidator): bytes and a ValidationConfig in,
validated batches or Kafka's error out; no broker."""

from __future__ import annotations

import pytest

from pybroker.errors import ErrorCode
from pybroker.log.validator import (
    RecordValidationError,
    ValidationConfig,
    analyze_records,
    check_batch_size,
    recompress,
    validate_records,
)
from pybroker.wire.compression import DecompressedSizeError
from pybroker.wire.record_walker import decode_records
from pybroker.wire.records import (
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_ZSTD,
    LOG_APPEND_TIME,
    InvalidRecordError,
    build_batch,
    parse_batches,
)

NOW = 1_700_000_000_000
CONFIG = ValidationConfig("t-0", max_message_bytes=1 << 20, max_uncompressed_bytes=1 << 24)


def _validated(batch: bytes, config: ValidationConfig = CONFIG, **kw):
    buf, batches = analyze_records(batch)
    return buf, validate_records(buf, batches, config, NOW, **kw)


def test_create_time_batch_gets_its_records_largest_timestamp():
    batch = bytearray(build_batch([(b"k", b"v", [], NOW - 5), (b"k", b"v", [], NOW - 9)]))
    batch[35:43] = (0).to_bytes(8, "big")  # a producer that left maxTimestamp unset
    from crc32c import crc32c

    batch[17:21] = crc32c(bytes(batch[21:])).to_bytes(4, "big")
    buf, (h,) = _validated(bytes(batch))
    assert h.max_timestamp == NOW - 5
    assert parse_batches(buf)[0].max_timestamp == NOW - 5  # in the buffer, CRC recomputed


def test_keyless_records_on_a_compacted_topic():
    cfg = ValidationConfig("t-3", 1 << 20, 1 << 24, compacted=True)
    batch = build_batch([(b"k", b"v", []), (None, b"v", []), (None, None, [])], timestamp=NOW)
    with pytest.raises(RecordValidationError) as e:
        _validated(batch, cfg)
    assert e.value.code == ErrorCode.INVALID_RECORD
    assert [i for i, _ in e.value.record_errors] == [1, 2]
    assert "without key in topic partition t-3" in e.value.record_errors[0][1]
    _validated(build_batch([(b"k", None, [])], timestamp=NOW), cfg)  # tombstones have keys


def test_timestamp_bounds_and_producer_log_append_time():
    cfg = ValidationConfig(
        "t-0", 1 << 20, 1 << 24, timestamp_before_max_ms=1000, timestamp_after_max_ms=10
    )
    ok = build_batch([(b"k", b"v", [], NOW - 1000), (b"k", b"v", [], NOW + 10)])
    _validated(ok, cfg)
    bad = build_batch([(b"k", b"v", [], NOW - 1001), (b"k", b"v", [], NOW), (b"k", b"", [], -1)])
    with pytest.raises(RecordValidationError) as e:
        _validated(bad, cfg)
    assert e.value.code == ErrorCode.INVALID_TIMESTAMP
    assert [i for i, _ in e.value.record_errors] == [0]
    lat = build_batch([(b"k", b"v", [])], timestamp=NOW, timestamp_type=LOG_APPEND_TIME)
    with pytest.raises(RecordValidationError) as e:
        _validated(lat)
    assert e.value.code == ErrorCode.INVALID_TIMESTAMP
    assert "Producer should not set timestamp type" in e.value.record_errors[0][1]


def test_timestamp_errors_come_before_key_errors():
    cfg = ValidationConfig("t-0", 1 << 20, 1 << 24, compacted=True, timestamp_before_max_ms=1)
    batch = build_batch([(None, b"v", [], NOW), (b"k", b"v", [], NOW - 5)])
    with pytest.raises(RecordValidationError) as e:
        _validated(batch, cfg)
    assert e.value.code == ErrorCode.INVALID_TIMESTAMP and e.value.record_errors[0][0] == 1


def test_sizes_and_inflation_budget():
    batch = build_batch([(b"k", b"x" * 5000, [])] * 40, compression=COMPRESSION_LZ4)
    buf, batches = analyze_records(batch)
    with pytest.raises(InvalidRecordError) as e:
        check_batch_size(batches[0], ValidationConfig("t-0", 100, 1 << 24))
    assert e.value.code == ErrorCode.MESSAGE_TOO_LARGE
    with pytest.raises(DecompressedSizeError):  # a lower budget for a first try on the loop
        validate_records(buf, batches, CONFIG, NOW, max_uncompressed_bytes=64 * 1024)
    validate_records(buf, batches, CONFIG, NOW)
    with pytest.raises(InvalidRecordError) as e:
        validate_records(buf, batches, ValidationConfig("t-0", 4000, 1 << 24), NOW)
    assert e.value.code == ErrorCode.MESSAGE_TOO_LARGE  # one record above max.message.bytes
    with pytest.raises(InvalidRecordError) as e:
        analyze_records(b"")
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE


def test_recompress_keeps_records_and_producer_fields():
    batch = build_batch(
        [(b"k%d" % i, b"v" * i, []) for i in range(30)],
        timestamp=NOW,
        producer_id=7,
        producer_epoch=2,
        base_sequence=40,
    )
    buf, batches = analyze_records(batch)
    out, rebuilt = recompress(buf, batches, COMPRESSION_ZSTD)
    (h,) = rebuilt
    assert h.compression == COMPRESSION_ZSTD
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 2, 40)
    assert [r.key for r in decode_records(out)] == [r.key for r in decode_records(batch)]
    same, again = recompress(buf, batches, COMPRESSION_NONE)
    assert bytes(same) == batch and again == batches
