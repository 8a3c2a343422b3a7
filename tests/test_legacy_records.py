"""Message format v0/v1 (pybroker/wire/legacy_records.py) and its conversions: build and parse
round trips for every magic and codec, kafka-python's own legacy record code as an independent
reader and writer, Kafka's broken LZ4 header checksum of magic 0, corrupt input refused with
Kafka's codes, up-conversion of produced message sets (pybroker/log/legacy_validator.py) and
down-conversion of stored batches for Fetch v0-3 (sizes, control batches, zstd, headers)."""

from __future__ import annotations

import struct
import zlib

import lz4.frame
import pytest

from pybroker.errors import ErrorCode
from pybroker.log.legacy_validator import up_convert
from pybroker.wire.legacy_records import (
    LegacyRecord,
    build_message_set,
    convert_batch,
    down_convert,
    entry_magics,
    inner_messages,
    parse_message_set,
    xxh32,
)
from pybroker.wire.record_walker import decode_records
from pybroker.wire.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    InvalidRecordError,
    build_batch,
    parse_batches,
    unpack_header,
)

CODECS = [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4]
RECS = [
    LegacyRecord(10, 1_700_000_000_000, b"k1", b"v1"),
    LegacyRecord(11, 1_700_000_000_005, None, b"v2"),
    LegacyRecord(12, 1_700_000_000_003, b"k3", None),
    LegacyRecord(13, 1_700_000_000_001, b"", b""),
]


def _read(message_set: bytes) -> list[tuple[int, int, bytes | None, bytes | None]]:
    out = []
    for m in parse_message_set(message_set):
        inner = [m] if m.compression == COMPRESSION_NONE else inner_messages(m, 1 << 20)
        out += [(i.offset, i.timestamp, i.key, i.value) for i in inner]
    return out


def _code(fn, *args, **kw) -> int:
    with pytest.raises(InvalidRecordError) as ei:
        fn(*args, **kw)
    return ei.value.code


# -- xxh32 and LZ4 framing -------------------------------------------------------------------


def test_xxh32_known_values_and_lz4_content_checksums():
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"abc") == 0x32D153FF
    assert xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F
    for n in (0, 1, 3, 4, 15, 16, 17, 31, 32, 33, 100, 1000):
        data = bytes(range(256)) * 4
        frame = lz4.frame.compress(data[:n], content_checksum=True)
        assert struct.unpack("<I", frame[-4:])[0] == xxh32(data[:n]), n


def test_magic0_lz4_wrapper_has_kafkas_broken_header_checksum():
    for magic in (0, 1):
        ms = build_message_set(RECS, magic=magic, compression=COMPRESSION_LZ4)
        (wrapper,) = parse_message_set(ms)
        frame = wrapper.value
        hc = frame[6]
        if magic == 0:  # over magic number + descriptor, as Kafka's magic-0 writer
            assert hc == (xxh32(frame[:6]) >> 8) & 0xFF
            with pytest.raises(RuntimeError):
                lz4.frame.decompress(frame)  # a standard reader refuses it
        else:
            assert hc == (xxh32(frame[4:6]) >> 8) & 0xFF
            lz4.frame.decompress(frame)
        assert _read(ms) == [(r.offset, r.timestamp if magic else -1, r.key, r.value) for r in RECS]


def test_magic0_lz4_reads_any_header_checksum_magic1_only_the_right_one():
    for magic, accepted in ((0, True), (1, False)):
        ms = bytearray(build_message_set(RECS, magic=magic, compression=COMPRESSION_LZ4))
        hc_at = 12 + (14 if magic else 6) + 4 + 4 + 6  # entry, header, key len, value len, 6
        ms[hc_at] ^= 0x5A
        crc_end = len(ms)
        struct.pack_into(">I", ms, 12, zlib.crc32(ms[16:crc_end]))
        if accepted:
            assert len(_read(bytes(ms))) == len(RECS)
        else:
            assert _code(_read, bytes(ms)) == ErrorCode.CORRUPT_MESSAGE


# -- round trips -----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("magic", [0, 1])
def test_build_parse_round_trip(magic, codec):
    ms = build_message_set(RECS, magic=magic, compression=codec)
    assert entry_magics(ms) == [magic] * (len(RECS) if codec == COMPRESSION_NONE else 1)
    want = [(r.offset, r.timestamp if magic else -1, r.key, r.value) for r in RECS]
    assert _read(ms) == want
    if codec != COMPRESSION_NONE:
        (wrapper,) = parse_message_set(ms)
        assert wrapper.offset == RECS[-1].offset  # the wrapper carries the last offset
        assert wrapper.key is None
        if magic == 1:
            assert wrapper.timestamp == max(r.timestamp for r in RECS)


def test_log_append_time_v1_stamps_every_message():
    for codec in CODECS:
        ms = build_message_set(
            RECS, magic=1, compression=codec, timestamp_type=1, log_append_time=42
        )
        assert {ts for _, ts, _, _ in _read(ms)} == {42}
        assert all(m.timestamp_type == 1 for m in parse_message_set(ms))


def test_negative_timestamps_are_written_as_none():
    ms = build_message_set([LegacyRecord(0, -5, None, b"x")], magic=1)
    assert _read(ms) == [(0, -1, None, b"x")]


# -- kafka-python's legacy record code as an independent implementation --------------------


def _kp():
    return pytest.importorskip("kafka.record.legacy_records")


def _kp_codecs(magic):
    # kafka-python's magic-0 LZ4 needs the xxhash package (not installed here)
    return [c for c in CODECS if not (magic == 0 and c == COMPRESSION_LZ4)]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("magic", [0, 1])
def test_kafka_python_reads_what_we_build(magic):
    lr = _kp()
    for codec in _kp_codecs(magic):
        ms = build_message_set(RECS, magic=magic, compression=codec)
        got = []
        pos = 0
        while pos < len(ms):
            size = struct.unpack_from(">i", ms, pos + 8)[0]
            batch = lr.LegacyRecordBatch(memoryview(ms[pos : pos + 12 + size]), magic)
            assert batch.validate_crc()
            got += [(r.offset, r.timestamp, r.key, r.value) for r in batch]
            pos += 12 + size
        want = [(r.offset, r.timestamp if magic else None, r.key, r.value) for r in RECS]
        assert got == want, codec


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("magic", [0, 1])
def test_we_read_what_kafka_python_builds(magic):
    lr = _kp()
    for codec in _kp_codecs(magic):
        builder = lr.LegacyRecordBatchBuilder(magic, codec, 1 << 20)
        for i, r in enumerate(RECS):  # a producer writes offsets 0..n-1 (relative)
            builder.append(i, r.timestamp, r.key, r.value)
        ms = bytes(builder.build())
        messages = parse_message_set(ms)
        if codec != COMPRESSION_NONE:
            assert messages[0].offset == 0  # kafka-python leaves the wrapper offset 0
        want = [(i, r.timestamp if magic else -1, r.key, r.value) for i, r in enumerate(RECS)]
        assert _read(ms) == want, codec
        batch = up_convert(ms, max_message_bytes=1 << 20, max_uncompressed_bytes=1 << 20,
                           create_time=True)  # fmt: skip
        (h,) = parse_batches(batch)
        assert h.compression == codec and h.records_count == len(RECS)
        assert [(r.offset, r.timestamp, r.key, r.value) for r in decode_records(batch)] == want


# -- corrupt input ---------------------------------------------------------------------------


def _reseal(ms: bytearray, at: int = 0) -> None:
    size = struct.unpack_from(">i", ms, at + 8)[0]
    struct.pack_into(">I", ms, at + 12, zlib.crc32(ms[at + 16 : at + 12 + size]))


def test_corrupt_crc_is_corrupt_message():
    for magic in (0, 1):
        for codec in CODECS:
            ms = bytearray(build_message_set(RECS, magic=magic, compression=codec))
            ms[-1] ^= 1
            assert _code(parse_message_set, bytes(ms)) == ErrorCode.CORRUPT_MESSAGE
            assert _code(_convert, bytes(ms)) == ErrorCode.CORRUPT_MESSAGE


def test_torn_and_short_messages_are_corrupt():
    ms = build_message_set(RECS, magic=1)
    assert _code(parse_message_set, ms[:-3]) == ErrorCode.CORRUPT_MESSAGE
    assert _code(parse_message_set, ms + b"\x00" * 5) == ErrorCode.CORRUPT_MESSAGE
    short = bytearray(ms)
    struct.pack_into(">i", short, 8, 13)  # below the 14-byte minimum
    assert _code(parse_message_set, bytes(short)) == ErrorCode.CORRUPT_MESSAGE
    # a key length running past the message, CRC intact
    bad = bytearray(build_message_set([LegacyRecord(0, 1, b"k", b"v")], magic=0))
    struct.pack_into(">i", bad, 18, 500)
    _reseal(bad)
    assert _code(parse_message_set, bytes(bad)) == ErrorCode.CORRUPT_MESSAGE
    bad = bytearray(build_message_set([LegacyRecord(0, 1, b"k", b"v")], magic=0))
    bad[16] = 3  # unknown magic
    _reseal(bad)
    assert _code(parse_message_set, bytes(bad)) == ErrorCode.CORRUPT_MESSAGE


def _wrapper(magic: int, codec: int, inner: bytes, offset: int = 0, attributes: int = 0) -> bytes:
    from pybroker.wire.legacy_records import _entry, _message, compress_legacy

    value = compress_legacy(codec, inner, magic) if codec != COMPRESSION_ZSTD else b"x" * 20
    return _entry(offset, _message(magic, codec | attributes, 5, None, value))


def _convert(ms: bytes, create_time: bool = True, max_message_bytes: int = 1 << 20) -> bytes:
    return up_convert(
        ms,
        max_message_bytes=max_message_bytes,
        max_uncompressed_bytes=1 << 20,
        create_time=create_time,
    )


def test_wrapper_errors_are_kafkas():
    inner_v1 = build_message_set([LegacyRecord(0, 7, b"a", b"b"), LegacyRecord(1, 8, None, b"c")],
                                 magic=1)  # fmt: skip
    assert _convert(_wrapper(1, COMPRESSION_GZIP, inner_v1, offset=0))  # offset 0: base 0
    # a v1 wrapper offset below its last inner offset (and not 0)
    bad = _wrapper(
        1,
        COMPRESSION_GZIP,
        build_message_set(
            [LegacyRecord(0, 7, b"a", b"b"), LegacyRecord(5, 8, None, b"c")], magic=1
        ),
        offset=3,
    )
    assert _code(_convert, bad) == ErrorCode.INVALID_RECORD
    # a compressed inner message
    nested = _wrapper(1, COMPRESSION_GZIP, _wrapper(1, COMPRESSION_GZIP, inner_v1))
    assert _code(_convert, nested) == ErrorCode.INVALID_RECORD
    # no inner messages; a null value; zstd; codec 5
    assert _code(_convert, _wrapper(1, COMPRESSION_GZIP, b"")) == ErrorCode.INVALID_RECORD
    from pybroker.wire.legacy_records import _entry, _message

    null_value = _entry(0, _message(1, COMPRESSION_GZIP, 5, None, None))
    assert _code(_convert, null_value) == ErrorCode.INVALID_RECORD
    assert _code(_convert, _wrapper(1, COMPRESSION_ZSTD, b"")) == ErrorCode.INVALID_RECORD
    codec5 = _entry(0, _message(1, 5, 5, None, b"xxxx"))
    assert _code(_convert, codec5) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    # two wrappers, or a wrapper beside an uncompressed message
    two = _wrapper(1, COMPRESSION_GZIP, inner_v1) * 2
    assert _code(_convert, two) == ErrorCode.INVALID_RECORD
    mixed = build_message_set([LegacyRecord(0, 1, None, b"x")], magic=1) + _wrapper(
        1, COMPRESSION_GZIP, inner_v1
    )
    assert _code(_convert, mixed) == ErrorCode.INVALID_RECORD
    # inner magic other than the wrapper's; an inner CRC mismatch
    inner_v0 = build_message_set([LegacyRecord(0, 7, b"a", b"b")], magic=0)
    assert _code(_convert, _wrapper(1, COMPRESSION_GZIP, inner_v0)) == ErrorCode.INVALID_RECORD
    broken = bytearray(inner_v1)
    broken[-1] ^= 1
    assert (
        _code(_convert, _wrapper(1, COMPRESSION_GZIP, bytes(broken))) == ErrorCode.CORRUPT_MESSAGE
    )
    # inflating past the limit
    big = build_message_set([LegacyRecord(0, 1, None, b"z" * 300_000)], magic=1)
    with pytest.raises(InvalidRecordError) as ei:
        up_convert(
            _wrapper(1, COMPRESSION_GZIP, big),
            max_message_bytes=1 << 20,
            max_uncompressed_bytes=100_000,
            create_time=True,
        )
    assert ei.value.code == ErrorCode.MESSAGE_TOO_LARGE


def test_up_convert_checks_magics_and_sizes():
    v0 = build_message_set([LegacyRecord(0, 1, None, b"x")], magic=0)
    v1 = build_message_set([LegacyRecord(0, 1, None, b"x")], magic=1)
    assert _code(_convert, v0 + v1) == ErrorCode.INVALID_RECORD
    assert _code(_convert, v1, max_message_bytes=len(v1) - 1) == ErrorCode.MESSAGE_TOO_LARGE
    assert _convert(v1, max_message_bytes=len(v1))


def test_producer_log_append_time_is_refused_as_kafka_refuses_it():
    lat = build_message_set([LegacyRecord(0, 5, None, b"x")], magic=1, timestamp_type=1,
                            log_append_time=5)  # fmt: skip
    assert _code(_convert, lat, create_time=False) == ErrorCode.INVALID_TIMESTAMP
    assert _convert(lat, create_time=True)  # a CreateTime topic checks only its bounds
    no_ts = build_message_set([LegacyRecord(0, -1, None, b"x")], magic=1, timestamp_type=1,
                              log_append_time=-1)  # fmt: skip
    assert _code(_convert, no_ts, create_time=True) == ErrorCode.INVALID_TIMESTAMP
    wrapped = build_message_set(RECS, magic=1, compression=COMPRESSION_GZIP, timestamp_type=1,
                                log_append_time=9)  # fmt: skip
    assert _code(_convert, wrapped, create_time=False) == ErrorCode.INVALID_TIMESTAMP


# -- up-conversion ---------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("magic", [0, 1])
def test_up_convert_keeps_records_and_codec(magic, codec):
    ms = build_message_set(RECS, magic=magic, compression=codec)
    batch = _convert(ms)
    (h,) = parse_batches(batch)
    assert h.compression == codec
    assert h.base_offset == 0 and h.records_count == len(RECS)
    assert h.producer_id == -1 and h.timestamp_type == 0
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decode_records(batch)]
    assert got == [
        (i, r.timestamp if magic else -1, r.key, r.value, []) for i, r in enumerate(RECS)
    ]
    assert h.max_timestamp == (max(r.timestamp for r in RECS) if magic else -1)


# -- down-conversion -------------------------------------------------------------------------


def _stored(records, base_offset=0, **kw) -> bytes:
    return build_batch(records, base_offset=base_offset, **kw)


def _messages(data: bytes) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Whole messages of a down-converted answer, as an old client reads it (a trailing
    partial message is skipped)."""
    out = []
    pos = 0
    while len(data) - pos >= 12:
        offset, size = struct.unpack_from(">qi", data, pos)
        if pos + 12 + size > len(data):
            break
        out += _read(data[pos : pos + 12 + size])
        pos += 12 + size
    return out


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("magic", [0, 1])
def test_down_convert_round_trip(magic, codec):
    a = _stored([(b"k", b"v", [("h", b"x")], 1000), (None, b"w", [], 1001)], base_offset=5,
                compression=codec)  # fmt: skip
    b = _stored([(b"k2", None, [], 2000)], base_offset=7, compression=codec)
    out = down_convert(a + b, magic, 5)
    want = [(5, 1000, b"k", b"v"), (6, 1001, None, b"w"), (7, 2000, b"k2", None)]
    if magic == 0:
        want = [(o, -1, k, v) for o, _, k, v in want]
    assert len(out) >= len(a + b)
    got = _messages(out)
    assert got[: len(want)] == want
    assert [m for m in got if m not in want] == []  # headers dropped, nothing invented


def test_down_convert_drops_records_before_the_fetch_offset_of_uncompressed_batches():
    stored = _stored([(None, b"a", []), (None, b"b", []), (None, b"c", [])], base_offset=10)
    assert [o for o, *_ in _messages(down_convert(stored, 1, 11))] == [11, 12]
    gz = _stored([(None, b"a", []), (None, b"b", [])], base_offset=10, compression=1)
    assert [o for o, *_ in _messages(down_convert(gz, 1, 11))] == [10, 11]  # kept, as Kafka


def test_down_convert_size_is_the_stored_size_or_the_first_converted_batch():
    stored = _stored([(None, b"x" * 10, []) for _ in range(50)])
    out = down_convert(stored, 0, 0)
    first = convert_batch(stored, 0, 0)
    assert len(first) > len(stored)  # v0 messages take more room than v2 records
    assert out == first  # the whole first batch, however large
    two = stored + _stored([(None, b"y" * 10, [])], base_offset=50)
    out = down_convert(two, 0, 0)
    assert len(out) == max(len(two), len(first)) and out[: len(first)] == first


def test_down_convert_skips_control_batches_and_pads():
    marker = _stored([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [])], base_offset=0,
                     is_control=True, producer_id=7, producer_epoch=0)  # fmt: skip
    data = _stored([(None, b"v", [])], base_offset=1)
    out = down_convert(marker + data, 1, 0)
    assert _messages(out) == [(1, unpack_header(data).base_timestamp, None, b"v")]
    assert len(out) == len(marker + data)  # the shortfall is an overflow header clients skip
    tail = out[len(convert_batch(data, 1, 0)) :]
    assert struct.unpack_from(">q", tail)[0] == -1
    # only control batches: an overflow header alone; nothing stored: nothing
    assert down_convert(marker, 1, 0) == struct.pack(">qi", -1, 61)
    assert down_convert(b"", 1, 0) == b""


def test_down_convert_of_zstd():
    zstd = _stored([(None, b"z", [])], compression=COMPRESSION_ZSTD)
    plain = _stored([(None, b"p", [])], base_offset=1)
    assert _code(down_convert, zstd + plain, 1, 0) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    # after a converted batch: the answer ends there (padded); the client fetches on and
    # then gets the error
    big = _stored([(None, b"p" * 200_000, [])])
    out = down_convert(big + _stored([(None, b"z", [])], base_offset=1, compression=4), 1, 0)
    assert [o for o, *_ in _messages(out)] == [0]


def test_down_convert_log_append_time():
    stored = _stored([(None, b"a", [], 5), (None, b"b", [], 6)], timestamp_type=1)
    h = unpack_header(stored)
    for codec in CODECS:
        batch = _stored([(None, b"a", [], 5)], timestamp_type=1, compression=codec)
        lat = unpack_header(batch).max_timestamp
        (m,) = parse_message_set(convert_batch(batch, 1, 0))
        assert m.timestamp_type == 1 and m.timestamp == lat
    assert {ts for _, ts, _, _ in _messages(down_convert(stored, 1, 0))} == {h.max_timestamp}


def test_up_convert_of_mutated_message_sets_fails_only_with_kafka_codes():
    """Bytes flipped, lengths changed, entries cut (CRCs recomputed, so the walk goes deep):
    up_convert gives a valid v2 batch or an InvalidRecordError, never another exception."""
    import gzip
    import random

    from pybroker.wire.legacy_records import _entry, _message

    rng = random.Random(1234)
    seeds = [build_message_set(RECS, magic=m, compression=c) for m in (0, 1) for c in CODECS]
    inner = build_message_set(RECS, magic=1)
    seeds.append(_entry(3, _message(1, COMPRESSION_GZIP, 9, None, gzip.compress(inner))))
    outcomes = set()
    for _ in range(3000):
        ms = bytearray(rng.choice(seeds))
        for _mutation in range(rng.randint(1, 3)):
            if not ms:
                break
            how = rng.randrange(4)
            pos = rng.randrange(len(ms))
            if how == 0:
                ms[pos] ^= 1 << rng.randrange(8)
            elif how == 1 and len(ms) > 4:
                struct.pack_into(
                    ">i", ms, min(pos, len(ms) - 4), rng.choice([-2, -1, 0, 1, 13, 14, 1 << 30])
                )
            elif how == 2:
                del ms[pos:]
            else:
                ms[pos:pos] = rng.randbytes(rng.randint(1, 8))
        if rng.random() < 0.8 and len(ms) >= 17:
            size = struct.unpack_from(">i", ms, 8)[0]
            if 14 <= size <= len(ms) - 12:
                struct.pack_into(">I", ms, 12, zlib.crc32(ms[16 : 12 + size]))
        try:
            batch = _convert(bytes(ms))
        except InvalidRecordError as e:
            outcomes.add(ErrorCode(e.code).name)
            continue
        parse_batches(batch)
        decode_records(batch)
        outcomes.add("converted")
    assert {"converted", "CORRUPT_MESSAGE", "INVALID_RECORD"} <= outcomes, outcomes


def test_down_convert_sized_by_kafkas_slice_with_a_partial_batch_at_its_end():
    from pybroker.wire.legacy_records import _overflow

    a = _stored([(None, b"a" * 30, [])])
    b = _stored([(None, b"b" * 30, [])], base_offset=1)
    converted = convert_batch(a, 1, 0) + convert_batch(b, 1, 0)
    for extra in (0, 5, 40, 200):  # Kafka's slice also holds the start of a third batch
        size = max(len(a + b) + extra, len(convert_batch(a, 1, 0)))
        got = down_convert(a + b, 1, 0, stored_size=len(a + b) + extra)
        want = converted[:size]
        if len(want) < size:
            want += _overflow(size - len(want))
        assert got == want, extra


def test_a_wrapper_inflating_to_zeros_fails_at_its_first_inner_message():
    """A gzip bomb in a wrapper: the inner set is parsed as it inflates, so the first (empty)
    inner message ends it, whatever the inflated size would be."""
    import gzip
    import tracemalloc

    from pybroker.wire.legacy_records import _entry, _message

    bomb = _entry(0, _message(1, COMPRESSION_GZIP, 5, None, gzip.compress(bytes(64 << 20), 1)))
    tracemalloc.start()
    try:
        assert _code(_convert, bomb) == ErrorCode.CORRUPT_MESSAGE
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak


def test_converting_an_uncompressed_batch_stops_once_the_answer_is_full():
    stored = _stored([(None, b"x" * 100, []) for _ in range(1000)])
    whole = convert_batch(stored, 1, 0)
    part = convert_batch(stored, 1, 0, 1000)
    assert 1000 <= len(part) < 1200 and whole.startswith(part)
    assert (
        down_convert(stored + _stored([(None, b"y", [])], base_offset=1000), 1, 0)[: len(whole)]
        == whole
    )
