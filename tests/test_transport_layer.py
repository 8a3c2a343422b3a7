"""How an answer with log regions leaves a connection (pybroker/transport_layer.py): the bytes
the client reads are the answer's parts in order, whatever the socket takes at a time (a
client that reads slowly, through a small receive buffer, makes every write short), over
plaintext TCP and over TLS; a peer that goes away mid-region ends the answer as a lost peer,
with no descriptor left behind; a region whose file is shorter than announced drops the
connection; an answer behind bytes the transport still buffers keeps its place, and its
regions still go out with sendfile.  Each on both event loops (event.loop)."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from broker_fixture import LOOPS

from pybroker import event_loop, transport_layer
from pybroker.connection import KafkaConnection
from pybroker.testing.tls_certs import make_certs


@dataclass
class _Region:  # what PartitionLog.read hands out: whole batches of a segment file
    file: Any
    position: int
    size: int


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture(scope="module")
def segment(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("seg") / "00000000000000000000.log"
    path.write_bytes(os.urandom(6 << 20))
    return path


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def _answer(segment: Path, f: Any) -> tuple[list[Any], bytes]:
    """An answer of bytes and regions, and the bytes a client must read for it."""
    data = segment.read_bytes()
    big = os.urandom(1 << 20)  # bytes too large for one write to a slow reader
    parts = [
        b"\x00\x00\x00\x00head",
        _Region(f, 100, 2 << 20),
        b"between",
        b" and more",
        big,
        _Region(f, 3 << 20, (3 << 20) - 7),
        _Region(f, 0, 10),
        b"tail",
    ]
    want = (
        b"\x00\x00\x00\x00head"
        + data[100 : 100 + (2 << 20)]
        + b"between and more"
        + big
        + data[3 << 20 : (6 << 20) - 7]
        + data[:10]
        + b"tail"
    )
    return parts, want


class _SlowReader(threading.Thread):
    """A client with a 16 KiB receive buffer that reads 16 KiB at a time, pausing now and
    then, until it has ``want`` bytes (or the peer closes)."""

    def __init__(self, sock: socket.socket, want: int, stop_after: int | None = None) -> None:
        super().__init__(daemon=True)
        self.sock, self.want, self.stop_after = sock, want, stop_after
        self.got = bytearray()

    def run(self) -> None:
        self.sock.settimeout(30)
        reads = 0
        while len(self.got) < self.want:
            if self.stop_after is not None and len(self.got) >= self.stop_after:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                self.sock.close()  # a reset: the broker's next write fails
                return
            chunk = self.sock.recv(16384)
            if not chunk:
                return
            self.got += chunk
            reads += 1
            if reads % 64 == 0:
                time.sleep(0.01)


def _tcp_pair(rcvbuf: int = 16384) -> tuple[socket.socket, socket.socket]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    client.connect(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    return server, client


async def _connection(server: socket.socket, ssl_context: ssl.SSLContext | None = None):
    conn = KafkaConnection(services=None, max_request_bytes=1 << 20)
    loop = asyncio.get_running_loop()
    await loop.connect_accepted_socket(lambda: conn, server, ssl=ssl_context)
    assert conn.task is None  # no frame sent, no request loop: the test drives _send itself
    return conn


@pytest.mark.parametrize("name", LOOPS)
def test_a_slow_reader_gets_every_part_in_order(segment, name):
    """Plaintext: regions go out with sendfile straight onto the socket; the writes come
    back short and the writer waits for room, many times per region."""

    async def main() -> bytes:
        server, client = _tcp_pair()
        conn = await _connection(server)
        assert conn.layer.direct
        with segment.open("rb") as f:
            parts, want = _answer(segment, f)
            second = [b"second answer"]
            reader = _SlowReader(client, len(want) + len(second[0]))
            reader.start()
            fds = _open_fds()
            await asyncio.wait_for(conn._send(parts), 60)
            await asyncio.wait_for(conn._send(second), 60)
            assert _open_fds() == fds  # the writability waits let go of their descriptors
            await asyncio.to_thread(reader.join, 30)
        conn.abort()
        client.close()
        assert bytes(reader.got) == want + second[0]
        return bytes(reader.got)

    event_loop.run(main(), name)


@pytest.mark.parametrize("name", LOOPS)
def test_an_answer_behind_buffered_bytes_keeps_its_place(segment, monkeypatch, name):
    """The transport still holds bytes of an earlier answer (the client was not reading):
    the regions wait for them, then go out with sendfile, never read through Python (on
    uvloop too, whose loop has no sendfile)."""

    def no_copy(*args: Any) -> None:
        raise AssertionError("a plaintext region was read through Python")

    monkeypatch.setattr(transport_layer, "_pread", no_copy)

    async def main() -> None:
        server, client = _tcp_pair()
        conn = await _connection(server)
        earlier = os.urandom(8 << 20)
        conn._write(earlier)  # far more than the socket takes: the transport buffers the rest
        assert conn.transport.get_write_buffer_size() > 0
        with segment.open("rb") as f:
            parts, want = _answer(segment, f)
            second = os.urandom(3 << 20)  # an answer of bytes only, behind the regions
            reader = _SlowReader(client, len(earlier) + 2 * len(want) + len(second))
            reader.start()
            fds = _open_fds()
            await asyncio.wait_for(conn._send(parts), 60)
            await asyncio.wait_for(conn._send([second]), 60)
            await asyncio.wait_for(conn._send(parts), 60)
            assert _open_fds() == fds  # the waits let go of their descriptors
            await asyncio.to_thread(reader.join, 60)
        conn.abort()
        client.close()
        assert bytes(reader.got) == earlier + want + second + want

    event_loop.run(main(), name)


@pytest.mark.parametrize("name", LOOPS)
def test_a_peer_that_resets_while_earlier_bytes_wait_is_a_lost_peer(segment, name):
    """The client goes away while the transport still holds an earlier answer: the answer
    with regions, waiting for those bytes to go, ends as a lost peer, descriptors freed."""

    async def main() -> None:
        server, client = _tcp_pair()
        conn = await _connection(server)
        conn._write(os.urandom(8 << 20))
        assert conn.transport.get_write_buffer_size() > 0
        fds = _open_fds()
        with segment.open("rb") as f:
            reader = _SlowReader(client, 16 << 20, stop_after=256 << 10)
            reader.start()
            with pytest.raises(ConnectionError):
                await asyncio.wait_for(conn._send([b"head", _Region(f, 0, 6 << 20)]), 30)
            await asyncio.to_thread(reader.join, 30)
        await asyncio.sleep(0.05)
        assert conn.closed
        assert _open_fds() <= fds

    event_loop.run(main(), name)


@pytest.mark.parametrize("name", LOOPS)
def test_a_peer_that_resets_mid_region_is_a_lost_peer(segment, name):
    async def main() -> None:
        server, client = _tcp_pair()
        conn = await _connection(server)
        fds = _open_fds()
        with segment.open("rb") as f:
            reader = _SlowReader(client, 6 << 20, stop_after=256 << 10)
            reader.start()
            with pytest.raises(ConnectionError):
                await asyncio.wait_for(conn._send([b"head", _Region(f, 0, 6 << 20)]), 30)
            await asyncio.to_thread(reader.join, 30)
        await asyncio.sleep(0.05)
        assert conn.closed  # the transport saw the reset too
        assert _open_fds() <= fds  # the duplicate is closed, and the connection's socket too

    event_loop.run(main(), name)


@pytest.mark.parametrize("name", LOOPS)
def test_a_region_longer_than_its_file_drops_the_connection(segment, tmp_path, name):
    short = tmp_path / "short.log"
    short.write_bytes(b"x" * 1000)

    async def main() -> None:
        server, client = _tcp_pair(rcvbuf=1 << 20)
        conn = await _connection(server)
        with short.open("rb") as f, pytest.raises(ConnectionError, match="sent 1000 of 4000"):
            await conn._send([b"head", _Region(f, 0, 4000)])
        conn.abort()
        client.close()

    event_loop.run(main(), name)


@pytest.mark.parametrize("name", LOOPS)
def test_a_slow_tls_reader_gets_every_part_in_order(segment, certs, name):
    """TLS: each region is read in chunks and written through the TLS transport; pages not
    in the page cache are read in a worker thread."""
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(certs.server)
    client_ctx = ssl.create_default_context(cafile=str(certs.ca))

    async def main() -> None:
        server, client = _tcp_pair()
        tls_client: list[ssl.SSLSocket] = []

        def handshake() -> None:
            tls_client.append(client_ctx.wrap_socket(client, server_hostname="localhost"))

        shaking = threading.Thread(target=handshake, daemon=True)
        shaking.start()
        conn = await _connection(server, server_ctx)
        await asyncio.to_thread(shaking.join, 30)
        assert conn.layer.tls and not conn.layer.direct
        with segment.open("rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)  # cold pages
            parts, want = _answer(segment, f)
            reader = _SlowReader(tls_client[0], len(want) + 6)
            reader.start()
            await asyncio.wait_for(conn._send(parts), 60)
            await asyncio.wait_for(conn._send([b"second"]), 60)
            await asyncio.to_thread(reader.join, 60)
        conn.abort()
        tls_client[0].close()
        assert bytes(reader.got) == want + b"second"

    event_loop.run(main(), name)
