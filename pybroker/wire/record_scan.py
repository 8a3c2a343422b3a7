"""The log cleaner's positions-only scans of the records inside a v2 batch (the record layout
pybroker/wire/record_walker.py documents): a record is where it is in the batch's records
section, no object is made for it but its key, and :func:`map_records` (the cleaner's pass 1)
does its work inline, with no call per record (the walker's ``visit`` costs one).  They check
what the clean relies on and leave the rest of the strict checks to the walker, which every
batch passed at append; anything else is InvalidRecordError(CORRUPT_MESSAGE).  The offset
map's key and value: :func:`key_id`, ``offset << 32 | position``.  Details: docs/internals.md
("pybroker/wire/record_scan.py").
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any, NamedTuple

from pybroker.errors import ErrorCode
from pybroker.wire.primitives import DecodeError, varint_at
from pybroker.wire.records import InvalidRecordError

SHORT_KEY = 16  # keys shorter than this are their own offset-map key; longer: their MD5
POSITION_BITS = 32  # map value = offset << 32 | position of the record in its section
POSITION_MASK = (1 << POSITION_BITS) - 1
_md5 = hashlib.md5


def key_id(key: bytes) -> bytes:
    """The offset map's key for a record key (see the module docstring)."""
    return key if len(key) < SHORT_KEY else _md5(key, usedforsecurity=False).digest()


def _corrupt(why: str) -> InvalidRecordError:
    return InvalidRecordError(ErrorCode.CORRUPT_MESSAGE, why)


def scan_varint(buf: Any, pos: int, max_bytes: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it; CORRUPT_MESSAGE when malformed."""
    try:
        return varint_at(buf, pos, len(buf), max_bytes)
    except DecodeError as e:
        raise _corrupt(f"record field at {pos}: {e}") from None


def map_records(
    buf: Any, pos: int, end: int, base_offset: int, count: int, last_delta: int, entries: dict
) -> None:
    """Pass 1 of a clean over one batch's records section ``buf[pos:end]``: for every record
    with a key, ``entries[key_id(key)] = offset << 32 | position`` (position relative to
    ``pos``), later records of a key replacing earlier ones.  The hot loop of the cleaner:
    one- and two-byte varints inline, nothing made per record but the key."""
    if end - pos > POSITION_MASK:
        raise _corrupt("records section over 4 GiB")
    packed = (base_offset << POSITION_BITS) - pos  # + (delta << 32) + position in buf
    gaps = count != last_delta + 1
    prev = -1
    md5 = _md5
    try:
        for i in range(count):
            b = buf[pos]
            if b < 0x80:
                q = pos + 1 + ((b >> 1) ^ -(b & 1))  # (the record's end)
                p = pos + 2  # timestampDelta (after the attributes)
            else:
                b2 = buf[pos + 1]
                if b2 < 0x80:
                    z = (b & 0x7F) | (b2 << 7)
                    q = pos + 2 + ((z >> 1) ^ -(z & 1))
                    p = pos + 3
                else:
                    n, p = scan_varint(buf, pos, 5)
                    q = p + n
                    p += 1
            while buf[p] > 0x7F:  # timestampDelta: skipped (bounded by the checks below)
                p += 1
            b = buf[p + 1]  # offsetDelta
            if b < 0x80:
                off = (b >> 1) ^ -(b & 1)
                p += 2
            else:
                b2 = buf[p + 2]
                if b2 < 0x80:
                    z = (b & 0x7F) | (b2 << 7)
                    off = (z >> 1) ^ -(z & 1)
                    p += 3
                else:
                    off, p = scan_varint(buf, p + 1, 5)
            if (off <= prev or off > last_delta) if gaps else off != i:
                raise _corrupt(f"record {i} has offset delta {off}")
            prev = off
            b = buf[p]  # keyLength
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                b2 = buf[p + 1]
                if b2 < 0x80:
                    z = (b & 0x7F) | (b2 << 7)
                    klen = (z >> 1) ^ -(z & 1)
                    p += 2
                else:
                    klen, p = scan_varint(buf, p, 5)
            if klen >= 0:
                k = p + klen
                if k >= q:  # (the value length follows the key inside the record)
                    raise _corrupt(f"record {i}: key past the record's end")
                if klen < SHORT_KEY:
                    entries[buf[p:k]] = packed + (off << POSITION_BITS) + pos
                else:
                    entries[md5(buf[p:k], usedforsecurity=False).digest()] = (
                        packed + (off << POSITION_BITS) + pos
                    )
            elif klen != -1 or p >= q:
                raise _corrupt(f"record {i}: key length {klen}")
            pos = q
    except IndexError:
        raise _corrupt("record truncated") from None
    if pos != end:
        raise _corrupt(f"{count} records end at {pos}, the records section at {end}")


class ScannedRecord(NamedTuple):
    offset_delta: int
    position: int  # of the record (its length field) in the scanned buffer
    end: int
    timestamp_delta: int
    key: bytes | None
    tombstone: bool


def record_at(buf: Any, pos: int) -> tuple[int, int, int, bytes | None, bool]:
    """The record at ``pos``: (end, timestamp delta, offset delta, key, tombstone).  (One-
    and two-byte length and offset delta, one-byte timestamp delta: inline.)"""
    b = buf[pos]
    if b < 0x80:
        n = (b >> 1) ^ -(b & 1)
        p = pos + 2
    elif buf[pos + 1] < 0x80:
        z = (b & 0x7F) | (buf[pos + 1] << 7)
        n = (z >> 1) ^ -(z & 1)
        p = pos + 3
    else:
        n, p = scan_varint(buf, pos, 5)
        p += 1
    end = p - 1 + n
    b = buf[p]
    if b < 0x80:
        ts = (b >> 1) ^ -(b & 1)
        p += 1
    else:
        ts, p = scan_varint(buf, p, 10)
    b = buf[p]
    if b < 0x80:
        off = (b >> 1) ^ -(b & 1)
        p += 1
    elif buf[p + 1] < 0x80:
        z = (b & 0x7F) | (buf[p + 1] << 7)
        off = (z >> 1) ^ -(z & 1)
        p += 2
    else:
        off, p = scan_varint(buf, p, 5)
    b = buf[p]
    if b < 0x80:
        klen = (b >> 1) ^ -(b & 1)
        p += 1
    else:
        klen, p = scan_varint(buf, p, 5)
    key = None
    if klen >= 0:
        key = buf[p : p + klen]
        p += klen
    elif klen != -1:
        raise _corrupt(f"key length {klen}")
    if n < 6 or p >= end:
        raise _corrupt(f"record at {pos} overruns its length")
    # valueLength: -1 (a tombstone) is the one byte 0x01
    return end, ts, off, key, buf[p] == 1


def scan_records(
    buf: Any, pos: int, end: int, count: int, last_delta: int
) -> Iterator[ScannedRecord]:
    """Every record of the records section ``buf[pos:end]`` (the cleaner's general path:
    batches it cannot filter from the offset map's positions alone)."""
    prev = -1
    try:
        for i in range(count):
            rend, ts, off, key, tombstone = record_at(buf, pos)
            if off <= prev or off > last_delta:
                raise _corrupt(f"record {i} has offset delta {off}")
            prev = off
            yield ScannedRecord(off, pos, rend, ts, key, tombstone)
            pos = rend
    except IndexError:
        raise _corrupt("record truncated") from None
    if pos != end:
        raise _corrupt(f"{count} records end at {pos}, the records section at {end}")
