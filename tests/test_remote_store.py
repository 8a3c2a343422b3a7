"""RemoteStore / StoreServer beyond the shared contract (tests/test_store.py runs that on the
"remote" backend too): a session ends when its process dies, the server going away is a LOST
session and a new one when it is back, and bytes that are no frame close only that connection."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from async_wait import wait_until

from pybroker.coord.metadata import remote_format as fmt
from pybroker.coord.metadata.local import LocalStore
from pybroker.coord.metadata.remote import RemoteStore
from pybroker.coord.metadata.store import (
    CONNECTED,
    LOST,
    ConnectionLossError,
    EventType,
    NoNodeError,
    WatchedEvent,
)
from pybroker.coord.metadata.store_server import StoreServer


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60), debug=True)


class Served:
    """A LocalStore under tmp_path served on a socket in a fresh short directory."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.sock_dir = Path(tempfile.mkdtemp(prefix="pybroker-test-"))
        self.socket_path = self.sock_dir / "store.sock"
        self.store: LocalStore | None = None
        self.server: StoreServer | None = None

    async def start(self) -> None:
        self.store = LocalStore(self.tmp_path / "meta")
        await self.store.start()
        self.server = StoreServer(self.store, self.socket_path)
        await self.server.start()

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
        if self.store is not None:
            await self.store.close()
        self.server = self.store = None

    def cleanup(self) -> None:
        for p in self.sock_dir.iterdir():
            p.unlink()
        self.sock_dir.rmdir()


def test_frames_round_trip_and_refuse_what_is_not_a_frame():
    value = [1, "get", "/brokers/ids/0", True, None, False, b"\x00\xff", [2**62, -1, "grüße"]]
    frame = fmt.encode(value)
    assert fmt.frame_length(frame[:4]) == len(frame) - 4
    assert fmt.decode(frame[4:]) == value
    for bad in (b"", b"i\x00", b"s\x00\x00\x00\x09abc", b"l\xff\xff\xff\xff", b"?", b"NN"):
        with pytest.raises(fmt.FrameError):
            fmt.decode(bad)
    with pytest.raises(fmt.FrameError):
        fmt.decode(b"l\x00\x00\x00\x01" * 40 + b"N")  # nested too deep
    with pytest.raises(fmt.FrameError):
        fmt.frame_length((fmt.MAX_FRAME + 1).to_bytes(4, "big"))


def test_a_killed_client_process_ends_its_session_at_once(tmp_path):
    """kill -9 of a broker process: its ephemerals go when the socket closes (no session
    timeout to wait for), and watchers hear of it."""

    async def main():
        served = Served(tmp_path)
        await served.start()
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                textwrap.dedent(f"""
                    import asyncio, sys
                    from pybroker.coord.metadata.remote import RemoteStore
                    async def main():
                        s = RemoteStore({str(served.socket_path)!r})
                        await s.start()
                        await s.create("/brokers/ids/7", b"me", ephemeral=True, makepath=True)
                        print("ready", flush=True)
                        await asyncio.sleep(600)
                    asyncio.run(main())
                """),
            ],
            stdout=subprocess.PIPE,
            env=dict(os.environ),
        )
        other = RemoteStore(served.socket_path)
        try:
            line = await asyncio.get_running_loop().run_in_executor(None, child.stdout.readline)
            assert line.strip() == b"ready"
            events: list[WatchedEvent] = []
            await other.start()
            data, stat = await other.get("/brokers/ids/7", watch=events.append)
            assert data == b"me" and stat.ephemeral_owner not in (0, other.session_id)
            child.send_signal(signal.SIGKILL)
            child.wait(10)
            await wait_until(lambda: events)
            assert events == [WatchedEvent(EventType.DELETED, "/brokers/ids/7")]
            assert await other.exists("/brokers/ids/7") is None
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(10)
            child.stdout.close()
            await other.close()
            await served.stop()
            served.cleanup()

    run(main())


def test_the_server_gone_is_a_lost_session_and_its_return_a_new_one(tmp_path):
    async def main():
        served = Served(tmp_path)
        await served.start()
        store = RemoteStore(served.socket_path, reconnect_delay_s=0.05)
        states: list[str] = []
        store.add_session_listener(states.append)
        await store.start()
        try:
            first = store.session_id
            await store.create("/e", ephemeral=True)
            watched: list[WatchedEvent] = []
            await store.get_children("/", watch=watched.append)
            await served.stop()
            await wait_until(lambda: LOST in states)
            await wait_until(lambda: watched)  # pending watches fire: re-read
            assert watched == [WatchedEvent(EventType.CHILD, "/")]
            with pytest.raises(ConnectionLossError):
                await store.get("/")
            await served.start()
            await wait_until(lambda: states[-1:] == [CONNECTED])
            assert store.session_id not in (0, first)
            assert await store.exists("/e") is None  # the old session's ephemeral is gone
            with pytest.raises(NoNodeError):
                await store.get("/missing")
        finally:
            await store.close()
            await served.stop()
            served.cleanup()

    run(main())


def test_bytes_that_are_no_frame_close_only_that_connection(tmp_path):
    async def main():
        served = Served(tmp_path)
        await served.start()
        good = RemoteStore(served.socket_path)
        await good.start()
        try:
            await good.create("/keep", b"1")
            loop = asyncio.get_running_loop()
            for junk in (
                b"\xff\xff\xff\xff",  # a length over the limit
                b"\x00\x00\x00\x01?",  # an unknown tag
                fmt.encode(["just one"]),  # a list that is no request
            ):
                s = socket.socket(socket.AF_UNIX)
                s.setblocking(False)
                await loop.sock_connect(s, str(served.socket_path))
                await loop.sock_sendall(s, junk)
                assert await asyncio.wait_for(loop.sock_recv(s, 100), 10) == b""  # closed
                s.close()
            answer = await served_request(served.socket_path, [5, "nope", "/keep"])
            assert answer[:3] == [5, 1, "StoreError"]  # an unknown op: an error answer
            answer = await served_request(served.socket_path, [6, "set", "/keep", 7, -1])
            assert answer[1] == 1 and "bytes" in answer[3]
            assert (await good.get("/keep"))[0] == b"1"
        finally:
            await good.close()
            await served.stop()
            served.cleanup()

    run(main())


async def served_request(path: Path, request: list) -> list:
    reader, writer = await asyncio.open_unix_connection(str(path))
    try:
        writer.write(fmt.encode(request))
        header = await reader.readexactly(4)
        return fmt.decode(await reader.readexactly(fmt.frame_length(header)))
    finally:
        writer.close()
