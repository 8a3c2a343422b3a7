"""ZooKeeperStore's windows of pipelined requests (get_many, set_many, multi_many) go to
kazoo's connection thread with one wake-up per window, not one per request (each wake-up
held the event loop for a GIL hand-over: 5,000 gets 1.9 s, docs/scale.md), and answer as
kazoo's own calls do, under a chroot too."""

from __future__ import annotations

import asyncio

from pybroker.coord.metadata import zk
from pybroker.coord.metadata.store import (
    BadVersionError,
    Check,
    Create,
    EventType,
    NoNodeError,
    SetData,
    WatchedEvent,
)
from pybroker.coord.metadata.zk import ZooKeeperStore


class _CountingSocket:
    """kazoo's wake-up socket, counting the wake-ups sent on it for many requests at once
    (sendall; kazoo's own calls, e.g. the session probe's, send one byte each)."""

    def __init__(self, sock) -> None:
        self.sock = sock
        self.sends = 0
        self.bytes = 0

    def sendall(self, data: bytes) -> None:
        self.sends += 1
        self.bytes += len(data)
        self.sock.sendall(data)

    def __getattr__(self, name: str):
        return getattr(self.sock, name)


async def _until(cond, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.02)


def test_windows_go_out_with_one_wake_up_each_under_a_chroot(zk_server):
    n = zk.GET_MANY_WINDOW * 2 + 3  # three windows

    async def main() -> None:
        store = ZooKeeperStore(zk_server.connect + "/pipelined/one", 6000)
        root = ZooKeeperStore(zk_server.connect, 6000)
        await store.start()
        await root.start()
        try:
            await store.create("/p", b"")
            paths = [f"/p/{i}" for i in range(n)]
            await store.multi_many([[Create(p, b"%d" % i)] for i, p in enumerate(paths)])
            conn = store._client._connection
            counting = conn._write_sock = _CountingSocket(conn._write_sock)
            events: dict[str, list[WatchedEvent]] = {p: [] for p in paths}
            got = await store.get_many(
                paths + ["/p/missing"], [events[p].append for p in paths] + [None]
            )
            assert (counting.sends, counting.bytes) == (3, n + 1)
            assert [g[0] for g in got[:-1]] == [b"%d" % i for i in range(n)] and got[-1] is None
            # each its own version: one stale write fails alone
            writes = [(p, b"w", 0) for p in paths]
            writes[n // 2] = (paths[n // 2], b"w", 5)
            stats = await store.set_many(writes)
            assert (counting.sends, counting.bytes) == (6, 2 * n + 1)
            assert isinstance(stats[n // 2], BadVersionError)
            assert all(s.version == 1 for i, s in enumerate(stats) if i != n // 2)
            await _until(lambda: all(events[p] for i, p in enumerate(paths) if i != n // 2))
            assert events[paths[0]] == [WatchedEvent(EventType.CHANGED, paths[0])]
            assert events[paths[n // 2]] == []
            # transactions: each with its own outcome
            batches = [[Check(p, 1), SetData(p, b"m", 1)] for p in paths]
            batches[1] = [Check(paths[1], 7), SetData(paths[1], b"m", 1)]
            batches[2] = [Create("/p/none/child", b"")]
            errors = await store.multi_many(batches)
            assert (counting.sends, counting.bytes) == (9, 3 * n + 1)
            assert isinstance(errors[1], BadVersionError) and errors[1].op_index == 0
            assert isinstance(errors[2], NoNodeError)
            assert [i for i, e in enumerate(errors) if e is not None] == [
                1,
                2,
                n // 2,
            ]  # (version 0)
            # what the root sees: everything under the chroot
            data, stat = await root.get("/pipelined/one/p/0")
            assert (data, stat.version) == (b"m", 2)
            assert (await root.get(f"/pipelined/one/p/{n // 2}"))[0] == b"%d" % (n // 2)
            assert (await root.get("/pipelined/one/p/1"))[0] == b"w"
            assert await root.exists("/p") is None
        finally:
            await store.close()
            await root.close()

    asyncio.run(main(), debug=True)
