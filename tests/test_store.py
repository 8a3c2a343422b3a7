"""The MetadataStore contract, run against both backends (LocalStore and a real ZooKeeper),
plus backend-specific tests: LocalStore persistence/crash safety, ZooKeeper reconnects."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest
from async_wait import wait_until

from pybroker.clock import ManualClock
from pybroker.coord.metadata.local import LocalStore
from pybroker.coord.metadata.remote import RemoteStore
from pybroker.coord.metadata.store import (
    CONNECTED,
    SUSPENDED,
    BadVersionError,
    Check,
    ConnectionLossError,
    Create,
    Delete,
    EventType,
    MetadataStore,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SetData,
    StoreError,
    WatchedEvent,
)
from pybroker.coord.metadata.store_server import StoreServer
from pybroker.coord.metadata.zk import ZooKeeperStore
from pybroker.testing.zookeeper import ZooKeeperServer, require_zookeeper


def run_async(fn):
    """Run an async test with asyncio.run(debug=True) (pytest-asyncio is not used)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(asyncio.wait_for(fn(*args, **kwargs), 60), debug=True)

    return wrapper


async def settle(n: int = 3, delay: float = 0.0) -> None:
    """Let callbacks scheduled on the loop run."""
    for _ in range(n):
        await asyncio.sleep(delay)


class Backend:
    """Opens stores of one kind on one shared namespace."""

    def __init__(self, kind: str, tmp_path: Path, connect: str | None) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.connect = connect
        self.clock = ManualClock()
        self.opened: list[MetadataStore] = []
        self.server: StoreServer | None = None  # remote: the node supervisor's side

    async def open(self) -> MetadataStore:
        if self.kind == "local":
            store: MetadataStore = LocalStore(self.tmp_path / "meta", self.clock)
        elif self.kind == "remote":
            if self.server is None:
                served = LocalStore(self.tmp_path / "meta", self.clock)
                await served.start()
                sock_dir = tempfile.mkdtemp(prefix="pybroker-store-")  # (short: AF_UNIX)
                self.server = StoreServer(served, Path(sock_dir) / "store.sock")
                await self.server.start()
            store = RemoteStore(self.server.socket_path)
        else:
            store = ZooKeeperStore(self.connect, 6000, connect_timeout_s=10)
        await store.start()
        self.opened.append(store)
        return store

    async def close_all(self) -> None:
        for s in self.opened:
            await s.close()
        if self.server is not None:
            await self.server.stop()
            await self.server.store.close()
            os.rmdir(self.server.socket_path.parent)
            self.server = None


@pytest.fixture(params=["local", "zookeeper", "remote"])
def backend(request, tmp_path):
    if request.param == "zookeeper":
        require_zookeeper()
        connect = request.getfixturevalue("zk_connect")
    else:
        connect = None
    return Backend(request.param, tmp_path, connect)


def with_store(fn):
    """Test body gets (store, backend); the stores are closed afterwards."""

    async def body(backend):
        store = await backend.open()
        try:
            await fn(store, backend)
        finally:
            await backend.close_all()

    def test(backend):
        asyncio.run(asyncio.wait_for(body(backend), 60), debug=True)

    test.__name__ = test.__qualname__ = fn.__name__
    test.__doc__ = fn.__doc__
    return test


# --------------------------------------------------------------------------- the contract


@with_store
async def test_create_get_set_versions(store, backend):
    assert await store.create("/a", b"one") == "/a"
    data, stat = await store.get("/a")
    assert data == b"one" and stat.version == 0 and stat.ephemeral_owner == 0
    assert stat.num_children == 0
    stat2 = await store.set("/a", b"two")
    assert stat2.version == 1
    stat3 = await store.set("/a", b"three", version=1)
    assert stat3.version == 2
    with pytest.raises(BadVersionError):
        await store.set("/a", b"stale", version=1)
    assert (await store.get("/a"))[0] == b"three"
    with pytest.raises(BadVersionError):
        await store.delete("/a", version=0)
    await store.delete("/a", version=2)
    assert await store.exists("/a") is None


@with_store
async def test_errors(store, backend):
    with pytest.raises(NoNodeError):
        await store.get("/missing")
    with pytest.raises(NoNodeError):
        await store.set("/missing", b"")
    with pytest.raises(NoNodeError):
        await store.delete("/missing")
    with pytest.raises(NoNodeError):
        await store.get_children("/missing")
    with pytest.raises(NoNodeError):
        await store.create("/no/parent")
    await store.create("/p")
    with pytest.raises(NodeExistsError):
        await store.create("/p")
    await store.create("/p/c")
    with pytest.raises(NotEmptyError):
        await store.delete("/p")
    with pytest.raises(ValueError):
        await store.get("relative")
    with pytest.raises(ValueError):
        await store.create("/p/")
    await store.create("/p/c/d/e", b"x", makepath=True)
    assert await store.get_children("/p/c/d") == ["e"]
    await store.delete("/p", recursive=True)
    assert await store.exists("/p") is None
    assert isinstance(NoNodeError(), StoreError)


@with_store
async def test_children_and_stat(store, backend):
    await store.ensure_path("/x/y")
    await store.ensure_path("/x/y")  # idempotent
    for name in ("b", "a", "c"):
        await store.create(f"/x/y/{name}")
    assert await store.get_children("/x/y") == ["a", "b", "c"]
    stat = await store.exists("/x/y")
    assert stat.num_children == 3 and stat.cversion == 3
    await store.delete("/x/y/b")
    stat = await store.exists("/x/y")
    assert stat.num_children == 2 and stat.cversion == 4


@with_store
async def test_sequential_names(store, backend):
    await store.create("/seq")
    await store.create("/seq/other")
    a = await store.create("/seq/n-", b"", sequence=True)
    b = await store.create("/seq/n-", b"", sequence=True)
    assert a == "/seq/n-0000000001"  # the parent's cversion, %010d, as in ZooKeeper
    assert b == "/seq/n-0000000002"
    await store.delete(b)
    c = await store.create("/seq/n-", b"", sequence=True, ephemeral=True)
    # ZooKeeper takes the suffix from the parent's cversion, but its delete bookkeeping lags
    # (the pending change record is not bumped), so only "increasing and unique" is contract
    assert c > b and len(c) == len(b)


@with_store
async def test_ephemeral_nodes(store, backend):
    await store.create("/eph", b"me", ephemeral=True)
    _, stat = await store.get("/eph")
    assert stat.ephemeral_owner == store.session_id != 0
    with pytest.raises(NoChildrenForEphemeralsError):
        await store.create("/eph/child")
    await store.close()
    backend.opened.remove(store)
    other = await backend.open()
    assert await other.exists("/eph") is None


@pytest.mark.parametrize("backend", ["zookeeper", "remote"], indirect=True)
@with_store
async def test_ephemeral_removed_when_session_closes_seen_by_other(store, backend):
    other = await backend.open()
    events: list[WatchedEvent] = []
    await store.create("/eph2", ephemeral=True)
    assert await other.exists("/eph2", watch=events.append) is not None
    await store.close()
    backend.opened.remove(store)
    await wait_until(lambda: events)
    assert events == [WatchedEvent(EventType.DELETED, "/eph2")]
    assert await other.exists("/eph2") is None


@with_store
async def test_watches_fire_once(store, backend):
    data_ev: list[WatchedEvent] = []
    await store.create("/w", b"0")
    await store.get("/w", watch=data_ev.append)
    await store.set("/w", b"1")
    await store.set("/w", b"2")
    await wait_until(lambda: data_ev)
    await asyncio.sleep(0.05)
    assert data_ev == [WatchedEvent(EventType.CHANGED, "/w")]

    exist_ev: list[WatchedEvent] = []
    assert await store.exists("/w2", watch=exist_ev.append) is None
    await store.create("/w2")
    await wait_until(lambda: exist_ev)
    assert exist_ev == [WatchedEvent(EventType.CREATED, "/w2")]

    child_ev: list[WatchedEvent] = []
    assert await store.get_children("/w", watch=child_ev.append) == []
    await store.create("/w/a")
    await store.create("/w/b")
    await wait_until(lambda: child_ev)
    await asyncio.sleep(0.05)
    assert child_ev == [WatchedEvent(EventType.CHILD, "/w")]

    del_ev: list[WatchedEvent] = []
    await store.get("/w/a", watch=del_ev.append)
    await store.get_children("/w", watch=del_ev.append)
    await store.delete("/w/a")
    await wait_until(lambda: len(del_ev) == 2)
    assert sorted(e.type.value for e in del_ev) == ["CHILD", "DELETED"]

    gone: list[WatchedEvent] = []
    await store.get_children("/w/b", watch=gone.append)
    await store.delete("/w/b")
    await wait_until(lambda: gone)
    assert gone == [WatchedEvent(EventType.DELETED, "/w/b")]

    # a failing call sets no watch
    none: list[WatchedEvent] = []
    with pytest.raises(NoNodeError):
        await store.get("/nope", watch=none.append)
    await store.create("/nope")
    await asyncio.sleep(0.05)
    assert none == []


@with_store
async def test_get_many_reads_together_with_watches(store, backend):
    """get_many: every path's (data, stat) in order, None for a missing node (no watch set
    there), each existing path's own watch; more paths than one pipelined window."""
    from pybroker.coord.metadata import zk

    await store.create("/gm", b"")
    n = zk.GET_MANY_WINDOW + 7
    for i in range(n):
        await store.create(f"/gm/{i}", b"%d" % i)
    paths = [f"/gm/{i}" for i in range(n)] + ["/gm/missing"]
    events: dict[str, list[WatchedEvent]] = {p: [] for p in paths}
    got = await store.get_many(paths, [events[p].append for p in paths])
    assert [g[0] if g else None for g in got] == [b"%d" % i for i in range(n)] + [None]
    assert all(g[1].version == 0 for g in got[:-1])
    await store.set("/gm/3", b"x")
    await store.set(f"/gm/{n - 1}", b"y")
    await store.create("/gm/missing")
    await wait_until(lambda: events["/gm/3"] and events[f"/gm/{n - 1}"])
    await asyncio.sleep(0.05)
    assert events["/gm/3"] == [WatchedEvent(EventType.CHANGED, "/gm/3")]
    assert events["/gm/missing"] == [] and events["/gm/0"] == []
    assert await store.get_many([]) == []


@with_store
async def test_multi_atomic(store, backend):
    await store.create("/m", b"v0")
    await store.multi(
        [
            Create("/m/a", b"A"),
            Create("/m/a/b", b"B"),
            SetData("/m", b"v1", version=0),
            Check("/m", 1),
        ]
    )
    assert (await store.get("/m/a/b"))[0] == b"B"
    assert (await store.get("/m"))[1].version == 1

    watched: list[WatchedEvent] = []
    await store.get_children("/m", watch=watched.append)
    with pytest.raises(BadVersionError) as ei:
        await store.multi([Create("/m/c"), SetData("/m", b"v2"), Delete("/m/a/b"), Check("/m", 7)])
    assert ei.value.op_index == 3
    assert await store.exists("/m/c") is None
    assert await store.exists("/m/a/b") is not None
    data, stat = await store.get("/m")
    assert data == b"v1" and stat.version == 1
    with pytest.raises(NodeExistsError) as ei:
        await store.multi([Create("/m/d"), Create("/m/a")])
    assert ei.value.op_index == 1
    assert await store.exists("/m/d") is None
    with pytest.raises(NoNodeError):
        await store.multi([Delete("/m/zzz")])
    await asyncio.sleep(0.05)
    assert watched == []  # nothing happened, nothing fired
    await store.multi([Delete("/m/a/b"), Delete("/m/a")])
    assert await store.get_children("/m") == []
    await wait_until(lambda: watched)
    assert watched == [WatchedEvent(EventType.CHILD, "/m")]


@with_store
async def test_concurrent_cas_one_winner(store, backend):
    await store.create("/counter", b"0")

    async def bump() -> int:
        conflicts = 0
        while True:
            data, stat = await store.get("/counter")
            try:
                await store.set("/counter", str(int(data) + 1).encode(), version=stat.version)
                return conflicts
            except BadVersionError:
                conflicts += 1

    await asyncio.gather(*(bump() for _ in range(10)))
    assert (await store.get("/counter"))[0] == b"10"


# --------------------------------------------------------------------------- LocalStore only


def test_local_persistence_across_reopen(tmp_path):
    async def main():
        clock = ManualClock(1_000)
        s = LocalStore(tmp_path, clock)
        await s.start()
        await s.create("/a", b"A")
        clock.advance(5)
        await s.set("/a", b"A2")
        await s.multi([Create("/b", b"B"), Create("/b/c", b"C")])
        await s.create("/b/s-", sequence=True)
        await s.create("/b/eph", ephemeral=True)
        await s.delete("/b/c")
        await s.close()

        s = LocalStore(tmp_path, clock)
        await s.start()
        data, stat = await s.get("/a")
        assert data == b"A2" and stat.version == 1
        assert stat.ctime == 1_000 and stat.mtime == 1_005
        assert await s.get_children("/b") == ["s-0000000001"]
        assert (await s.exists("/b")).cversion == 5  # c, s-1, eph, -eph, -c
        assert await s.create("/b/s-", sequence=True) == "/b/s-0000000005"
        await s.close()

    asyncio.run(main(), debug=True)


def crash_after(directory: Path, ops: str, **store_kwargs: object) -> None:
    """Open a LocalStore on ``directory`` in a child process, run ``ops`` (statements awaiting
    on ``s``, the open store), then kill -9 the child: no close, no ephemeral cleanup, no fsync,
    as a broker that crashed."""
    body = textwrap.indent(textwrap.dedent(ops), "    ")
    script = (
        "import asyncio, os, signal\n"
        "from pybroker.coord.metadata.local import LocalStore\n"
        "from pybroker.coord.metadata.store import Create, SetData\n"
        "async def main():\n"
        f"    s = LocalStore({str(directory)!r}, **{store_kwargs!r})\n"
        "    await s.start()\n"
        f"{body}\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], timeout=120)
    assert done.returncode == -signal.SIGKILL


def test_local_crash_keeps_writes_drops_ephemerals(tmp_path):
    crash_after(
        tmp_path,
        """
        await s.create("/keep", b"k")
        await s.create("/keep/eph", b"e", ephemeral=True)
        await s.create("/keep/seq-", sequence=True, ephemeral=True)
        """,
        fsync_interval_ms=60_000,
    )

    async def main():
        s = LocalStore(tmp_path)
        await s.start()
        assert (await s.get("/keep"))[0] == b"k"
        assert await s.get_children("/keep") == []
        await s.close()

    asyncio.run(main(), debug=True)
    # sequence numbers never go backwards after ephemerals are expired
    crash_after(
        tmp_path,
        """
        assert await s.create("/keep/seq-", sequence=True) == "/keep/seq-0000000004"
        """,
    )

    async def after() -> None:
        s = LocalStore(tmp_path)
        await s.start()
        assert await s.get_children("/keep") == ["seq-0000000004"]
        await s.close()

    asyncio.run(after(), debug=True)


def test_local_torn_journal_tail_is_ignored(tmp_path):
    crash_after(
        tmp_path,
        """
        await s.create("/a", b"A")
        await s.multi([Create("/b"), Create("/b/c"), SetData("/a", b"A2")])
        """,
    )
    (journal,) = tmp_path.glob("journal-*")
    size = journal.stat().st_size
    with open(journal, "r+b") as f:  # tear the last entry (the multi)
        f.truncate(size - 3)

    async def torn() -> None:
        s = LocalStore(tmp_path)
        await s.start()
        assert (await s.get("/a"))[0] == b"A"  # the multi is all-or-nothing on replay too
        assert await s.exists("/b") is None
        await s.close()

    asyncio.run(torn(), debug=True)
    crash_after(tmp_path, 'await s.create("/after")')
    (journal,) = tmp_path.glob("journal-*")
    with open(journal, "ab") as f:  # garbage after a good entry
        f.write(b"\x00\x00\x00\x10garbage")

    async def garbage() -> None:
        s = LocalStore(tmp_path)
        await s.start()
        assert await s.exists("/after") is not None
        await s.close()

    asyncio.run(garbage(), debug=True)


def test_local_corrupt_entry_crc(tmp_path):
    crash_after(
        tmp_path,
        """
        await s.create("/a", b"AAAA")
        await s.create("/b", b"BBBB")
        """,
    )
    (journal,) = tmp_path.glob("journal-*")
    raw = bytearray(journal.read_bytes())
    raw[raw.rindex(b"BBBB")] ^= 0xFF
    journal.write_bytes(bytes(raw))

    async def main():
        s = LocalStore(tmp_path)
        await s.start()
        assert await s.exists("/a") is not None
        assert await s.exists("/b") is None
        await s.close()

    asyncio.run(main(), debug=True)


def test_local_snapshot_rotation(tmp_path):
    crash_after(
        tmp_path,
        """
        await s.create("/t")
        for i in range(300):
            await s.create(f"/t/n{i:03d}", b"x" * 20)
            if i % 3 == 0:
                await s.set("/t/n000", str(i).encode())
        counter = [0]

        async def next_rotation():
            job, sets = s._snapshot_job, 0
            while s._snapshot_job is job:
                await s.set("/t/n000", b"%d" % counter[0])
                counter[0] += 1
                sets += 1
            await asyncio.wrap_future(s._snapshot_job)
            return sets

        assert s._snapshot_job is not None
        await asyncio.wrap_future(s._snapshot_job)
        await next_rotation()  # its snapshot holds the whole tree
        size = s._last_snapshot_bytes
        assert size > 10_000
        # the next snapshot comes once the journal is as large as the last snapshot (here
        # larger than snapshot_bytes): rotations cost O(tree), so their rate falls as it grows
        sets = await next_rotation()
        assert sets * 45 >= size - 100  # a set of /t/n000 is at most 45 bytes of journal
        """,
        snapshot_bytes=2000,
    )
    journals = list(tmp_path.glob("journal-*"))
    snapshot = (tmp_path / "snapshot").stat().st_size
    assert sum(j.stat().st_size for j in journals) < 100  # truncated by the snapshot
    assert snapshot > 2000

    async def main():
        s = LocalStore(tmp_path)
        await s.start()
        children = await s.get_children("/t")
        assert len(children) == 300
        data, stat = await s.get("/t/n000")
        assert stat.version == 100 + int(data) + 1
        await s.close()

    asyncio.run(main(), debug=True)


def test_local_write_cost_is_proportional_to_change(tmp_path):
    async def main():
        s = LocalStore(tmp_path)
        await s.start()
        for i in range(200):
            await s.create(f"/n{i}", b"y" * 100)
        (journal,) = tmp_path.glob("journal-*")
        before = journal.stat().st_size
        await s.set("/n5", b"z")
        assert journal.stat().st_size - before < 64
        await s.close()

    asyncio.run(main(), debug=True)


def test_local_directory_lock(tmp_path):
    async def main():
        s = LocalStore(tmp_path)
        await s.start()
        with pytest.raises(StoreError, match="in use"):
            await LocalStore(tmp_path).start()
        await s.close()
        s2 = LocalStore(tmp_path)
        await s2.start()
        await s2.close()

    asyncio.run(main(), debug=True)


def test_local_strict_fsync_mode(tmp_path):
    async def main():
        s = LocalStore(tmp_path, fsync_interval_ms=0)
        await s.start()
        await s.create("/a", b"1")
        await s.set("/a", b"2")
        await s.close()
        s = LocalStore(tmp_path)
        await s.start()
        assert (await s.get("/a"))[0] == b"2"
        await s.close()

    asyncio.run(main(), debug=True)


# --------------------------------------------------------------------------- ZooKeeper only


def test_zk_start_times_out_when_unreachable():
    async def main():
        store = ZooKeeperStore("127.0.0.1:1", connect_timeout_s=0.5)
        t0 = time.monotonic()
        with pytest.raises(ConnectionLossError, match="could not connect to ZooKeeper"):
            await store.start()
        assert time.monotonic() - t0 < 5

    asyncio.run(main(), debug=True)


def test_zk_chroot_is_created_and_isolates(zk_server):
    async def main():
        a = ZooKeeperStore(zk_server.connect + "/kafka/one", 6000)
        root = ZooKeeperStore(zk_server.connect, 6000)
        await a.start()
        await root.start()
        try:
            await a.create("/brokers")
            assert await root.exists("/kafka/one/brokers") is not None
            assert await a.exists("/kafka") is None
        finally:
            await a.close()
            await root.close()

    asyncio.run(main(), debug=True)


def test_zk_survives_server_restart(tmp_path):
    require_zookeeper()
    server = ZooKeeperServer(tmp_path / "zk")
    server.start()

    async def main():
        store = ZooKeeperStore(server.connect + "/r", 20_000, connect_timeout_s=30)
        states: list[str] = []
        store.add_session_listener(states.append)
        await store.start()
        await store.create("/eph", b"e", ephemeral=True)
        await store.create("/p", b"p")
        session = store.session_id
        watched: list[WatchedEvent] = []
        await store.get("/p", watch=watched.append)
        await asyncio.get_running_loop().run_in_executor(None, server.stop)
        await wait_until(lambda: SUSPENDED in states)
        # the watch was dropped with the connection: it fires so the watcher re-reads
        await wait_until(lambda: watched)
        await asyncio.get_running_loop().run_in_executor(None, server.start)
        # a call made while suspended is queued and completes after the reconnect
        data, _ = await store.get("/p")
        assert data == b"p"
        assert states[-1] == CONNECTED
        assert store.session_id == session
        assert (await store.get("/eph"))[1].ephemeral_owner == session
        await store.close()

    try:
        asyncio.run(asyncio.wait_for(main(), 60), debug=True)
    finally:
        server.cleanup()


class _Gate:
    """A TCP forwarder on loopback in front of one ZooKeeper server: forwards each connection,
    or, while ``swallowing``, accepts the next one and holds it without a byte (what a
    starting ZooKeeper does to a connection made before it runs); ``cut()`` closes every
    forwarded connection (the client sees the server go away)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.swallowing = False
        self.swallowed: list[socket.socket] = []
        self.forwarded: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            if self.swallowing:
                self.swallowing = False
                self.swallowed.append(conn)
                continue
            up = socket.create_connection(("127.0.0.1", self.upstream_port))
            self.forwarded += [conn, up]
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        for s in self.forwarded:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        self.forwarded.clear()

    def close(self) -> None:
        self.listener.close()
        self.cut()
        for s in self.swallowed:
            s.close()


def test_zk_a_reconnect_swallowed_keeps_the_session(tmp_path):
    """A starting ZooKeeper listens on its client port before it runs (ZOOKEEPER-3916): a
    connection made then is accepted and never answered.  kazoo waits session timeout / hosts
    for a connect answer, so with one host that one attempt used the whole session and the
    session expired although the server was back at once (1 run in ~40 of
    test_zk_survives_server_restart).  Made deterministic with a gate in front of a running
    server: the connection is cut, the store's first reconnect is held silently, the next
    ones are forwarded; the store must give up on the held one in time to get back into its
    session."""
    require_zookeeper()
    server = ZooKeeperServer(tmp_path / "zk")
    server.start()
    gate = _Gate(server.port)

    async def main():
        store = ZooKeeperStore(f"127.0.0.1:{gate.port}", 12_000, connect_timeout_s=30)
        states: list[str] = []
        store.add_session_listener(states.append)
        await store.start()
        await store.create("/eph", b"e", ephemeral=True)
        session = store.session_id
        gate.swallowing = True
        gate.cut()
        await wait_until(lambda: SUSPENDED in states)
        await wait_until(lambda: gate.swallowed, 30)
        await wait_until(lambda: states[-1] != SUSPENDED, 30)
        assert states[-1] == CONNECTED
        assert store.session_id == session
        assert (await store.get("/eph"))[1].ephemeral_owner == session
        await store.close()

    try:
        asyncio.run(asyncio.wait_for(main(), 60), debug=True)
    finally:
        gate.close()
        server.cleanup()


def test_zk_a_call_cut_off_while_starting_waits_for_the_connection(tmp_path):
    """Until started_up() (the broker's start), a read in flight when the connection is lost
    is sent again once it is back (Kafka's KafkaZkClient sends its requests again until
    connected), within zookeeper.connection.timeout.ms, then fails naming the setting; after
    started_up() it fails at once.  The connection is cut by stopping ZooKeeper (SIGSTOP):
    the call is sent and never answered, kazoo's ping times out."""
    require_zookeeper()
    server = ZooKeeperServer(tmp_path / "zk")
    server.start()

    def freeze(sig: int) -> None:
        assert server.proc is not None
        os.killpg(server.proc.pid, sig)

    def sent(store: ZooKeeperStore) -> bool:
        """kazoo sent the call's request and waits for its answer (the session probe's
        ``exists`` aside: the calls here are gets and a multi)."""
        return any(type(e[0]).__name__ != "Exists" for e in store._client._pending)

    def sent_or_lost(store: ZooKeeperStore, states: list[str], n: int) -> bool:
        return sent(store) or SUSPENDED in states[n:]

    async def cut_while(store: ZooKeeperStore, states: list[str], call, hold: float | None):
        """SIGSTOP ZooKeeper, make the call, SIGCONT once kazoo saw the loss (+ hold s;
        None: only after the call ended); returns the call's result or exception.  The cut
        counts only if the call was sent before kazoo saw the loss: a call made once the
        connection is already lost waits in kazoo's queue and is sent after the reconnect,
        which is not the case under test (under load the ping could time out before kazoo's
        thread sent the call: seen twice at load 12-18), so such a cut is made again."""
        for _ in range(5):
            await wait_until(lambda: states[-1] == CONNECTED, 30)  # (after the previous cut)
            n = len(states)
            freeze(signal.SIGSTOP)
            task = asyncio.ensure_future(call())
            await wait_until(functools.partial(sent_or_lost, store, states, n), 30)
            if sent(store):
                break
            freeze(signal.SIGCONT)  # lost before the call went out: not this case
            with contextlib.suppress(ConnectionLossError):
                await task
        else:
            raise AssertionError("the call was never sent before the loss in 5 cuts")
        try:
            await wait_until(lambda: SUSPENDED in states[n:], 30)
            if hold is not None:
                await asyncio.sleep(hold)
                freeze(signal.SIGCONT)
            try:
                return await task
            except ConnectionLossError as e:
                return e
        finally:
            freeze(signal.SIGCONT)

    async def main():
        store = ZooKeeperStore(server.connect + "/w", 4000, connect_timeout_s=30)
        states: list[str] = []
        store.add_session_listener(states.append)
        await store.start()
        await store.create("/p", b"p")
        await wait_until(lambda: states and states[-1] == CONNECTED)
        try:
            got = await cut_while(store, states, lambda: store.get("/p"), 0.5)
            assert not isinstance(got, Exception), got
            assert got[0] == b"p"
            # many gets (get_many) and a multi too
            got = await cut_while(store, states, lambda: store.get_many(["/p", "/none"]), 0.5)
            assert not isinstance(got, Exception), got
            assert got[0][0] == b"p" and got[1] is None
            # a write is not sent again (ZooKeeper may have applied it): it fails
            got = await cut_while(store, states, lambda: store.multi([Create("/q", b"q")]), 0.5)
            assert isinstance(got, ConnectionLossError), got
            # not back within the bound: an error naming the setting
            store._connect_timeout_s = 1.0
            got = await cut_while(store, states, lambda: store.get("/p"), None)
            assert isinstance(got, ConnectionLossError), got
            assert "did not come back within 1 s (zookeeper.connection.timeout.ms" in str(got)
            # once started: at once
            store.started_up()
            got = await cut_while(store, states, lambda: store.get("/p"), 0.5)
            assert isinstance(got, ConnectionLossError), got
            assert "did not come back" not in str(got)
        finally:
            await store.close()

    try:
        asyncio.run(asyncio.wait_for(main(), 120), debug=True)
    finally:
        server.cleanup()


def test_no_kazoo_import_outside_zk():
    root = Path(__file__).resolve().parent.parent / "pybroker"
    offenders = [
        str(p)
        for p in root.rglob("*.py")
        if p.name != "zk.py"
        and "kazoo" in p.read_text()
        and "import" in p.read_text()
        and any(
            line.lstrip().startswith(("import kazoo", "from kazoo"))
            for line in p.read_text().splitlines()
        )
    ]
    assert offenders == []
    assert os.path.exists(root / "coord" / "metadata" / "zk.py")
