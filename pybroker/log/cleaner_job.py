"""One clean's work on files (Kafka's Cleaner): map the keys of the dirty range, then write
each group of segments, filtered, as a ``.cleaned`` segment.  It reads segment files and
writes new ones and never touches a PartitionLog, so it runs the same in the cleaner's thread
(tests) or in a cleaner process (the broker: pybroker/log/cleaner_process.py).  Plain values
in (:class:`CleanJob`), plain values out (:class:`JobResult`); per record, only what cannot
be done in bulk runs in Python.  Passes and the contract with pybroker/log/cleaner.py:
docs/internals.md ("pybroker/log/cleaner_job.py").
"""

from __future__ import annotations

import mmap
import os
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pybroker.errors import ErrorCode
from pybroker.log.compacted_records import (
    empty_batch,
    has_delete_horizon,
    read_records,
    rebuild_batch,
    rebuild_from_positions,
)
from pybroker.log.segment import CLEANED_SUFFIX, SWAP_SUFFIX, LogSegment
from pybroker.log.txn_index import AbortedTxn, TransactionIndex
from pybroker.wire.control_records import read_end_txn_marker
from pybroker.wire.record_scan import (
    POSITION_BITS,
    POSITION_MASK,
    key_id,
    map_records,
    record_at,
    scan_records,
)
from pybroker.wire.records import (
    COMPRESSION_NONE,
    HEADER_SIZE,
    MAGIC,
    MIN_BATCH_LENGTH,
    BatchHeader,
    InvalidRecordError,
    decompress,
    unpack_header,
)

INT32_MAX = 2**31 - 1


class CleanAborted(Exception):
    """The log changed under a clean (or the cleaner is stopping): nothing was swapped."""


class OffsetMap:
    """key -> latest offset, bounded to ``capacity`` keys (Kafka's SkimpyOffsetMap: a key's
    size does not count).  ``entries``: :func:`record_scan.key_id` -> ``offset << 32 |
    position`` of the record in its batch's records section (pass 2 finds the records a
    batch keeps there, without reading the others)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.entries: dict[bytes, int] = {}
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self.entries)

    def put(self, key: bytes, offset: int, position: int = 0) -> bool:
        """Map ``key`` to ``offset``; False (nothing changed) when full and ``key`` is new."""
        k = key_id(key)
        entries = self.entries
        if len(entries) >= self.capacity and k not in entries:
            return False
        entries[k] = offset << POSITION_BITS | position
        self.latest_offset = offset
        return True

    def get(self, key: bytes) -> int:
        v = self.entries.get(key_id(key))
        return -1 if v is None else v >> POSITION_BITS

    def clear(self) -> None:
        self.entries.clear()
        self.latest_offset = -1


class TxnCleaning:
    """Kafka's CleanedTransactionMetadata for one pass over consecutive batches: which
    transactional batches belong to an aborted transaction, and which markers have no data of
    their transaction left in the batches seen."""

    def __init__(self, aborted: list[AbortedTxn], cleaned_index: TransactionIndex | None = None):
        self._aborted = deque(sorted(aborted, key=lambda t: t.first_offset))
        self._ongoing_aborted: dict[int, list] = {}  # pid -> [AbortedTxn, last batch seen]
        self._ongoing_committed: set[int] = set()
        self.cleaned_index = cleaned_index

    def _consume_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0].first_offset <= offset:
            txn = self._aborted.popleft()
            self._ongoing_aborted[txn.producer_id] = [txn, None]

    def on_batch(self, h: BatchHeader) -> bool:
        """A data batch: True if it belongs to an aborted transaction (to be dropped)."""
        self._consume_up_to(h.last_offset)
        if not h.is_transactional:
            return False
        state = self._ongoing_aborted.get(h.producer_id)
        if state is not None:
            state[1] = h.last_offset
            return True
        self._ongoing_committed.add(h.producer_id)
        return False

    def on_control(self, h: BatchHeader, data: bytes) -> bool:
        """A control batch: True if it is a marker whose transaction has no data left in the
        batches seen (it may go once its delete horizon passed)."""
        self._consume_up_to(h.last_offset)
        if h.records_count == 0:
            return True  # emptied by an earlier clean
        try:
            marker = read_end_txn_marker(data)
        except InvalidRecordError:
            return False
        if marker is None:
            return False  # another control type: kept
        if marker.committed:
            if h.producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(h.producer_id)
                return False
            return True
        state = self._ongoing_aborted.pop(h.producer_id, None)
        if state is not None and state[1] is not None:
            if self.cleaned_index is not None:
                self.cleaned_index.append(state[0])
            return False
        return True


@dataclass(frozen=True)
class SegmentRef:
    """An inactive segment as a clean reads it: its .log up to ``size`` bytes."""

    base_offset: int
    log_path: Path
    size: int
    next_offset: int


@dataclass
class CleanJob:
    directory: Path
    segments: list[SegmentRef]  # the inactive segments, in offset order
    first_dirty: int
    first_uncleanable: int
    map_capacity: int
    segment_bytes: int
    index_interval_bytes: int
    max_index_bytes: int
    delete_retention_ms: int
    io_buffer_size: int
    aborted: list[AbortedTxn]  # overlapping the inactive segments
    last_batches: dict[int, int]  # producer id -> last offset of its last batch
    now: int


@dataclass
class JobStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    batches_emptied: int = 0
    segments_in: int = 0


@dataclass
class CleanedGroup:
    base_offset: int  # of the .cleaned segment: the first replaced segment's
    replaced: list[int]  # base offsets of the segments it replaces


@dataclass
class JobResult:
    end_offset: int
    groups: list[CleanedGroup] = field(default_factory=list)
    stats: JobStats = field(default_factory=JobStats)
    horizons: list[int] = field(default_factory=list)


def _no_check() -> None:
    pass


def overlapping(aborted: list[AbortedTxn], start: int, end: int) -> list[AbortedTxn]:
    """The aborted transactions with data in [start, end)."""
    return [t for t in aborted if t.last_offset >= start and t.first_offset < end]


def run_clean_job(
    job: CleanJob,
    offset_map: OffsetMap | None = None,
    check: Callable[[], None] = _no_check,
    on_group_written: Callable[[CleanedGroup], None] | None = None,
) -> JobResult:
    """Map the dirty range, then write every group of segments up to the map's end as a
    ``.cleaned`` segment.  ``check`` runs between batches (the thread's stop and GIL
    handover); raising there abandons the job (files of the group being written deleted)."""
    if offset_map is None:
        offset_map = OffsetMap(job.map_capacity)
    offset_map.clear()
    end = build_offset_map(job, offset_map, check)
    result = JobResult(end)
    live = LiveRecords(sorted(offset_map.entries.values()))
    to_clean = [s for s in job.segments if s.base_offset < end]
    for group in group_segments(job, to_clean):
        written = write_cleaned_group(job, group, offset_map, result, check, live)
        result.groups.append(written)
        if on_group_written is not None:
            on_group_written(written)
    return result


class MappedSegment:
    """An inactive segment's .log mapped read-only up to its size in the job (no copy into
    this process; pages behind the scan are let go every ``RELEASE_BYTES``, so the process's
    resident memory stays bounded whatever the segment's size).  A segment deleted since the
    job was made is CleanAborted; one truncated under the map would end the process with
    SIGBUS, which the manager takes as an abandoned clean (only a follower's truncation
    shortens an inactive segment)."""

    RELEASE_BYTES = 16 * 1024 * 1024

    def __init__(self, seg: SegmentRef) -> None:
        self.seg = seg
        self.buf: Any = b""
        try:
            fd = os.open(seg.log_path, os.O_RDONLY)
        except FileNotFoundError as e:
            raise CleanAborted(f"{seg.log_path} is gone") from e
        try:
            if os.fstat(fd).st_size < seg.size:
                raise CleanAborted(f"{seg.log_path} was truncated")
            if seg.size:
                self.buf = mmap.mmap(fd, seg.size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        self._released = 0

    def __enter__(self) -> MappedSegment:
        return self

    def __exit__(self, *exc: object) -> None:
        if isinstance(self.buf, mmap.mmap):
            self.buf.close()

    def headers(self) -> Iterator[BatchHeader]:
        """The header of every batch up to the size (each checked to fit)."""
        buf, size, path = self.buf, self.seg.size, self.seg.log_path
        pos = 0
        while pos < size:
            if pos + HEADER_SIZE > size:
                raise InvalidRecordError(
                    ErrorCode.CORRUPT_MESSAGE, f"torn batch at {pos} in {path}"
                )
            h = unpack_header(buf, pos)
            if h.batch_length < MIN_BATCH_LENGTH or pos + h.size > size or h.magic != MAGIC:
                raise InvalidRecordError(ErrorCode.CORRUPT_MESSAGE, f"bad batch at {pos} in {path}")
            yield h
            pos += h.size
            if pos - self._released >= self.RELEASE_BYTES:
                upto = pos - pos % mmap.PAGESIZE
                self.buf.madvise(mmap.MADV_DONTNEED, self._released, upto - self._released)
                self._released = upto


def records_section(buf: Any, h: BatchHeader) -> tuple[Any, int, int]:
    """(buffer, start, end) of batch ``h``'s records: in ``buf`` itself when uncompressed,
    else the decompressed payload (C codecs)."""
    start, end = h.position + HEADER_SIZE, h.position + h.size
    if h.compression == COMPRESSION_NONE:
        return buf, start, end
    payload = decompress(h.compression, buf[start:end])
    return payload, 0, len(payload)


def build_offset_map(job: CleanJob, offset_map: OffsetMap, check: Callable[[], None]) -> int:
    """Map the keys of [first_dirty, first_uncleanable), leaving out aborted transactional
    batches and control batches; returns the end of the range mapped (the map's last offset
    + 1 when it filled up, else the bound)."""
    start, bound = job.first_dirty, job.first_uncleanable
    txns = TxnCleaning(overlapping(job.aborted, start, bound))
    entries, capacity = offset_map.entries, offset_map.capacity
    segments = job.segments
    for i, seg in enumerate(segments):
        seg_end = segments[i + 1].base_offset if i + 1 < len(segments) else seg.next_offset
        if seg_end <= start or seg.base_offset >= bound:
            continue
        with MappedSegment(seg) as f:
            buf = f.buf
            for h in f.headers():
                check()
                if h.base_offset >= bound:
                    break
                if h.last_offset < start:
                    continue
                if h.is_control:
                    txns.on_control(h, buf[h.position : h.position + h.size])
                    continue
                if txns.on_batch(h):
                    continue
                section, pos, end = records_section(buf, h)
                count, base = h.records_count, h.base_offset
                if base >= start and len(entries) + count <= capacity:  # (the hot path)
                    map_records(section, pos, end, base, count, h.last_offset_delta, entries)
                    offset_map.latest_offset = h.last_offset
                    continue
                # a batch across the start, or one that may fill the map: record by record
                for r in scan_records(section, pos, end, count, h.last_offset_delta):
                    offset = base + r.offset_delta
                    if offset < start or r.key is None:
                        continue
                    if not offset_map.put(r.key, offset, r.position - pos):
                        return offset_map.latest_offset + 1
    # every record below the bound was looked at: none of them is "past the map"
    offset_map.latest_offset = max(offset_map.latest_offset, bound - 1)
    return bound


class LiveRecords:
    """The offset map's values in offset order (``offset << 32 | position``): the records
    that pass 2 keeps of the mapped range; ``next`` is where the next batch's search starts
    (batches are filtered in offset order)."""

    def __init__(self, values: list[int]) -> None:
        self.values = values
        self.next = 0

    def in_batch(self, h: BatchHeader) -> list[int]:
        values = self.values
        lo = bisect_left(values, h.base_offset << POSITION_BITS, self.next)
        hi = bisect_left(values, (h.last_offset + 1) << POSITION_BITS, lo)
        self.next = hi
        return values[lo:hi]


def _index_estimate(seg: SegmentRef, interval: int) -> int:
    return (seg.size // max(1, interval) + 1) * 12


def group_segments(job: CleanJob, to_clean: list[SegmentRef]) -> list[list[SegmentRef]]:
    """Kafka's groupSegmentsBySize: consecutive segments whose sizes add up to at most
    segment.bytes, whose indexes would fit segment.index.bytes, and whose offsets span
    less than 2**31."""
    segments = job.segments
    groups: list[list[SegmentRef]] = []
    position = {seg.base_offset: k for k, seg in enumerate(segments)}
    i = 0
    while i < len(to_clean):
        group = [to_clean[i]]
        size = to_clean[i].size
        index_bytes = _index_estimate(to_clean[i], job.index_interval_bytes)
        i += 1
        while i < len(to_clean):
            seg = to_clean[i]
            nxt = position[seg.base_offset] + 1
            last = (segments[nxt].base_offset if nxt < len(segments) else seg.next_offset) - 1
            if (
                size + seg.size > job.segment_bytes
                or index_bytes + _index_estimate(seg, job.index_interval_bytes)
                > job.max_index_bytes
                or last - group[0].base_offset > INT32_MAX
            ):
                break
            group.append(seg)
            size += seg.size
            index_bytes += _index_estimate(seg, job.index_interval_bytes)
            i += 1
        groups.append(group)
    return groups


def segment_paths(directory: Path, base: int, suffix: str) -> list[Path]:
    return [
        directory / f"{base:020d}{ext}{suffix}"
        for ext in (".log", ".index", ".timeindex", ".txnindex")
    ]


def write_cleaned_group(
    job: CleanJob,
    group: list[SegmentRef],
    offset_map: OffsetMap,
    result: JobResult,
    check: Callable[[], None],
    live: LiveRecords | None = None,
) -> CleanedGroup:
    """The group's batches, filtered, into ``<base>.*.cleaned`` (fsynced, then closed)."""
    base = group[0].base_offset
    for suffix in (CLEANED_SUFFIX, SWAP_SUFFIX):
        for p in segment_paths(job.directory, base, suffix):
            p.unlink(missing_ok=True)
    cleaned = LogSegment(
        job.directory,
        base,
        index_interval_bytes=job.index_interval_bytes,
        max_index_bytes=job.max_index_bytes,
        file_suffix=CLEANED_SUFFIX,
    )
    stats = result.stats
    try:
        k = job.segments.index(group[-1])
        upper = (
            job.segments[k + 1].base_offset if k + 1 < len(job.segments) else group[-1].next_offset
        )
        txns = TxnCleaning(overlapping(job.aborted, base, upper), cleaned.txn_index)
        out = bytearray()
        out_headers: list[BatchHeader] = []
        for seg in group:
            stats.segments_in += 1
            with MappedSegment(seg) as f:
                buf = f.buf
                for h in f.headers():
                    check()
                    stats.bytes_read += h.size
                    kept = filter_batch(job, h, buf, offset_map, result, txns, live)
                    if kept is None:
                        continue
                    if kept is UNCHANGED:
                        out_headers.append(h._replace(position=len(out)))
                        out += buf[h.position : h.position + h.size]
                    else:
                        out_headers.append(unpack_header(kept)._replace(position=len(out)))
                        out += kept
                    if len(out) >= job.io_buffer_size:
                        cleaned.append_batches(out, out_headers)
                        stats.bytes_written += len(out)
                        out, out_headers = bytearray(), []
        cleaned.append_batches(out, out_headers)
        stats.bytes_written += len(out)
        cleaned.flush()
    except Exception:
        # (a BaseException is a simulated kill in the tests: files stay as they are)
        if not cleaned.deleted:
            cleaned.delete_files()
        raise
    cleaned.release()
    return CleanedGroup(base, [s.base_offset for s in group])


UNCHANGED: Any = object()  # filter_batch: the batch stays as it is


def filter_batch(
    job: CleanJob,
    h: BatchHeader,
    buf: Any,
    offset_map: OffsetMap,
    result: JobResult,
    txns: TxnCleaning | None = None,
    live: LiveRecords | None = None,
) -> bytes | None:
    """Batch ``h`` of ``buf`` as the clean leaves it: :data:`UNCHANGED`, rewritten, empty,
    or gone (None).  A batch all of whose records were mapped in this clean is filtered from
    ``live`` (only the records it keeps are read); any other record by record."""
    txns = txns or TxnCleaning([])
    stats, horizons, now = result.stats, result.horizons, job.now
    if h.is_control:
        data = buf[h.position : h.position + h.size]
        stats.records_read += h.records_count
        if not txns.on_control(h, data):
            return UNCHANGED
        # no data of its transaction left: gone once its delete horizon has passed
        if has_delete_horizon(h):
            if now >= h.base_timestamp:
                stats.records_removed += h.records_count
                return None
            horizons.append(h.base_timestamp)
            return UNCHANGED
        if h.records_count == 0:
            return None
        horizon = now + job.delete_retention_ms
        horizons.append(horizon)
        _, records = read_records(data)
        return rebuild_batch(h, records, delete_horizon_ms=horizon)
    last_of_producer = h.has_producer_id and job.last_batches.get(h.producer_id) == h.last_offset
    count = h.records_count
    stats.records_read += count
    if txns.on_batch(h):  # data of an aborted transaction
        stats.records_removed += count
        if last_of_producer:
            stats.batches_emptied += 1
            return empty_batch(h)
        return None
    if not count:  # an empty batch kept for its producer: only while it is the last
        return UNCHANGED if last_of_producer else None
    has_horizon = has_delete_horizon(h)
    retain_deletes = not has_horizon or now < h.base_timestamp
    kept: list[tuple[int, int, int]] = []  # (position, end, timestamp delta) in ``section``
    tombstones = False
    latest = offset_map.latest_offset
    if live is not None and h.base_offset >= job.first_dirty and h.last_offset <= latest:
        # every keyed record was mapped: it stays if it is its key's latest
        values = live.in_batch(h)
        section: Any = None
        if values:
            section, start, _ = records_section(buf, h)
            for v in values:
                pos = start + (v & POSITION_MASK)
                end, ts, _, _, tombstone = record_at(section, pos)
                if tombstone:
                    if not retain_deletes:
                        stats.tombstones_removed += 1
                        continue
                    tombstones = True
                kept.append((pos, end, ts))
    else:
        section, start, end = records_section(buf, h)
        entries = offset_map.entries
        base = h.base_offset
        for r in scan_records(section, start, end, count, h.last_offset_delta):
            offset = base + r.offset_delta
            if offset > latest:
                keep = True
            elif r.key is None:
                keep = False
            else:
                v = entries.get(key_id(r.key))
                keep = (v is None or offset >= v >> POSITION_BITS) and (
                    not r.tombstone or retain_deletes
                )
            if keep:
                kept.append((r.position, r.end, r.timestamp_delta))
                tombstones |= r.tombstone
            elif r.tombstone:
                stats.tombstones_removed += 1
    stats.records_removed += count - len(kept)
    set_horizon = tombstones and not has_horizon
    horizon = now + job.delete_retention_ms if set_horizon else None
    if tombstones:
        horizons.append(horizon if horizon is not None else h.base_timestamp)
    if len(kept) == count and not set_horizon:
        return UNCHANGED
    if kept:
        if not set_horizon and has_horizon:
            horizon = h.base_timestamp  # keep the horizon stamped by an earlier clean
        return rebuild_from_positions(h, section, kept, delete_horizon_ms=horizon)
    if last_of_producer:
        stats.batches_emptied += 1
        return empty_batch(h)
    return None


def first_header(seg: Any) -> BatchHeader | None:
    """The first batch header of a segment's .log (None if it is gone or empty)."""
    try:
        fd = os.open(seg.log_path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        data = os.pread(fd, 61, 0)
    finally:
        os.close(fd)
    return unpack_header(data) if len(data) == 61 else None
