"""LocalStore: the metadata store in process, for the one-node default (no zookeeper.connect).
The tree lives in memory; every committed write is appended to a journal (os.write) before the
call returns, so a process crash never loses an acknowledged write; fsync is batched on a
thread (``fsync_interval_ms``, like Kafka's default log flush policy), and a snapshot
replaces the journal once it is as large as the last snapshot (at least ``snapshot_bytes``),
encoded and written on that thread from a copy-on-write view of the tree (``_rotate``).
Ephemeral nodes belong to this store instance or to a session of its store server
(store_server.py), and are kept by session, so a session's start and end cost what it owns.

Directory: the broker passes ``<first log.dir>/__cluster_metadata``; the store owns it::

    LOCK                       flock()ed while open: a second process (or store) is refused
    snapshot                   the whole tree as of txid S (written to snapshot.tmp, fsync, rename)
    journal-<first txid>       committed transactions after the snapshot, %020d in the name

The byte layouts of the snapshot and journal files are in metadata/local_format.py.  Loading and
durability: docs/internals.md ("pybroker/coord/metadata/local.py").
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import fcntl
import logging
import os
import random
from collections.abc import Callable
from pathlib import Path

from pybroker.clock import SYSTEM_CLOCK, Clock
from pybroker.coord.metadata.local_format import (
    K_CREATE,
    K_DELETE,
    K_SET,
    Node,
    Record,
    SnapshotView,
    decode_snapshot,
    encode_entry,
    encode_journal_header,
    iter_snapshot,
    read_journal,
)
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
        self._nodes: dict[str, Node] = {}
        # each session's ephemeral paths in creation order (ZooKeeper's DataTree keeps them by
        # session too): a session's start and end cost what it owns, not the whole tree
        self._ephemerals: dict[int, dict[str, None]] = {}
        self._sessions: set[int] = set()  # the other sessions (new_session to end_session)
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
        # the tree as of the snapshot being written: the live table plus the nodes as they were
        # before their first change since (no copy of the table; its Node objects are never
        # changed while it is set: _own copies a node before its first change)
        self._frozen: SnapshotView | None = None
        self._last_snapshot_bytes = 0
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
            self._write_snapshot(self._txid, self._nodes)
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
        self._nodes = {"/": Node(b"", 0)}
        self._txid = 0
        snap = self.data_dir / "snapshot"
        if snap.exists():
            self._txid, self._nodes = decode_snapshot(snap.read_bytes(), str(snap))
        self._ephemerals = {}
        for path, node in self._nodes.items():  # (once, at start-up, beside the decode)
            if node.owner:
                self._ephemerals.setdefault(node.owner, {})[path] = None
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

    def _write_snapshot(self, txid: int, nodes: dict[str, Node]) -> None:
        """Encode ``nodes`` (as of ``txid``) into snapshot.tmp piece by piece, fsync, rename."""
        tmp = self.data_dir / "snapshot.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        size = 0
        try:
            for chunk in iter_snapshot(txid, nodes):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
                size += len(chunk)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.data_dir / "snapshot")
        self._last_snapshot_bytes = size
        _fsync_dir(self.data_dir)

    def _start_journal(self) -> None:
        first = self._txid + 1
        path = self.data_dir / f"journal-{first:020d}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        os.write(fd, encode_journal_header(first))
        self._jfd = fd
        self._journal_bytes = 0

    def _expire_ephemerals(self) -> None:
        """The previous process's sessions are over: their ephemerals go (at load, unjournaled:
        the snapshot written next records the tree without them)."""
        for paths in self._ephemerals.values():
            for path in paths:
                node = self._nodes.pop(path)
                assert not node.children
                parent = self._own(parent_of(path))
                parent.children.discard(path[path.rfind("/") + 1 :])
                parent.cversion += 1
        self._ephemerals = {}

    async def close(self) -> None:
        if not self._open:
            return
        mine = list(self._ephemerals.get(self._session_id, ()))
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
        self._frozen = None
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

    def _commit(self, ops: list[Op], owner: int | None = None) -> list[str | Stat | None]:
        """Validate and apply ops atomically, journal them, then fire watches.  ``owner``: the
        session whose ephemerals the creates make (this store's own by default)."""
        self._check_open()
        owner = self._session_id if owner is None else owner
        now = self._clock.time_ms()
        undo: list[Callable[[], None]] = []
        records: list[Record] = []
        events: list[tuple[dict[str, list[WatchCallback]], str, EventType]] = []
        results: list[str | Stat | None] = []
        try:
            for i, op in enumerate(ops):
                try:
                    results.append(self._apply_op(op, now, undo, records, events, owner))
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

    def _apply_op(self, op: Op, now: int, undo: list, records: list, events: list, session: int):
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
            owner = session if op.ephemeral else 0
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

            def restore(path=op.path, old=old) -> None:
                node = self._own(path)
                node.data, node.version, node.mtime = old

            node = self._raw_set(op.path, bytes(op.data), now)
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

    def _keep(self, path: str) -> bool:
        """Before ``path``'s entry in the live table changes: while a snapshot is being written
        from ``_frozen``, it records the entry as of the snapshot (first change only).  ->
        whether the live node is the snapshot's (to be copied before it changes)."""
        view = self._frozen
        return view is not None and view.keep(path, self._nodes.get(path))

    def _own(self, path: str) -> Node:
        """The node at ``path``, to be changed: while a snapshot is being written from
        ``_frozen``, a node it shares is first replaced in the live tree by a copy (copy on
        write, once per node and snapshot), so the writer thread sees the tree as of its txid."""
        if self._keep(path):
            self._nodes[path] = self._nodes[path].copy()
        return self._nodes[path]

    def _index(self, path: str, owner: int) -> None:
        if owner:
            self._ephemerals.setdefault(owner, {})[path] = None

    def _unindex(self, path: str, owner: int) -> None:
        if owner:
            paths = self._ephemerals[owner]
            del paths[path]
            if not paths:
                del self._ephemerals[owner]

    def _raw_create(self, path: str, data: bytes, owner: int, now: int) -> None:
        parent = self._own(parent_of(path))
        self._keep(path)
        self._nodes[path] = Node(data, now, owner)
        self._index(path, owner)
        parent.children.add(path[path.rfind("/") + 1 :])
        parent.cversion += 1

    def _undo_create(self, path: str) -> None:
        self._keep(path)
        self._unindex(path, self._nodes.pop(path).owner)
        parent = self._own(parent_of(path))
        parent.children.discard(path[path.rfind("/") + 1 :])
        parent.cversion -= 1

    def _raw_set(self, path: str, data: bytes, now: int) -> Node:
        node = self._own(path)
        node.data = data
        node.version += 1
        node.mtime = now
        return node

    def _raw_delete(self, path: str) -> None:
        self._keep(path)
        self._unindex(path, self._nodes.pop(path).owner)
        parent = self._own(parent_of(path))
        parent.children.discard(path[path.rfind("/") + 1 :])
        parent.cversion += 1

    def _undo_delete(self, path: str, node: Node) -> None:
        self._keep(path)
        self._nodes[path] = node
        self._index(path, node.owner)
        parent = self._own(parent_of(path))
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
        job = self._snapshot_job
        if job is None or job.done():
            self._frozen = None  # the snapshot is written: no more copies on write
            # a snapshot once the journal is as large as the last snapshot (at least
            # snapshot_bytes): rotations cost O(tree) each, so this keeps their cost per byte
            # written bounded as the tree grows, and a restart reads at most about twice the tree
            if self._journal_bytes >= max(self._snapshot_bytes, self._last_snapshot_bytes):
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
        """Start a new journal and write the tree as of now to the snapshot on the io thread.
        On the loop: a view of the node table (no copy: the loop records each node's state as of
        the snapshot before its first change, and _own copies the node) and the journal switch;
        encoding, writing and fsyncing run on the thread.  Writes made meanwhile go to the new
        journal, which a restart replays after the old snapshot and journals (until the rename)
        or after the new snapshot (after it): either way the same tree."""
        self._frozen = frozen = SnapshotView(self._nodes)
        txid = self._txid
        old_fd = self._jfd
        old_files = self._journal_files()
        self._start_journal()
        self._snapshot_job = self._executor.submit(
            self._snapshot_job_sync, txid, frozen, old_fd, old_files
        )

    def _snapshot_job_sync(
        self, txid: int, frozen: SnapshotView, old_fd: int, old_files: list[Path]
    ) -> None:
        try:
            os.fsync(old_fd)
        finally:
            os.close(old_fd)
        try:
            self._write_snapshot(txid, frozen)
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

    async def get_many(
        self, paths: list[str], watches: list[WatchCallback | None] | None = None
    ) -> list[tuple[bytes, Stat] | None]:
        self._check_open()
        out: list[tuple[bytes, Stat] | None] = []
        for i, path in enumerate(paths):
            validate_path(path)
            node = self._nodes.get(path)
            if node is None:
                out.append(None)
                continue
            if watches and watches[i] is not None:
                self._add_watch(self._data_watches, path, watches[i])
            out.append((node.data, node.stat()))
        return out

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

    # ------------------------------------------------------------------ other sessions
    # The node's store server (metadata/store_server.py) serves this store to the broker
    # processes of a node, each its own session: their ephemerals carry their session id and
    # go when the session ends.

    def new_session(self) -> int:
        """A fresh session id, never this store's own nor one in use."""
        while True:
            sid = random.getrandbits(62) | 1
            if (
                sid != self._session_id
                and sid not in self._sessions
                and sid not in self._ephemerals
            ):
                self._sessions.add(sid)
                return sid

    async def commit_for(self, session_id: int, ops: list[Op]) -> list[str | Stat | None]:
        """``multi`` on behalf of another session: its creates' ephemerals are that
        session's.  Returns each operation's result (a create's path, a set's Stat)."""
        results = self._commit(list(ops), session_id)
        await self._sync_if_strict()
        return results

    async def end_session(self, session_id: int) -> None:
        """The session is over (its client went away): its ephemerals are deleted at once,
        in one journaled transaction, and their watchers told."""
        self._sessions.discard(session_id)
        if not self._open:
            return
        theirs = list(self._ephemerals.get(session_id, ()))
        if theirs:
            await self.commit_for(session_id, [Delete(p) for p in theirs])

    def remove_watch(self, path: str, cb: WatchCallback) -> None:
        """Forget a watch that has not fired (the session that set it ended)."""
        for table in (self._data_watches, self._child_watches):
            cbs = table.get(path)
            if cbs and cb in cbs:
                cbs.remove(cb)
                if not cbs:
                    del table[path]

    def add_session_listener(self, cb: SessionListener) -> None:
        self._listeners.append(cb)  # never called: the in-process session does not end

    def remove_session_listener(self, cb: SessionListener) -> None:
        if cb in self._listeners:
            self._listeners.remove(cb)
