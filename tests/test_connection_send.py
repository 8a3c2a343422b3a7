"""KafkaConnection._send when the client has gone (issue 10, defect 7; found again by the
protocol fuzzer): a response with a log region (sent with sendfile) to a connection whose
transport is already closing raised RuntimeError("Transport is closing"), which the request
loop logged as an unexpected error with a traceback.  A peer that disconnects mid-fetch is an
expected condition: it ends the connection quietly."""

from __future__ import annotations

import asyncio
import logging
import socket
from types import SimpleNamespace

from pybroker.config import Config
from pybroker.connection import KafkaConnection


def test_sendfile_to_a_closing_transport_ends_the_connection_quietly(tmp_path, caplog):
    data = tmp_path / "00000000000000000000.log"
    data.write_bytes(b"x" * 4096)

    async def main() -> None:
        ours, theirs = socket.socketpair()
        conn = KafkaConnection(services=None, max_request_bytes=1 << 20)
        loop = asyncio.get_running_loop()
        await loop.create_connection(lambda: conn, sock=ours)
        theirs.close()  # the client goes away
        conn.transport.close()  # and the transport is closing when the fetch answer goes out
        with open(data, "rb") as f:
            region = SimpleNamespace(file=f, position=0, size=4096)
            conn.closed = False  # the request loop is still sending its current answer
            try:
                await conn._send([b"\x00\x00\x10\x10header", region])
            except ConnectionError:
                pass  # _run takes ConnectionError as "peer gone" (logged at DEBUG)
        assert conn.task is None  # (no frame sent: no request loop; the test drives _send)

    with caplog.at_level(logging.DEBUG):
        asyncio.run(main())
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]


def test_answers_to_a_peer_that_reset_are_not_written(caplog):
    """Found by the long protocol fuzz: a client that pipelines requests and resets the
    connection left the request loop writing every later answer into the dead transport, and
    asyncio logged "socket.send() raised exception." for each (4,612 lines in one run), on a
    loop already busy.  Once the transport is closing, the loop stops answering."""

    async def main() -> None:
        ours, theirs = socket.socketpair()
        conn = KafkaConnection(services=None, max_request_bytes=1 << 20)
        loop = asyncio.get_running_loop()
        await loop.create_connection(lambda: conn, sock=ours)
        theirs.close()
        conn.transport.write(b"x" * 65536)  # fails: the transport closes, connection_lost is due
        await asyncio.sleep(0)
        conn.closed = False  # the request loop has not seen connection_lost yet
        for _ in range(20):
            try:
                await conn._send([b"\x00\x00\x00\x04abcd"])
            except ConnectionError:
                break
        assert conn.task is None  # (no frame sent: no request loop; the test drives _send)

    with caplog.at_level(logging.DEBUG):
        asyncio.run(main())
    assert not [r for r in caplog.records if "socket.send() raised" in r.getMessage()]


def test_a_pipelining_client_lets_other_work_run_between_its_requests():
    """Found by the long protocol fuzz (seed 11, frame #852240): 37 pipelined requests on one
    connection, each answered without suspending, were handled in one go and held the event
    loop 162 ms.  The connection now yields between requests: a callback scheduled when the
    frames arrive runs before the last of them is answered."""
    from pybroker.wire import codec

    async def main() -> tuple[int, int]:
        ours, theirs = socket.socketpair()
        # ApiVersions reads the broker's config (which group protocols it offers) and whether
        # share groups run
        services = SimpleNamespace(config=Config(), share_groups=None)
        conn = KafkaConnection(services=services, max_request_bytes=1 << 20)
        loop = asyncio.get_running_loop()
        await loop.create_connection(lambda: conn, sock=ours)
        events: list[str] = []
        real_write = conn.transport.write

        def write(data):  # noqa: ANN001
            events.append("answer")
            real_write(data)

        conn.transport.write = write
        frames = b"".join(codec.encode_request(18, 0, i, "pipeliner", {}) for i in range(20))
        conn.data_received(frames)  # all 20 queued at once, as from one socket read
        loop.call_soon(events.append, "other work")
        while events.count("answer") < 20:
            await asyncio.sleep(0.01)
        conn.task.cancel()
        theirs.close()
        return events.index("other work"), len(events)

    position, total = asyncio.run(main())
    assert total == 21
    assert position < 20  # before the last answer (it used to come after all 20)
