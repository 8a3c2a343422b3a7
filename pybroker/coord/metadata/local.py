"""LocalStore: the metadata store in process, for the one-node default (no zookeeper.connect).

The tree lives in memory; every committed write is appended to a journal before the call
returns, and a snapshot of the whole tree periodically replaces the journal, so a write costs
O(size of the change) and a restart costs O(snapshot + journal tail).

Directory: the broker passes ``<first log.dir>/__cluster_metadata``; the store owns it::

    LOCK                       flock()ed while open: a second process (or store) is refused
    snapshot                   the whole tree as of txid S (written to snapshot.tmp, fsync, rename)
    journal-<first txid>       committed transactions after the snapshot, %020d in the name

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

One entry is one committed transaction (a single create/set/delete or a whole ``multi``: all or
nothing on replay too).  Records hold resolved results (the sequential name), so replay is
deterministic and reproduces versions, cversions, ctime/mtime (the entry's time_ms, from the
injected clock) and sequence numbers (taken from the parent's cversion, as ZooKeeper does).

Loading: read the snapshot (its CRC must match: it is written atomically), then replay the
journals in txid order, skipping txids <= last_txid (a crash between a snapshot's rename and the
old journal's unlink leaves such entries) and stopping at the first torn or corrupt entry or txid
gap (a crash mid-append leaves a torn tail; it is ignored).  Then the ephemeral nodes left from the
previous process are removed (each bumps its parent's cversion, like a session closing), a fresh
snapshot is written and the old journals are deleted, and a new journal is started.

Durability (fsync policy): the journal entry is written with os.write before the call returns,
so a process crash (kill -9) never loses an acknowledged write (the page cache survives it).
fsync is batched: at most ``fsync_interval_ms`` after a write, on a dedicated thread (never on
the event loop); so an OS crash or power loss can lose the last interval's writes, like Kafka's
default log flush policy.  ``fsync_interval_ms=0`` fsyncs (on the thread) before each write
returns.  Snapshots are written on the same thread: the tree is serialized on the loop (cheap,
the metadata tree is small), a new journal is started at once, and the thread fsyncs the old
journal, writes + fsyncs + renames the snapshot, fsyncs the directory, then unlinks the old
journals.  A snapshot is taken when the journal exceeds ``snapshot_bytes``.

Ephemeral nodes belong to this store instance (its session); ``close()`` deletes them (journaled),
and a restart after a crash removes them on load.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import fcntl
import logging
import os
import random
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import crc32c

from pybroker.clock import SYSTEM_CLOCK, Clock
from pybroker.coord.metadata.store import (
    BadVersionError,
    Check,
    Create,
    Delete,
    EventType,
    MetadataStore,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SessionListener,
    SetData,
    Stat,
    StoreError,
    WatchCallback,
    WatchedEvent,
    join,
    parent_of,
    validate_path,
)

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


class _Node:
    __slots__ = ("data", "version", "cversion", "ctime", "mtime", "owner", "children")

    def __init__(self, data: bytes, ctime: int, owner: int = 0) -> None:
        self.data = data
        self.version = 0
        self.cversion = 0
        self.ctime = ctime
        self.mtime = ctime
        self.owner = owner
        self.children: set[str] = set()

    def stat(self) -> Stat:
        return Stat(
            self.version, self.owner, self.ctime, self.mtime, len(self.children), self.cversion
        )


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


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalStore(MetadataStore):
    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        clock: Clock = SYSTEM_CLOCK,
        *,
        fsync_interval_ms: int = 1000,
        snapshot_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        self.data_dir = Path(data_dir)
        self._clock = clock
        self._fsync_interval = fsync_interval_ms / 1000.0
        self._snapshot_bytes = snapshot_bytes
        self._session_id = random.getrandbits(62) | 1
        self._nodes: dict[str, _Node] = {}
        self._data_watches: dict[str, list[WatchCallback]] = {}
        self._child_watches: dict[str, list[WatchCallback]] = {}
        self._listeners: list[SessionListener] = []
        self._txid = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock_fd: int | None = None
        self._jfd: int | None = None
        self._journal_bytes = 0
        self._fsync_handle: asyncio.TimerHandle | None = None
        self._snapshot_job: concurrent.futures.Future[None] | None = None
        self._open = False

    # ------------------------------------------------------------------ lifecycle

    @property
    def session_id(self) -> int:
        return self._session_id

    async def start(self) -> None:
        if self._open:
            return
        self._loop = asyncio.get_running_loop()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="localstore-io"
        )
        await self._loop.run_in_executor(self._executor, self._open_sync)
        self._open = True

    def _open_sync(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(self.data_dir / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock_fd)
            raise StoreError(
                f"metadata directory {self.data_dir} is in use by another broker process"
            ) from None
        self._lock_fd = lock_fd
        try:
            self._load()
            self._expire_ephemerals()
            blob = self._serialize_snapshot()
            self._write_snapshot(blob)
            for p in self._journal_files():
                p.unlink()
            self._start_journal()
            _fsync_dir(self.data_dir)
        except BaseException:
            self._release_files()
            raise

    def _journal_files(self) -> list[Path]:
        files = []
        for p in self.data_dir.glob("journal-*"):
            try:
                files.append((int(p.name[len("journal-") :]), p))
            except ValueError:
                continue
        return [p for _, p in sorted(files)]

    def _load(self) -> None:
        self._nodes = {"/": _Node(b"", 0)}
        self._txid = 0
        snap = self.data_dir / "snapshot"
        if snap.exists():
            self._load_snapshot(snap.read_bytes())
        for jpath in self._journal_files():
            for txid, time_ms, records in read_journal(jpath):
                if txid <= self._txid:
                    continue
                if txid != self._txid + 1:
                    log.warning("%s: txid gap (%d after %d), stopping", jpath, txid, self._txid)
                    return
                for rec in records:
                    self._replay(rec, time_ms)
                self._txid = txid

    def _load_snapshot(self, buf: bytes) -> None:
        if len(buf) < _SNAP_HEADER.size + 4:
            raise StoreError(f"{self.data_dir}/snapshot is truncated")
        (crc,) = _U32.unpack_from(buf, len(buf) - 4)
        if crc32c.crc32c(buf[:-4]) != crc:
            raise StoreError(f"{self.data_dir}/snapshot fails its CRC check")
        magic, fmt, last_txid, count = _SNAP_HEADER.unpack_from(buf, 0)
        if magic != SNAPSHOT_MAGIC or fmt != FORMAT:
            raise StoreError(f"{self.data_dir}/snapshot: unknown format {fmt}")
        pos = _SNAP_HEADER.size
        nodes: dict[str, _Node] = {}
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
            node = _Node(data, ctime, owner)
            node.version, node.cversion, node.mtime = version, cversion, mtime
            nodes[path] = node
            if path != "/":
                nodes[parent_of(path)].children.add(path[path.rfind("/") + 1 :])
        self._nodes = nodes
        self._txid = last_txid

    def _serialize_snapshot(self) -> bytes:
        parts = [_SNAP_HEADER.pack(SNAPSHOT_MAGIC, FORMAT, self._txid, len(self._nodes))]
        stack = ["/"]
        while stack:
            path = stack.pop()
            node = self._nodes[path]
            parts.append(_encode_path(path))
            parts.append(_U32.pack(len(node.data)))
            parts.append(node.data)
            parts.append(
                _NODE_STAT.pack(node.version, node.cversion, node.ctime, node.mtime, node.owner)
            )
            stack.extend(join(path, c) for c in sorted(node.children, reverse=True))
        blob = b"".join(parts)
        return blob + _U32.pack(crc32c.crc32c(blob))

    def _write_snapshot(self, blob: bytes) -> None:
        tmp = self.data_dir / "snapshot.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(blob)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.data_dir / "snapshot")
        _fsync_dir(self.data_dir)

    def _start_journal(self) -> None:
        first = self._txid + 1
        path = self.data_dir / f"journal-{first:020d}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        os.write(fd, _JOURNAL_HEADER.pack(JOURNAL_MAGIC, FORMAT, first))
        self._jfd = fd
        self._journal_bytes = 0

    def _expire_ephemerals(self) -> None:
        for path in [p for p, n in self._nodes.items() if n.owner]:
            node = self._nodes.pop(path)
            assert not node.children
            parent = self._nodes[parent_of(path)]
            parent.children.discard(path[path.rfind("/") + 1 :])
            parent.cversion += 1

    async def close(self) -> None:
        if not self._open:
            return
        mine = [p for p, n in self._nodes.items() if n.owner == self._session_id]
        if mine:
            try:
                await self.multi([Delete(p) for p in mine])
            except StoreError:
                log.exception("could not delete ephemeral nodes at close")
        self._open = False
        if self._fsync_handle is not None:
            self._fsync_handle.cancel()
            self._fsync_handle = None
        assert self._loop is not None and self._executor is not None
        await self._loop.run_in_executor(self._executor, self._close_sync)
        self._executor.shutdown(wait=True)
        self._data_watches.clear()
        self._child_watches.clear()

    def _close_sync(self) -> None:
        if self._jfd is not None:
            os.fsync(self._jfd)
        self._release_files()

    def _release_files(self) -> None:
        if self._jfd is not None:
            os.close(self._jfd)
            self._jfd = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    # ------------------------------------------------------------------ the write path

    def _check_open(self) -> None:
        if not self._open:
            raise StoreError("the local metadata store is not open")

    def _commit(self, ops: list[Op]) -> list[str | Stat | None]:
        """Validate and apply ops atomically, journal them, then fire watches."""
        self._check_open()
        now = self._clock.time_ms()
        undo: list[Callable[[], None]] = []
        records: list[Record] = []
        events: list[tuple[dict[str, list[WatchCallback]], str, EventType]] = []
        results: list[str | Stat | None] = []
        try:
            for i, op in enumerate(ops):
                try:
                    results.append(self._apply_op(op, now, undo, records, events))
                except StoreError as e:
                    e.op_index = i
                    raise
            if records:
                self._journal_append(encode_entry(self._txid + 1, now, records))
                self._txid += 1
        except BaseException:
            for u in reversed(undo):
                u()
            raise
        for table, path, etype in events:
            for cb in table.pop(path, ()):
                self._loop.call_soon(self._run_watch, cb, WatchedEvent(etype, path))
        if records:
            self._after_write()
        return results

    def _apply_op(self, op: Op, now: int, undo: list, records: list, events: list):
        validate_path(op.path)
        nodes = self._nodes
        if isinstance(op, Create):
            ppath = parent_of(op.path)
            parent = nodes.get(ppath)
            if op.path == "/":
                raise NodeExistsError(path="/")
            if parent is None:
                raise NoNodeError(f"parent of {op.path} does not exist", path=op.path)
            if parent.owner:
                raise NoChildrenForEphemeralsError(path=op.path)
            path = op.path + (f"{parent.cversion:010d}" if op.sequence else "")
            if path in nodes:
                raise NodeExistsError(path=path)
            owner = self._session_id if op.ephemeral else 0
            self._raw_create(path, bytes(op.data), owner, now)
            undo.append(lambda: self._undo_create(path))
            records.append((K_CREATE, path, bytes(op.data), owner))
            events.append((self._data_watches, path, EventType.CREATED))
            events.append((self._child_watches, ppath, EventType.CHILD))
            return path
        node = nodes.get(op.path)
        if node is None:
            raise NoNodeError(path=op.path)
        if op.version != -1 and op.version != node.version:
            raise BadVersionError(
                f"{op.path} is at version {node.version}, not {op.version}", path=op.path
            )
        if isinstance(op, SetData):
            old = (node.data, node.version, node.mtime)

            def restore(node=node, old=old) -> None:
                node.data, node.version, node.mtime = old

            self._raw_set(op.path, bytes(op.data), now)
            undo.append(restore)
            records.append((K_SET, op.path, bytes(op.data)))
            events.append((self._data_watches, op.path, EventType.CHANGED))
            return node.stat()
        if isinstance(op, Delete):
            if op.path == "/":
                raise StoreError("the root node cannot be deleted", path="/")
            if node.children:
                raise NotEmptyError(path=op.path)
            ppath = parent_of(op.path)
            self._raw_delete(op.path)
            undo.append(lambda: self._undo_delete(op.path, node))
            records.append((K_DELETE, op.path))
            events.append((self._data_watches, op.path, EventType.DELETED))
            events.append((self._child_watches, op.path, EventType.DELETED))
            events.append((self._child_watches, ppath, EventType.CHILD))
            return None
        if isinstance(op, Check):
            return None
        raise TypeError(f"not a store operation: {op!r}")

    def _raw_create(self, path: str, data: bytes, owner: int, now: int) -> None:
        parent = self._nodes[parent_of(path)]
        self._nodes[path] = _Node(data, now, owner)
        parent.children.add(path[path.rfind("/") + 1 :])
        parent.cversion += 1

    def _undo_create(self, path: str) -> None:
        del self._nodes[path]
        parent = self._nodes[parent_of(path)]
        parent.children.discard(path[path.rfind("/") + 1 :])
        parent.cversion -= 1

    def _raw_set(self, path: str, data: bytes, now: int) -> None:
        node = self._nodes[path]
        node.data = data
        node.version += 1
        node.mtime = now

    def _raw_delete(self, path: str) -> None:
        del self._nodes[path]
        parent = self._nodes[parent_of(path)]
        parent.children.discard(path[path.rfind("/") + 1 :])
        parent.cversion += 1

    def _undo_delete(self, path: str, node: _Node) -> None:
        self._nodes[path] = node
        parent = self._nodes[parent_of(path)]
        parent.children.add(path[path.rfind("/") + 1 :])
        parent.cversion -= 1

    def _replay(self, rec: Record, time_ms: int) -> None:
        try:
            if rec[0] == K_CREATE:
                self._raw_create(rec[1], rec[2], rec[3], time_ms)
            elif rec[0] == K_SET:
                self._raw_set(rec[1], rec[2], time_ms)
            else:
                self._raw_delete(rec[1])
        except KeyError as e:
            raise StoreError(f"journal replay of {rec[:2]} does not fit the tree") from e

    def _journal_append(self, entry: bytes) -> None:
        assert self._jfd is not None
        try:
            n = os.write(self._jfd, entry)
            if n != len(entry):
                # a short write to a regular file means the disk is full: the torn tail is
                # ignored on load, but later appends must not follow it
                raise OSError(f"short write ({n} of {len(entry)} bytes)")
        except OSError as e:
            raise StoreError(f"metadata journal write failed: {e}") from e
        self._journal_bytes += len(entry)

    def _after_write(self) -> None:
        if self._journal_bytes >= self._snapshot_bytes and (
            self._snapshot_job is None or self._snapshot_job.done()
        ):
            self._rotate()
        if self._fsync_handle is None and self._fsync_interval > 0:
            self._fsync_handle = self._loop.call_later(self._fsync_interval, self._fsync_soon)

    def _fsync_soon(self) -> None:
        self._fsync_handle = None
        if self._open and self._jfd is not None:
            self._executor.submit(os.fsync, self._jfd)

    async def _sync_if_strict(self) -> None:
        if self._fsync_interval <= 0 and self._jfd is not None:
            await self._loop.run_in_executor(self._executor, os.fsync, self._jfd)

    def _rotate(self) -> None:
        blob = self._serialize_snapshot()
        old_fd = self._jfd
        old_files = self._journal_files()
        self._start_journal()
        self._snapshot_job = self._executor.submit(self._snapshot_job_sync, blob, old_fd, old_files)

    def _snapshot_job_sync(self, blob: bytes, old_fd: int, old_files: list[Path]) -> None:
        try:
            os.fsync(old_fd)
        finally:
            os.close(old_fd)
        try:
            self._write_snapshot(blob)
            for p in old_files:
                p.unlink(missing_ok=True)
        except OSError:
            log.exception("metadata snapshot failed; the journals are kept")

    # ------------------------------------------------------------------ watches

    def _run_watch(self, cb: WatchCallback, event: WatchedEvent) -> None:
        try:
            cb(event)
        except Exception:
            log.exception("metadata watch callback %r failed for %s", cb, event)

    def _add_watch(self, table: dict[str, list[WatchCallback]], path: str, cb) -> None:
        table.setdefault(path, []).append(cb)

    # ------------------------------------------------------------------ the interface

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        validate_path(path)
        if makepath:
            await self.ensure_path(parent_of(path))
        (result,) = self._commit([Create(path, data, ephemeral, sequence)])
        await self._sync_if_strict()
        return result

    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes, Stat]:
        self._check_open()
        validate_path(path)
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path=path)
        if watch is not None:
            self._add_watch(self._data_watches, path, watch)
        return node.data, node.stat()

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        (result,) = self._commit([SetData(path, data, version)])
        await self._sync_if_strict()
        return result

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        self._check_open()
        validate_path(path)
        ops: list[Op] = []
        if recursive and path in self._nodes:
            ops = [Delete(p) for p in self._subtree_bottom_up(path) if p != path]
        ops.append(Delete(path, version))
        try:
            self._commit(ops)
        except StoreError as e:
            e.op_index = None
            raise
        await self._sync_if_strict()

    def _subtree_bottom_up(self, path: str) -> list[str]:
        out: list[str] = []
        stack = [path]
        while stack:
            p = stack.pop()
            out.append(p)
            stack.extend(join(p, c) for c in self._nodes[p].children)
        return out[::-1]

    async def exists(self, path: str, watch: WatchCallback | None = None) -> Stat | None:
        self._check_open()
        validate_path(path)
        node = self._nodes.get(path)
        if watch is not None:
            self._add_watch(self._data_watches, path, watch)
        return None if node is None else node.stat()

    async def get_children(self, path: str, watch: WatchCallback | None = None) -> list[str]:
        self._check_open()
        validate_path(path)
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path=path)
        if watch is not None:
            self._add_watch(self._child_watches, path, watch)
        return sorted(node.children)

    async def multi(self, ops: list[Op]) -> None:
        self._commit(list(ops))
        await self._sync_if_strict()

    async def ensure_path(self, path: str) -> None:
        self._check_open()
        validate_path(path)
        missing: list[Op] = []
        p = path
        while p != "/" and p not in self._nodes:
            missing.append(Create(p))
            p = parent_of(p)
        if missing:
            self._commit(missing[::-1])
            await self._sync_if_strict()

    def add_session_listener(self, cb: SessionListener) -> None:
        self._listeners.append(cb)  # never called: the in-process session does not end

    def remove_session_listener(self, cb: SessionListener) -> None:
        if cb in self._listeners:
            self._listeners.remove(cb)
