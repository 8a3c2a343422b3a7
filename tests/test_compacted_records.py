"""The cleaner's positions-only scans and batch rebuild (pybroker/log/compacted_records.py),
fed bytes only: they agree with the strict record walker on every well-formed records
section, refuse a malformed one with CORRUPT_MESSAGE (never another exception), and a batch
rebuilt from positions is byte for byte the one rebuilt from decoded records."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from record_fixture import raw_record

from pybroker.errors import ErrorCode
from pybroker.log.compacted_records import read_records, rebuild_batch, rebuild_from_positions
from pybroker.wire.record_scan import POSITION_BITS, key_id, map_records, record_at, scan_records
from pybroker.wire.record_walker import walk
from pybroker.wire.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_ZSTD,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    InvalidRecordError,
    build_batch,
    decompress,
    unpack_header,
)

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

blobs = st.one_of(
    st.none(),
    st.binary(max_size=20),
    st.binary(min_size=60, max_size=200),  # two-byte lengths
)
records_st = st.lists(
    st.tuples(
        st.integers(1, 3),  # offset step (gaps when > 1)
        st.sampled_from([0, 1, -1, 63, 64, -65, 8191, 8192, 2**40, -(2**50)]),  # ts delta
        blobs,  # key
        blobs,  # value
        st.lists(
            st.tuples(st.binary(max_size=4), st.one_of(st.none(), st.binary(max_size=4))),
            max_size=2,
        ),
    ),
    min_size=1,
    max_size=40,
)


def _section(spec, contiguous: bool) -> tuple[bytes, list[tuple], int]:
    """(records section, [(offset delta, position, end, ts, key, tombstone)], last delta)."""
    out = bytearray()
    expected = []
    off = -1
    for step, ts, key, value, hdrs in spec:
        off += 1 if contiguous else step
        rec = raw_record(off, ts, key, value, hdrs)
        expected.append((off, len(out), len(out) + len(rec), ts, key, value is None))
        out += rec
    return bytes(out), expected, off


@SETTINGS
@given(records_st, st.booleans(), st.binary(max_size=7))
def test_scans_agree_with_the_walker(spec, contiguous, prefix):
    payload, expected, last = _section(spec, contiguous)
    walked = walk((payload,), len(spec), max_record_bytes=1 << 20, gaps_up_to=last)
    assert walked.records == len(spec)
    buf = prefix + payload  # a section inside a larger buffer: positions relative to its start
    start, end = len(prefix), len(buf)
    shifted = [(o, p + start, e + start, t, k, tomb) for o, p, e, t, k, tomb in expected]
    assert [tuple(r) for r in scan_records(buf, start, end, len(spec), last)] == shifted
    for o, p, e, t, k, tomb in shifted:
        assert record_at(buf, p) == (e, t, o, k, tomb)
    entries: dict = {}
    map_records(buf, start, end, 1000, len(spec), last, entries)
    want = {}
    for o, p, _, _, k, _ in expected:
        if k is not None:
            want[key_id(k)] = (1000 + o) << POSITION_BITS | p
    assert entries == want


def test_key_ids():
    assert key_id(b"") == b"" and key_id(b"x" * 15) == b"x" * 15
    assert key_id(b"x" * 16) == hashlib.md5(b"x" * 16).digest()


@SETTINGS
@given(records_st, st.data())
def test_malformed_sections_are_corrupt_message(spec, data):
    """Any damage: the scans raise CORRUPT_MESSAGE or read what the strict walker reads."""
    payload, _, last = _section(spec, False)
    damaged = bytearray(payload)
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["byte", "cut", "count"]))
        if kind == "byte" and damaged:
            damaged[data.draw(st.integers(0, len(damaged) - 1))] = data.draw(st.integers(0, 255))
        elif kind == "cut" and damaged:
            del damaged[data.draw(st.integers(0, len(damaged) - 1)) :]
    count = len(spec) + data.draw(st.integers(-1, 1))
    buf = bytes(damaged)
    seen: list[tuple] = []
    try:
        walk(
            (buf,),
            count,
            max_record_bytes=1 << 20,
            gaps_up_to=last,
            visit=lambda _b, _i, off, ts, _k, _f, end: seen.append((off, end, ts)),
        )
        valid = True
    except InvalidRecordError:
        valid = False
    entries: dict = {}
    outcomes = []
    for scan in (
        lambda: map_records(buf, 0, len(buf), 0, count, last, entries),
        lambda: list(scan_records(buf, 0, len(buf), count, last)),
    ):
        try:
            outcomes.append(scan())
        except InvalidRecordError as e:
            assert e.code == ErrorCode.CORRUPT_MESSAGE
            outcomes.append(False)
    if valid:
        scanned = outcomes[1]
        assert outcomes[0] is None and scanned is not False
        assert [(r.offset_delta, r.end, r.timestamp_delta) for r in scanned] == seen
        latest = {
            key_id(r.key): r.offset_delta << POSITION_BITS | r.position
            for r in scanned
            if r.key is not None
        }
        assert entries == latest


@pytest.mark.parametrize("deltas", [[1, 1], [0, 1, 1], [0, 2, 2], [1, 0]])
def test_offset_deltas_of_a_stored_batch_only_go_up(deltas):
    """A stored batch's offset deltas may have gaps but never repeat or go back: the strict
    walker refuses what the cleaner's scans refuse (a repeated delta equal to its record's
    index was let through by the walker and by map_records, found by the property above)."""
    buf = b"".join(raw_record(off, 0, b"k%d" % i, b"v", []) for i, off in enumerate(deltas))
    last = max(deltas)
    with pytest.raises(InvalidRecordError):
        walk((buf,), len(deltas), max_record_bytes=1 << 20, gaps_up_to=last)
    for scan in (
        lambda: map_records(buf, 0, len(buf), 0, len(deltas), last, {}),
        lambda: list(scan_records(buf, 0, len(buf), len(deltas), last)),
    ):
        with pytest.raises(InvalidRecordError) as e:
            scan()
        assert e.value.code == ErrorCode.CORRUPT_MESSAGE


@SETTINGS
@given(
    records_st,
    st.data(),
    st.sampled_from([COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_LZ4, COMPRESSION_ZSTD]),
    st.booleans(),
    st.sampled_from([None, "same", "new"]),
)
def test_rebuild_from_positions_equals_rebuild_batch(spec, data, codec, log_append, horizon):
    recs = [(k, v, [(h.decode("latin-1"), hv) for h, hv in hdrs]) for _, _, k, v, hdrs in spec]
    stamps = [1_700_000_000_000 + ts % 10**6 for _, ts, _, _, _ in spec]
    batch = build_batch(
        [(*r, t) for r, t in zip(recs, stamps, strict=True)],
        base_offset=500,
        compression=codec,
        timestamp_type=LOG_APPEND_TIME if log_append else 0,
    )
    h, records = read_records(batch)
    picks = sorted(set(data.draw(st.lists(st.integers(0, len(records) - 1), min_size=1))))
    kept = [records[i] for i in picks]
    horizon_ms = {None: None, "same": h.base_timestamp, "new": h.base_timestamp + 86_400_000}
    section = decompress(h.compression, batch[HEADER_SIZE:])
    positions = [
        (r.position, r.end, r.timestamp_delta)
        for r in scan_records(section, 0, len(section), h.records_count, h.last_offset_delta)
    ]
    got = rebuild_from_positions(
        h, section, [positions[i] for i in picks], delete_horizon_ms=horizon_ms[horizon]
    )
    want = rebuild_batch(h, kept, delete_horizon_ms=horizon_ms[horizon])
    assert got == want
    assert unpack_header(got).records_count == len(picks)


def test_a_section_past_4_gib_is_refused():
    """(A position must fit the 32 bits a map value keeps for it.)"""
    with pytest.raises(InvalidRecordError):
        map_records(b"", 0, 2**32, 0, 1, 0, {})
