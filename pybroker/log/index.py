"""Fixed-width sparse indexes of a log segment, in Kafka's on-disk format.

``<base offset>.index`` (OffsetIndex), entries of 8 bytes, big-endian::

    offset  size  field
         0     4  relative offset   int32   batch last offset - segment base offset
         4     4  position          int32   byte position of that batch in the .log file

``<base offset>.timeindex`` (TimeIndex), entries of 12 bytes, big-endian::

    offset  size  field
         0     8  timestamp         int64   largest batch max timestamp seen so far in the segment
         8     4  relative offset   int32   (last) offset of the batch that reached it - base offset

Both are strictly increasing in every field.  An entry is added every ``index_interval_bytes``
of appended data (LogSegment decides), so the indexes are sparse: a lookup gives the greatest
entry at or below the target and the segment scans batch headers forward from there.

Unlike Kafka we do not preallocate and mmap: the files are append-only and hold exactly the
valid entries (nothing to trim on close, and a crash can only leave a torn last entry, which
the sanity check catches).  Entries are cached in memory lazily, on the first lookup, so
opening a log with many segments reads only each index's first and last entries.
"""

from __future__ import annotations

import bisect
import os
import struct
from pathlib import Path


class CorruptIndexError(Exception):
    pass


class _Index:
    ENTRY = struct.Struct(">ii")

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // self.ENTRY.size)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        size = os.fstat(self._fd).st_size
        self.entries = size // self.ENTRY.size
        self._torn = size % self.ENTRY.size != 0
        self._keys: list[int] | None = None  # first field of each entry, when loaded
        self._vals: list[int] | None = None
        self._last: tuple[int, int] | None = (
            self._read_entry(self.entries - 1) if self.entries else None
        )

    def _read_entry(self, n: int) -> tuple[int, int]:
        data = os.pread(self._fd, self.ENTRY.size, n * self.ENTRY.size)
        if len(data) != self.ENTRY.size:
            raise CorruptIndexError(f"{self.path}: short read")
        return self.ENTRY.unpack(data)

    def _load(self) -> tuple[list[int], list[int]]:
        if self._keys is None or self._vals is None:
            size = self.entries * self.ENTRY.size
            data = os.pread(self._fd, size, 0) if size else b""
            pairs = list(self.ENTRY.iter_unpack(data[:size]))
            self._keys = [p[0] for p in pairs]
            self._vals = [p[1] for p in pairs]
        return self._keys, self._vals

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def _append(self, key: int, val: int) -> None:
        os.write(self._fd, self.ENTRY.pack(key, val))
        self.entries += 1
        self._last = (key, val)
        if self._keys is not None and self._vals is not None:
            self._keys.append(key)
            self._vals.append(val)

    def _truncate_entries(self, n: int) -> None:
        os.ftruncate(self._fd, n * self.ENTRY.size)
        self.entries = n
        self._torn = False
        if self._keys is not None and self._vals is not None:
            del self._keys[n:]
            del self._vals[n:]
        self._last = self._read_entry(n - 1) if n else None

    def reset(self) -> None:
        self._truncate_entries(0)
        self._keys, self._vals = [], []

    def flush(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class OffsetIndex(_Index):
    """Maps (relative) batch last offsets to byte positions in the segment's .log file."""

    ENTRY = struct.Struct(">ii")

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
            first = self._read_entry(0)
            if first[0] < 0 or first[0] > rel or first[1] > pos:
                raise CorruptIndexError(f"{self.path}: entries out of order")


class TimeIndex(_Index):
    """Maps the segment's running max timestamp to the offset that reached it."""

    ENTRY = struct.Struct(">qi")

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
            first = self._read_entry(0)
            if first[1] < 0 or first[0] > ts or first[1] > rel:
                raise CorruptIndexError(f"{self.path}: entries out of order")
