"""log/index.py: offset and time index files."""

from __future__ import annotations

import struct

import pytest

from pybroker.log.index import CorruptIndexError, OffsetIndex, TimeIndex


def test_offset_index_layout_and_lookup(tmp_path):
    p = tmp_path / "00000000000000000100.index"
    idx = OffsetIndex(p, 100, 1024)
    assert idx.lookup(150) == (100, 0)
    idx.append(110, 4096)
    idx.append(120, 8200)
    idx.append(120, 9000)  # not increasing: ignored
    assert p.read_bytes() == b"" and idx.pending == 2  # in memory until flushed
    idx.flush()
    assert p.read_bytes() == struct.pack(">iiii", 10, 4096, 20, 8200) and idx.pending == 0
    assert idx.lookup(109) == (100, 0)
    assert idx.lookup(110) == (110, 4096)
    assert idx.lookup(119) == (110, 4096)
    assert idx.lookup(10**9) == (120, 8200)
    assert idx.lookup_position(8199) == 4096
    idx.close()
    # reopen: lazily loaded, same answers
    idx = OffsetIndex(p, 100, 1024)
    assert idx.entries == 2 and idx.last_offset == 120 and idx.last_position == 8200
    assert idx.lookup(125) == (120, 8200)
    idx.truncate_to(120)
    assert idx.entries == 1 and p.stat().st_size == 8 and idx.lookup(125) == (110, 4096)
    idx.close()


def test_offset_index_full(tmp_path):
    idx = OffsetIndex(tmp_path / "0.index", 0, 16)
    idx.append(1, 10)
    assert not idx.is_full
    idx.append(2, 20)
    assert idx.is_full
    idx.close()


def test_offset_index_sanity(tmp_path):
    p = tmp_path / "0.index"
    p.write_bytes(struct.pack(">ii", 5, 100) + b"\x00\x01")
    idx = OffsetIndex(p, 0, 1024)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(1000)  # torn entry
    idx.close()
    p.write_bytes(struct.pack(">ii", 5, 100))
    idx = OffsetIndex(p, 0, 1024)
    idx.sanity_check(1000)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(100)  # points at/after the end of the log
    idx.close()
    p.write_bytes(struct.pack(">iiii", 5, 100, 3, 50))
    idx = OffsetIndex(p, 0, 1024)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(1000)  # out of order
    idx.close()


def test_time_index(tmp_path):
    p = tmp_path / "00000000000000000010.timeindex"
    ti = TimeIndex(p, 10, 1024)
    assert ti.lookup(5) == (-1, 10)
    ti.maybe_append(1000, 12)
    ti.maybe_append(1000, 15)  # same timestamp: skipped
    ti.maybe_append(2000, 20)
    ti.flush()
    assert p.read_bytes() == struct.pack(">qiqi", 1000, 2, 2000, 10)
    assert ti.lookup(999) == (-1, 10)
    assert ti.lookup(1500) == (1000, 12)
    assert ti.last_entry == (2000, 20)
    ti.sanity_check(20)
    with pytest.raises(CorruptIndexError):
        ti.sanity_check(19)
    ti.truncate_to(20)
    assert ti.last_entry == (1000, 12)
    ti.close()
    p.write_bytes(b"\x00" * 13)
    ti = TimeIndex(p, 10, 1024)
    with pytest.raises(CorruptIndexError):
        ti.sanity_check(100)
    ti.close()
