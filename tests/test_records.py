"""wire/records.py: batch header view, validation, and cross-checks against kafka-python."""

from __future__ import annotations

import struct
import types

import cramjam
import kafka.codec
import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from pybroker.errors import ErrorCode
from pybroker.wire import records as R
from pybroker.wire.record_walker import decode_records
from pybroker.wire.records import (
    InvalidRecordError,
    build_batch,
    parse_batches,
    scan_batches,
    set_base_offset,
    set_max_timestamp,
    set_partition_leader_epoch,
)

CODECS = [
    R.COMPRESSION_NONE,
    R.COMPRESSION_GZIP,
    R.COMPRESSION_SNAPPY,
    R.COMPRESSION_LZ4,
    R.COMPRESSION_ZSTD,
]


@pytest.fixture(autouse=True)
def _kafka_python_snappy(monkeypatch):
    """kafka-python wants python-snappy; give it the same raw codec via cramjam."""
    shim = types.SimpleNamespace(
        compress=lambda b: bytes(cramjam.snappy.compress_raw(bytes(b))),
        decompress=lambda b: bytes(cramjam.snappy.decompress_raw(bytes(b))),
    )
    monkeypatch.setattr(kafka.codec, "snappy", shim)


RECS = [
    (b"key-1", b"value-1" * 50, [("h1", b"v1"), ("h2", None)], 1_000),
    (None, b"value-2" * 50, [], 1_005),
    (b"key-3", None, [("\u00e9", b"")], 999),
]


def test_header_fields_and_properties():
    b = build_batch(RECS, base_offset=0, producer_id=7, producer_epoch=3, base_sequence=10)
    (h,) = parse_batches(b)
    assert h.size == len(b) and h.magic == 2 and h.records_count == 3
    assert h.last_offset_delta == 2 and h.base_timestamp == 1_000 and h.max_timestamp == 1_005
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (7, 3, 10, 12)
    assert not h.is_transactional and not h.is_control and h.compression == 0


@pytest.mark.parametrize("codec", CODECS)
def test_ours_read_by_kafka_python(codec):
    b = build_batch(RECS, compression=codec, producer_id=5, producer_epoch=1, base_sequence=0)
    kb = DefaultRecordBatch(b)
    assert kb.validate_crc()
    assert kb.compression_type == codec
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in kb]
    assert got == [(i, r[3], r[0], r[1], r[2]) for i, r in enumerate(RECS)]
    assert (kb.producer_id, kb.producer_epoch, kb.base_sequence) == (5, 1, 0)


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_read_by_us(codec):
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=9,
        producer_epoch=2,
        base_sequence=100,
        batch_size=1 << 20,
    )
    for i, (k, v, hs, ts) in enumerate(RECS):
        builder.append(i, timestamp=ts, key=k, value=v, headers=hs)
    raw = bytes(builder.build())
    (h,) = parse_batches(raw)
    assert h.compression == codec  # kafka-python sends uncompressed only if it doesn't help
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == (9, 2, 100, 3)
    recs = decode_records(raw)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs] == [
        (i, r[3], r[0], r[1], r[2]) for i, r in enumerate(RECS)
    ]


def test_snappy_is_xerial_framed_and_raw_snappy_is_accepted():
    b = build_batch(RECS, compression=R.COMPRESSION_SNAPPY)
    assert b[61:69] == b"\x82SNAPPY\x00"
    # librdkafka style raw snappy
    body = R.decompress(R.COMPRESSION_SNAPPY, b[61:])
    raw = bytes(cramjam.snappy.compress_raw(body))
    b2 = bytearray(b[:61]) + raw
    struct.pack_into(">i", b2, 8, len(b2) - 12)
    struct.pack_into(">I", b2, 17, crc32c(bytes(b2[21:])))
    assert [r.value for r in decode_records(b2)] == [r[1] for r in RECS]


def test_set_base_offset_keeps_crc_and_leader_epoch():
    buf = bytearray(build_batch(RECS) + build_batch(RECS[:1]))
    hs = parse_batches(buf)
    set_base_offset(buf, hs[0].position, 100)
    set_base_offset(buf, hs[1].position, 103)
    set_partition_leader_epoch(buf, hs[1].position, 5)
    h0, h1 = parse_batches(buf)  # CRC still valid
    assert (h0.base_offset, h0.last_offset, h1.base_offset, h1.partition_leader_epoch) == (
        100,
        102,
        103,
        5,
    )
    assert [r.offset for r in decode_records(buf[h1.position :])] == [103]
    assert DefaultRecordBatch(bytes(buf[: h0.size])).base_offset == 100


def test_set_max_timestamp_log_append_time():
    buf = bytearray(build_batch(RECS, compression=R.COMPRESSION_GZIP))
    set_max_timestamp(buf, 0, R.LOG_APPEND_TIME, 42)
    (h,) = parse_batches(buf)
    assert h.timestamp_type == R.LOG_APPEND_TIME and h.max_timestamp == 42
    assert {r.timestamp for r in decode_records(buf)} == {42}
    assert {r.timestamp for r in DefaultRecordBatch(bytes(buf))} == {42}


def _reseal(buf: bytearray, pos: int = 0) -> None:
    struct.pack_into(">I", buf, pos + 17, crc32c(bytes(buf[pos + 21 :])))


def _code(buf) -> ErrorCode:
    with pytest.raises(InvalidRecordError) as ei:
        parse_batches(buf)
    return ei.value.code


def test_validation_errors():
    good = build_batch(RECS)
    assert _code(b"") == ErrorCode.INVALID_RECORD
    assert _code(good + good[:30]) == ErrorCode.CORRUPT_MESSAGE  # trailing partial batch
    assert _code(good[:-1]) == ErrorCode.CORRUPT_MESSAGE  # torn batch
    assert _code(good + b"\x00" * 5) == ErrorCode.CORRUPT_MESSAGE
    flipped = bytearray(good)
    flipped[-1] ^= 1
    assert _code(flipped) == ErrorCode.CORRUPT_MESSAGE  # CRC
    for magic, code in (
        (0, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT),
        (1, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT),
        (3, ErrorCode.CORRUPT_MESSAGE),
    ):
        b = bytearray(good)
        b[16] = magic
        assert _code(b) == code
    short = bytearray(good)
    struct.pack_into(">i", short, 8, 48)
    assert _code(short) == ErrorCode.CORRUPT_MESSAGE
    for codec in (5, 6, 7):
        b = bytearray(good)
        struct.pack_into(">h", b, 21, codec)
        _reseal(b)
        assert _code(b) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    b = bytearray(good)
    struct.pack_into(">i", b, 57, 2)  # count != lastOffsetDelta + 1
    _reseal(b)
    assert _code(b) == ErrorCode.INVALID_RECORD
    b = bytearray(good)
    struct.pack_into(">i", b, 23, -1)
    struct.pack_into(">i", b, 57, 0)
    _reseal(b)
    assert _code(b) == ErrorCode.INVALID_RECORD
    ctrl = build_batch(
        [(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [])],
        is_control=True,
        producer_id=1,
        producer_epoch=0,
        base_sequence=0,
    )
    assert _code(ctrl) == ErrorCode.INVALID_RECORD
    assert parse_batches(ctrl, allow_control=True)[0].is_control
    noseq = build_batch(RECS, producer_id=3, producer_epoch=0, base_sequence=-1)
    assert _code(noseq) == ErrorCode.INVALID_RECORD
    assert len(parse_batches(flipped, verify_crc=False)) == 1


def test_scan_batches_stops_at_first_bad_batch():
    a, b, c = build_batch(RECS), build_batch(RECS[:1]), build_batch(RECS[:2])
    buf = bytearray(a + b + c)
    assert [h.position for h in scan_batches(buf)] == [0, len(a), len(a) + len(b)]
    buf[len(a) + 30] ^= 0xFF
    assert [h.position for h in scan_batches(buf)] == [0]
    assert [h.position for h in scan_batches(a + b + c[:-3])] == [0, len(a)]


def test_sequence_wraps():
    b = build_batch(RECS, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2)
    (h,) = parse_batches(b)
    assert h.last_sequence == 0
    assert DefaultRecordBatch(b).last_sequence == 0


def test_decode_records_rejects_garbage():
    b = bytearray(build_batch(RECS))
    b[61:] = b"\x7f" * (len(b) - 61)
    with pytest.raises(InvalidRecordError):
        decode_records(b)
    gz = bytearray(build_batch(RECS, compression=R.COMPRESSION_GZIP))
    gz[-6] ^= 0xFF  # gzip trailer CRC
    with pytest.raises(InvalidRecordError):
        decode_records(gz)


VALID = build_batch(RECS) + build_batch(RECS[:1], compression=R.COMPRESSION_LZ4)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_parse_random_bytes_only_raises_invalid_record(data):
    try:
        parse_batches(data)
    except InvalidRecordError:
        pass
    list(scan_batches(data))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), max_size=6),
    st.integers(0, len(VALID)),
)
def test_parse_mutated_batches_only_raises_invalid_record(mutations, cut):
    buf = bytearray(VALID)
    for pos, val in mutations:
        buf[pos] = val
    del buf[cut:]
    for verify in (True, False):
        try:
            hs = parse_batches(buf, verify_crc=verify)
        except InvalidRecordError:
            continue
        assert sum(h.size for h in hs) == len(buf)
    list(scan_batches(buf))


@pytest.mark.parametrize(
    "records",
    [
        [(b"k", b"v")],
        [(b"k" * 70, b"v" * 300), (b"tombstone", None), (b"", b"")],
        [(bytes([i]) * i, bytes(200 * i)) for i in range(1, 80)],
    ],
)
@pytest.mark.parametrize("transactional", [False, True])
def test_keyed_batch_is_build_batch_buffers_batch(records, transactional):
    """The coordinator's batch (records.build_keyed_batch) has exactly the bytes
    build_batch_buffer gives the same records, and reads back as them."""
    options = dict(
        producer_id=7 if transactional else -1,
        producer_epoch=3 if transactional else -1,
        base_sequence=0 if transactional else -1,
        is_transactional=transactional,
        partition_leader_epoch=12,
    )
    built = R.build_keyed_batch(records, 1_700_000_000_123, **options)
    reference = R.build_batch_buffer(
        [(k, v, []) for k, v in records], timestamp=1_700_000_000_123, **options
    )
    assert bytes(built) == bytes(reference)
    (batch,) = parse_batches(bytes(built))
    assert batch.is_transactional == transactional
    assert [(r.key, r.value) for r in decode_records(built)] == [(k, v) for k, v in records]
