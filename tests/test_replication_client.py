"""replication/client.py: the broker-to-broker connection under a concurrent close()."""

from __future__ import annotations

import asyncio

import pytest

from pybroker.replication.client import BrokerConnection


async def _silent_server() -> tuple[asyncio.Server, int]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # never answers
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


class _ClosingReader:
    """Delivers a response's size prefix, but lets close() run first, as another task (a
    fetcher being stopped) may between the two reads of a response."""

    def __init__(self, conn: BrokerConnection, real: asyncio.StreamReader) -> None:
        self.conn, self.real = conn, real

    async def readexactly(self, n: int) -> bytes:
        if n == 4:
            self.conn.close()
            return (10).to_bytes(4, "big")
        return await self.real.readexactly(n)


def test_close_between_the_reads_of_a_response_is_a_connection_error():
    """Issue 10, defect 7: replication/client.py raised AttributeError ('NoneType' object has
    no attribute 'readexactly') when close() ran while a request awaited its answer."""

    async def main() -> None:
        server, port = await _silent_server()
        conn = BrokerConnection("127.0.0.1", port, "test", timeout_s=5.0)
        try:
            await conn.connect()
            conn._reader = _ClosingReader(conn, conn._reader)
            with pytest.raises(ConnectionError):
                await conn.request(
                    18, 3, {"client_software_name": "t", "client_software_version": "1"}
                )
            assert not conn.connected
        finally:
            conn.close()
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_cancelling_a_request_is_not_swallowed():
    """A request cancelled while it waits for the answer ends with CancelledError (a fetcher
    stopped at shutdown must not carry on)."""

    async def main() -> None:
        server, port = await _silent_server()
        conn = BrokerConnection("127.0.0.1", port, "test", timeout_s=30.0)
        try:
            task = asyncio.create_task(
                conn.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
            )
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            conn.close()
            server.close()
            await server.wait_closed()

    asyncio.run(main())
