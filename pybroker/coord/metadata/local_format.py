"""The on-disk formats of LocalStore (metadata/local.py): a snapshot of the whole tree and the
journal of the transactions committed after it.  One journal entry is one committed
transaction, replayed all or nothing (replay: docs/internals.md,
"pybroker/coord/metadata/local_format.py").

Byte layout (all integers big-endian; CRC is CRC-32C, Castagnoli)::

    snapshot:
        magic        4   b"PBMS"
        format       u32 1
        last_txid    u64 the txid of the last transaction included
        node_count   u32
        node_count x node (pre-order: a parent before its children; the root "/" first):
            path_len u16, path utf-8, data_len u32, data,
            version i32, cversion i32, ctime i64, mtime i64, ephemeral_owner i64
        crc          u32 CRC-32C of every byte above

    journal file:
        magic        4   b"PBMJ"
        format       u32 1
        first_txid   u64 txid of the first entry that may follow
        entries, back to back:
            length   u32 byte length of body
            crc      u32 CRC-32C of body
            body:    txid u64, time_ms i64, count u32, then count records:
                kind u8  1 = create: path_len u16, path, data_len u32, data, ephemeral_owner i64
                         2 = set:    path_len u16, path, data_len u32, data
                         3 = delete: path_len u16, path
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path

import crc32c

from pybroker.coord.metadata.store import Stat, StoreError, join, parent_of

log = logging.getLogger(__name__)

SNAPSHOT_MAGIC = b"PBMS"
JOURNAL_MAGIC = b"PBMJ"
FORMAT = 1
_SNAP_HEADER = struct.Struct(">4sIQI")
_JOURNAL_HEADER = struct.Struct(">4sIQ")
_ENTRY_HEADER = struct.Struct(">II")
_BODY_HEADER = struct.Struct(">QqI")
_NODE_STAT = struct.Struct(">iiqqq")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")

K_CREATE, K_SET, K_DELETE = 1, 2, 3

Record = tuple  # (K_CREATE, path, data, owner) | (K_SET, path, data) | (K_DELETE, path)


class Node:
    __slots__ = ("data", "version", "cversion", "ctime", "mtime", "owner", "children")

    def __init__(self, data: bytes, ctime: int, owner: int = 0) -> None:
        self.data = data
        self.version = 0
        self.cversion = 0
        self.ctime = ctime
        self.mtime = ctime
        self.owner = owner
        self.children: set[str] = set()

    def copy(self) -> Node:
        """A node of the same content that can change without changing this one."""
        twin = Node(self.data, self.ctime, self.owner)
        twin.version, twin.cversion, twin.mtime = self.version, self.cversion, self.mtime
        twin.children = set(self.children)
        return twin

    def stat(self) -> Stat:
        return Stat(
            self.version, self.owner, self.ctime, self.mtime, len(self.children), self.cversion
        )


_ABSENT = object()


class SnapshotView(Mapping[str, Node]):
    """The tree as of a snapshot's txid, read by the io thread while the loop changes the live
    table: no copy of the table is made.  The loop records in ``saved`` each path's node as it
    was before the path's first change since the view was taken (None: the path did not exist
    then), and records it *before* it changes the live table, so a reader that finds a path
    unsaved after reading its live node has read the node as of the view.  A node the view
    reaches is never changed (LocalStore._own copies it first)."""

    def __init__(self, live: dict[str, Node]) -> None:
        self._live = live
        self._count = len(live)
        self.saved: dict[str, Node | None] = {}

    def __getitem__(self, path: str) -> Node:
        node = self._live.get(path)  # first the live node, then whether it had changed
        prev = self.saved.get(path, _ABSENT)
        if prev is not _ABSENT:
            node = prev
        if node is None:
            raise KeyError(path)
        return node

    def keep(self, path: str, node: Node | None) -> bool:
        """The loop is about to change ``path`` (its live node ``node``, None if absent): the
        first time, record the node as of the view.  -> whether ``node`` is the view's (it must
        then be copied, not changed)."""
        prev = self.saved.get(path, _ABSENT)
        if prev is _ABSENT:
            self.saved[path] = prev = node
        return node is not None and prev is node

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[str]:
        """Every path of the view (on the loop's thread only: it walks the live table)."""
        saved = self.saved
        yield from (p for p in list(self._live) if saved.get(p, _ABSENT) is not None)
        yield from (p for p, n in list(saved.items()) if n is not None and p not in self._live)


def _encode_path(path: str) -> bytes:
    raw = path.encode()
    return _U16.pack(len(raw)) + raw


def encode_entry(txid: int, time_ms: int, records: list[Record]) -> bytes:
    parts = [_BODY_HEADER.pack(txid, time_ms, len(records))]
    for rec in records:
        kind = rec[0]
        parts.append(bytes([kind]))
        parts.append(_encode_path(rec[1]))
        if kind in (K_CREATE, K_SET):
            parts.append(_U32.pack(len(rec[2])))
            parts.append(rec[2])
        if kind == K_CREATE:
            parts.append(_I64.pack(rec[3]))
    body = b"".join(parts)
    return _ENTRY_HEADER.pack(len(body), crc32c.crc32c(body)) + body


def _decode_body(body: bytes) -> tuple[int, int, list[Record]]:
    txid, time_ms, count = _BODY_HEADER.unpack_from(body, 0)
    pos = _BODY_HEADER.size
    records: list[Record] = []
    for _ in range(count):
        kind = body[pos]
        pos += 1
        (plen,) = _U16.unpack_from(body, pos)
        pos += 2
        path = body[pos : pos + plen].decode()
        pos += plen
        if kind in (K_CREATE, K_SET):
            (dlen,) = _U32.unpack_from(body, pos)
            pos += 4
            data = bytes(body[pos : pos + dlen])
            pos += dlen
            if kind == K_CREATE:
                (owner,) = _I64.unpack_from(body, pos)
                pos += 8
                records.append((K_CREATE, path, data, owner))
            else:
                records.append((K_SET, path, data))
        elif kind == K_DELETE:
            records.append((K_DELETE, path))
        else:
            raise ValueError(f"unknown record kind {kind}")
    if pos != len(body):
        raise ValueError("trailing bytes in journal entry")
    return txid, time_ms, records


def read_journal(path: Path) -> Iterator[tuple[int, int, list[Record]]]:
    """Yield (txid, time_ms, records) for each intact entry; stop at a torn/corrupt tail."""
    buf = path.read_bytes()
    if len(buf) < _JOURNAL_HEADER.size:
        return
    magic, fmt, _first = _JOURNAL_HEADER.unpack_from(buf, 0)
    if magic != JOURNAL_MAGIC or fmt != FORMAT:
        raise StoreError(f"{path}: not a pybroker metadata journal (format {fmt})")
    pos = _JOURNAL_HEADER.size
    while pos + _ENTRY_HEADER.size <= len(buf):
        length, crc = _ENTRY_HEADER.unpack_from(buf, pos)
        start = pos + _ENTRY_HEADER.size
        body = buf[start : start + length]
        if len(body) < length or crc32c.crc32c(body) != crc:
            log.warning("%s: ignoring torn/corrupt journal tail at byte %d", path, pos)
            return
        try:
            yield _decode_body(body)
        except (ValueError, struct.error, UnicodeDecodeError, IndexError):
            log.warning("%s: ignoring undecodable journal entry at byte %d", path, pos)
            return
        pos = start + length


def encode_journal_header(first_txid: int) -> bytes:
    return _JOURNAL_HEADER.pack(JOURNAL_MAGIC, FORMAT, first_txid)


SNAPSHOT_CHUNK_BYTES = 1 << 20


def iter_snapshot(
    txid: int, nodes: Mapping[str, Node], chunk_bytes: int = SNAPSHOT_CHUNK_BYTES
) -> Iterator[bytes]:
    """The snapshot of ``nodes`` as of ``txid`` in pieces of about ``chunk_bytes``, pre-order
    from "/", the CRC after the last node: so a writer never holds the whole blob, nor the GIL
    for longer than one piece's join."""
    parts = [_SNAP_HEADER.pack(SNAPSHOT_MAGIC, FORMAT, txid, len(nodes))]
    size = len(parts[0])
    crc = 0
    stack = ["/"]
    while stack:
        path = stack.pop()
        node = nodes[path]
        raw = path.encode()
        parts.append(_U16.pack(len(raw)) + raw + _U32.pack(len(node.data)))
        parts.append(node.data)
        parts.append(
            _NODE_STAT.pack(node.version, node.cversion, node.ctime, node.mtime, node.owner)
        )
        size += len(raw) + len(node.data) + 6 + _NODE_STAT.size
        if node.children:
            stack.extend(join(path, c) for c in sorted(node.children, reverse=True))
        if size >= chunk_bytes:
            chunk = b"".join(parts)
            crc = crc32c.crc32c(chunk, crc)
            yield chunk
            parts, size = [], 0
    chunk = b"".join(parts)
    yield chunk + _U32.pack(crc32c.crc32c(chunk, crc))


def encode_snapshot(txid: int, nodes: Mapping[str, Node]) -> bytes:
    """The whole tree as of ``txid``, pre-order from "/", with its CRC."""
    return b"".join(iter_snapshot(txid, nodes))


def decode_snapshot(buf: bytes, where: str) -> tuple[int, dict[str, Node]]:
    """-> (last txid, the tree by path); StoreError naming ``where`` when the file is bad."""
    if len(buf) < _SNAP_HEADER.size + 4:
        raise StoreError(f"{where} is truncated")
    (crc,) = _U32.unpack_from(buf, len(buf) - 4)
    if crc32c.crc32c(buf[:-4]) != crc:
        raise StoreError(f"{where} fails its CRC check")
    magic, fmt, last_txid, count = _SNAP_HEADER.unpack_from(buf, 0)
    if magic != SNAPSHOT_MAGIC or fmt != FORMAT:
        raise StoreError(f"{where}: unknown format {fmt}")
    pos = _SNAP_HEADER.size
    nodes: dict[str, Node] = {}
    for _ in range(count):
        (plen,) = _U16.unpack_from(buf, pos)
        pos += 2
        path = buf[pos : pos + plen].decode()
        pos += plen
        (dlen,) = _U32.unpack_from(buf, pos)
        pos += 4
        data = buf[pos : pos + dlen]
        pos += dlen
        version, cversion, ctime, mtime, owner = _NODE_STAT.unpack_from(buf, pos)
        pos += _NODE_STAT.size
        node = Node(data, ctime, owner)
        node.version, node.cversion, node.mtime = version, cversion, mtime
        nodes[path] = node
        if path != "/":
            nodes[parent_of(path)].children.add(path[path.rfind("/") + 1 :])
    return last_txid, nodes
