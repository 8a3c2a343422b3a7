"""The aborted-transaction index of a log segment (Kafka's TransactionIndex, ``.txnindex``).

``<20-digit base offset>.txnindex`` beside the segment's ``.log``, entries of 34 bytes
(Kafka's AbortedTxn), big-endian::

    offset  size  field
         0     2  version              int16   0
         2     8  producer id          int64
        10     8  first offset         int64   first offset of the aborted transaction
        18     8  last offset          int64   offset of its ABORT marker
        26     8  last stable offset   int64   the LSO when the marker was written: the first
                                               offset of the earliest other ongoing
                                               transaction, else last offset + 1

One entry per aborted transaction with data in the partition, in the segment that received
its ABORT marker, in marker order.  Reads and corruption: docs/internals.md
("pybroker/log/txn_index.py").
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

from pybroker.log.index import CorruptIndexError

TXN_INDEX_SUFFIX = ".txnindex"
CURRENT_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(CURRENT_VERSION, *self)


def decode_entries(data: bytes, start_offset: int = 0) -> list[AbortedTxn]:
    """Parse a .txnindex file; raises CorruptIndexError."""
    if len(data) % ENTRY_SIZE:
        raise CorruptIndexError(f"transaction index of {len(data)} bytes: a torn entry")
    out: list[AbortedTxn] = []
    for pos in range(0, len(data), ENTRY_SIZE):
        version, *fields = _ENTRY.unpack_from(data, pos)
        if version != CURRENT_VERSION:
            raise CorruptIndexError(f"aborted transaction version {version}")
        txn = AbortedTxn(*fields)
        if txn.last_offset < start_offset or txn.first_offset > txn.last_offset:
            raise CorruptIndexError(f"aborted transaction {txn} in a segment at {start_offset}")
        if out and txn.last_offset <= out[-1].last_offset:
            raise CorruptIndexError(f"aborted transaction {txn} after {out[-1]}")
        out.append(txn)
    return out


class TransactionIndex:
    def __init__(self, path: Path, start_offset: int) -> None:
        self.path = path
        self.start_offset = start_offset
        self._entries: list[AbortedTxn] | None = None
        self._dirty = False

    @property
    def entries(self) -> list[AbortedTxn]:
        """Every entry (loaded on first use).  Raises CorruptIndexError."""
        if self._entries is None:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                data = b""
            self._entries = decode_entries(data, self.start_offset)
        return self._entries

    def sanity_check(self) -> None:
        """Load the file if it exists (Kafka's sanityCheck); raises CorruptIndexError."""
        if self._entries is None and self.path.exists():
            _ = self.entries

    def append(self, txn: AbortedTxn) -> None:
        entries = self.entries
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise ValueError(
                f"aborted transaction last offsets must increase: {txn} after {entries[-1]}"
            )
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, txn.encode())
        finally:
            os.close(fd)
        entries.append(txn)
        self._dirty = True

    def _rewrite(self, entries: list[AbortedTxn]) -> None:
        if not entries:
            self.path.unlink(missing_ok=True)
        else:
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_bytes(b"".join(t.encode() for t in entries))
            os.replace(tmp, self.path)
        self._entries = list(entries)
        self._dirty = bool(entries)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose ABORT marker is at or above ``offset``."""
        entries = self.entries if self.path.exists() or self._entries else []
        kept = [t for t in entries if t.last_offset < offset]
        if len(kept) != len(entries):
            self._rewrite(kept)

    def reset(self) -> None:
        """Forget every entry and delete the file (the segment is being rebuilt)."""
        self.path.unlink(missing_ok=True)
        self._entries = []
        self._dirty = False

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [fetch_offset, upper_bound), and whether the search is complete
        (an entry's last stable offset reached ``upper_bound``: later segments cannot hold an
        aborted transaction that started below it)."""
        out = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                out.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return out, True
        return out, False

    def flush(self) -> None:
        """fsync the file if it was written since the last flush (may run in a worker)."""
        if not self._dirty:
            return
        self._dirty = False
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def discard(self) -> None:
        self._entries = []
        self._dirty = False
