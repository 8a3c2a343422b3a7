"""Leader epoch cache of one partition (Kafka's LeaderEpochFileCache): each leader epoch that
wrote to the log mapped to the offset of its first batch, both strictly increasing.  It
answers OffsetForLeaderEpoch and lets a follower find where its log diverges from a new
leader's.  One owner (the event loop), as PartitionLog, which keeps it consistent with the log.

File ``leader-epoch-checkpoint`` in the partition directory, Kafka's format (UTF-8 text),
rewritten whole (temporary file, rename; its fsync deferred to PartitionLog.flush) after
every change::

    0                       version
    <n>                     number of entries
    <epoch> <start offset>  n lines, ascending

Recovery: docs/internals.md ("pybroker/log/leader_epoch.py").
"""

from __future__ import annotations

import bisect
import logging
import os
import queue
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from pybroker.log.checkpoints import fsync_dir, write_checkpoint_file

log = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
_VERSION = 0


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


def read_leader_epoch_checkpoint(path: Path) -> list[EpochEntry]:
    """Parse a checkpoint.  Raises FileNotFoundError if absent and ValueError if malformed
    (bad version, count, syntax, negative values, epochs or offsets out of order)."""
    try:
        lines = path.read_text().splitlines()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not text") from e
    try:
        if int(lines[0]) != _VERSION:
            raise ValueError(f"{path}: version {lines[0]!r}")
        n = int(lines[1])
        body = [line for line in lines[2:] if line.strip()]
        if n < 0 or len(body) != n:
            raise ValueError(f"{path}: {len(body)} entries, header says {n}")
        out: list[EpochEntry] = []
        for line in body:
            epoch, offset = line.split()
            entry = EpochEntry(int(epoch), int(offset))
            if entry.epoch < 0 or entry.start_offset < 0:
                raise ValueError(f"{path}: negative entry {line!r}")
            if out and (entry.epoch <= out[-1].epoch or entry.start_offset <= out[-1].start_offset):
                raise ValueError(f"{path}: entry {line!r} out of order")
            out.append(entry)
        return out
    except IndexError as e:
        raise ValueError(f"{path}: truncated") from e


def write_leader_epoch_checkpoint(
    path: Path, entries: Iterable[EpochEntry], *, sync: bool = True
) -> None:
    """Replace the checkpoint atomically (temporary file, rename); with ``sync`` the file is
    fsynced before the rename and the directory after it."""
    write_checkpoint_file(
        path, _VERSION, [f"{e.epoch} {e.start_offset}" for e in entries], sync=sync
    )


class EpochCheckpointWriter:
    """One thread writing the leader-epoch checkpoints whose change only added entries at
    the end (a new epoch's first append, a new leader's epoch): LeaderEpochCache.flush hands
    them here instead of writing on the event loop (after a failover every partition gets a
    new epoch at once: 16,000 file writes on one loop pass at 100,000 replicas).  A cache
    queued twice is written once, with its newest entries.  Why that is safe: the class
    docstring of LeaderEpochCache."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[LeaderEpochCache | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, cache: LeaderEpochCache) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="leader-epoch-checkpoints", daemon=True
                )
                self._thread.start()
        self._queue.put(cache)

    def _run(self) -> None:
        while True:
            cache = self._queue.get()
            if cache is None:
                return
            cache.write_pending(keep_error=True)

    def stop(self) -> None:
        """Write what is queued, then end the thread."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join()


class LeaderEpochCache:
    """``path`` is the checkpoint file (None: in memory only).  The constructor does not read
    it: PartitionLog loads and validates it against the log (see :meth:`load`).

    With a ``writer`` (LogManager's), a change that only appends entries to what the file
    holds (or to an absent file) is written by the writer's thread, not by the caller; any
    other change (truncation, a conflicting epoch, a cleared cache) is written at once, after
    whatever was pending.  Safe against a crash: a deferred write only adds entries starting
    at or after the log end of its append, and before the recovery point passes them
    :meth:`sync` (PartitionLog.flush) writes what is pending itself, so a checkpoint lacking
    them can only lack entries above the recovery point, which recovery re-reads from the
    batch headers (a missing file: every header).  Every write holds the cache's lock."""

    def __init__(self, path: Path | None, entries: Iterable[EpochEntry] = ()) -> None:
        self._path = path
        self.writer: EpochCheckpointWriter | None = None
        self._lock = threading.Lock()
        self._pending: list[EpochEntry] | None = None  # handed to the writer, not yet written
        self._failed: OSError | None = None  # the writer's error, raised to the owner
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        # what the file holds (None: unknown), and the writes made / covered by an fsync
        # (sync may run in a worker thread while the owner writes again: counters, as the
        # indexes keep theirs)
        self._persisted: list[EpochEntry] | None = None
        self._dirty = False
        self._writes = 0
        self._synced_writes = 0
        for e in entries:
            self.assign(e.epoch, e.start_offset, flush=False)

    @classmethod
    def for_directory(cls, directory: Path) -> LeaderEpochCache:
        return cls(directory / LEADER_EPOCH_CHECKPOINT)

    # -- reading ------------------------------------------------------------------------------

    def entries(self) -> list[EpochEntry]:
        return [EpochEntry(e, o) for e, o in zip(self._epochs, self._offsets, strict=True)]

    def __len__(self) -> int:
        return len(self._epochs)

    def latest_epoch(self) -> int:
        """The newest epoch with an entry, or -1 (UNDEFINED_EPOCH) if none."""
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's LeaderEpochFileCache.endOffsetFor: ``(epoch, end offset)``.

        * requested epoch -1, empty cache, or an epoch above the latest: ``(-1, -1)``;
        * the latest epoch: ``(latest, log_end_offset)`` (a leader appends the current epoch
          when it takes over, so followers asking for it get the LEO);
        * an epoch below the earliest: ``(requested, start of the earliest)``: data before it
          is gone (retention), the follower replicates from there;
        * otherwise ``(largest epoch <= requested, start of the first epoch > requested)``.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._offsets[0]
        return self._epochs[higher - 1], self._offsets[higher]

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch that wrote ``offset`` (the last entry starting at or before it), or -1
        if ``offset`` is before the earliest entry."""
        i = bisect.bisect_right(self._offsets, offset)
        return self._epochs[i - 1] if i else UNDEFINED_EPOCH

    # -- updates (each writes the checkpoint if it changed something, unless flush=False) ------

    def assign(self, epoch: int, start_offset: int, *, flush: bool = True) -> bool:
        """Record that ``epoch`` starts at ``start_offset``, as Kafka's assign:

        * a newer epoch than the latest is appended;
        * the latest epoch again, at the same or a later offset, changes nothing (every batch
          of an epoch passes here);
        * anything else (an older epoch, or the latest one at an earlier offset) conflicts
          with the cache: entries whose epoch or start offset is >= the new one's are removed
          first, so both columns stay monotonic and the cache matches what the log says.

        Returns whether the cache changed."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        if self._epochs and epoch == self._epochs[-1] and start_offset >= self._offsets[-1]:
            return False
        while self._epochs and (self._epochs[-1] >= epoch or self._offsets[-1] >= start_offset):
            self._epochs.pop()
            self._offsets.pop()
        self._epochs.append(epoch)
        self._offsets.append(start_offset)
        self._changed(flush)
        return True

    def truncate_from_end(self, end_offset: int, *, flush: bool = True) -> bool:
        """Remove the entries starting at or after ``end_offset`` (log truncated there).  A
        negative offset (undefined) changes nothing."""
        if end_offset < 0:
            return False
        i = bisect.bisect_left(self._offsets, end_offset)
        if i == len(self._offsets):
            return False
        del self._epochs[i:], self._offsets[i:]
        self._changed(flush)
        return True

    def truncate_from_start(self, start_offset: int, *, flush: bool = True) -> bool:
        """The log now starts at ``start_offset`` (retention, DeleteRecords): remove the
        entries wholly before it and move the start of the one covering it there.  An entry
        starting exactly at ``start_offset`` is kept as is; a negative offset changes nothing."""
        if start_offset < 0:
            return False
        i = bisect.bisect_right(self._offsets, start_offset)  # entries starting <= start_offset
        if i == 0 or (i == 1 and self._offsets[0] == start_offset):
            return False
        covering = self._epochs[i - 1]
        del self._epochs[: i - 1], self._offsets[: i - 1]
        self._epochs[0], self._offsets[0] = covering, start_offset
        self._changed(flush)
        return True

    def clear(self, *, flush: bool = True) -> None:
        self._epochs.clear()
        self._offsets.clear()
        self._changed(flush)

    # -- persistence --------------------------------------------------------------------------

    def _changed(self, flush: bool) -> None:
        if flush:
            self.flush()
        else:
            self._dirty = True

    @property
    def dirty(self) -> bool:
        """Changed with ``flush=False`` since the last write: the file may hold entries the
        cache no longer has (PartitionLog writes it before the log grows past them)."""
        return self._dirty

    @property
    def path(self) -> Path | None:
        return self._path

    @path.setter
    def path(self, path: Path | None) -> None:
        with self._lock:  # (a pending write goes to the new place)
            self._path = path

    def flush(self) -> None:
        """Write the checkpoint atomically unless it holds these entries already (no-op for
        an in-memory cache, or once the partition directory is gone: a deleted partition, as
        Kafka's writeIfDirExists).  Not fsynced: :meth:`sync` does that (module docstring).
        Only appended to, with a writer: handed to the writer (class docstring)."""
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed
        if self.path is None:
            return
        entries = self.entries()
        persisted = self._persisted
        if entries == persisted:
            self._dirty = False
            return
        if (
            self.writer is not None
            and persisted is not None
            and entries[: len(persisted)] == persisted
        ):
            with self._lock:
                queued = self._pending is not None
                self._pending = entries
            if not queued:
                self.writer.submit(self)
        else:
            with self._lock:
                self._pending = None
                self._write(entries)
        self._persisted = entries
        self._dirty = False
        self._writes += 1

    def _write(self, entries: list[EpochEntry]) -> None:
        """Write ``entries`` now (holding the lock)."""
        path = self._path
        if path is None:
            return
        try:
            write_leader_epoch_checkpoint(path, entries, sync=False)
        except FileNotFoundError:
            if path.parent.exists():
                raise

    def write_pending(self, *, keep_error: bool = False) -> None:
        """Write what was handed to the writer, if not written yet (the writer's thread, or
        :meth:`sync` before an fsync).  With ``keep_error`` (the writer's thread) an error is
        kept for the owner's next flush or sync instead of raised."""
        with self._lock:
            entries, self._pending = self._pending, None
            if entries is None:
                return
            try:
                self._write(entries)
            except OSError as e:
                if not keep_error:
                    raise
                log.error("leader epoch checkpoint %s: %s", self._path, e)
                self._failed = e

    @property
    def unsynced(self) -> bool:
        """A write not yet covered by an fsync."""
        return self._synced_writes < self._writes

    def sync(self) -> None:
        """fsync the checkpoint and its directory if a write since the last sync needs it (may
        run in a worker thread; PartitionLog.flush calls it before the recovery point moves)."""
        writes = self._writes
        if self.path is None or self._synced_writes >= writes:
            return
        self.write_pending()
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            if self.path.parent.exists():
                raise
            return  # (a deleted partition)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self.path.parent)
        self._synced_writes = max(self._synced_writes, writes)

    def load(self) -> bool:
        """Replace the entries with the checkpoint's.  Returns False (and empties the cache)
        if the file is missing or malformed: the caller rebuilds from the log."""
        self._epochs.clear()
        self._offsets.clear()
        self._persisted = None
        self._dirty = False
        if self.path is None:
            return False
        try:
            entries = read_leader_epoch_checkpoint(self.path)
        except FileNotFoundError:
            self._persisted = []  # (nothing on disk: a first write may be deferred)
            return False
        except (OSError, ValueError):
            return False
        for e in entries:
            self._epochs.append(e.epoch)
            self._offsets.append(e.start_offset)
        self._persisted = entries
        return True

    def delete_file(self) -> None:
        with self._lock:
            self._pending = None
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            self.path.with_name(self.path.name + ".tmp").unlink(missing_ok=True)
        self._persisted = None

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.entries()})"


__all__ = [
    "LEADER_EPOCH_CHECKPOINT",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochCheckpointWriter",
    "EpochEntry",
    "LeaderEpochCache",
    "read_leader_epoch_checkpoint",
    "write_leader_epoch_checkpoint",
]
