"""A partition log's retention (Kafka's UnifiedLog.deleteOldSegments): by time, by size and
below the log start offset (DeleteRecords), whole segments never past the high watermark,
renamed to ``*.deleted`` and unlinked after file.delete.delay.ms.  A part of PartitionLog
(partition_log.py)."""

from __future__ import annotations

from pybroker.errors import ErrorCode, KafkaError
from pybroker.log.segment import LogSegment


class LogRetention:
    """PartitionLog's retention (module docstring)."""

    def delete_old_segments(self) -> int:
        """Retention by time, then by size, as Kafka's deleteOldSegments: whole segments from
        the oldest on, never past the high watermark; if every segment goes, roll first so an
        empty active segment remains at the LEO.  Files are renamed to ``*.deleted`` and
        unlinked later by :meth:`delete_pending_files`.  Returns the number of segments."""
        now = self.clock.time_ms()
        deleted = 0
        if not self.config.delete:  # compact only: the cleaner's, plus the log start breach
            return self._delete_segments(self._below_log_start)
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
        deleted += self._delete_segments(self._below_log_start)
        return deleted

    def _below_log_start(self, seg: LogSegment, nxt: LogSegment | None) -> bool:
        """Kafka's log-start-offset breach: every offset of ``seg`` is below the log start."""
        return nxt is not None and nxt.base_offset <= self.log_start_offset

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: make ``offset`` the log start offset (no-op if it is not above the
        current one) and delete the segments wholly below it; reads below it fail with
        OFFSET_OUT_OF_RANGE from now on.  ``offset`` must be in [0, high watermark], else
        KafkaError(OFFSET_OUT_OF_RANGE).  Returns the log start offset (the response's low
        watermark).  LogManager's log-start-offset-checkpoint makes it durable."""
        if offset < 0 or offset > self.high_watermark:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"cannot delete records before {offset}: high watermark is {self.high_watermark}",
            )
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._delete_segments(self._below_log_start)
            self.leader_epochs.truncate_from_start(offset)
            self.producer_state.delete_snapshots_before(offset)
        return self.log_start_offset

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
            seg.release()  # an in-flight read keeps the descriptor it uses
            self._pending_deletes.append((due, seg))
        del self.segments[: len(deletable)]
        del self._bases[: len(deletable)]
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self.producer_state.delete_snapshots_before(self.log_start_offset)
        self.leader_epochs.truncate_from_start(self.log_start_offset)
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
