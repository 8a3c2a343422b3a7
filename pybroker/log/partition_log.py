"""The log of one partition: its segments, offsets, roll, retention, truncation and recovery.

Directory ``<log.dir>/<topic>-<partition>/`` holds, as Kafka's does:

* ``<20-digit base offset>.log / .index / .timeindex``: segments (pybroker/log/segment.py,
  pybroker/log/index.py)
* ``<20-digit offset>.snapshot``: producer state (pybroker/log/producer_state.py)
* ``*.deleted``: segment files waiting to be unlinked (file.delete.delay.ms after retention)

Offsets: log start offset (first segment's base offset), log end offset (LEO, next offset to
assign), high watermark (a separate attribute: == LEO after each append on a single node;
replication will move it), recovery point (everything below it has been fsynced).

Recovery on open (Kafka's LogLoader): segments wholly below the recovery point, or every
segment after a clean shutdown, are trusted: their indexes are sanity-checked (rebuilt if
missing or corrupt) and only the batch headers after the last index entry are read.  Segments
from the recovery point on are scanned batch by batch with CRC checks; the first torn or
corrupt batch and everything after it are truncated and later segments deleted.  Recovery cost
thus grows with the unflushed tail, not with the log.  Producer state comes from the newest
snapshot at or below the recovered LEO plus the batch headers after it.

Threading: one owner (the event loop) calls append/read/roll/retention/truncate.  ``flush``
and ``delete_pending_files`` only fsync or unlink files and may run in a worker thread.
"""

from __future__ import annotations

import bisect
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from pybroker.clock import SYSTEM_CLOCK, Clock
from pybroker.errors import ErrorCode, KafkaError
from pybroker.log.producer_state import ProducerStateManager
from pybroker.log.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    FileSlice,
    LogSegment,
)
from pybroker.wire.records import (
    LOG_APPEND_TIME,
    BatchHeader,
    decode_records,
    set_base_offset,
    set_max_timestamp,
)

INT32_MAX = 2**31 - 1
_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex)$")


@dataclass(frozen=True)
class LogConfig:
    """Kafka's topic-level names: segment.bytes, segment.ms, retention.ms, retention.bytes,
    index.interval.bytes, segment.index.bytes, message.timestamp.type, file.delete.delay.ms.
    A negative retention disables that kind of retention."""

    segment_bytes: int = 1024 * 1024 * 1024
    roll_ms: int = 7 * 24 * 3600 * 1000
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    index_interval_bytes: int = 4096
    max_index_bytes: int = 10 * 1024 * 1024
    message_timestamp_type: str = "CreateTime"
    file_delete_delay_ms: int = 60_000


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    duplicate: bool = False  # an idempotent retry: nothing appended, original offsets


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


class PartitionLog:
    def __init__(self, directory: Path, config: LogConfig, clock: Clock) -> None:
        self.directory = directory
        self.config = config
        self.clock = clock
        parsed = parse_partition_dir(directory.name)
        self.topic, self.partition = parsed if parsed else (directory.name, 0)
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.high_watermark = 0
        self.recovery_point = 0
        self.producer_state = ProducerStateManager(directory)
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self.closed = False

    # -- opening and recovery -----------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        clock: Clock = SYSTEM_CLOCK,
        *,
        recovery_point: int = 0,
        clean_shutdown: bool = False,
    ) -> PartitionLog:
        """Open (creating if needed) and recover a partition log.  ``recovery_point`` comes
        from the log dir's recovery-point-offset-checkpoint; ``clean_shutdown`` from its
        ``.kafka_cleanshutdown`` marker (LogManager passes both)."""
        directory.mkdir(parents=True, exist_ok=True)
        log = cls(directory, config, clock)
        log._load(recovery_point, clean_shutdown)
        return log

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.max_index_bytes,
        )

    def _load(self, recovery_point: int, clean_shutdown: bool) -> None:
        now = self.clock.time_ms()
        bases: set[int] = set()
        orphans: list[Path] = []
        for name in os.listdir(self.directory):
            path = self.directory / name
            if name.endswith(DELETED_SUFFIX) or name.endswith(".tmp"):
                path.unlink(missing_ok=True)  # interrupted deletion or atomic write
                continue
            m = _SEGMENT_FILE.match(name)
            if m is None:
                continue  # unknown files (snapshots, operator notes) are left alone
            if m.group(2) == "log":
                bases.add(int(m.group(1)))
            else:
                orphans.append(path)
        for path in orphans:  # indexes without a .log: Kafka deletes them
            if int(path.name[:20]) not in bases:
                path.unlink(missing_ok=True)
        ordered = sorted(bases)
        truncated_at: int | None = None
        for i, base in enumerate(ordered):
            seg = self._new_segment(base)
            if truncated_at is not None:
                seg.delete_files()  # after a torn segment: Kafka deletes the rest
                continue
            next_base = ordered[i + 1] if i + 1 < len(ordered) else None
            trusted = clean_shutdown or (next_base is not None and next_base <= recovery_point)
            if trusted:
                seg.load(now)
            else:
                if self.segments and base < self.segments[-1].next_offset:
                    seg.delete_files()  # overlaps its predecessor: cannot be valid
                    truncated_at = base
                    continue
                if seg.recover(now):
                    truncated_at = base
                seg.flush()
            self.segments.append(seg)
        if not self.segments:
            self.segments.append(self._new_segment(0))
        self._bases = [s.base_offset for s in self.segments]
        self.log_start_offset = self.segments[0].base_offset
        self.log_end_offset = self.segments[-1].next_offset
        self.high_watermark = self.log_end_offset
        self.recovery_point = self.log_end_offset
        self._load_producer_state()

    def _load_producer_state(self) -> None:
        ps = self.producer_state
        start = ps.load_latest_snapshot(self.log_end_offset)
        if start is None:
            ps.reset(self.log_start_offset)
            start = self.log_start_offset
        start = max(start, self.log_start_offset)
        if start < self.log_end_offset:
            for seg in self.segments:
                if seg.next_offset <= start:
                    continue
                h0 = seg.translate_offset(start) if seg.base_offset < start else None
                for h in seg.headers_from(h0.position if h0 else 0):
                    if h.base_offset >= start:
                        ps.update(h, h.base_offset)
        ps.map_end_offset = self.log_end_offset

    # -- appending ----------------------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    def _should_roll(self, size: int, last_offset_delta: int, now: int) -> bool:
        seg = self.active_segment
        if seg.size == 0:
            return False
        if seg.size > self.config.segment_bytes - size:
            return True
        if seg.rolling_base_ms is not None and now - seg.rolling_base_ms > self.config.roll_ms:
            return True
        if seg.should_roll_for_index():
            return True
        return self.log_end_offset + last_offset_delta - seg.base_offset > INT32_MAX

    def roll(self) -> LogSegment:
        """Start a new active segment at the LEO (no-op if the active one is empty) and
        snapshot the producer state there, as Kafka does."""
        if self.active_segment.size == 0:
            return self.active_segment
        seg = self._new_segment(self.log_end_offset)
        self.segments.append(seg)
        self._bases.append(seg.base_offset)
        self.producer_state.map_end_offset = self.log_end_offset
        self.producer_state.take_snapshot()
        return seg

    def append(self, buf: bytearray, batches: list[BatchHeader]) -> AppendInfo:
        """Append validated batches (parse_batches) held in ``buf``: assign offsets by patching
        base offsets in place and write the bytes once.  Idempotent retries are answered with
        the original offsets and not written again."""
        if not batches:
            raise ValueError("nothing to append")
        dup = self.producer_state.check(batches)
        if dup is not None:
            return AppendInfo(dup.first_offset, dup.last_offset, -1, self.log_start_offset, True)
        start = batches[0].position
        end = batches[-1].position + batches[-1].size
        size = end - start
        if size > self.config.segment_bytes:
            raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE, f"{size} bytes > segment.bytes")
        now = self.clock.time_ms()
        first = self.log_end_offset
        offset = first
        for h in batches:
            set_base_offset(buf, h.position, offset)
            offset += h.last_offset_delta + 1
        append_time = -1
        if self.config.message_timestamp_type == "LogAppendTime":
            append_time = now
            for h in batches:
                set_max_timestamp(buf, h.position, LOG_APPEND_TIME, now)
        if self._should_roll(size, offset - 1 - first, now):
            self.roll()
        self.active_segment.append(
            memoryview(buf)[start:end], batches, first, now, None if append_time < 0 else now
        )
        offset = first
        for h in batches:
            self.producer_state.update(h, offset, None if append_time < 0 else now)
            offset += h.last_offset_delta + 1
        self.log_end_offset = offset
        self.high_watermark = offset
        return AppendInfo(first, offset - 1, append_time, self.log_start_offset)

    # -- reading ------------------------------------------------------------------------------

    def _segment_index(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        min_one_batch: bool = True,
        max_offset: int | None = None,
    ) -> FileSlice | None:
        """Whole batches from the one containing ``offset`` (one segment per call).  None at
        the LEO; KafkaError(OFFSET_OUT_OF_RANGE) outside [log start, LEO]."""
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} not in [{self.log_start_offset}, {self.log_end_offset}]",
            )
        if offset == self.log_end_offset:
            return None
        for seg in self.segments[self._segment_index(offset) :]:
            if seg.next_offset <= offset:
                continue
            if max_offset is not None and seg.base_offset >= max_offset:
                return None
            got = seg.read(offset, max_bytes, min_one_batch, max_offset)
            if got is not None or seg.size:
                return got
        return None

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets by timestamp: (offset, timestamp) of the first record whose timestamp is
        >= ``timestamp`` (Kafka decompresses the batch to find it), or None."""
        for seg in self.segments:
            if seg.max_timestamp >= timestamp:
                got = seg.find_offset_by_timestamp(timestamp, self.log_start_offset)
                if got is not None:
                    return got
        return None

    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        """ListOffsets -3 (KIP-734): (offset, timestamp) of the first record with the largest
        timestamp in the log, or None if the log is empty."""
        best: LogSegment | None = None
        for seg in self.segments:
            if seg.size and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return None
        h = best.translate_offset(best.offset_of_max_timestamp)
        if h is not None:
            for r in decode_records(best.read_batch(h)):
                if r.timestamp == best.max_timestamp:
                    return r.offset, r.timestamp
        return best.offset_of_max_timestamp, best.max_timestamp

    # -- retention ----------------------------------------------------------------------------

    def delete_old_segments(self) -> int:
        """Retention by time, then by size, as Kafka's deleteOldSegments: whole segments from
        the oldest on, never past the high watermark; if every segment goes, roll first so an
        empty active segment remains at the LEO.  Files are renamed to ``*.deleted`` and
        unlinked later by :meth:`delete_pending_files`.  Returns the number of segments."""
        now = self.clock.time_ms()
        deleted = 0
        if self.config.retention_ms >= 0:
            deleted += self._delete_segments(
                lambda seg, _: now - seg.max_timestamp > self.config.retention_ms
            )
        if self.config.retention_bytes >= 0:
            excess = self.size - self.config.retention_bytes

            def over_size(seg: LogSegment, _: LogSegment | None) -> bool:
                nonlocal excess
                if excess - seg.size >= 0:
                    excess -= seg.size
                    return True
                return False

            deleted += self._delete_segments(over_size)
        return deleted

    def _delete_segments(self, predicate) -> int:  # noqa: ANN001
        deletable: list[LogSegment] = []
        for i, seg in enumerate(self.segments):
            nxt = self.segments[i + 1] if i + 1 < len(self.segments) else None
            if nxt is None and seg.size == 0:
                break
            upper = nxt.base_offset if nxt else self.log_end_offset
            if not (predicate(seg, nxt) and self.high_watermark >= upper):
                break
            deletable.append(seg)
        if not deletable:
            return 0
        if len(deletable) == len(self.segments):
            self.roll()
        due = self.clock.time_ms() + self.config.file_delete_delay_ms
        for seg in deletable:
            seg.rename_for_delete()
            self._pending_deletes.append((due, seg))
        del self.segments[: len(deletable)]
        del self._bases[: len(deletable)]
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self.producer_state.delete_snapshots_before(self.log_start_offset)
        return len(deletable)

    def delete_pending_files(self, *, force: bool = False) -> int:
        """Unlink ``*.deleted`` files whose file.delete.delay.ms has passed (all if ``force``).
        Safe in a worker thread.  Returns the number of segments removed."""
        now = self.clock.time_ms()
        keep, done = [], 0
        for due, seg in list(self._pending_deletes):
            if force or due <= now:
                seg.delete_files()
                done += 1
            else:
                keep.append((due, seg))
        self._pending_deletes = keep
        return done

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    # -- truncation, flush, close -------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove everything at and above ``offset`` (whole batches), as a follower does
        before replicating from a new leader."""
        if offset >= self.log_end_offset:
            return
        if offset <= self.log_start_offset:
            self.truncate_fully_and_start_at(offset if offset >= 0 else self.log_start_offset)
            return
        while len(self.segments) > 1 and self.active_segment.base_offset >= offset:
            seg = self.segments.pop()
            self._bases.pop()
            seg.delete_files()
        self.active_segment.truncate_to(offset)
        self.log_end_offset = self.active_segment.next_offset
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self._reload_producer_state()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        for seg in self.segments:
            seg.delete_files()
        self.segments = [self._new_segment(offset)]
        self._bases = [offset]
        self.log_start_offset = self.log_end_offset = self.high_watermark = offset
        self.recovery_point = offset
        self._reload_producer_state()

    def _reload_producer_state(self) -> None:
        for off in self.producer_state.snapshot_offsets():
            if off > self.log_end_offset:
                (self.directory / f"{off:020d}.snapshot").unlink(missing_ok=True)
        self._load_producer_state()

    def flush(self) -> int:
        """fsync every segment holding data at or above the recovery point, then advance the
        recovery point to the LEO seen at the start.  May run in a worker thread."""
        target = self.log_end_offset
        for seg in list(self.segments):
            if seg.next_offset > self.recovery_point or seg is self.segments[-1]:
                seg.flush()
        self.recovery_point = max(self.recovery_point, target)
        return self.recovery_point

    def close(self) -> None:
        """Flush, snapshot the producer state at the LEO (fsynced), close the files."""
        if self.closed:
            return
        self.flush()
        self.producer_state.map_end_offset = self.log_end_offset
        self.producer_state.take_snapshot(fsync=True)
        for seg in self.segments:
            seg.close()
        self.delete_pending_files(force=True)
        self.closed = True

    def delete(self) -> None:
        """Close and remove every file of this log (the directory itself is LogManager's)."""
        for seg in self.segments:
            seg.delete_files()
        self.delete_pending_files(force=True)
        self.closed = True


__all__ = [
    "AppendInfo",
    "FileSlice",
    "INDEX_SUFFIX",
    "LOG_SUFFIX",
    "LogConfig",
    "PartitionLog",
    "TIME_INDEX_SUFFIX",
    "parse_partition_dir",
]
