"""The one record walker (pybroker/wire/record_walker.py): what every reader of records inside a
batch relies on, fed bytes only (no broker)."""

from __future__ import annotations

import pytest
from record_fixture import raw_record

from pybroker.errors import ErrorCode
from pybroker.wire.primitives import DecodeError, uvarint_at, varint_at, write_varint
from pybroker.wire.record_walker import (
    RecordError,
    decode_records,
    fields,
    headers,
    walk,
    walk_batch,
)
from pybroker.wire.records import (
    COMPRESSION_GZIP,
    COMPRESSION_NONE,
    HEADER_SIZE,
    InvalidRecordError,
    build_batch,
    parse_batches,
)


def _payload(n: int, size: int) -> bytes:
    # offsets and sizes crossing the one/two/three-byte varint boundaries
    return b"".join(
        raw_record(i, i * 70, b"k" * (i % 3), bytes([i % 256]) * size, [(b"h", b"v")] * (i % 2))
        for i in range(n)
    )


def test_varints_shared_with_the_protocol_reader():
    for v in (0, 1, -1, 63, -64, 64, 8191, -8192, 8192, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)):
        out = bytearray()
        write_varint(out, v)
        assert varint_at(out, 0, len(out)) == (v, len(out))
    assert uvarint_at(b"\x80\x01", 0, 2) == (128, 2)
    with pytest.raises(DecodeError, match="truncated"):
        uvarint_at(b"\x80\x80", 0, 2)
    with pytest.raises(DecodeError, match="longer than 5"):
        uvarint_at(b"\x80" * 6 + b"\x01", 0, 7, 5)


@pytest.mark.parametrize("size", [0, 50, 100, 8000, 9000])
def test_every_chunking_gives_the_same_walk(size):
    """Records split across chunk boundaries anywhere are read alike (the streaming walk
    holds at most one record plus one chunk)."""
    n = 140 if size < 8000 else 3
    data = _payload(n, size)
    seen_whole: list = []
    whole = walk((data,), n, max_record_bytes=1 << 20, visit=lambda *a: seen_whole.append(a[1:4]))
    assert whole == (n, (n - 1) * 70, False)
    assert [s[:2] for s in seen_whole] == [(i, i) for i in range(n)]
    for step in (1, 2, 3, 5, 7, 64, 1000):
        chunks = [data[i : i + step] for i in range(0, len(data), step)]
        seen: list = []
        got = walk(chunks, n, max_record_bytes=1 << 20, visit=lambda *a, s=seen: s.append(a[1:4]))
        assert got == whole and seen == seen_whole, step


def test_fields_and_headers_of_visited_records():
    data = raw_record(0, 5, None, b"v", [(b"a", None), (b"b", b"2")]) + raw_record(1, 6, b"k", None)
    got = []

    def visit(buf, i, off, ts, klen, at, end):
        f = fields(buf, at)
        got.append((i, off, ts, klen, f.key(buf), f.value(buf), headers(buf, f.headers_pos)))

    walk([data], 2, max_record_bytes=100, visit=visit)
    assert got == [
        (0, 0, 5, -1, None, b"v", [(b"a", None), (b"b", b"2")]),
        (1, 1, 6, 1, b"k", None, []),
    ]


def test_visit_ends_the_walk_early():
    data = _payload(10, 10)
    got = walk([data], 10, max_record_bytes=100, visit=lambda b, i, *a: i == 3)
    assert got.records == 4 and got.stopped


@pytest.mark.parametrize(
    "data, count, why",
    [
        (raw_record(0, 0, None, b"x") + b"\x00", 1, "bytes after"),
        (raw_record(0, 0, None, b"x"), 2, "2 records declared, 1 found"),
        (raw_record(1, 0, None, b"x"), 1, "offset delta 1"),
        (raw_record(0, 0, None, b"x")[:-1], 1, "truncated"),
        (b"\x0a" + b"\x00" * 5, 1, "record length 5"),
        (raw_record(0, 0, b"k", b"x").replace(b"\x02k", b"\x03k"), 1, "key length -2"),
        (b"\x80\x80\x80\x80\x80\x01", 1, "longer than 5"),
    ],
)
def test_malformed_records_are_invalidraw_record(data, count, why):
    with pytest.raises(RecordError, match=why) as e:
        walk([data], count, max_record_bytes=1 << 20)
    assert e.value.code == ErrorCode.INVALID_RECORD


def test_record_above_the_limit_is_message_too_large():
    with pytest.raises(InvalidRecordError) as e:
        walk([raw_record(0, 0, None, b"x" * 100)], 1, max_record_bytes=50)
    assert e.value.code == ErrorCode.MESSAGE_TOO_LARGE


def test_gaps_only_ascending_within_the_last_offset_delta():
    data = (
        raw_record(0, 0, b"a", b"1") + raw_record(4, 0, b"b", b"2") + raw_record(9, 0, b"c", b"3")
    )
    assert walk([data], 3, max_record_bytes=99, gaps_up_to=9).records == 3
    with pytest.raises(RecordError):
        walk([data], 3, max_record_bytes=99)  # a produced batch: 0, 1, 2 only
    with pytest.raises(RecordError):
        walk([data], 3, max_record_bytes=99, gaps_up_to=8)


@pytest.mark.parametrize("codec", [COMPRESSION_NONE, COMPRESSION_GZIP])
def test_walk_batch_and_decode_records_agree(codec):
    recs = [(b"k%d" % i, b"v" * i, [("h", b"x")]) for i in range(200)]
    batch = build_batch(recs, compression=codec, timestamp=1000)
    h = parse_batches(batch)[0]
    assert walk_batch(batch, h, max_record_bytes=1 << 20, max_uncompressed_bytes=1 << 20) == (
        200,
        0,
        False,
    )
    decoded = decode_records(batch)
    assert [(r.offset, r.key, r.value, r.headers) for r in decoded] == [
        (i, k, v, hs) for i, (k, v, hs) in enumerate(recs)
    ]
    keys = []  # an uncompressed batch is walked in place (a memoryview): fields are copies
    walk_batch(
        bytearray(batch),
        h,
        max_record_bytes=1 << 20,
        max_uncompressed_bytes=1 << 20,
        visit=lambda buf, *a: keys.append(fields(buf, a[4]).key(buf)),
    )
    assert keys == [k for k, _, _ in recs] and all(type(k) is bytes for k in keys)
    assert len(batch) > HEADER_SIZE
