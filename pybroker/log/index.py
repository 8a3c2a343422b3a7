"""Fixed-width sparse indexes of a log segment, in Kafka's on-disk format.

``<base offset>.index`` (OffsetIndex), entries of 8 bytes, big-endian::

    offset  size  field
         0     4  relative offset   int32   batch last offset - segment base offset
         4     4  position          int32   byte position of that batch in the .log file

``<base offset>.timeindex`` (TimeIndex), entries of 12 bytes, big-endian::

    offset  size  field
         0     8  timestamp         int64   largest batch max timestamp seen so far in the segment
         8     4  relative offset   int32   (last) offset of the batch that reached it - base offset

Both are strictly increasing in every field, and sparse: a lookup gives the greatest entry at
or below the target.  Unlike Kafka's, the files are append-only (no preallocation, no mmap) and
no descriptor stays open.  Details: docs/internals.md ("pybroker/log/index.py").
"""

from __future__ import annotations

import bisect
import os
import struct
import threading
from array import array
from pathlib import Path

# unwritten entries that trigger a write without waiting for flush (bounds what a crash loses
# and the size of one write; entries stay cached in memory either way)
PENDING_ENTRIES = 1000


class CorruptIndexError(Exception):
    pass


class _Index:
    ENTRY = struct.Struct(">ii")
    KEY_TYPE = "i"  # array typecodes of the two fields
    VAL_TYPE = "i"

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // self.ENTRY.size)
        self._lock = threading.Lock()
        self._keys: array | None = None  # every entry's fields, once loaded
        self._vals: array | None = None
        self._last: tuple[int, int] | None = None
        # changes made to the file, and how many of them an fsync has covered (flushes may run
        # in several threads at once: one must not return before another's fsync is done)
        self._changes = self._synced_changes = 0
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            self._written = size // self.ENTRY.size  # whole entries in the file
            self._torn = size % self.ENTRY.size != 0
            if self._written:
                self._last = self._read_entries(fd, self._written - 1, 1)[0]
        finally:
            os.close(fd)

    # -- the file -----------------------------------------------------------------------------

    def _read_entries(self, fd: int, first: int, n: int) -> list[tuple[int, int]]:
        size = self.ENTRY.size
        data = os.pread(fd, n * size, first * size)
        if len(data) != n * size:
            raise CorruptIndexError(f"{self.path}: short read")
        return list(self.ENTRY.iter_unpack(data))

    def _first_entry(self) -> tuple[int, int]:
        if self._keys is not None and self._vals is not None:
            return self._keys[0], self._vals[0]
        fd = os.open(self.path, os.O_RDONLY)
        try:
            return self._read_entries(fd, 0, 1)[0]
        finally:
            os.close(fd)

    def _load(self) -> tuple[array, array]:
        keys, vals = self._keys, self._vals
        if keys is None or vals is None:
            n = self._written
            pairs = []
            if n:
                fd = os.open(self.path, os.O_RDONLY)
                try:
                    pairs = self._read_entries(fd, 0, n)
                finally:
                    os.close(fd)
            keys = array(self.KEY_TYPE, [p[0] for p in pairs])
            vals = array(self.VAL_TYPE, [p[1] for p in pairs])
            self._keys, self._vals = keys, vals
        return keys, vals

    def _pack(self, keys: array, vals: array, start: int, end: int) -> bytes:
        pack = self.ENTRY.pack
        return b"".join([pack(keys[i], vals[i]) for i in range(start, end)])

    def _write_pending(self) -> int:
        """Write entries not in the file yet (holding the lock); returns the descriptor
        (the caller closes it) or -1 if there was nothing to write."""
        keys, vals = self._keys, self._vals
        if keys is None or vals is None:
            return -1
        n = len(keys)
        if n <= self._written and not self._torn:
            return -1
        data = self._pack(keys, vals, self._written, n)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            start = self._written * self.ENTRY.size
            if self._torn:
                os.ftruncate(fd, start)
                self._torn = False
            done = 0
            while done < len(data):
                done += os.pwrite(fd, data[done:], start + done)
        except BaseException:
            os.close(fd)
            raise
        self._written = n
        self._changes += 1
        return fd

    # -- entries ------------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        keys = self._keys
        return len(keys) if keys is not None else self._written

    @property
    def pending(self) -> int:
        """Entries held only in memory so far."""
        return self.entries - self._written

    @property
    def is_full(self) -> bool:
        keys = self._keys  # (``entries`` inline: asked at every append)
        return (len(keys) if keys is not None else self._written) >= self.max_entries

    def _append(self, key: int, val: int) -> None:
        fd = -1
        with self._lock:  # (against a release from a flush thread dropping the arrays)
            keys, vals = self._load()
            keys.append(key)
            vals.append(val)
            self._last = (key, val)
            if len(keys) - self._written >= PENDING_ENTRIES:
                fd = self._write_pending()
        if fd >= 0:
            os.close(fd)

    def _truncate_entries(self, n: int) -> None:
        with self._lock:
            keys, vals = self._load()
            del keys[n:]
            del vals[n:]
            if self._written > n or self._torn:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
                try:
                    os.ftruncate(fd, n * self.ENTRY.size)
                finally:
                    os.close(fd)
                self._written = n
                self._torn = False
                self._changes += 1
            self._last = (keys[n - 1], vals[n - 1]) if n else None

    def reset(self) -> None:
        self._truncate_entries(0)

    def flush(self) -> None:
        """Write the pending entries and fsync the file (may run in a worker thread)."""
        with self._lock:
            fd = self._write_pending()
            changes = self._changes
            if fd < 0 and changes == self._synced_changes:
                return
        if fd < 0:
            fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        with self._lock:
            self._synced_changes = max(self._synced_changes, changes)

    def release(self) -> None:
        """Drop the in-memory entries if they are all in the file (reloaded when needed)."""
        with self._lock:
            if self._keys is not None and len(self._keys) == self._written and not self._torn:
                self._keys = self._vals = None

    def close(self) -> None:
        """Write and fsync the pending entries (a clean shutdown leaves whole indexes)."""
        self.flush()

    def discard(self) -> None:
        """Forget pending entries (the files are about to be deleted)."""
        with self._lock:
            if self._keys is not None and self._vals is not None:
                del self._keys[self._written :]
                del self._vals[self._written :]
            self._synced_changes = self._changes


class OffsetIndex(_Index):
    """Maps (relative) batch last offsets to byte positions in the segment's .log file."""

    ENTRY = struct.Struct(">ii")
    KEY_TYPE = "i"
    VAL_TYPE = "i"

    @property
    def last_offset(self) -> int:
        return self.base_offset + self._last[0] if self._last else self.base_offset

    @property
    def last_position(self) -> int:
        return self._last[1] if self._last else 0

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if self._last is not None and (rel <= self._last[0] or position <= self._last[1]):
            return  # Kafka refuses non-increasing entries; for us they are simply not needed
        self._append(rel, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """Greatest entry with offset <= ``offset`` as (absolute offset, position), or
        (base_offset, 0) if there is none."""
        keys, vals = self._load()
        i = bisect.bisect_right(keys, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + keys[i], vals[i]

    def lookup_position(self, position: int) -> int:
        """Greatest indexed batch position <= ``position`` (0 if none)."""
        _, vals = self._load()
        i = bisect.bisect_right(vals, position) - 1
        return vals[i] if i >= 0 else 0

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= ``offset``."""
        keys, _ = self._load()
        self._truncate_entries(bisect.bisect_left(keys, offset - self.base_offset))

    def sanity_check(self, log_size: int) -> None:
        """Kafka's OffsetIndex.sanityCheck plus: the last entry must point inside the log."""
        if self._torn:
            raise CorruptIndexError(f"{self.path}: size is not a multiple of 8")
        if self._last is not None:
            rel, pos = self._last
            if rel < 0 or pos < 0 or pos >= log_size:
                raise CorruptIndexError(f"{self.path}: last entry {self._last} beyond the log")
            first = self._first_entry()
            if first[0] < 0 or first[0] > rel or first[1] > pos:
                raise CorruptIndexError(f"{self.path}: entries out of order")


class TimeIndex(_Index):
    """Maps the segment's running max timestamp to the offset that reached it."""

    ENTRY = struct.Struct(">qi")
    KEY_TYPE = "q"
    VAL_TYPE = "i"

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, absolute offset) of the last entry."""
        return (self._last[0], self.base_offset + self._last[1]) if self._last else None

    def maybe_append(self, timestamp: int, offset: int) -> None:
        rel = offset - self.base_offset
        if self._last is not None and (timestamp <= self._last[0] or rel < self._last[1]):
            return
        self._append(timestamp, rel)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """Greatest entry with timestamp <= ``timestamp`` as (timestamp, absolute offset), or
        (-1, base_offset) if there is none."""
        keys, vals = self._load()
        i = bisect.bisect_right(keys, timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        return keys[i], self.base_offset + vals[i]

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose offset is >= ``offset``."""
        _, vals = self._load()
        self._truncate_entries(bisect.bisect_left(vals, offset - self.base_offset))

    def sanity_check(self, last_offset: int) -> None:
        if self._torn:
            raise CorruptIndexError(f"{self.path}: size is not a multiple of 12")
        if self._last is not None:
            ts, rel = self._last
            if rel < 0 or self.base_offset + rel > last_offset:
                raise CorruptIndexError(f"{self.path}: last entry {self._last} beyond the log")
            first = self._first_entry()
            if first[1] < 0 or first[0] > ts or first[1] > rel:
                raise CorruptIndexError(f"{self.path}: entries out of order")
