"""One log segment: ``<20-digit base offset>.log`` plus its ``.index``, ``.timeindex`` and,
once it holds an aborted transaction, ``.txnindex`` (pybroker/log/txn_index.py).

``.log`` byte layout: record batches v2 exactly as Kafka stores them, back to back, with their
absolute base offsets patched in (layout in pybroker/wire/records.py).  There is no other
framing: the file is a concatenation of whole batches, and anything after the last whole
batch with a valid CRC is a torn write that recovery truncates.

Index entries are added as Kafka's LogSegment.append adds them (layouts in
pybroker/log/index.py).  A segment holds at most one descriptor, for its ``.log``, bounded by
its owner's DescriptorCache (pybroker/log/descriptors.py); a release, deletion or close never pulls the file from
under an in-flight sendfile.  Descriptors, readers and deletion: docs/internals.md
("pybroker/log/segment.py").
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

from pybroker.log.descriptors import (
    UNBOUNDED,
    Descriptor,
    DescriptorCache,
    FileSlice,
    SegmentReader,
    Unbounded,
)
from pybroker.log.index import CorruptIndexError, OffsetIndex, TimeIndex
from pybroker.log.txn_index import TXN_INDEX_SUFFIX, TransactionIndex
from pybroker.log.validator import READ_MAX_UNCOMPRESSED_BYTES, find_record
from pybroker.wire.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MIN_BATCH_LENGTH,
    BatchHeader,
    scan_batches,
    unpack_header,
)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"  # a segment the log cleaner is writing
SWAP_SUFFIX = ".swap"  # a cleaned segment about to replace the segments it was cleaned from
RECOVERY_CHUNK = 1 << 20
_LEN = struct.Struct(">qi")


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def scan_log_headers(path: Path) -> Iterator[BatchHeader]:
    """Headers (absolute positions) of the valid batches of a .log file, CRC checked,
    stopping at the first torn or corrupt one (recovery of an interrupted swap)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        pos = 0
        while pos < size:
            chunk = os.pread(fd, RECOVERY_CHUNK, pos)
            consumed = 0
            for h in scan_batches(chunk):
                yield h._replace(position=pos + h.position)
                consumed = h.position + h.size
            if consumed == 0:
                if len(chunk) >= 12:
                    _, length = _LEN.unpack_from(chunk)
                    total = LOG_OVERHEAD + length
                    if len(chunk) < total <= size - pos and length >= MIN_BATCH_LENGTH:
                        chunk = os.pread(fd, total, pos)
                        hs = list(scan_batches(chunk))
                        if hs:
                            yield hs[0]._replace(position=pos)
                            pos += hs[0].size
                            continue
                return
            pos += consumed
    finally:
        os.close(fd)


class LogSegment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int = 4096,
        max_index_bytes: int = 10 * 1024 * 1024,
        file_suffix: str = "",
        descriptors: DescriptorCache | None = None,
    ) -> None:
        """``file_suffix`` (``.cleaned``, ``.swap``) names the files of a segment that the
        log cleaner is building (pybroker/log/cleaner.py); :meth:`change_file_suffixes`
        renames them.  ``descriptors``: the cache bounding open descriptors (None: none)."""
        self.directory = directory
        self.descriptors: DescriptorCache | Unbounded = (
            descriptors if descriptors is not None else UNBOUNDED
        )
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = directory / (segment_name(base_offset, LOG_SUFFIX) + file_suffix)
        self._desc: Descriptor | None = None
        desc = self._handle(os.O_CREAT)
        self.size = os.fstat(desc.fd).st_size
        del desc
        self.offset_index = OffsetIndex(
            directory / (segment_name(base_offset, INDEX_SUFFIX) + file_suffix),
            base_offset,
            max_index_bytes,
        )
        self.time_index = TimeIndex(
            directory / (segment_name(base_offset, TIME_INDEX_SUFFIX) + file_suffix),
            base_offset,
            max_index_bytes,
        )
        self.txn_index = TransactionIndex(
            directory / (segment_name(base_offset, TXN_INDEX_SUFFIX) + file_suffix), base_offset
        )
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.bytes_since_last_index_entry = 0
        # clock time of the first append (segment.ms / roll_ms); load time for a loaded segment
        self.rolling_base_ms: int | None = None
        # segment.jitter.ms: taken off segment.ms for this segment (set by its log)
        self.roll_jitter_ms = 0
        self.deleted = False  # renamed for deletion or deleted: nothing left to flush

    # -- the descriptor -----------------------------------------------------------------------

    def _handle(self, flags: int = 0) -> Descriptor:
        """The segment's descriptor, reopened if released or evicted by its cache.
        Callers keep the returned object (not just its number) while they use it: a
        concurrent release or eviction cannot close it then."""
        desc = self._desc
        if desc is None:
            desc = Descriptor(os.open(self.log_path, os.O_RDWR | os.O_APPEND | flags, 0o644))
            self._desc = desc
            self.descriptors.opened(self)
        else:
            self.descriptors.touch(self)
        return desc

    def evict_descriptor(self) -> None:
        """Its cache let go of the descriptor (which closes once in-flight readers are done)."""
        self._desc = None

    @property
    def has_handle(self) -> bool:
        return self._desc is not None

    def release(self) -> None:
        """Let go of the descriptor (it closes when in-flight readers are done with it) and
        of fully written index entries; both come back on the next use.  For segments no
        longer appended to; may run in a worker thread."""
        self._desc = None
        self.descriptors.forget(self)
        self.offset_index.release()
        self.time_index.release()

    # -- loading ------------------------------------------------------------------------------

    def load(self, now_ms: int) -> None:
        """Open a segment we trust (below the recovery point or after a clean shutdown):
        sanity-check the indexes and read only the tail after the last index entry.  Falls back
        to a full :meth:`recover` (CRC scan and index rebuild) if anything does not add up."""
        try:
            self.offset_index.sanity_check(self.size)
            self._load_tail()
            self.time_index.sanity_check(self.next_offset - 1)
        except (CorruptIndexError, ValueError):
            self.recover(now_ms)
            self.flush()  # the rebuilt indexes go to disk: the segment stays trusted
            return
        self._set_rolling_base(now_ms)

    def _load_tail(self) -> None:
        last = self.time_index.last_entry
        if last is not None:
            self.max_timestamp, self.offset_of_max_timestamp = last
        start = pos = self.offset_index.last_position
        next_offset = self.base_offset
        for h in self.headers_from(start):
            if h.position == start and self.offset_index.entries:
                if h.last_offset != self.offset_index.last_offset:
                    raise ValueError("offset index does not match the log")
            elif h.base_offset < next_offset:
                raise ValueError("offsets go backwards")
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = h.max_timestamp, h.last_offset
            next_offset = h.next_offset
            pos = h.position + h.size
        if pos != self.size:
            raise ValueError("torn batch in a trusted segment")
        self.next_offset = next_offset
        self.bytes_since_last_index_entry = self.size - self.offset_index.last_position

    def _set_rolling_base(self, now_ms: int) -> None:
        # segment.ms counts clock time since the first append; for a segment loaded from
        # disk that moment is unknown, so the clock restarts at load (Kafka's ``created``
        # fallback).  Client timestamps are not used: a skewed producer clock must not roll.
        self.rolling_base_ms = now_ms if self.size else None

    def recover(self, now_ms: int) -> int:
        """Scan the whole segment batch by batch with CRC checks, rebuild both indexes, and
        truncate the first invalid batch and everything after it.  Returns the number of bytes
        truncated."""
        self.offset_index.reset()
        self.time_index.reset()
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        self.bytes_since_last_index_entry = 0
        expected = self.base_offset
        pos = 0
        want = RECOVERY_CHUNK
        desc = self._handle()
        while pos < self.size:
            chunk = os.pread(desc.fd, min(want, self.size - pos), pos)
            consumed = 0
            for h in scan_batches(chunk):
                if h.base_offset < expected:
                    break
                self._index_batch(pos + h.position, h.last_offset, h.max_timestamp, h.size)
                expected = h.next_offset
                consumed = h.position + h.size
            if consumed == 0:
                # the first batch did not fit in the chunk, or is invalid
                if len(chunk) >= 17 and chunk[16] == MAGIC:
                    _, length = _LEN.unpack_from(chunk)
                    total = LOG_OVERHEAD + length
                    if (
                        length >= MIN_BATCH_LENGTH
                        and total > len(chunk)
                        and pos + total <= self.size
                    ):
                        want = total
                        continue
                break
            pos += consumed
            want = RECOVERY_CHUNK
        truncated = self.size - pos
        if truncated:
            os.ftruncate(desc.fd, pos)
            self.size = pos
        self.next_offset = expected
        self._set_rolling_base(now_ms)
        return truncated

    # -- appending ----------------------------------------------------------------------------

    def _index_batch(self, position: int, last_offset: int, max_timestamp: int, size: int) -> None:
        if max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, last_offset
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size

    def _write_all(self, data: memoryview, physical: int) -> None:
        """Write ``data`` at the end of the .log (``physical`` bytes long).  On an OSError
        (ENOSPC: a full disk writes part of the data, then fails) the file is cut back to
        ``physical``, so no torn batch stays behind, and the OSError is raised for the caller
        to take the log dir offline (LogManager.fail_dir, Kafka's LogDirFailureChannel)."""
        fd = self._handle().fd
        try:
            written = os.write(fd, data)
            while written < len(data):  # a short write: the next one raises if the disk is full
                written += os.write(fd, data[written:])
        except OSError:
            try:
                os.ftruncate(fd, physical)
            except OSError:
                pass  # the dir goes offline; recovery truncates the torn tail at the next start
            raise

    def append(
        self,
        data: memoryview,
        batches: list[BatchHeader],
        first_offset: int,
        now_ms: int,
        max_timestamp: int | None = None,
    ) -> None:
        """Write ``data`` (the batches, offsets already patched) with one os.write and index
        them.  ``batches`` positions are relative to the buffer ``data`` was cut from, whose
        first batch starts ``data``.  ``max_timestamp`` overrides the batches' (LogAppendTime).
        An OSError leaves the file as it was (see _write_all) and is raised."""
        physical = self.size
        self._write_all(data, physical)
        if self.size == 0 and self.rolling_base_ms is None:
            self.rolling_base_ms = now_ms
        start = batches[0].position
        offset = first_offset
        for h in batches:
            last = offset + h.last_offset_delta
            ts = h.max_timestamp if max_timestamp is None else max_timestamp
            self._index_batch(physical + h.position - start, last, ts, h.size)
            offset = last + 1
        self.size = physical + len(data)
        self.next_offset = offset

    def append_batches(self, data: bytes | bytearray, batches: list[BatchHeader]) -> None:
        """Write whole batches that carry their offsets already (the log cleaner's output:
        offsets may have gaps) and index them.  ``batches`` positions are relative to
        ``data``."""
        if not batches:
            return
        physical = self.size
        view = memoryview(data)
        self._write_all(view, physical)
        for h in batches:
            self._index_batch(physical + h.position, h.last_offset, h.max_timestamp, h.size)
        self.size = physical + len(view)
        self.next_offset = batches[-1].next_offset

    def change_file_suffixes(
        self, old: str, new: str, on_rename: Callable[[Path], None] | None = None
    ) -> None:
        """Rename the .log, then the indexes, from suffix ``old`` to ``new`` (Kafka's
        LogSegment.changeFileSuffixes); descriptors stay valid.  ``on_rename(new path)``
        after each file (crash-injection tests)."""
        for obj, attr in (
            (self, "log_path"),
            (self.offset_index, "path"),
            (self.time_index, "path"),
            (self.txn_index, "path"),
        ):
            path: Path = getattr(obj, attr)
            if old and not path.name.endswith(old):
                raise ValueError(f"{path} does not end with {old}")
            target = path.with_name(path.name[: len(path.name) - len(old)] + new)
            if obj is self.txn_index and not path.exists():
                setattr(obj, attr, target)  # no aborted transaction: no file (as Kafka's)
                continue
            os.replace(path, target)
            setattr(obj, attr, target)
            if on_rename is not None:
                on_rename(target)

    # -- reading ------------------------------------------------------------------------------

    def read_header(self, position: int, desc: Descriptor | None = None) -> BatchHeader | None:
        desc = desc or self._handle()
        data = os.pread(desc.fd, HEADER_SIZE, position)
        if len(data) < HEADER_SIZE:
            return None
        h = unpack_header(data)
        if h.batch_length < MIN_BATCH_LENGTH or h.magic != MAGIC:
            return None
        return h._replace(position=position)

    def headers_from(self, position: int, end: int | None = None) -> Iterator[BatchHeader]:
        """Batch headers from ``position`` (a batch boundary) to ``end`` via pread (no CRC)."""
        end = self.size if end is None else end
        desc = self._handle()
        while position < end:
            h = self.read_header(position, desc)
            if h is None or position + h.size > end:
                return
            yield h
            position += h.size

    def translate_offset(self, offset: int) -> BatchHeader | None:
        """Header (absolute position) of the first batch whose last offset >= ``offset``."""
        _, pos = self.offset_index.lookup(offset)
        for h in self.headers_from(pos):
            if h.last_offset >= offset:
                return h
        return None

    def _boundary_at_or_before(self, limit: int, start: int) -> int:
        """The greatest batch boundary <= ``limit``, searching from boundary ``start``."""
        pos = max(start, self.offset_index.lookup_position(limit))
        for h in self.headers_from(pos):
            if h.position + h.size > limit:
                return h.position
            pos = h.position + h.size
        return pos

    def read(
        self, offset: int, max_bytes: int, min_one_batch: bool = True, max_offset: int | None = None
    ) -> FileSlice | None:
        """Whole batches from the one containing ``offset``, at most ``max_bytes`` (but one
        whole batch if ``min_one_batch``), only batches whose base offset < ``max_offset``."""
        first = self.translate_offset(offset)
        if first is None:
            return None
        if max_offset is not None and first.base_offset >= max_offset:
            return None
        cap = self.size
        if max_offset is not None and max_offset < self.next_offset:
            # (a cap at or past this segment's end, the usual high watermark, needs no lookup)
            h = self.translate_offset(max_offset)
            if h is not None:
                cap = h.position + (h.size if h.base_offset < max_offset else 0)
        start = first.position
        end = self._boundary_at_or_before(min(cap, start + max(max_bytes, 0)), start)
        if end == start:
            if not min_one_batch:
                return None
            end = start + first.size
        kafka_end = min(cap, start + max(max_bytes, first.size if min_one_batch else 0))
        return FileSlice(
            SegmentReader(self._handle(), start), start, end - start, max(kafka_end, end) - start
        )

    def read_batch(self, header: BatchHeader) -> bytes:
        desc = self._handle()
        return os.pread(desc.fd, header.size, header.position)

    def batch_for_timestamp(
        self, timestamp: int, starting_offset: int
    ) -> tuple[BatchHeader, bytes] | None:
        """The first batch whose maxTimestamp is >= ``timestamp`` and which holds an offset
        >= ``starting_offset`` (found through the time index), and its bytes; or None."""
        _, ts_offset = self.time_index.lookup(timestamp)
        _, pos = self.offset_index.lookup(max(ts_offset, starting_offset))
        for h in self.headers_from(pos):
            if h.max_timestamp >= timestamp and h.last_offset >= starting_offset:
                return h, self.read_batch(h)
        return None

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int
    ) -> tuple[int, int] | None:
        """Kafka's LogSegment.findOffsetByTimestamp: (offset, timestamp) of the first record
        with timestamp >= ``timestamp`` and offset >= ``starting_offset`` (walks the records of
        the batches whose maxTimestamp qualifies, decompressing as a stream).  Raises
        InvalidRecordError on a malformed batch."""
        start = starting_offset
        while (got := self.batch_for_timestamp(timestamp, start)) is not None:
            h, data = got
            found = find_record(
                data,
                unpack_header(data),
                lambda o, t: t >= timestamp and o >= starting_offset,
                max_uncompressed_bytes=READ_MAX_UNCOMPRESSED_BYTES,
            )
            if found is not None:
                return found
            start = h.next_offset
        return None

    # -- truncation, durability, deletion -----------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove the batch containing ``offset`` and everything after it; returns bytes cut."""
        h = self.translate_offset(offset)
        if h is None:
            return 0
        cut = self.size - h.position
        desc = self._handle()
        os.ftruncate(desc.fd, h.position)
        self.size = h.position
        self.offset_index.truncate_to(h.base_offset)
        self.time_index.truncate_to(h.base_offset)
        self.txn_index.truncate_to(h.base_offset)
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        self._load_tail()
        if self.size == 0:
            self.rolling_base_ms = None
        return cut

    def should_roll_for_index(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    def flush(self) -> None:
        """fsync the .log, then write and fsync the index entries (in this order, so that an
        index on disk never gets ahead of the fsynced data it points into).  May run in a
        worker thread."""
        if self.deleted:
            return
        desc = self._handle()  # held: a concurrent release must not close it under fsync
        os.fsync(desc.fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Write the pending index entries and let go of the descriptor."""
        self.offset_index.close()
        self.time_index.close()
        self._desc = None
        self.descriptors.forget(self)

    def paths(self) -> list[Path]:
        return [self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path]

    def moved_to(self, directory: Path) -> None:
        """The segment's directory was renamed (a deleted partition's ``-delete``): its files
        keep their names there.  Descriptors stay valid."""
        self.directory = directory
        for obj, attr in (
            (self, "log_path"),
            (self.offset_index, "path"),
            (self.time_index, "path"),
            (self.txn_index, "path"),
        ):
            setattr(obj, attr, directory / getattr(obj, attr).name)

    def rename_for_delete(self) -> None:
        """Rename the files to ``*.deleted``; open descriptors (and in-flight reads) stay valid."""
        self.deleted = True
        for obj, attr in (
            (self, "log_path"),
            (self.offset_index, "path"),
            (self.time_index, "path"),
            (self.txn_index, "path"),
        ):
            old: Path = getattr(obj, attr)
            new = old.with_name(old.name + DELETED_SUFFIX)
            try:
                os.rename(old, new)
            except FileNotFoundError:
                pass  # (a .txnindex exists only with entries) never unlink the old name later
            setattr(obj, attr, new)

    def delete_files(self) -> None:
        """Let go of the descriptor and unlink; safe to run in a worker thread (an in-flight
        reader keeps the descriptor, and the data, until it is done)."""
        self.deleted = True
        self._desc = None
        self.descriptors.forget(self)
        self.offset_index.discard()
        self.time_index.discard()
        self.txn_index.discard()
        for p in self.paths():
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
