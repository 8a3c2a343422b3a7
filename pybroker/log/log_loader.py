"""Opening a partition's log after a start (Kafka's LogLoader): an interrupted clean's swap
finished or rolled back, leftover files removed, segments below the recovery point trusted
(all after a clean shutdown) and the rest recovered, the producer state and the leader epoch
cache rebuilt from the log.  A part of PartitionLog (partition_log.py), whose fields it fills;
docs/internals.md ("pybroker/log/partition_log.py").
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from pybroker.log.index import CorruptIndexError
from pybroker.log.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    scan_log_headers,
)

logger = logging.getLogger("pybroker.log.partition_log")  # PartitionLog's
_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)$")


class LogLoader:
    """PartitionLog's loading (module docstring)."""

    def _complete_swaps(self) -> set[int]:
        """Finish or roll back a clean interrupted by a crash (Kafka's LogLoader), before the
        segments are loaded.  The cleaner writes ``<base>.{log,index,timeindex}.cleaned``,
        renames them to ``.swap`` (the .log first), renames the replaced segments' files to
        ``.deleted``, then drops the ``.swap`` suffix (the .log first):

        * ``.cleaned`` files are deleted, and so are the ``.swap`` files of the same base
          offset (a swap whose renaming to ``.swap`` did not finish: the old segments are all
          still there, so this rolls the clean back).  Kafka deletes every ``.swap`` at or
          above the lowest ``.cleaned`` offset, for its segment splits; a clean here swaps one
          segment at a time, and a ``.cleaned`` of another base offset is a stale one that
          says nothing about a complete swap (whose old segments may be gone already);
        * a ``.log.swap`` left is complete: every other segment file whose base offset lies in
          [its base offset, its next offset) is one it replaces and is deleted;
        * every ``.swap`` file left then loses its suffix.

        Returns the base offsets of the segments so swapped in (their indexes are rebuilt)."""
        names = os.listdir(self.directory)
        cleaned = [n for n in names if n.endswith(CLEANED_SUFFIX)]
        swaps = [n for n in names if n.endswith(SWAP_SUFFIX)]
        if not cleaned and not swaps:
            return set()
        incomplete = {int(n[:20]) for n in cleaned}
        for n in cleaned:
            (self.directory / n).unlink(missing_ok=True)
        for n in [n for n in swaps if int(n[:20]) in incomplete]:
            (self.directory / n).unlink(missing_ok=True)
            swaps.remove(n)
        ranges = []
        for n in swaps:
            if n.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                base = int(n[:20])
                end = base
                for h in scan_log_headers(self.directory / n):
                    end = h.next_offset
                ranges.append((base, end))
        if ranges:
            for n in os.listdir(self.directory):
                m = _SEGMENT_FILE.match(n)
                if m and any(lo <= int(m.group(1)) < hi for lo, hi in ranges):
                    (self.directory / n).unlink(missing_ok=True)
        swapped = set()
        for n in swaps:
            os.replace(self.directory / n, self.directory / n[: -len(SWAP_SUFFIX)])
            swapped.add(int(n[:20]))
        return swapped

    def _load(self, recovery_point: int, clean_shutdown: bool, log_start_offset: int = 0) -> None:
        now = self.clock.time_ms()
        swapped = self._complete_swaps()
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
        # aborted-transaction index entries at or above this offset are rebuilt by the
        # producer-state replay (segments recovered, or whose .txnindex is corrupt)
        index_from: int | None = None
        for i, base in enumerate(ordered):
            seg = self._new_segment(base)
            if truncated_at is not None:
                seg.delete_files()  # after a torn segment: Kafka deletes the rest
                continue
            next_base = ordered[i + 1] if i + 1 < len(ordered) else None
            trusted = clean_shutdown or (next_base is not None and next_base <= recovery_point)
            if base in swapped:
                seg.offset_index.reset()  # swapped in at recovery: rebuild its indexes
                seg.time_index.reset()
                trusted = False
            if trusted:
                seg.load(now)
                try:
                    seg.txn_index.sanity_check()
                except CorruptIndexError as e:
                    logger.warning(
                        "%s: rebuilding %s: %s", self.directory.name, seg.txn_index.path.name, e
                    )
                    seg.txn_index.reset()
                    index_from = base if index_from is None else min(index_from, base)
            else:
                seg.txn_index.reset()
                index_from = base if index_from is None else min(index_from, base)
                if self.segments and base < self.segments[-1].next_offset:
                    seg.delete_files()  # overlaps its predecessor: cannot be valid
                    truncated_at = base
                    continue
                if seg.recover(now):
                    truncated_at = base
                if base in swapped:
                    seg.flush()  # (its rebuilt indexes, before a later start trusts it)
            self.segments.append(seg)
        if not self.segments:
            self.segments.append(self._new_segment(0))
        if index_from is not None:
            # the replay indexes every marker from there on: later (trusted) segments too
            for seg in self.segments:
                if seg.base_offset >= index_from:
                    seg.txn_index.reset()
        for seg in self.segments[:-1]:
            seg.release()  # fsynced (trusted or flushed above); reopened when read
        self._bases = [s.base_offset for s in self.segments]
        if log_start_offset > self.segments[-1].next_offset:
            # the tail holding the checkpointed log start was lost: start empty there
            self.truncate_fully_and_start_at(log_start_offset)
            return
        self.log_start_offset = max(self.segments[0].base_offset, log_start_offset)
        self.log_end_offset = self.segments[-1].next_offset
        if truncated_at is not None:
            self._note_truncation(self.log_end_offset)
        self.high_watermark = self.log_end_offset
        # As Kafka's LogLoader: recovered segments are not fsynced here (an fsync per
        # partition made a start after kill -9 minutes long); the recovery point stays where
        # the checkpoint had it and the next flush moves it.
        self.recovery_point = (
            self.log_end_offset if clean_shutdown else min(recovery_point, self.log_end_offset)
        )
        self._load_producer_state(index_from)
        self._load_leader_epochs(self.log_end_offset if clean_shutdown else recovery_point)

    def _load_producer_state(self, index_from: int | None = None) -> None:
        """Newest snapshot at or below the LEO (at or below ``index_from`` if given) plus the
        batches after it.  Transaction markers at or above ``index_from`` are indexed again
        (their segments' .txnindex was reset: recovery after an unclean shutdown, or a
        corrupt file), as Kafka's segment recovery rebuilds the transaction index."""
        ps = self.producer_state
        limit = self.log_end_offset if index_from is None else min(index_from, self.log_end_offset)
        start = ps.load_latest_snapshot(limit)
        if start is None:
            ps.reset(self.log_start_offset)
            start = self.log_start_offset
        start = max(start, self.log_start_offset)
        if start < self.log_end_offset:
            for seg, h in self._segment_headers_from(start):
                if h.base_offset < start:
                    continue
                marker = self._stored_marker(seg, h) if h.is_control else None
                completed = ps.update(h, h.base_offset, None, marker)
                if completed is not None:
                    if index_from is not None and completed.last_offset >= index_from:
                        self._index_completed(seg, completed)
                    else:
                        ps.complete_txn(completed)
        ps.map_end_offset = self.log_end_offset

    def _load_leader_epochs(self, recovery_point: int) -> None:
        """Checkpoint minus entries beyond the LEO, plus epochs of the headers from the
        recovery point; every header if the checkpoint is missing or corrupt."""
        cache = self.leader_epochs
        valid = cache.load()
        cache.truncate_from_end(self.log_end_offset, flush=False)
        scan_from = self.log_start_offset
        if valid:
            scan_from = max(scan_from, min(recovery_point, self.log_end_offset))
        if scan_from < self.log_end_offset:
            for h in self._headers_from(scan_from):
                if h.partition_leader_epoch > cache.latest_epoch():
                    cache.assign(h.partition_leader_epoch, h.base_offset, flush=False)
        cache.truncate_from_start(self.log_start_offset, flush=False)
        after = cache.entries()
        # A new (or empty) log without a checkpoint has nothing to record: writing an empty
        # one would cost a write per partition created (the first assign writes the file).
        # A valid checkpoint changed here is left dirty, not rewritten: the next append or
        # assign writes it (for an empty log, becoming leader in the same epoch again puts
        # back what the file holds: no write at all), and a load always drops the entries
        # beyond the log end again.
        if not valid and (after or cache.path is None or cache.path.exists()):
            cache.flush()
