"""Records inside a v2 batch, as log compaction needs them: keys, tombstones, and batches
rewritten with some records left out (Kafka's MemoryRecords.filterTo).

The cleaner's positions-only scans of the records (the offset map's keys, the kept records'
positions) are pybroker/wire/record_scan.py.  A rewritten batch keeps what Kafka's buildRetainedRecordsInto
keeps (base offset, last offset delta, producer fields, leader epoch, codec), so offsets and
producer sequences survive a clean.  Checks, rewrites and delete horizons: docs/internals.md
("pybroker/log/compacted_records.py").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from crc32c import crc32c

from pybroker.wire.primitives import write_varint
from pybroker.wire.record_scan import scan_varint
from pybroker.wire.record_walker import fields, walk_stored
from pybroker.wire.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    BatchHeader,
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

    walk_stored(payload, h, collect)
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
            _, q = scan_varint(buf, p, 5)  # q: the attributes
            _, r = scan_varint(buf, q + 1, 10)  # r: the offset delta
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
