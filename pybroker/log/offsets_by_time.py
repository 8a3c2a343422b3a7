"""A partition log's offsets by time: ListOffsets v0 (segment mtimes), by timestamp and the
largest timestamp (KIP-734).  A part of PartitionLog (partition_log.py)."""

from __future__ import annotations

import os

from pybroker.log.segment import LogSegment
from pybroker.log.validator import find_record
from pybroker.wire.records import BatchHeader


class OffsetsByTime:
    """PartitionLog's lookups by time (module docstring)."""

    def legacy_offsets_before(self, timestamp: int, max_num_offsets: int) -> list[int]:
        """ListOffsets v0 (Kafka's UnifiedLog.legacyFetchOffsetsBefore): each segment stands
        for (its base offset, at least the log start, the .log file's mtime), plus (log end
        offset, now) when the last segment holds data; from the last entry whose time is at
        or before ``timestamp`` (-1: the last, -2: the first) backwards, at most
        ``max_num_offsets`` offsets, largest first.  ValueError for a negative count where
        Kafka fails (its array size)."""
        entries = []
        for seg in self.segments:
            try:
                mtime = os.stat(seg.log_path).st_mtime_ns // 1_000_000
            except OSError:
                mtime = 0  # as Java's File.lastModified of a missing file
            entries.append((max(seg.base_offset, self.log_start_offset), mtime))
        if self.segments[-1].size > 0:
            entries.append((self.log_end_offset, self.clock.time_ms()))
        if timestamp == -1:
            start = len(entries) - 1
        elif timestamp == -2:
            start = 0
        else:
            start = len(entries) - 1
            while start >= 0 and entries[start][1] > timestamp:
                start -= 1
        count = min(max_num_offsets, start + 1)
        if count < 0:
            raise ValueError(f"max_num_offsets {max_num_offsets}")
        return sorted((entries[start - j][0] for j in range(count)), reverse=True)

    def batch_for_timestamp(
        self, timestamp: int, after: int | None = None
    ) -> tuple[BatchHeader, bytes] | None:
        """ListOffsets by timestamp, first step (on the owner's thread): the first batch whose
        maxTimestamp is >= ``timestamp`` holding offsets at or above the log start offset (and
        ``after``, to go on past a batch that held no match), and its bytes; or None.  The
        caller walks its records (pybroker.log.validator.find_record), in a worker thread if
        it likes: the bytes are a copy."""
        start = self.log_start_offset if after is None else max(after, self.log_start_offset)
        for seg in self.segments:
            if seg.next_offset <= start or seg.max_timestamp < timestamp:
                continue
            self._reading(seg)
            got = seg.batch_for_timestamp(timestamp, start)
            if got is not None:
                return got
        return None

    def batch_of_max_timestamp(self) -> tuple[BatchHeader, bytes, int] | None:
        """ListOffsets -3 (KIP-734), first step: the batch holding the log's largest timestamp,
        its bytes and that timestamp; None if the log is empty."""
        best: LogSegment | None = None
        for seg in self.segments:
            if seg.size and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return None
        self._reading(best)
        h = best.translate_offset(best.offset_of_max_timestamp)
        if h is None:
            return None
        return h, best.read_batch(h), best.max_timestamp

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets by timestamp: (offset, timestamp) of the first record whose timestamp is
        >= ``timestamp`` (Kafka decompresses the batch to find it), or None.  Raises
        InvalidRecordError on a malformed batch."""
        start = self.log_start_offset
        after = None
        while (got := self.batch_for_timestamp(timestamp, after)) is not None:
            h, data = got
            found = find_record(
                data, h._replace(position=0), lambda o, t: t >= timestamp and o >= start
            )
            if found is not None:
                return found
            after = h.next_offset
        return None

    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        """ListOffsets -3 (KIP-734): (offset, timestamp) of the first record with the largest
        timestamp in the log, or None if the log is empty.  Raises InvalidRecordError on a
        malformed batch."""
        got = self.batch_of_max_timestamp()
        if got is None:
            return None
        h, data, max_ts = got
        found = find_record(data, h._replace(position=0), lambda _o, t: t == max_ts)
        return found or (h.last_offset, max_ts)
