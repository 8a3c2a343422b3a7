"""Records inside a v2 batch, as log compaction needs them: keys, tombstones, and batches
rewritten with some records left out (Kafka's MemoryRecords.filterTo).

The scans read positions only (no object per record but its key) and check what the clean
relies on; anything else is InvalidRecordError(CORRUPT_MESSAGE).  The offset map's key
(:func:`key_id`): the key itself when shorter than 16 bytes, else its MD5; a map value packs
``offset << 32 | position``.  A rewritten batch keeps what Kafka's buildRetainedRecordsInto
keeps (base offset, last offset delta, producer fields, leader epoch, codec), so offsets and
producer sequences survive a clean.  Checks, rewrites and delete horizons: docs/internals.md
("pybroker/log/compacted_records.py").
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from crc32c import crc32c

from pybroker.errors import ErrorCode
from pybroker.wire.primitives import DecodeError, varint_at, write_varint
from pybroker.wire.record_walker import fields, walk
from pybroker.wire.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    BatchHeader,
    InvalidRecordError,
    compress,
    decompress,
    unpack_header,
)

DELETE_HORIZON_MASK = 0x40  # batch attribute bit 6 (KIP-534): baseTimestamp is the horizon
_UINT32_MAX = 0xFFFFFFFF


class RawRecord(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    has_value: bool
    tail: bytes  # key length, key, value length, value, headers: as stored


def has_delete_horizon(h: BatchHeader) -> bool:
    return bool(h.attributes & DELETE_HORIZON_MASK)


def read_records(
    batch: bytes, every_64: Callable[[], None] | None = None
) -> tuple[BatchHeader, list[RawRecord]]:
    """The header and the records of one whole v2 batch (decompressed), through the record
    walker (offset deltas may have gaps).  Raises InvalidRecordError(CORRUPT_MESSAGE) on
    malformed data.  ``every_64`` is called every 64 records (the cleaner lets other threads
    run there)."""
    h = unpack_header(batch)
    payload = decompress(h.compression, bytes(batch[HEADER_SIZE : LOG_OVERHEAD + h.batch_length]))
    base_offset = h.base_offset
    base_ts = h.max_timestamp if h.timestamp_type == LOG_APPEND_TIME else h.base_timestamp
    log_append = h.timestamp_type == LOG_APPEND_TIME
    out: list[RawRecord] = []
    append = out.append

    def collect(buf: bytes, i: int, off: int, ts: int, _klen: int, at: int, end: int) -> None:
        if every_64 is not None and i % 64 == 63:
            every_64()
        f = fields(buf, at)
        timestamp = base_ts if log_append else base_ts + ts
        append(RawRecord(base_offset + off, timestamp, f.key(buf), f.value_len >= 0, buf[at:end]))

    try:
        walk(
            (payload,),
            h.records_count,
            max_record_bytes=len(payload),
            gaps_up_to=h.last_offset_delta,
            visit=collect,
        )
    except InvalidRecordError as e:
        raise InvalidRecordError(ErrorCode.CORRUPT_MESSAGE, str(e)) from e
    return h, out


def _finish(buf: bytearray) -> bytes:
    crc = crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:])
    buf[CRC_OFFSET : CRC_OFFSET + 4] = crc.to_bytes(4, "big")
    return bytes(buf)


def rebuild_batch(
    h: BatchHeader,
    records: list[RawRecord],
    *,
    delete_horizon_ms: int | None = None,
    every_64: Callable[[], None] | None = None,
    level: int | None = None,
) -> bytes:
    """A batch holding ``records`` (a non-empty subset of ``h``'s, in order) with ``h``'s
    offsets, producer fields and codec (at ``level``: compression.<codec>.level, None: the
    codec's default, as Kafka's cleaner); see the module docstring."""
    if not records:
        return empty_batch(h)
    attributes = h.attributes
    base_ts = h.base_timestamp
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
        base_ts = delete_horizon_ms
    body = bytearray()
    for n, r in enumerate(records):
        if every_64 is not None and n % 64 == 63:
            every_64()
        rec = bytearray(b"\x00")
        write_varint(rec, r.timestamp - base_ts if h.timestamp_type != LOG_APPEND_TIME else 0)
        write_varint(rec, r.offset - h.base_offset)
        rec += r.tail
        write_varint(body, len(rec))
        body += rec
    payload = compress(h.compression, bytes(body), level)
    if h.timestamp_type == LOG_APPEND_TIME:
        max_ts = h.max_timestamp
    else:
        max_ts = max(r.timestamp for r in records)
    return _batch(h, attributes, base_ts, max_ts, len(records), payload)


def _batch(
    h: BatchHeader, attributes: int, base_ts: int, max_ts: int, count: int, payload: bytes = b""
) -> bytes:
    """A batch with ``h``'s offsets, epoch and producer fields, these attributes, timestamps
    and record count, and ``payload`` (its records, compressed) after the header; CRC set."""
    out = bytearray(HEADER_SIZE) + payload
    HEADER.pack_into(
        out,
        0,
        h.base_offset,
        len(out) - LOG_OVERHEAD,
        h.partition_leader_epoch,
        h.magic,
        0,
        attributes,
        h.last_offset_delta,
        base_ts,
        max_ts,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        count,
    )
    return _finish(out)


def empty_batch(h: BatchHeader) -> bytes:
    """The header of ``h`` with no records (Kafka's DefaultRecordBatch.writeEmptyHeader):
    offsets, producer fields and epoch kept, codec none, both timestamps the max timestamp."""
    attributes = h.attributes & ~COMPRESSION_MASK & ~DELETE_HORIZON_MASK
    return _batch(h, attributes, h.max_timestamp, h.max_timestamp, 0)


# -- the cleaner's positions-only scans ---------------------------------------------------

SHORT_KEY = 16  # keys shorter than this are their own offset-map key; longer: their MD5
POSITION_BITS = 32  # map value = offset << 32 | position of the record in its section
POSITION_MASK = (1 << POSITION_BITS) - 1
_md5 = hashlib.md5


def key_id(key: bytes) -> bytes:
    """The offset map's key for a record key (see the module docstring)."""
    return key if len(key) < SHORT_KEY else _md5(key, usedforsecurity=False).digest()


def _corrupt(why: str) -> InvalidRecordError:
    return InvalidRecordError(ErrorCode.CORRUPT_MESSAGE, why)


def _varint(buf: Any, pos: int, max_bytes: int) -> tuple[int, int]:
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
                    n, p = _varint(buf, pos, 5)
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
                    off, p = _varint(buf, p + 1, 5)
            if off != i and (not gaps or off <= prev or off > last_delta):
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
                    klen, p = _varint(buf, p, 5)
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
        n, p = _varint(buf, pos, 5)
        p += 1
    end = p - 1 + n
    b = buf[p]
    if b < 0x80:
        ts = (b >> 1) ^ -(b & 1)
        p += 1
    else:
        ts, p = _varint(buf, p, 10)
    b = buf[p]
    if b < 0x80:
        off = (b >> 1) ^ -(b & 1)
        p += 1
    elif buf[p + 1] < 0x80:
        z = (b & 0x7F) | (buf[p + 1] << 7)
        off = (z >> 1) ^ -(z & 1)
        p += 2
    else:
        off, p = _varint(buf, p, 5)
    b = buf[p]
    if b < 0x80:
        klen = (b >> 1) ^ -(b & 1)
        p += 1
    else:
        klen, p = _varint(buf, p, 5)
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


def rebuild_from_positions(
    h: BatchHeader,
    buf: Any,
    kept: list[tuple[int, int, int]],
    *,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """A batch of ``h``'s holding the records at ``kept`` ((position, end, timestamp delta)
    in ``buf``, the batch's records section, in order; not empty), as :func:`rebuild_batch`
    writes it: a record's bytes are copied as they are unless its timestamp delta changes."""
    attributes = h.attributes
    base_ts = h.base_timestamp
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
        base_ts = delete_horizon_ms
    log_append = h.timestamp_type == LOG_APPEND_TIME
    if not log_append and base_ts == h.base_timestamp:
        body: bytes | bytearray = b"".join([buf[p:e] for p, e, _ in kept])
    else:
        shift = h.base_timestamp - base_ts
        body = bytearray()
        for p, e, ts in kept:
            _, q = _varint(buf, p, 5)  # q: the attributes
            _, r = _varint(buf, q + 1, 10)  # r: the offset delta
            rec = bytearray(b"\x00")
            write_varint(rec, 0 if log_append else ts + shift)
            rec += buf[r:e]
            write_varint(body, len(rec))
            body += rec
    if log_append:
        max_ts = h.max_timestamp
    else:
        max_ts = h.base_timestamp + max(ts for _, _, ts in kept)
    payload = compress(h.compression, bytes(body))
    return _batch(h, attributes, base_ts, max_ts, len(kept), payload)
