"""StoreServer: one LocalStore served over a Unix socket to the broker processes of a node.

A multi-core node (pybroker/node/) runs one broker process per core on the embedded metadata
store; the supervisor process owns the LocalStore (its directory, its journal) and serves it
here, and each broker process reaches it through a RemoteStore (metadata/remote.py) with the
same ZooKeeper semantics as the other backends:

* one connection is one session: the server gives it an id, the ephemerals it creates carry
  that id, and when the connection closes (the process ended, or was killed) the session
  ends at once: its ephemerals are deleted in one journaled transaction and their watchers
  told, as ZooKeeper does at session expiry (with no timeout to wait for: a closed Unix
  socket means the process is gone);
* requests of one connection are answered in order (each is applied before the next is read,
  so a watch set by a request is in place before any later request's change);
* a watch is one-shot: the server sets one LocalStore watch per request that asks for it and
  sends one event when it fires; watches of an ended session are removed.

Ops (the frames are in remote_format.py): ``hello`` -> session id; ``create path data
ephemeral sequence makepath`` -> path; ``get path watch`` -> [data, stat]; ``set path data
version`` -> stat; ``delete path version recursive``; ``exists path watch`` -> stat | None;
``children path watch`` -> names; ``multi [[kind, path, data, version, ephemeral,
sequence]...]``; ``ensure path``.  A stat is the list of :class:`Stat`'s fields.

The socket file is created mode 0600 inside the store's directory: only the node's user
reaches it.  Bad frames close the connection (that session ends); they never stop the server.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

from pybroker.coord.metadata import remote_format as fmt
from pybroker.coord.metadata.local import LocalStore
from pybroker.coord.metadata.store import (
    Create,
    Stat,
    StoreError,
    WatchedEvent,
    parent_of,
    validate_path,
)

log = logging.getLogger(__name__)


def _bytes(v: Any) -> bytes:
    if v is None:
        return b""
    if not isinstance(v, bytes):
        raise ValueError("node data must be bytes")
    return v


def _int(v: Any) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise ValueError("a version must be an int")
    return v


def stat_list(stat: Stat | None) -> list[int] | None:
    return None if stat is None else list(stat)


class _Session:
    def __init__(self, server: StoreServer, writer: asyncio.StreamWriter, session_id: int):
        self.server = server
        self.writer = writer
        self.id = session_id
        # the LocalStore callbacks set and not fired -> their paths: a fire or a drop costs
        # O(1), not O(the session's watches) (a broker watches every partition's state)
        self.watches: dict[Any, str] = {}
        self.open = True

    def send(self, value: Any) -> None:
        if self.open and not self.writer.is_closing():
            self.writer.write(fmt.encode(value))

    def watcher(self, table: str, path: str) -> Any:
        def fire(event: WatchedEvent) -> None:
            self.watches.pop(fire, None)
            self.send([0, table, event.type.value, event.path])

        self.watches[fire] = path
        return fire

    def drop_watch(self, cb: Any) -> None:
        """A call that raised sets no watch."""
        path = self.watches.pop(cb, None)
        if path is not None:
            self.server.store.remove_watch(path, cb)


class StoreServer:
    """Serves ``store`` (started and closed by the caller) on ``socket_path``."""

    def __init__(self, store: LocalStore, socket_path: str | os.PathLike[str]) -> None:
        self.store = store
        self.socket_path = Path(socket_path)
        self._server: asyncio.AbstractServer | None = None
        self._sessions: set[_Session] = set()
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        self.socket_path.unlink(missing_ok=True)
        old = os.umask(0o177)  # the socket file: rw for the owner only
        try:
            self._server = await asyncio.start_unix_server(
                self._serve, path=str(self.socket_path), limit=1 << 20
            )
        finally:
            os.umask(old)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for s in list(self._sessions):
            s.writer.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=3)
        self.socket_path.unlink(missing_ok=True)

    @property
    def sessions(self) -> int:
        return len(self._sessions)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        session = _Session(self, writer, self.store.new_session())
        self._sessions.add(session)
        try:
            while True:
                try:
                    header = await reader.readexactly(4)
                    body = await reader.readexactly(fmt.frame_length(header))
                    request = fmt.decode(body)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                except fmt.FrameError as e:
                    log.warning("metadata store client sent a bad frame: %s; closing", e)
                    return
                if not isinstance(request, list) or len(request) < 2:
                    log.warning("metadata store client sent a bad request; closing")
                    return
                session.send(await self._answer(session, request))
                await writer.drain()
        except asyncio.CancelledError:
            pass
        finally:
            session.open = False
            self._sessions.discard(session)
            for cb, path in session.watches.items():
                self.store.remove_watch(path, cb)
            session.watches.clear()
            try:
                await self.store.end_session(session.id)
            except StoreError as e:
                log.error("could not end metadata session %x: %s", session.id, e)
            writer.close()
            self._tasks.discard(task)

    async def _answer(self, session: _Session, request: list[Any]) -> list[Any]:
        req_id, op, args = request[0], request[1], request[2:]
        try:
            result = await self._call(session, op, args)
        except StoreError as e:
            return [req_id, 1, type(e).__name__, str(e), e.path, e.op_index]
        except (ValueError, TypeError) as e:  # (a malformed request: its own error)
            return [req_id, 1, "StoreError", f"bad request {op!r:.40}: {e}", None, None]
        return [req_id, 0, result]

    async def _call(self, session: _Session, op: Any, args: list[Any]) -> Any:
        store = self.store
        if op == "hello":
            return session.id
        if op == "create":
            path, data, ephemeral, sequence, makepath = args
            validate_path(path)
            data = _bytes(data)
            if makepath:
                await store.ensure_path(parent_of(path))
            (created,) = await store.commit_for(
                session.id, [Create(path, data, bool(ephemeral), bool(sequence))]
            )
            return created
        if op in ("get", "exists", "children"):
            path, watch = args
            validate_path(path)
            table = "child" if op == "children" else "data"
            cb = session.watcher(table, path) if watch else None
            try:
                if op == "get":
                    data, stat = await store.get(path, watch=cb)
                    return [data, list(stat)]
                if op == "exists":
                    return stat_list(await store.exists(path, watch=cb))
                return await store.get_children(path, watch=cb)
            except BaseException:
                if cb is not None:
                    session.drop_watch(cb)
                raise
        if op == "set":
            path, data, version = args
            return list(await store.set(path, _bytes(data), _int(version)))
        if op == "delete":
            path, version, recursive = args
            await store.delete(path, _int(version), recursive=bool(recursive))
            return None
        if op == "multi":
            (items,) = args
            if not isinstance(items, list):
                raise ValueError("multi takes a list")
            await store.commit_for(session.id, [fmt.decode_op(i) for i in items])
            return None
        if op == "ensure":
            (path,) = args
            await store.ensure_path(path)
            return None
        raise ValueError(f"unknown op {op!r:.40}")
