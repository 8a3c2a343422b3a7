"""connection.py: a fetch answer whose peer went away while it was being sent."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from typing import Any

import pytest

from pybroker.connection import KafkaConnection


@dataclass
class _Region:  # what PartitionLog.read hands out: a file region for sendfile
    file: Any
    position: int
    size: int


def test_sendfile_to_a_closing_transport_is_a_lost_peer(tmp_path):
    """Issue 10, defect 7: a client that disconnects during a fetch made loop.sendfile raise
    RuntimeError('Transport is closing'), logged as an unexpected error with a traceback.
    The transport is closing before connection_lost runs; that is a lost peer
    (ConnectionError, handled quietly), not a bug."""
    path = tmp_path / "segment.log"
    path.write_bytes(b"r" * 4096)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        conn = KafkaConnection(services=None, max_request_bytes=1 << 20)
        await loop.connect_accepted_socket(lambda: conn, ours)
        try:
            theirs.close()
            conn.transport.close()  # what the loop does on a reset; connection_lost comes later
            assert not conn.closed
            with path.open("rb") as f, pytest.raises(ConnectionError):
                await conn._send([b"\x00\x00\x10\x04", _Region(f, 0, 4096)])
        finally:
            conn.abort()
            await asyncio.sleep(0)

    asyncio.run(main())


def test_closing_during_a_sendfile_waits_for_it(tmp_path):
    """A connection closed (broker shutdown, a peer gone) while a log region is being sent:
    asyncio 3.11 failed in the transport's connection_lost ('InvalidStateError: invalid
    state' on its finished empty-waiter, a traceback in the broker log) and closed the socket
    under sendfile.  The close waits for the sendfile to end."""
    path = tmp_path / "segment.log"
    path.write_bytes(b"r" * (8 << 20))  # far more than the socket buffers: sendfile blocks

    async def main() -> list[dict]:
        loop = asyncio.get_running_loop()
        reported: list[dict] = []
        loop.set_exception_handler(lambda _loop, context: reported.append(context))
        ours, theirs = socket.socketpair()
        theirs.setblocking(False)
        conn = KafkaConnection(services=None, max_request_bytes=1 << 20)
        await loop.connect_accepted_socket(lambda: conn, ours)
        with path.open("rb") as f:
            send = asyncio.create_task(conn._send([_Region(f, 0, 8 << 20)]))
            await asyncio.sleep(0.2)
            assert not send.done()  # blocked: the peer reads nothing
            conn.close()
            await asyncio.sleep(0.2)
            theirs.close()  # the peer goes: the sendfile fails, then the close happens
            with pytest.raises(ConnectionError):
                await asyncio.wait_for(send, 10)
        await asyncio.sleep(0.2)
        assert conn.transport.is_closing()
        return reported

    reported = asyncio.run(main())
    assert reported == [], [c.get("message") for c in reported]
