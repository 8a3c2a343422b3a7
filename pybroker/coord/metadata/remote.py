"""RemoteStore: the MetadataStore of a node's supervisor, reached over a Unix socket.

The broker processes of a multi-core node on the embedded store (pybroker/node/) each open
one; the supervisor serves its LocalStore with metadata/store_server.py (the session, watch
and ordering rules are there).  This side:

* Calls are pipelined on one connection and answered in order; each becomes a future that
  the reader task settles.  Errors come back by class name as the store's own errors.
* A watch callback is registered when its call's answer arrives (an event for it can only
  follow that answer), under (data | child, path); an event pops and runs every callback
  registered there, on the loop.  A callback registered while an earlier event was in flight
  may so run early: a spurious event, which the contract allows (watchers re-read).
* The connection lost is the session ended (the server deletes its ephemerals at once):
  calls in flight fail with ConnectionLossError, every pending watch fires (``CHANGED`` /
  ``CHILD``, as the ZooKeeper backend does after a lost connection), listeners hear ``LOST``,
  and the store connects again in the background; the new session is announced
  ``CONNECTED``.  Calls made while disconnected fail at once with ConnectionLossError.
* ``start()`` gives up after ``connect_timeout_s`` with ConnectionLossError naming the socket.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from pybroker.coord.metadata import remote_format as fmt
from pybroker.coord.metadata import store as store_errors
from pybroker.coord.metadata.store import (
    CONNECTED,
    LOST,
    ConnectionLossError,
    EventType,
    MetadataStore,
    Op,
    SessionListener,
    Stat,
    StoreError,
    WatchCallback,
    WatchedEvent,
    validate_path,
)

log = logging.getLogger(__name__)

_ERRORS: dict[str, type[StoreError]] = {
    cls.__name__: cls
    for cls in vars(store_errors).values()
    if isinstance(cls, type) and issubclass(cls, StoreError)
}


def _stat(v: list[int]) -> Stat:
    return Stat(*v)


class RemoteStore(MetadataStore):
    def __init__(
        self,
        socket_path: str | os.PathLike[str],
        *,
        connect_timeout_s: float = 10.0,
        reconnect_delay_s: float = 0.2,
    ) -> None:
        self.socket_path = str(socket_path)
        self._connect_timeout_s = connect_timeout_s
        self._reconnect_delay_s = reconnect_delay_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task | None = None
        self._reconnect_task: asyncio.Task | None = None
        self._pending: dict[int, tuple[asyncio.Future, _Registration | None]] = {}
        self._watches: dict[tuple[str, str], list[WatchCallback]] = {}
        self._listeners: list[SessionListener] = []
        self._next_id = 1
        self._session_id = 0
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    @property
    def session_id(self) -> int:
        return self._session_id

    async def start(self) -> None:
        if self._writer is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._closed = False
        deadline = self._loop.time() + self._connect_timeout_s
        while True:
            try:
                await self._connect()
                return
            except OSError as e:
                if self._loop.time() >= deadline:
                    raise ConnectionLossError(
                        f"could not reach the node's metadata store at {self.socket_path} "
                        f"within {self._connect_timeout_s:g}s: {e}"
                    ) from None
                await asyncio.sleep(0.05)

    async def _connect(self) -> None:
        reader, writer = await asyncio.open_unix_connection(self.socket_path, limit=1 << 20)
        self._writer = writer
        self._reader_task = asyncio.create_task(self._read(reader), name="remote-store-reader")
        try:
            self._session_id = await self._call("hello")
        except BaseException:
            self._drop_connection()
            raise
        log.info("metadata session %x on %s", self._session_id, self.socket_path)

    async def close(self) -> None:
        self._closed = True
        if self._reconnect_task is not None:
            self._reconnect_task.cancel()
            self._reconnect_task = None
        writer, task = self._writer, self._reader_task
        self._drop_connection(fire_watches=False)
        if writer is not None:
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, OSError):
                pass
        if task is not None:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        self._watches.clear()

    def add_session_listener(self, cb: SessionListener) -> None:
        self._listeners.append(cb)

    def remove_session_listener(self, cb: SessionListener) -> None:
        if cb in self._listeners:
            self._listeners.remove(cb)

    def _tell(self, state: str) -> None:
        for cb in list(self._listeners):
            try:
                cb(state)
            except Exception:
                log.exception("session listener %r failed", cb)

    # ------------------------------------------------------------------ the connection

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                header = await reader.readexactly(4)
                message = fmt.decode(await reader.readexactly(fmt.frame_length(header)))
                self._dispatch(message)
        except (asyncio.IncompleteReadError, OSError, ValueError, TypeError) as e:
            # (a closed socket, or bytes that are no answer of this protocol: FrameError is a
            # ValueError)
            if not self._closed:
                log.warning("lost the node's metadata store (%s): session ended", e)
        finally:
            if asyncio.current_task() is self._reader_task and not self._closed:
                self._drop_connection()
                self._tell(LOST)
                self._reconnect_task = asyncio.create_task(self._reconnect(), name="reconnect")

    def _dispatch(self, message: Any) -> None:
        if not isinstance(message, list) or len(message) < 2:
            raise fmt.FrameError("not a message")
        req_id = message[0]
        if req_id == 0:  # a watch event: [0, table, type, path]
            _, table, etype, path = message
            event = WatchedEvent(EventType(etype), path)
            for cb in self._watches.pop((table, path), ()):
                self._loop.call_soon(_run_watch, cb, event)
            return
        entry = self._pending.pop(req_id, None)
        if entry is None:
            raise fmt.FrameError(f"answer to no request ({req_id})")
        fut, reg = entry
        if message[1] == 0:
            if reg is not None:
                self._watches.setdefault((reg.table, reg.path), []).append(reg.cb)
            if not fut.done():
                fut.set_result(message[2] if len(message) > 2 else None)
            return
        _, _, name, text, path, op_index = message
        err = _ERRORS.get(name, StoreError)(text, path)
        err.op_index = op_index
        if not fut.done():
            fut.set_exception(err)

    def _drop_connection(self, fire_watches: bool = True) -> None:
        writer, self._writer = self._writer, None
        self._session_id = 0
        if writer is not None:
            writer.close()
        pending, self._pending = self._pending, {}
        for fut, _ in pending.values():
            if not fut.done():
                fut.set_exception(ConnectionLossError("the node's metadata store went away"))
        if fire_watches:
            watches, self._watches = self._watches, {}
            for (table, path), cbs in watches.items():
                etype = EventType.CHILD if table == "child" else EventType.CHANGED
                for cb in cbs:
                    self._loop.call_soon(_run_watch, cb, WatchedEvent(etype, path))

    async def _reconnect(self) -> None:
        while not self._closed:
            await asyncio.sleep(self._reconnect_delay_s)
            try:
                await self._connect()
            except (OSError, StoreError):
                continue
            self._tell(CONNECTED)
            return

    async def _call(self, op: str, *args: Any, reg: _Registration | None = None) -> Any:
        """Send one request and wait for its answer; ``reg``: the watch its answer sets."""
        writer = self._writer
        if writer is None or writer.is_closing():
            raise ConnectionLossError(f"not connected to the node's metadata store ({op})")
        req_id = self._next_id
        self._next_id += 1
        fut = self._loop.create_future()
        self._pending[req_id] = (fut, reg)
        writer.write(fmt.encode([req_id, op, *args]))
        return await fut

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
        return await self._call("create", path, bytes(data), ephemeral, sequence, makepath)

    async def _watched(self, op: str, table: str, path: str, watch: WatchCallback | None) -> Any:
        validate_path(path)
        reg = None if watch is None else _Registration(table, path, watch)
        return await self._call(op, path, watch is not None, reg=reg)

    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes, Stat]:
        data, stat = await self._watched("get", "data", path, watch)
        return data, _stat(stat)

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        validate_path(path)
        return _stat(await self._call("set", path, bytes(data), version))

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        validate_path(path)
        await self._call("delete", path, version, recursive)

    async def exists(self, path: str, watch: WatchCallback | None = None) -> Stat | None:
        stat = await self._watched("exists", "data", path, watch)
        return None if stat is None else _stat(stat)

    async def get_children(self, path: str, watch: WatchCallback | None = None) -> list[str]:
        return await self._watched("children", "child", path, watch)

    async def multi(self, ops: list[Op]) -> None:
        for op in ops:
            validate_path(op.path)
        if ops:
            await self._call("multi", [fmt.encode_op(op) for op in ops])

    async def ensure_path(self, path: str) -> None:
        validate_path(path)
        if path != "/":
            await self._call("ensure", path)


class _Registration:
    """A watch waiting for its call's answer: where it is registered then."""

    __slots__ = ("table", "path", "cb")

    def __init__(self, table: str, path: str, cb: WatchCallback) -> None:
        self.table = table
        self.path = path
        self.cb = cb


def _run_watch(cb: WatchCallback, event: WatchedEvent) -> None:
    try:
        cb(event)
    except Exception:
        log.exception("metadata watch callback %r failed for %s", cb, event)
