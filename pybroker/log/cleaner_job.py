"""One clean's work on files (Kafka's Cleaner): map the keys of the dirty range, then write
each group of segments, filtered, as a ``.cleaned`` segment.  It reads segment files and
writes new ones; it never touches a PartitionLog, so it runs the same in the cleaner's
thread (tests) or in a cleaner process (the broker: :class:`CleanerProcess`), where its
pure-Python work does not hold the event loop's GIL.

Contract with pybroker/log/cleaner.py (the manager: which log, the swap, the checkpoint):

* :class:`CleanJob` holds everything the work needs, as plain values: the inactive
  segments (:class:`SegmentRef`: path, base offset, size, next offset, read up to that
  size), the range [first_dirty, first_uncleanable), the offset map's capacity, the log's
  configs, the aborted transactions overlapping the inactive segments, the last batch of
  each producer, and the time.
* :func:`run_clean_job` returns a :class:`JobResult`: the end of the range mapped (the
  map's last offset + 1 when it filled up), per group the base offsets of the segments
  it replaces and the base offset of the ``.cleaned`` segment written (fsynced, closed),
  the counters, and the delete horizons still pending.  The manager swaps each group in
  order; a group it cannot swap (the log changed) ends the clean and its ``.cleaned`` files
  are deleted (recovery deletes leftover ``.cleaned`` files too).
"""

from __future__ import annotations

import ctypes
import hashlib
import multiprocessing
import os
import signal
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from pybroker.log.compacted_records import (
    empty_batch,
    has_delete_horizon,
    read_records,
    rebuild_batch,
)
from pybroker.log.segment import CLEANED_SUFFIX, SWAP_SUFFIX, LogSegment
from pybroker.log.txn_index import AbortedTxn, TransactionIndex
from pybroker.wire.control_records import read_end_txn_marker
from pybroker.wire.records import BatchHeader, InvalidRecordError, unpack_header

INT32_MAX = 2**31 - 1


class CleanAborted(Exception):
    """The log changed under a clean (or the cleaner is stopping): nothing was swapped."""


class OffsetMap:
    """key -> latest offset, bounded to ``capacity`` keys (Kafka's SkimpyOffsetMap: keys are
    hashed, so a key's size does not count)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1

    @staticmethod
    def _hash(key: bytes) -> bytes:
        return hashlib.md5(key, usedforsecurity=False).digest()

    def __len__(self) -> int:
        return len(self._map)

    def put(self, key: bytes, offset: int) -> bool:
        """Map ``key`` to ``offset``; False (nothing changed) when full and ``key`` is new."""
        h = self._hash(key)
        if h not in self._map and len(self._map) >= self.capacity:
            return False
        self._map[h] = offset
        self.latest_offset = offset
        return True

    def get(self, key: bytes) -> int:
        return self._map.get(self._hash(key), -1)

    def clear(self) -> None:
        self._map.clear()
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
    to_clean = [s for s in job.segments if s.base_offset < end]
    for group in group_segments(job, to_clean):
        written = write_cleaned_group(job, group, offset_map, result, check)
        result.groups.append(written)
        if on_group_written is not None:
            on_group_written(written)
    return result


def build_offset_map(job: CleanJob, offset_map: OffsetMap, check: Callable[[], None]) -> int:
    """Map the keys of [first_dirty, first_uncleanable), leaving out aborted transactional
    batches and control batches; returns the end of the range mapped (the map's last offset
    + 1 when it filled up, else the bound)."""
    start, bound = job.first_dirty, job.first_uncleanable
    txns = TxnCleaning(overlapping(job.aborted, start, bound))
    segments = job.segments
    for i, seg in enumerate(segments):
        seg_end = segments[i + 1].base_offset if i + 1 < len(segments) else seg.next_offset
        if seg_end <= start or seg.base_offset >= bound:
            continue
        for h, data in batches(seg):
            check()
            if h.base_offset >= bound:
                break
            if h.last_offset < start:
                continue
            if h.is_control:
                txns.on_control(h, data)
                continue
            if txns.on_batch(h):
                continue
            _, records = read_records(data, check)
            for n, r in enumerate(records):
                if n % 64 == 63:
                    check()
                if r.offset < start or r.key is None:
                    continue
                if not offset_map.put(r.key, r.offset):
                    return offset_map.latest_offset + 1
    # every record below the bound was looked at: none of them is "past the map"
    offset_map.latest_offset = max(offset_map.latest_offset, bound - 1)
    return bound


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
            for h, data in batches(seg):
                check()
                stats.bytes_read += h.size
                kept = filter_batch(job, h, data, offset_map, result, txns, check)
                if kept is None:
                    continue
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


def filter_batch(
    job: CleanJob,
    h: BatchHeader,
    data: bytes,
    offset_map: OffsetMap,
    result: JobResult,
    txns: TxnCleaning | None = None,
    check: Callable[[], None] = _no_check,
) -> bytes | None:
    """The batch as the clean leaves it: unchanged, rewritten, empty, or gone (None)."""
    txns = txns or TxnCleaning([])
    stats, horizons, now = result.stats, result.horizons, job.now
    if h.is_control:
        stats.records_read += h.records_count
        if not txns.on_control(h, data):
            return data
        # no data of its transaction left: gone once its delete horizon has passed
        if has_delete_horizon(h):
            if now >= h.base_timestamp:
                stats.records_removed += h.records_count
                return None
            horizons.append(h.base_timestamp)
            return data
        if h.records_count == 0:
            return None
        horizon = now + job.delete_retention_ms
        horizons.append(horizon)
        _, records = read_records(data, check)
        return rebuild_batch(h, records, delete_horizon_ms=horizon)
    last_of_producer = h.has_producer_id and job.last_batches.get(h.producer_id) == h.last_offset
    if txns.on_batch(h):  # data of an aborted transaction
        stats.records_read += h.records_count
        stats.records_removed += h.records_count
        if last_of_producer:
            stats.batches_emptied += 1
            return empty_batch(h)
        return None
    _, records = read_records(data, check)
    stats.records_read += len(records)
    if not records:  # an empty batch kept for its producer: only while it is the last
        return data if last_of_producer else None
    has_horizon = has_delete_horizon(h)
    retain_deletes = not has_horizon or now < h.base_timestamp
    kept = []
    tombstones = False
    for n, r in enumerate(records):
        if n % 64 == 63:
            check()
        if r.offset > offset_map.latest_offset:
            keep = True
        elif r.key is None:
            keep = False
        else:
            keep = r.offset >= offset_map.get(r.key) and (r.has_value or retain_deletes)
        if keep:
            kept.append(r)
            tombstones |= not r.has_value
        elif not r.has_value:
            stats.tombstones_removed += 1
    stats.records_removed += len(records) - len(kept)
    set_horizon = tombstones and not has_horizon
    horizon = now + job.delete_retention_ms if set_horizon else None
    if tombstones:
        horizons.append(horizon if horizon is not None else h.base_timestamp)
    if len(kept) == len(records) and not set_horizon:
        return data
    if kept:
        if not set_horizon and has_horizon:
            horizon = h.base_timestamp  # keep the horizon stamped by an earlier clean
        return rebuild_batch(h, kept, delete_horizon_ms=horizon, every_64=check)
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


def batches(seg: SegmentRef) -> Iterator[tuple[BatchHeader, bytes]]:
    """(header, bytes) of every batch of ``seg`` up to its size, read through a descriptor of
    our own (the owner may release the segment's meanwhile); CleanAborted if it is gone."""
    try:
        fd = os.open(seg.log_path, os.O_RDONLY)
    except FileNotFoundError as e:
        raise CleanAborted(f"{seg.log_path} is gone") from e
    try:
        size = min(seg.size, os.fstat(fd).st_size)
        pos = 0
        chunk = b""
        chunk_pos = 0
        while pos < size:
            rel = pos - chunk_pos
            if rel + 61 > len(chunk):
                chunk = os.pread(fd, max(1 << 20, 61), pos)
                chunk_pos, rel = pos, 0
            h = unpack_header(chunk, rel)
            if h.batch_length < 49:
                raise InvalidRecordError(2, f"bad batch at {pos} in {seg.log_path}")
            if rel + h.size > len(chunk):
                chunk = os.pread(fd, max(1 << 20, h.size), pos)
                chunk_pos, rel = pos, 0
            data = bytes(chunk[rel : rel + h.size])
            yield h._replace(position=pos), data
            pos += h.size
    finally:
        os.close(fd)


# -- the cleaner process ----------------------------------------------------------------------


def _die_with_parent(parent_pid: int) -> None:
    """A broker killed with -9 takes its cleaner process along (Linux PR_SET_PDEATHSIG):
    an orphan would go on writing .cleaned files into a log dir a restarted broker owns."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:  # gone before the prctl
        os._exit(1)


def _worker_main(conn: Connection, parent_pid: int) -> None:
    """A cleaner process: runs the jobs it is sent, one at a time, with one offset map."""
    _die_with_parent(parent_pid)
    offset_map: OffsetMap | None = None
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        try:
            if offset_map is None or offset_map.capacity != job.map_capacity:
                offset_map = OffsetMap(job.map_capacity)
            result = run_clean_job(job, offset_map)
            offset_map.clear()
            conn.send(("ok", result))
        except CleanAborted as e:
            conn.send(("aborted", str(e)))
        except Exception as e:  # noqa: BLE001 - handed to the manager, which logs it
            conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


class CleanerProcess:
    """One cleaner thread's process (spawned, so none of the broker's threads or loop is
    copied): :meth:`run` sends a job and waits for its result, polling ``stopping`` so a
    stop terminates a clean in progress (its ``.cleaned`` files are deleted by the next
    clean of that log or by recovery)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._proc: Any = None
        self._conn: Connection | None = None

    def _ensure(self) -> Connection:
        if self._proc is None or not self._proc.is_alive():
            ctx = multiprocessing.get_context("spawn")
            parent, child = ctx.Pipe()
            self._proc = ctx.Process(
                target=_worker_main, args=(child, os.getpid()), name=self.name, daemon=True
            )
            self._proc.start()
            child.close()
            self._conn = parent
        assert self._conn is not None
        return self._conn

    def run(self, job: CleanJob, stopping: Callable[[], bool]) -> JobResult:
        conn = self._ensure()
        conn.send(job)
        while not conn.poll(0.1):
            if stopping():
                self.close(kill=True)
                raise CleanAborted("the cleaner is stopping")
            if not self._proc.is_alive():
                self.close(kill=True)
                raise CleanAborted(f"cleaner process exited ({self._proc.exitcode})")
        try:
            kind, value = conn.recv()
        except (EOFError, OSError) as e:
            self.close(kill=True)
            raise CleanAborted(f"cleaner process lost: {e}") from e
        if kind == "ok":
            return value
        if kind == "aborted":
            raise CleanAborted(value)
        raise RuntimeError(f"in the cleaner process: {value}")

    def close(self, kill: bool = False) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            if not kill:
                try:
                    conn.send(None)
                except OSError:
                    pass
            conn.close()
        if proc is not None:
            if kill:
                proc.kill()
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
