"""A response onto the connection, its bytes and its log-file regions: Kafka's TransportLayer
(plaintext, on either loop: ``os.write`` and ``os.sendfile`` straight onto the socket, zero
copies, once the transport has written out what it buffered; TLS: the region read in chunks
and written through the transport; a transport without a socket: asyncio's
``loop.sendfile``, or the chunks on a loop without it).

Invariant: while an answer is written the connection's task is the socket's only writer, and
the transport's buffer is empty when the direct path starts (``write_direct`` waits for it:
asyncio's transport and uvloop's write nothing of their own while their buffers are empty).
Why not ``loop.sendfile``, the waits and the TLS reads: docs/internals.md
("pybroker/transport_layer.py").
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any

from pybroker.event_loop import native_sendfile

TLS_CHUNK = 256 * 1024
_RWF_NOWAIT = getattr(os, "RWF_NOWAIT", 0)
_BYTES = (bytes, bytearray, memoryview)


class PeerGone(ConnectionResetError):
    """The connection closed while an answer was being written."""


class TransportLayer:
    """Writes one connection's answers (one at a time: the connection's task is the only
    caller).  ``closed`` tells whether the connection has gone or is closing; ``drain`` waits
    for the transport's write flow control (pause_writing / resume_writing)."""

    def __init__(
        self,
        transport: asyncio.Transport,
        closed: Callable[[], bool],
        drain: Callable[[], Awaitable[Any]],
    ) -> None:
        self.transport = transport
        self._closed = closed
        self._drain = drain
        self._waiter: asyncio.Future | None = None
        self._watched = -1  # the duplicate descriptor watched for writability, or -1
        self.tls = transport.get_extra_info("ssl_object") is not None
        sock = None if self.tls else transport.get_extra_info("socket")
        self._fd = sock.fileno() if sock is not None else -1
        # regions through the transport (write_through) rather than loop.sendfile: TLS, and
        # a loop without sendfile (uvloop: event_loop.py)
        self.through = self.tls or not native_sendfile(asyncio.get_running_loop())

    @property
    def direct(self) -> bool:
        """Whether regions go straight onto the socket (plaintext with a socket)."""
        return self._fd >= 0

    def wake(self) -> None:
        """The connection was lost: end a wait for writability."""
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    _ready = wake  # the watched duplicate is writable (or hung up)

    # -- plaintext ------------------------------------------------------------------------
    async def write_direct(self, parts: list[Any]) -> None:
        """All parts onto the socket, after what the transport still buffers (earlier
        answers to a client that reads slowly): the first byte goes once that is out."""
        try:
            await self._emptied()
            pending: list[Any] = []
            for part in parts:
                if isinstance(part, _BYTES):
                    pending.append(part)
                    continue
                if pending:
                    await self._write_bytes(pending[0] if len(pending) == 1 else b"".join(pending))
                    pending = []
                await self._sendfile(part)
            if pending:
                await self._write_bytes(pending[0] if len(pending) == 1 else b"".join(pending))
        finally:
            self._unwatch()

    async def _emptied(self) -> None:
        """Until the transport's buffer is empty (asyncio's, or uvloop's with libuv's write
        queue): the transport writes it when the socket has room, which wakes this wait too
        (the next loop iteration sees what the transport wrote)."""
        while self.transport.get_write_buffer_size():
            self._check()
            await self._writable()
        self._check()

    def _check(self) -> None:
        if self._closed() or self.transport.is_closing():
            raise PeerGone("the connection closed while an answer was sent")

    async def _write_bytes(self, data: Any) -> None:
        view = memoryview(data)
        while view:
            self._check()
            try:
                n = os.write(self._fd, view)
            except (BlockingIOError, InterruptedError):
                n = 0
            view = view[n:]
            if view:
                await self._writable()

    async def _sendfile(self, region: Any) -> None:
        fileno = region.file.fileno()
        position, left = region.position, region.size
        while left > 0:
            self._check()
            try:
                n = os.sendfile(self._fd, fileno, position, left)
            except (BlockingIOError, InterruptedError):
                n = -1
            if n == 0:  # the file shrank under us: the frame is broken, drop the peer
                raise ConnectionError(
                    f"sent {region.size - left} of {region.size} bytes of a log region"
                )
            if n > 0:
                position += n
                left -= n
            if left > 0:  # a short write or EAGAIN: the send buffer is full
                await self._writable()

    async def _writable(self) -> None:
        """Until the socket is writable.  The duplicate is watched from the first wait to the
        answer's end (one registration per answer, not per wait: an answer larger than the
        send buffer waits many times); the loop refuses a writer on a transport's own
        descriptor, and a duplicate cannot be closed or reused under the wait."""
        loop = asyncio.get_running_loop()
        if self._watched < 0:
            self._watched = os.dup(self._fd)
            try:
                loop.add_writer(self._watched, self._ready)
            except BaseException:
                os.close(self._watched)
                self._watched = -1
                raise
        waiter = self._waiter = loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def _unwatch(self) -> None:
        if self._watched >= 0:
            fd, self._watched = self._watched, -1
            try:
                asyncio.get_running_loop().remove_writer(fd)
            finally:
                os.close(fd)

    # -- TLS and other transports ---------------------------------------------------------
    async def write_through(self, parts: list[Any]) -> None:
        """All parts through the transport: regions read and written in chunks (TLS, or a
        loop without sendfile)."""
        transport = self.transport
        loop = asyncio.get_running_loop()
        for part in parts:
            if isinstance(part, _BYTES):
                self._check()
                transport.write(part)
                continue
            fileno = part.file.fileno()
            position, left = part.position, part.size
            while left > 0:
                await self._drain()
                self._check()
                n = min(left, TLS_CHUNK)
                chunk = await _pread(loop, fileno, n, position)
                if not chunk:  # the file shrank under us: the frame is broken
                    raise ConnectionError(
                        f"sent {part.size - left} of {part.size} bytes of a log region"
                    )
                self._check()
                transport.write(chunk)
                position += len(chunk)
                left -= len(chunk)


async def _pread(loop: asyncio.AbstractEventLoop, fd: int, n: int, position: int) -> Any:
    """Up to ``n`` bytes at ``position``: from the page cache on the loop, else (the pages
    are not cached, or the system has no RWF_NOWAIT) in a worker thread."""
    if _RWF_NOWAIT:
        buf = bytearray(n)
        try:
            got = os.preadv(fd, [buf], position, _RWF_NOWAIT)
        except (BlockingIOError, OSError):
            got = 0
        if got == n:
            return buf
        if got > 0:
            return memoryview(buf)[:got]
    return await loop.run_in_executor(None, os.pread, fd, n, position)
