"""The log cleaner: compaction of logs whose cleanup.policy includes ``compact`` (Kafka's
LogCleaner, LogCleanerManager and Cleaner).  The dirtiest log above min.cleanable.dirty.ratio
(or past max.compaction.lag.ms) is cleaned first; a record stays when its key's latest offset
is its own, a tombstone until its delete horizon, and offsets never change.  The clean's work
on files (pybroker/log/cleaner_job.py) runs in a worker process (log/cleaner_process.py); its one handoff to the
owner of the logs (``run_on_owner``) is the swap of each cleaned group and two reads.  Kafka's
``.cleaned`` / ``.swap`` / ``.deleted`` file protocol makes a crash anywhere safe.  Contract,
transactions and crash safety: docs/internals.md ("pybroker/log/cleaner.py").
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pybroker.clock import SYSTEM_CLOCK, Clock
from pybroker.log.checkpoints import read_checkpoint, write_checkpoint
from pybroker.log.cleaner_job import (
    CleanAborted,
    CleanedGroup,
    CleanJob,
    OffsetMap,
    SegmentRef,
    first_header,
    run_clean_job,
    segment_paths,
)
from pybroker.log.cleaner_process import CleanerProcess
from pybroker.log.manager import LogManager
from pybroker.log.partition_log import PartitionLog
from pybroker.log.segment import CLEANED_SUFFIX, SWAP_SUFFIX, LogSegment

__all__ = ["CleanAborted", "CleanStats", "CleanerConfig", "LogCleaner", "OffsetMap"]

log = logging.getLogger("pybroker.log.cleaner")

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
# Memory of one offset map entry: Kafka's SkimpyOffsetMap packs a 16-byte MD5 and an 8-byte
# offset into 24 bytes; here an entry is a dict item (the key, or its 16-byte MD5 for keys of
# 16 bytes or more -> an int packing offset and position) plus its place in pass 2's sorted
# list of values: at most 146 bytes in CPython 3.11 (tracemalloc, 100,000 to 1,000,000
# entries, MD5 keys, offsets above 2**40).  The capacity is counted in these, so the map stays
# within log.cleaner.dedupe.buffer.size.
BYTES_PER_ENTRY = 148
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
    # each thread hands the reading and writing to a process of its own (the broker): its
    # pure-Python work then never holds the event loop's GIL.  Off: in the thread (tests).
    use_process: bool = False

    @property
    def map_capacity(self) -> int:
        """Entries each thread's offset map holds (at the load factor)."""
        per_thread = min(self.dedupe_buffer_size // max(1, self.threads), INT32_MAX)
        return max(1, int(per_thread // BYTES_PER_ENTRY * self.dedupe_buffer_load_factor))


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


def _direct(fn: Callable[[], T]) -> T:
    return fn()


def discard_cleaned(directory: Path) -> None:
    """Delete the ``.cleaned`` files of a clean that ended before its swaps (one clean of a
    log at a time: every ``.cleaned`` file in its directory is that clean's)."""
    try:
        for path in directory.glob("*" + CLEANED_SUFFIX):
            path.unlink(missing_ok=True)
    except OSError:
        pass  # (the directory went: a deleted or moved log)


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
        self.compacted_logs = False  # a compacted log was seen: the processes are started
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
                target=self._run, args=(i,), name=f"pybroker-log-cleaner-thread-{i}", daemon=True
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

    def _run(self, i: int) -> None:
        process = None
        if self.config.use_process:
            process = CleanerProcess(f"pybroker-log-cleaner-{i}")
            offset_map = None  # (the process holds it)
        else:
            offset_map = OffsetMap(self.config.map_capacity)
        try:
            while not self._stop.is_set():
                cleaned = False
                try:
                    cleaned = self.clean_filthiest(offset_map, process) is not None
                    if process is not None and not process.started and self.compacted_logs:
                        process.start()  # warm before the first clean a compacted log needs
                except Exception:
                    log.exception("log cleaner failed")
                if not cleaned:
                    self._wake.wait(self.config.backoff_ms / 1000.0)
                    self._wake.clear()
        finally:
            if process is not None:
                process.close()

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
                    h = first_header(seg)
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
            if not plog.config.compact or plog.closed:
                continue
            self.compacted_logs = True
            if (topic, partition) in self._in_progress:
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

    def clean_filthiest(
        self, offset_map: OffsetMap | None = None, process: CleanerProcess | None = None
    ) -> CleanStats | None:
        """Clean the filthiest log once (the work in ``process`` if given); None when no
        log needed it."""
        pick = self.grab_filthiest(self.clock.time_ms())
        if pick is None:
            return None
        key = (pick.log.topic, pick.log.partition)
        try:
            if offset_map is None and process is None:
                offset_map = OffsetMap(self.config.map_capacity)
            return self.clean(pick, offset_map, process)
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

    def clean(
        self,
        c: Cleanable,
        offset_map: OffsetMap | None = None,
        process: CleanerProcess | None = None,
    ) -> CleanStats:
        """One clean of ``c.log`` (Kafka's Cleaner.doClean): the work on files
        (pybroker/log/cleaner_job.py) here or in ``process``, then each group's swap."""
        plog = c.log
        started = time.monotonic()
        now = self.clock.time_ms()
        stats = CleanStats(plog.topic, plog.partition, c.ratio, c.first_dirty, started_ms=now)
        segments = list(plog.segments)[:-1]
        job = self._job(c, segments, now)
        if process is not None:
            try:
                result = process.run(job, self._stop.is_set)
            except Exception:
                discard_cleaned(plog.directory)  # what a process killed mid-write left
                raise
        else:
            result = run_clean_job(job, offset_map, self._check_stop)
        stats.map_full = result.end_offset < c.first_uncleanable
        stats.end_offset = result.end_offset
        for name, value in vars(result.stats).items():
            setattr(stats, name, value)
        by_base = {seg.base_offset: seg for seg in segments}
        for k, group in enumerate(result.groups):
            try:
                self._swap(plog, group, [by_base[b] for b in group.replaced])
            except Exception:
                for later in result.groups[k + 1 :]:  # written, never to be swapped
                    for path in segment_paths(plog.directory, later.base_offset, CLEANED_SUFFIX):
                        path.unlink(missing_ok=True)
                raise
            stats.segments_out += 1
        key = (plog.topic, plog.partition)
        with self._lock:
            self.checkpoints[key] = result.end_offset
            if result.horizons:
                self.delete_horizons[key] = min(result.horizons)
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

    def _job(self, c: Cleanable, segments: list[LogSegment], now: int) -> CleanJob:
        """What the work on files needs, as plain values (asking the owner of the log for
        its aborted transactions and its producers' last batches)."""
        plog = c.log
        refs = [SegmentRef(s.base_offset, s.log_path, s.size, s.next_offset) for s in segments]
        start = refs[0].base_offset if refs else c.first_dirty
        upper = c.first_uncleanable
        if len(plog.segments) > len(segments):
            upper = max(upper, plog.segments[len(segments)].base_offset)
        aborted = self.run_on_owner(lambda: plog.collect_aborted_transactions(start, upper))
        last_batches: dict[int, int] = self.run_on_owner(
            lambda: {
                pid: e.batches[-1].last_offset
                for pid, e in plog.producer_state.producers.items()
                if e.batches
            }
        )
        cfg = plog.config
        return CleanJob(
            directory=plog.directory,
            segments=refs,
            first_dirty=c.first_dirty,
            first_uncleanable=c.first_uncleanable,
            map_capacity=self.config.map_capacity,
            segment_bytes=cfg.segment_bytes,
            index_interval_bytes=cfg.index_interval_bytes,
            max_index_bytes=cfg.max_index_bytes,
            delete_retention_ms=cfg.delete_retention_ms,
            io_buffer_size=self.config.io_buffer_size,
            aborted=aborted,
            last_batches=last_batches,
            now=now,
        )

    def _swap(self, plog: PartitionLog, group: CleanedGroup, old: list[LogSegment]) -> None:
        """Put the group's ``.cleaned`` segment in place of ``old`` (Kafka's
        replaceSegments): rename it to ``.swap``, then the owner swaps it in."""
        step = self._step
        cleaned = LogSegment(
            plog.directory,
            group.base_offset,
            index_interval_bytes=plog.config.index_interval_bytes,
            max_index_bytes=plog.config.max_index_bytes,
            file_suffix=CLEANED_SUFFIX,
            descriptors=plog.descriptors,
        )
        swapped = False
        try:
            cleaned.load(self.clock.time_ms())
            step("cleaned written")
            cleaned.change_file_suffixes(
                CLEANED_SUFFIX, SWAP_SUFFIX, on_rename=lambda p: step(f"renamed to {p.name}")
            )
            swapped = self.run_on_owner(lambda: plog.replace_segments(cleaned, old, step=step))
            if not swapped:
                raise CleanAborted("the log changed during the clean")
            step("swapped")
        except Exception:
            # (a BaseException is a simulated kill in the tests: files stay as they are)
            if not swapped and not cleaned.deleted:
                cleaned.delete_files()
            raise
        cleaned.release()

    # -- the checkpoint -------------------------------------------------------------------------

    def write_checkpoint(self) -> None:
        """``cleaner-offset-checkpoint``: the first dirty offset of every log still here."""
        with self._lock:
            present = {(t, p) for t, p, _ in self.logs.partitions()}
            for key in [k for k in self.checkpoints if k not in present]:
                del self.checkpoints[key]
            entries = sorted((t, p, o) for (t, p), o in self.checkpoints.items())
            write_checkpoint(self.checkpoint_path, entries)
