"""The descriptors of segment files: one OS descriptor per open ``.log``, owned by an object
that closes it once nobody refers to it, a :class:`SegmentReader` view over it for sendfile,
and the :class:`DescriptorCache` bounding how many are open at once (a 2Q policy: a segment
used once lets go first, one used again after being let go stays longest).  Why deletion and eviction never pull a file from under a reader:
docs/internals.md ("pybroker/log/segment.py")."""

from __future__ import annotations

import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import BinaryIO, NamedTuple, Protocol


class DescriptorHolder(Protocol):
    """What holds a cached descriptor (a LogSegment): it lets go of it when evicted."""

    def evict_descriptor(self) -> None: ...


class Descriptor:
    """Owns one OS file descriptor; closes it when no longer referenced (CPython refcounting:
    as soon as the segment and every SegmentReader have let go of it)."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __del__(self, _close: Callable[[int], None] = os.close) -> None:
        # os.close bound at definition: at interpreter exit module globals may be gone already
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                _close(fd)
            except OSError:
                pass


def descriptor_budget(soft_limit: int) -> int:
    """Segment descriptors allowed open at once for a process RLIMIT_NOFILE soft limit: half
    of it (the rest is for connections, ZooKeeper, index and checkpoint writes), at least
    MIN_OPEN_SEGMENTS."""
    if soft_limit == resource.RLIM_INFINITY or soft_limit <= 0:
        soft_limit = 1 << 20
    return max(MIN_OPEN_SEGMENTS, soft_limit // 2)


MIN_OPEN_SEGMENTS = 16


class DescriptorCache:
    """The segments holding an open ``.log`` descriptor, at most ``capacity`` of them among
    the segments given this cache: opening one more lets go of another's descriptor (it
    closes once its in-flight readers are done; the segment reopens it on its next use).  So
    the log's descriptors are bounded whatever the number of partitions and segments.  Used
    from the loop and from flush threads: one lock.  The broker makes one
    (pybroker/builder.py) and hands it to its LogManager.

    Which one lets go: the 2Q policy (Johnson and Shasha, VLDB 1994).  A newly opened
    segment joins a first-in first-out queue of a quarter of the capacity (``_new``); the
    segments let go of from there are remembered by identity only (``_ghosts``, half the
    capacity, holding nothing); one opened again while remembered joins the main queue
    (``_hot``, least recently used let go first, only when ``_new`` is within its share).
    A plain LRU misses on every use once segments are used round-robin over more than its
    capacity (producing to or consuming from more partitions than half the open-files
    limit: docs/scale.md); 2Q keeps the main queue's segments and lets the others take turns
    in the first one, and a one-off read (a consumer catching up on an old segment) passes
    through the first queue without pushing the segments in use out."""

    @classmethod
    def for_open_files_limit(cls) -> DescriptorCache:
        """A cache sized from this process's RLIMIT_NOFILE soft limit (descriptor_budget)."""
        return cls(descriptor_budget(resource.getrlimit(resource.RLIMIT_NOFILE)[0]))

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self.new_share = max(1, self.capacity // 4)  # 2Q's Kin
        self.ghost_share = max(1, self.capacity // 2)  # 2Q's Kout
        self._lock = threading.Lock()
        self._new: OrderedDict[DescriptorHolder, None] = OrderedDict()  # oldest first
        self._hot: OrderedDict[DescriptorHolder, None] = OrderedDict()  # least recent first
        self._ghosts: OrderedDict[int, bool] = OrderedDict()  # id() of segments let go of
        self._last: DescriptorHolder | None = None  # most recently used: touching it is free
        self.opens = 0  # descriptors opened through this cache (a miss each but the first)

    def __len__(self) -> int:
        return len(self._new) + len(self._hot)

    def opened(self, seg: DescriptorHolder) -> None:
        with self._lock:
            self.opens += 1
            if seg in self._hot or seg in self._new:
                return  # (already counted)
            if self._ghosts.pop(id(seg), False):
                self._hot[seg] = None  # used again after being let go: keep it
            else:
                self._new[seg] = None
            self._last = seg
            self._evict()

    def touch(self, seg: DescriptorHolder) -> None:
        if seg is self._last:  # the common case: several uses in a row (append, read)
            return
        with self._lock:
            if seg in self._hot:
                self._hot.move_to_end(seg)
            self._last = seg  # (in _new: its place stays, first in first out)

    def forget(self, seg: DescriptorHolder) -> None:
        with self._lock:
            if seg in self._hot:
                del self._hot[seg]
            else:
                self._new.pop(seg, None)
            self._ghosts.pop(id(seg), None)
            if self._last is seg:
                self._last = None

    def _evict(self) -> None:
        while len(self._new) + len(self._hot) > self.capacity:
            if len(self._new) > self.new_share or not self._hot:
                victim, _ = self._new.popitem(last=False)
                self._ghosts[id(victim)] = True
                if len(self._ghosts) > self.ghost_share:
                    self._ghosts.popitem(last=False)
            else:
                victim, _ = self._hot.popitem(last=False)
            if self._last is victim:
                self._last = None
            victim.evict_descriptor()  # it closes when its last user lets go


class Unbounded:
    """No cache: a segment keeps its descriptor until it is released or closed (a segment
    or log made on its own, without a log manager: tests, the cleaner's worker process)."""

    def opened(self, seg: DescriptorHolder) -> None:
        pass

    def touch(self, seg: DescriptorHolder) -> None:
        pass

    def forget(self, seg: DescriptorHolder) -> None:
        pass


UNBOUNDED = Unbounded()  # stateless


class SegmentReader:
    """A read-only binary file over a segment's descriptor with a private position (os.pread):
    what ``loop.sendfile`` needs (``fileno``, ``seek``, ``readinto``; the native path uses the
    descriptor with explicit offsets)."""

    __slots__ = ("_desc", "_pos")
    mode = "rb"

    def __init__(self, desc: Descriptor, position: int = 0) -> None:
        self._desc = desc
        self._pos = position

    @property
    def closed(self) -> bool:
        return self._desc.fd < 0

    def fileno(self) -> int:
        return self._desc.fd

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._pos

    def seek(self, position: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_CUR:
            position += self._pos
        elif whence == os.SEEK_END:
            position += os.fstat(self._desc.fd).st_size
        elif whence != os.SEEK_SET:
            raise ValueError(f"invalid whence {whence}")
        if position < 0:
            raise ValueError("negative seek position")
        self._pos = position
        return position

    def readinto(self, buffer: bytearray | memoryview) -> int:
        n = os.preadv(self._desc.fd, [buffer], self._pos)
        self._pos += n
        return n

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = max(0, os.fstat(self._desc.fd).st_size - self._pos)
        data = os.pread(self._desc.fd, size, self._pos)
        self._pos += len(data)
        return data

    def close(self) -> None:
        """Drop this view (the descriptor closes once nothing else refers to it)."""


class FileSlice(NamedTuple):
    """Whole batches of a segment file: send ``size`` bytes of ``file`` from ``position``.
    ``slice_size``: the bytes Kafka's DescriptorHolder.read would hand over instead (up to the byte
    limit or the readable end, so a partial batch at the end too), which sizes a
    down-converted Fetch v0-3 answer as Kafka's; -1: ``size``."""

    file: SegmentReader | BinaryIO
    position: int
    size: int
    slice_size: int = -1

    def read_bytes(self) -> bytes:
        """The region's bytes, read now (the region then needs its descriptor no longer)."""
        return os.pread(self.file.fileno(), self.size, self.position)
