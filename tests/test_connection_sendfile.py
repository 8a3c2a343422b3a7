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
