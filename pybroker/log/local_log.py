"""The segments' side of a partition log (Kafka's LocalLog): reads, truncation, the flush that
moves the recovery point, the log cleaner's swap, close, rename and deletion.  A part of
PartitionLog (partition_log.py: its fields, opening and appends, Kafka's UnifiedLog), whose
fields it uses; docs/internals.md ("pybroker/log/partition_log.py").
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from pathlib import Path

from pybroker.errors import ErrorCode, KafkaError
from pybroker.log.checkpoints import fsync_dir
from pybroker.log.descriptors import FileSlice
from pybroker.log.segment import SWAP_SUFFIX, LogSegment
from pybroker.wire.records import BatchHeader


class LocalLog:
    """PartitionLog's segments (module docstring)."""

    # -- reading ------------------------------------------------------------------------------

    def _headers_from(self, start: int) -> Iterator[BatchHeader]:
        """Headers of every batch from the one containing offset ``start`` to the LEO."""
        for seg in self.segments[self._segment_index(start) :]:
            if seg.next_offset <= start:
                continue
            self._reading(seg)
            h0 = seg.translate_offset(start) if seg.base_offset < start else None
            yield from seg.headers_from(h0.position if h0 else 0)

    def _segment_headers_from(self, start: int) -> Iterator[tuple[LogSegment, BatchHeader]]:
        for seg in self.segments[self._segment_index(start) :]:
            if seg.next_offset <= start:
                continue
            self._reading(seg)
            h0 = seg.translate_offset(start) if seg.base_offset < start else None
            for h in seg.headers_from(h0.position if h0 else 0):
                yield seg, h

    def _segment_index(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    def _reading(self, seg: LogSegment) -> None:
        """About to read ``seg``: if it is an older segment, it becomes the one older segment
        whose descriptor stays open (the previous one is released)."""
        if seg is self.segments[-1] or seg is self._reader:
            return
        prev, self._reader = self._reader, seg
        if prev is not None and prev is not self.segments[-1]:
            prev.release()

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
            self._reading(seg)
            got = seg.read(offset, max_bytes, min_one_batch, max_offset)
            if got is not None or seg.size:
                return got
        return None

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    # -- truncation, flush, close -------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove everything at and above ``offset`` (whole batches: the LEO may end below
        ``offset`` if it falls inside a batch), as a follower does before replicating from a
        new leader.  The high watermark, recovery point, producer state (newest snapshot at
        or below the new LEO plus the headers after it) and epoch cache follow.

        At or above the LEO no record goes, but the epoch cache still loses its entries
        starting at the LEO, as Kafka's truncateTo (why: docs/replication.md, Followers)."""
        if offset >= self.log_end_offset:
            self.leader_epochs.truncate_from_end(self.log_end_offset)
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
        self._note_truncation(self.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        self._reload_producer_state()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset`` (a follower whose log
        is wholly below the leader's log start).  As Kafka: producer state and its snapshots
        and the epoch cache are cleared."""
        for seg in self.segments:
            seg.delete_files()
        self.segments = [self._new_segment(offset)]
        self._bases = [offset]
        self.log_start_offset = self.log_end_offset = self.high_watermark = offset
        self.recovery_point = offset
        self._note_truncation(offset)
        self.producer_state.truncate_fully_and_start_at(offset)
        self.leader_epochs.clear()

    def _note_truncation(self, offset: int) -> None:
        self._flushed = None  # (the same end and size may hold other bytes now)
        self._truncations += 1
        self.truncated_to = offset if self.truncated_to is None else min(self.truncated_to, offset)
        future = self.future_copy
        if future is not None and future.log_end_offset > offset:
            future.truncate_to(offset)

    # -- the log cleaner's swap ---------------------------------------------------------------

    def replace_segments(
        self,
        new: LogSegment,
        old: list[LogSegment],
        step: Callable[[str], None] | None = None,
    ) -> bool:
        """Swap a cleaned segment (files ``*.swap``, fsynced) in for ``old``, consecutive
        segments of this log that it replaces (Kafka's replaceSegments).  Called by the owner
        (the event loop), the one writer of the segment list.  Returns False, changing
        nothing, when the log moved on meanwhile (a retention, truncation or deletion took
        one of ``old``); the caller then deletes ``new``.  Order on disk and recovery of an
        interrupted swap: docs/internals.md (log cleaner)."""
        if self.closed or not old or not new.log_path.exists():
            return False  # (a deleted topic's directory was renamed away)
        try:
            i = next(k for k, seg in enumerate(self.segments) if seg is old[0])
        except StopIteration:
            return False
        if self.segments[i : i + len(old)] != old or i + len(old) >= len(self.segments):
            return False  # changed, or would replace the active segment
        if any(seg.deleted for seg in old) or new.base_offset != old[0].base_offset:
            return False
        due = self.clock.time_ms() + self.config.file_delete_delay_ms
        for seg in old:
            if seg is self._reader:
                self._reader = None
            seg.rename_for_delete()
            seg.release()
            self._pending_deletes.append((due, seg))
            if step is not None:
                step(f"renamed {seg.log_path.name}")
        new.change_file_suffixes(
            SWAP_SUFFIX, "", None if step is None else lambda p: step(f"renamed to {p.name}")
        )
        self.segments[i : i + len(old)] = [new]
        self._bases[i : i + len(old)] = [new.base_offset]
        return True

    def _reload_producer_state(self) -> None:
        for off in self.producer_state.snapshot_offsets():
            if off > self.log_end_offset:
                (self.directory / f"{off:020d}.snapshot").unlink(missing_ok=True)
        self._load_producer_state()

    def flush(self, upto: int | None = None) -> int:
        """fsync the segments holding data from the recovery point to ``upto`` (None: the LEO
        seen now; a roll passes the new segment's base, Kafka's flushUptoOffsetExclusive), each
        .log then its index entries (written here: a segment below the recovery point has
        whole indexes on disk), and first the producer-state snapshots the rolls wrote up to
        there, then the directory if a segment or snapshot is new there (Kafka's roll flush and
        LocalLog.flush); the recovery point moves there unless a truncation ran meanwhile (or
        an fsync failed); older segments' descriptors are released.  May run in a worker
        thread."""
        target = self.log_end_offset if upto is None else min(upto, self.log_end_offset)
        truncations, segments = self._truncations, list(self.segments)
        active = segments[-1]
        new_files = self.producer_state.flush_snapshots(target)
        if upto is not None and target <= self.recovery_point:
            if new_files:
                fsync_dir(self.directory)
            return self.recovery_point
        # nothing appended, truncated or rolled since the last flush: no fsync (an idle log
        # costs nothing); an empty log's recovery point stays (nothing below it to protect)
        unchanged = (target, active, active.size)
        empty = len(segments) == 1 and active.size == 0 and target == self.recovery_point
        if (unchanged != self._flushed or target != self.recovery_point) and not empty:
            for seg in segments:
                below = seg.next_offset > self.recovery_point and seg.base_offset < target
                if below or (seg is active and upto is None):
                    seg.flush()
                    new_files |= seg.base_offset >= self.recovery_point
            self._flushed = unchanged if upto is None else self._flushed
        if new_files:  # a new segment's or snapshot's entry (Kafka's LocalLog.flush)
            fsync_dir(self.directory)
        if not empty:
            self.leader_epochs.sync()  # (its writes are not fsynced: leader_epoch.py)
        for seg in segments[:-1]:
            if seg.has_handle:
                seg.release()
        if truncations == self._truncations:
            self.recovery_point = max(self.recovery_point, target)
        return self.recovery_point

    def close(self) -> None:
        """Flush, snapshot the producer state at the LEO (fsynced), close the files."""
        if self.closed:
            return
        if self.leader_epochs.dirty:
            self.leader_epochs.flush()
        self.flush()
        self.producer_state.map_end_offset = self.log_end_offset
        self.producer_state.take_snapshot(fsync=True)
        for seg in self.segments:
            seg.close()
        self.delete_pending_files(force=True)
        self.closed = True

    def moved_to(self, directory: Path) -> None:
        """LogManager renamed this log's directory (Kafka's renameDir, for a deletion): every
        path it holds now names the new place, so that removing its files later cannot touch
        a new log created under the old name."""
        self.directory = directory
        for seg in [*self.segments, *(s for _, s in self._pending_deletes)]:
            seg.moved_to(directory)
        self.producer_state.directory = directory
        if self.leader_epochs.path is not None:
            self.leader_epochs.path = directory / self.leader_epochs.path.name

    def delete(self) -> None:
        """Close and remove every file of this log (the directory itself is LogManager's)."""
        for seg in self.segments:
            seg.delete_files()
        self.delete_pending_files(force=True)
        self.leader_epochs.delete_file()
        self.closed = True
