"""The log cleaner: compaction of logs whose cleanup.policy includes ``compact`` (Kafka's
LogCleaner, LogCleanerManager and Cleaner).

Contract (docs/internals.md has the summary):

* Threads: ``log.cleaner.threads`` threads (none when ``log.cleaner.enable`` is false) do all
  the reading, deduplicating and writing; the event loop never waits on them.  The one
  handoff is the swap: a thread asks the owner of the logs (``run_on_owner``: the event loop
  in the broker, a direct call in tests) to put the cleaned segment in place of the old
  ones (:meth:`PartitionLog.replace_segments`: renames and a list update, no I/O beyond
  that), and to read the producer state.  A clean that finds the log changed under it
  (retention, truncation, deletion) is dropped and tried again later.
* Which log: per compacted log, the cleanable range runs from the first dirty offset (the
  ``cleaner-offset-checkpoint`` entry, or the log start) to the first uncleanable offset:
  the smallest of the active segment's base offset, the high watermark (the last stable
  offset once transactions exist) and the base offset of the first segment holding a record
  younger than min.compaction.lag.ms, rounded down to a segment boundary.  dirty ratio =
  dirty bytes / (clean bytes + dirty bytes).  The dirtiest log whose ratio exceeds
  min.cleanable.dirty.ratio is cleaned first; a log whose oldest dirty batch is older than
  max.compaction.lag.ms is cleaned whatever its ratio; when none qualifies, a log with
  tombstones whose delete horizon has passed is cleaned.  Nothing to do: sleep
  ``log.cleaner.backoff.ms``.
* A clean: the offset map (key hash -> latest offset; MD5 of the key, 24 bytes an entry,
  ``log.cleaner.dedupe.buffer.size / threads`` bytes at load factor 0.9, as Kafka's
  SkimpyOffsetMap) is filled from the dirty range; when it fills up, the clean stops at the
  last offset mapped and the rest waits for the next pass.  Then every segment from the log
  start up to that end is rewritten, in groups of consecutive segments whose total size fits
  segment.bytes (and the index size limit), each group into one ``.cleaned`` segment.  A
  record is kept when it is past the map's last offset, or its key's latest offset is its
  own (a key absent from the map is kept); a tombstone (null value) is kept until its
  batch's delete horizon (KIP-534: the first clean that keeps it stamps the batch with
  now + delete.retention.ms, attribute bit 6) has passed.  Records without a key are
  dropped.  Offsets never change: the log has gaps afterwards.  A batch keeps its base
  offset, last offset delta, producer fields, leader epoch and codec
  (pybroker/log/compacted_records.py); a batch left with no record is dropped, except the
  last batch of each producer in the producer state, kept empty (so idempotent producers
  are not fenced by a clean, and the state can be rebuilt from the log).
* Transactions (Kafka's CleanedTransactionMetadata, :class:`TxnCleaning`): the first
  uncleanable offset is bounded by the last stable offset, so every transaction in the
  cleaned range is decided.  The aborted transactions overlapping a range come from the
  .txnindex files (PartitionLog.collect_aborted_transactions, asked of the owner).  A
  transactional batch of an aborted transaction is dropped (kept empty if it is its
  producer's last batch) and its keys are not mapped; committed transactional records are
  compacted like any other.  A marker is kept while data of its transaction remains in the
  cleaned segment (an ABORT marker then also keeps its .txnindex entry, written to the cleaned
  segment's index); once none does, the first clean that sees it stamps its delete horizon
  (now + delete.retention.ms, KIP-534 bit 6) and a clean after the horizon drops it.  Markers
  of other control types are kept.
* Crash safety (Kafka's file protocol): the group's cleaned segment is written as
  ``<base>.{log,index,timeindex}.cleaned`` and fsynced, renamed to ``.swap`` (the .log
  first), the old segments' files are renamed to ``.deleted``, then the ``.swap`` suffix
  is dropped.  PartitionLog's recovery (``_complete_swaps``) finishes or rolls back a clean
  interrupted anywhere.  After all groups of a clean, ``cleaner-offset-checkpoint`` (Kafka's
  OffsetCheckpointFile format, in the log dir) records the new first dirty offset; a crash
  before that only repeats work.
* Observability: every clean logs, at INFO on ``pybroker.log.cleaner``, the log, its dirty
  ratio, bytes read and written, records and tombstones removed and the time taken;
  :attr:`LogCleaner.last_clean` keeps the latest :class:`CleanStats` of each log.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pybroker.clock import SYSTEM_CLOCK, Clock
from pybroker.log.compacted_records import (
    empty_batch,
    has_delete_horizon,
    read_records,
    rebuild_batch,
)
from pybroker.log.manager import LogManager, read_checkpoint, write_checkpoint
from pybroker.log.partition_log import PartitionLog
from pybroker.log.segment import CLEANED_SUFFIX, SWAP_SUFFIX, LogSegment
from pybroker.log.txn_index import AbortedTxn, TransactionIndex
from pybroker.wire.control_records import read_end_txn_marker
from pybroker.wire.records import BatchHeader, InvalidRecordError, unpack_header

log = logging.getLogger("pybroker.log.cleaner")

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
BYTES_PER_ENTRY = 24  # a 16-byte MD5 of the key and an 8-byte offset (Kafka's SkimpyOffsetMap)
INT32_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
# The cleaner's threads share the GIL with the event loop: they let go of it at least this
# often (seconds of work), so request handling waits less than the interpreter's 5 ms switch
# interval for it.
YIELD_INTERVAL_S = 0.0005
T = TypeVar("T")


@dataclass(frozen=True)
class CleanerConfig:
    """Kafka's log.cleaner.* broker settings."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_buffer_size: int = 512 * 1024
    dedupe_buffer_load_factor: float = 0.9
    backoff_ms: int = 15_000

    @property
    def map_capacity(self) -> int:
        """Entries each thread's offset map holds (at the load factor)."""
        per_thread = min(self.dedupe_buffer_size // max(1, self.threads), INT32_MAX)
        return max(1, int(per_thread // BYTES_PER_ENTRY * self.dedupe_buffer_load_factor))


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


@dataclass
class CleanStats:
    topic: str
    partition: int
    dirty_ratio: float = 0.0
    first_dirty_offset: int = 0
    end_offset: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    batches_emptied: int = 0
    segments_in: int = 0
    segments_out: int = 0
    started_ms: int = 0
    elapsed_s: float = 0.0
    map_full: bool = False


class CleanAborted(Exception):
    """The log changed under a clean (or the cleaner is stopping): nothing was swapped."""


@dataclass
class Cleanable:
    log: PartitionLog
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int
    needs_compaction_now: bool

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


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


def _direct(fn: Callable[[], T]) -> T:
    return fn()


@dataclass
class _Group:
    segments: list[LogSegment] = field(default_factory=list)


class LogCleaner:
    def __init__(
        self,
        logs: LogManager,
        config: CleanerConfig,
        clock: Clock = SYSTEM_CLOCK,
        *,
        run_on_owner: Callable[[Callable[[], Any]], Any] = _direct,
    ) -> None:
        self.logs = logs
        self.config = config
        self.clock = clock
        self.run_on_owner = run_on_owner
        self.checkpoint_path = Path(logs.log_dir) / CLEANER_OFFSET_CHECKPOINT
        self.checkpoints: dict[tuple[str, int], int] = read_checkpoint(self.checkpoint_path)
        self.last_clean: dict[tuple[str, int], CleanStats] = {}
        self.delete_horizons: dict[tuple[str, int], int] = {}  # earliest pending horizon
        self.crash_hook: Callable[[str], None] | None = None  # tests: "crash" at a step
        # logs whose clean failed unexpectedly: skipped until their log is opened again
        self.uncleanable: dict[tuple[str, int], PartitionLog] = {}
        self._lock = threading.Lock()
        self._in_progress: set[tuple[str, int]] = set()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._last_yield = 0.0

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        if not self.config.enable:
            return
        for i in range(self.config.threads):
            t = threading.Thread(
                target=self._run, name=f"pybroker-log-cleaner-thread-{i}", daemon=True
            )
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        """Stop the threads (a clean in progress is abandoned at its next batch)."""
        self._stop.set()
        self._wake.set()
        for t in self._threads:
            t.join()
        self._threads.clear()

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        offset_map = OffsetMap(self.config.map_capacity)
        while not self._stop.is_set():
            cleaned = False
            try:
                cleaned = self.clean_filthiest(offset_map) is not None
            except Exception:
                log.exception("log cleaner failed")
            if not cleaned:
                self._wake.wait(self.config.backoff_ms / 1000.0)
                self._wake.clear()

    # -- choosing a log -------------------------------------------------------------------------

    def cleanable(self, plog: PartitionLog, now: int) -> Cleanable | None:
        """Kafka's LogCleanerManager.cleanableOffsets for one compacted log (None if the log
        has nothing it could clean)."""
        key = (plog.topic, plog.partition)
        segments = list(plog.segments)
        if len(segments) < 2:
            return None
        with self._lock:
            checkpoint = self.checkpoints.get(key, plog.log_start_offset)
            if plog.truncated_to is not None:
                checkpoint = min(checkpoint, plog.truncated_to)
                plog.truncated_to = None
                self.checkpoints[key] = checkpoint
        if checkpoint < plog.log_start_offset or checkpoint > plog.log_end_offset:
            checkpoint = plog.log_start_offset
        # Kafka's firstUncleanableDirtyOffset: never at or past the last stable offset (asked
        # of the owner, whose producer state it is, when the log has transactions in flight)
        uncleanable = min(segments[-1].base_offset, plog.high_watermark)
        ps = plog.producer_state
        if ps.ongoing_txns or ps.unreplicated_txns:
            uncleanable = min(uncleanable, self.run_on_owner(lambda: plog.last_stable_offset))
        cfg = plog.config
        if cfg.min_compaction_lag_ms > 0:
            limit = now - cfg.min_compaction_lag_ms
            for seg in segments[:-1]:
                if seg.next_offset > checkpoint and seg.max_timestamp > limit:
                    uncleanable = min(uncleanable, seg.base_offset)
                    break
        # round down to a segment boundary: the segment holding it is not cleanable
        bound = segments[0].base_offset
        for nxt in segments[1:]:
            if nxt.base_offset <= uncleanable:
                bound = nxt.base_offset
        clean_bytes = dirty_bytes = 0
        earliest_dirty_ts: int | None = None
        for i, seg in enumerate(segments[:-1]):
            end = segments[i + 1].base_offset
            if end <= checkpoint:
                clean_bytes += seg.size
            elif end <= bound:
                dirty_bytes += seg.size
                if earliest_dirty_ts is None and seg.size:
                    h = _first_header(seg)
                    if h is not None:
                        earliest_dirty_ts = h.base_timestamp
        need_now = (
            cfg.max_compaction_lag_ms < LONG_MAX
            and earliest_dirty_ts is not None
            and earliest_dirty_ts < now - cfg.max_compaction_lag_ms
        )
        return Cleanable(plog, checkpoint, bound, clean_bytes, dirty_bytes, need_now)

    def grab_filthiest(self, now: int) -> Cleanable | None:
        """The log to clean next (marked in progress), as Kafka's grabFilthiestCompactedLog."""
        candidates: list[Cleanable] = []
        expired: list[Cleanable] = []
        for topic, partition, plog in self.logs.partitions():
            if not plog.config.compact or plog.closed or (topic, partition) in self._in_progress:
                continue
            if self.uncleanable.get((topic, partition)) is plog:
                continue
            c = self.cleanable(plog, now)
            if c is None:
                continue
            if (c.needs_compaction_now and c.dirty_bytes > 0) or (
                c.dirty_bytes > 0 and c.ratio > plog.config.min_cleanable_dirty_ratio
            ):
                candidates.append(c)
            else:
                horizon = self.delete_horizons.get((topic, partition))
                if horizon is not None and horizon <= now:
                    expired.append(c)
        pick = max(candidates, key=lambda c: c.ratio, default=None) or (
            expired[0] if expired else None
        )
        if pick is not None:
            with self._lock:
                key = (pick.log.topic, pick.log.partition)
                if key in self._in_progress:
                    return None
                self._in_progress.add(key)
        return pick

    def clean_filthiest(self, offset_map: OffsetMap | None = None) -> CleanStats | None:
        """Clean the filthiest log once; None when no log needed it."""
        pick = self.grab_filthiest(self.clock.time_ms())
        if pick is None:
            return None
        key = (pick.log.topic, pick.log.partition)
        try:
            if offset_map is None:
                offset_map = OffsetMap(self.config.map_capacity)
            return self.clean(pick, offset_map)
        except CleanAborted as e:
            log.info("clean of %s-%s abandoned: %s", key[0], key[1], e)
            return None
        except Exception:
            # Kafka marks such a partition uncleanable rather than failing on it for ever
            log.exception("cleaning %s-%s failed: marked uncleanable", key[0], key[1])
            self.uncleanable[key] = pick.log
            return None
        finally:
            with self._lock:
                self._in_progress.discard(key)

    # -- cleaning -------------------------------------------------------------------------------

    def _step(self, name: str) -> None:
        if self.crash_hook is not None:
            self.crash_hook(name)

    def _check_stop(self) -> None:
        """Between batches and records: stop if asked, and hand the GIL over regularly."""
        now = time.perf_counter()
        if now - self._last_yield > YIELD_INTERVAL_S:
            time.sleep(0)
            self._last_yield = time.perf_counter()
        if self._stop.is_set():
            raise CleanAborted("the cleaner is stopping")

    def clean(self, c: Cleanable, offset_map: OffsetMap) -> CleanStats:
        """One clean of ``c.log`` (Kafka's Cleaner.doClean)."""
        plog = c.log
        started = time.monotonic()
        now = self.clock.time_ms()
        stats = CleanStats(plog.topic, plog.partition, c.ratio, c.first_dirty, started_ms=now)
        segments = list(plog.segments)[:-1]
        offset_map.clear()
        end = self._build_offset_map(segments, c.first_dirty, c.first_uncleanable, offset_map, plog)
        stats.map_full = end < c.first_uncleanable
        stats.end_offset = end
        last_batches: dict[int, int] = self.run_on_owner(
            lambda: {
                pid: e.batches[-1].last_offset
                for pid, e in plog.producer_state.producers.items()
                if e.batches
            }
        )
        to_clean = [s for s in segments if s.base_offset < end]
        horizons: list[int] = []
        for group in self._group_segments(plog, to_clean, segments):
            self._clean_group(plog, group, offset_map, last_batches, now, stats, horizons)
        key = (plog.topic, plog.partition)
        with self._lock:
            self.checkpoints[key] = end
            if horizons:
                self.delete_horizons[key] = min(horizons)
            else:
                self.delete_horizons.pop(key, None)
        self.write_checkpoint()
        self._step("checkpointed")
        stats.elapsed_s = time.monotonic() - started
        self.last_clean[key] = stats
        log.info(
            "cleaned %s-%s: dirty ratio %.2f, offsets [%d, %d), %d segments -> %d, %d -> %d"
            " bytes, %d of %d records removed (%d tombstones), %.3f s (%.1f MB/s)%s",
            plog.topic,
            plog.partition,
            stats.dirty_ratio,
            stats.first_dirty_offset,
            stats.end_offset,
            stats.segments_in,
            stats.segments_out,
            stats.bytes_read,
            stats.bytes_written,
            stats.records_removed,
            stats.records_read,
            stats.tombstones_removed,
            stats.elapsed_s,
            stats.bytes_read / 1e6 / stats.elapsed_s if stats.elapsed_s else 0.0,
            "; offset map full, the rest in a later pass" if stats.map_full else "",
        )
        return stats

    def _aborted_transactions(self, plog: PartitionLog) -> Callable[[int, int], list[AbortedTxn]]:
        def collect(start: int, end: int) -> list[AbortedTxn]:
            return self.run_on_owner(lambda: plog.collect_aborted_transactions(start, end))

        return collect

    def _build_offset_map(
        self,
        segments: list[LogSegment],
        start: int,
        bound: int,
        offset_map: OffsetMap,
        plog: PartitionLog | None = None,
    ) -> int:
        """Map the keys of [start, bound), leaving out aborted transactional batches and
        control batches; returns the end of the range mapped (the map's last offset + 1 when
        it filled up, else ``bound``)."""
        aborted = [] if plog is None else self._aborted_transactions(plog)(start, bound)
        txns = TxnCleaning(aborted)
        for i, seg in enumerate(segments):
            seg_end = segments[i + 1].base_offset if i + 1 < len(segments) else seg.next_offset
            if seg_end <= start or seg.base_offset >= bound:
                continue
            for h, data in _batches(seg):
                self._check_stop()
                if h.base_offset >= bound:
                    break
                if h.last_offset < start:
                    continue
                if h.is_control:
                    txns.on_control(h, data)
                    continue
                if txns.on_batch(h):
                    continue
                _, records = read_records(data, self._check_stop)
                for n, r in enumerate(records):
                    if n % 64 == 63:
                        self._check_stop()
                    if r.offset < start or r.key is None:
                        continue
                    if not offset_map.put(r.key, r.offset):
                        return offset_map.latest_offset + 1
        # every record below the bound was looked at: none of them is "past the map"
        offset_map.latest_offset = max(offset_map.latest_offset, bound - 1)
        return bound

    def _group_segments(
        self, plog: PartitionLog, to_clean: list[LogSegment], segments: list[LogSegment]
    ) -> list[list[LogSegment]]:
        """Kafka's groupSegmentsBySize: consecutive segments whose sizes add up to at most
        segment.bytes, whose indexes would fit segment.index.bytes, and whose offsets span
        less than 2**31."""
        cfg = plog.config
        groups: list[list[LogSegment]] = []
        position = {id(seg): k for k, seg in enumerate(segments)}
        i = 0
        while i < len(to_clean):
            group = [to_clean[i]]
            size = to_clean[i].size
            index_bytes = _index_estimate(to_clean[i], cfg.index_interval_bytes)
            i += 1
            while i < len(to_clean):
                seg = to_clean[i]
                nxt = position[id(seg)] + 1
                last = (segments[nxt].base_offset if nxt < len(segments) else seg.next_offset) - 1
                if (
                    size + seg.size > cfg.segment_bytes
                    or index_bytes + _index_estimate(seg, cfg.index_interval_bytes)
                    > cfg.max_index_bytes
                    or last - group[0].base_offset > INT32_MAX
                ):
                    break
                group.append(seg)
                size += seg.size
                index_bytes += _index_estimate(seg, cfg.index_interval_bytes)
                i += 1
            groups.append(group)
        return groups

    def _clean_group(
        self,
        plog: PartitionLog,
        group: list[LogSegment],
        offset_map: OffsetMap,
        last_batches: dict[int, int],
        now: int,
        stats: CleanStats,
        horizons: list[int],
    ) -> None:
        base = group[0].base_offset
        for suffix in (CLEANED_SUFFIX, SWAP_SUFFIX):
            for p in _segment_paths(plog.directory, base, suffix):
                p.unlink(missing_ok=True)
        cleaned = LogSegment(
            plog.directory,
            base,
            index_interval_bytes=plog.config.index_interval_bytes,
            max_index_bytes=plog.config.max_index_bytes,
            file_suffix=CLEANED_SUFFIX,
        )
        swapped = False
        step = self._step
        try:
            position = {id(seg): k for k, seg in enumerate(plog.segments)}
            last = group[-1]
            k = position.get(id(last))
            upper = (
                plog.segments[k + 1].base_offset
                if k is not None and k + 1 < len(plog.segments)
                else last.next_offset
            )
            txns = TxnCleaning(self._aborted_transactions(plog)(base, upper), cleaned.txn_index)
            out = bytearray()
            out_headers: list[BatchHeader] = []
            for seg in group:
                stats.segments_in += 1
                for h, data in _batches(seg):
                    self._check_stop()
                    stats.bytes_read += h.size
                    kept = self._filter_batch(
                        h, data, offset_map, last_batches, plog, now, stats, horizons, txns
                    )
                    if kept is None:
                        continue
                    out_headers.append(unpack_header(kept)._replace(position=len(out)))
                    out += kept
                    if len(out) >= self.config.io_buffer_size:
                        cleaned.append_batches(out, out_headers)
                        stats.bytes_written += len(out)
                        out, out_headers = bytearray(), []
            cleaned.append_batches(out, out_headers)
            stats.bytes_written += len(out)
            cleaned.flush()
            step("cleaned written")
            cleaned.change_file_suffixes(
                CLEANED_SUFFIX, SWAP_SUFFIX, on_rename=lambda p: step(f"renamed to {p.name}")
            )
            swapped = self.run_on_owner(lambda: plog.replace_segments(cleaned, group, step=step))
            if not swapped:
                raise CleanAborted("the log changed during the clean")
            stats.segments_out += 1
            step("swapped")
        except Exception:
            # (a BaseException is a simulated kill in the tests: files stay as they are)
            if not swapped and not cleaned.deleted:
                cleaned.delete_files()
            raise
        cleaned.release()

    def _filter_batch(
        self,
        h: BatchHeader,
        data: bytes,
        offset_map: OffsetMap,
        last_batches: dict[int, int],
        plog: PartitionLog,
        now: int,
        stats: CleanStats,
        horizons: list[int],
        txns: TxnCleaning | None = None,
    ) -> bytes | None:
        """The batch as the clean leaves it: unchanged, rewritten, empty, or gone (None)."""
        txns = txns or TxnCleaning([])
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
            horizon = now + plog.config.delete_retention_ms
            horizons.append(horizon)
            _, records = read_records(data, self._check_stop)
            return rebuild_batch(h, records, delete_horizon_ms=horizon)
        last_of_producer = h.has_producer_id and last_batches.get(h.producer_id) == h.last_offset
        if txns.on_batch(h):  # data of an aborted transaction
            stats.records_read += h.records_count
            stats.records_removed += h.records_count
            if last_of_producer:
                stats.batches_emptied += 1
                return empty_batch(h)
            return None
        _, records = read_records(data, self._check_stop)
        stats.records_read += len(records)
        if not records:  # an empty batch kept for its producer: only while it is the last
            return data if last_of_producer else None
        has_horizon = has_delete_horizon(h)
        retain_deletes = not has_horizon or now < h.base_timestamp
        kept = []
        tombstones = False
        for n, r in enumerate(records):
            if n % 64 == 63:
                self._check_stop()
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
        horizon = now + plog.config.delete_retention_ms if set_horizon else None
        if tombstones:
            horizons.append(horizon if horizon is not None else h.base_timestamp)
        if len(kept) == len(records) and not set_horizon:
            return data
        if kept:
            if not set_horizon and has_horizon:
                horizon = h.base_timestamp  # keep the horizon stamped by an earlier clean
            return rebuild_batch(h, kept, delete_horizon_ms=horizon, every_64=self._check_stop)
        if last_of_producer:
            stats.batches_emptied += 1
            return empty_batch(h)
        return None

    # -- the checkpoint -------------------------------------------------------------------------

    def write_checkpoint(self) -> None:
        """``cleaner-offset-checkpoint``: the first dirty offset of every log still here."""
        with self._lock:
            present = {(t, p) for t, p, _ in self.logs.partitions()}
            for key in [k for k in self.checkpoints if k not in present]:
                del self.checkpoints[key]
            entries = sorted((t, p, o) for (t, p), o in self.checkpoints.items())
            write_checkpoint(self.checkpoint_path, entries)


def _segment_paths(directory: Path, base: int, suffix: str) -> list[Path]:
    return [
        directory / f"{base:020d}{ext}{suffix}"
        for ext in (".log", ".index", ".timeindex", ".txnindex")
    ]


def _index_estimate(seg: LogSegment, interval: int) -> int:
    return (seg.size // max(1, interval) + 1) * 12


def _first_header(seg: LogSegment) -> BatchHeader | None:
    try:
        fd = os.open(seg.log_path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        data = os.pread(fd, 61, 0)
    finally:
        os.close(fd)
    return unpack_header(data) if len(data) == 61 else None


def _batches(seg: LogSegment):  # noqa: ANN202
    """(header, bytes) of every batch of ``seg``, read through a descriptor of our own (the
    owner may release the segment's meanwhile); CleanAborted if the files went away."""
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
