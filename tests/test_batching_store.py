"""Group commit on the metadata store (coord/metadata/batching.py): concurrent multis of
independent writers go out merged, each writer's operations all or nothing, a writer whose
operation loses a race fails alone, and every group's commits land in the order they were
made (OffsetStore over a BatchingStore), on a slow in-process store and on ZooKeeper."""

from __future__ import annotations

import asyncio
import random

import pytest

from pybroker.clock import ManualClock
from pybroker.coord.group.offsets import CommittedOffset, OffsetStore
from pybroker.coord.metadata.batching import BatchingStore
from pybroker.coord.metadata.local import LocalStore
from pybroker.coord.metadata.store import (
    BadVersionError,
    Create,
    NodeExistsError,
    NoNodeError,
    SetData,
)
from pybroker.coord.metadata.zk import ZooKeeperStore
from tests.zk_server import zk_connect, zk_server  # noqa: F401 (fixtures)


class SlowStore(LocalStore):
    """A LocalStore whose multi takes a while (so writers queue behind one in flight)."""

    multis = 0

    async def multi(self, ops):
        self.multis += 1
        await asyncio.sleep(0.01)
        await super().multi(ops)


async def _slow(tmp_path) -> SlowStore:
    s = SlowStore(tmp_path, ManualClock())
    await s.start()
    return s


def test_concurrent_writers_share_round_trips_and_fail_alone(tmp_path) -> None:
    async def main() -> None:
        inner = await _slow(tmp_path)
        store = BatchingStore(inner, max_in_flight=1)
        for i in range(30):
            await inner.create(f"/n{i}", b"0")
        inner.multis = 0

        async def write(i: int):
            version = 5 if i == 7 else 0  # writer 7 lost a race: the node is at version 0
            ops = [SetData(f"/n{i}", b"1", version)]
            if i == 11:  # all or nothing: its first op must not land
                ops.append(Create("/n3"))
            await store.multi(ops)

        results = await asyncio.gather(*(write(i) for i in range(30)), return_exceptions=True)
        failed = {i: type(r) for i, r in enumerate(results) if isinstance(r, Exception)}
        assert failed == {7: BadVersionError, 11: NodeExistsError}
        assert results[7].op_index == 0 and results[11].op_index == 1
        for i in range(30):
            data, stat = await inner.get(f"/n{i}")
            assert (data, stat.version) == ((b"0", 0) if i in (7, 11) else (b"1", 1)), i
        assert store.callers == 30
        assert inner.multis < 10  # merged (a few retries after the two failures included)
        await inner.close()

    asyncio.run(main())


def test_a_writer_cancelled_while_queued_withdraws(tmp_path) -> None:
    async def main() -> None:
        inner = await _slow(tmp_path)
        store = BatchingStore(inner, max_in_flight=1)
        first = asyncio.ensure_future(store.multi([Create("/a")]))
        queued = asyncio.ensure_future(store.multi([Create("/b")]))
        await asyncio.sleep(0)
        queued.cancel()
        await first
        with pytest.raises(asyncio.CancelledError):
            await queued
        await asyncio.sleep(0.05)
        assert await inner.exists("/a") is not None
        assert await inner.exists("/b") is None
        await inner.close()

    asyncio.run(main())


async def _commits_in_order(store) -> None:
    """Many groups, each with several members committing concurrently: every group ends at
    the offsets of its last commit, and no commit of a group is lost or reordered."""
    offsets = OffsetStore(store, ManualClock(), timestamp_refresh_ms=0)
    groups = [f"g{i}" for i in range(40)]
    rng = random.Random(7)
    last: dict[tuple[str, int], int] = {}
    counter = 0

    async def member(group: str, m: int) -> None:
        nonlocal counter
        for _ in range(5):
            counter += 1
            n = counter
            p = rng.randrange(3)
            last[(group, p)] = n  # the call order is the order to keep
            await offsets.commit(group, {("t", p): CommittedOffset(n, -1, "", 0)})

    await asyncio.gather(*(member(g, m) for g in groups for m in range(3)))
    fresh = OffsetStore(store, ManualClock())
    for (group, p), n in last.items():
        assert (await fresh.load(group))[("t", p)].offset == n, (group, p)


def test_group_commits_keep_each_groups_order_slow_store(tmp_path) -> None:
    async def main() -> None:
        inner = await _slow(tmp_path)
        store = BatchingStore(inner)
        await _commits_in_order(store)
        assert store.round_trips < store.callers
        await inner.close()

    asyncio.run(main())


def test_group_commits_keep_each_groups_order_on_zookeeper(zk_connect) -> None:  # noqa: F811
    async def main() -> None:
        inner = ZooKeeperStore(zk_connect)
        await inner.start()
        store = BatchingStore(inner)
        try:
            await _commits_in_order(store)
            assert store.round_trips < store.callers
            # a compare-and-set that lost fails alone on ZooKeeper too
            await inner.create("/x", b"")
            await inner.create("/y", b"")
            res = await asyncio.gather(
                store.multi([SetData("/x", b"1", 0)]),
                store.multi([SetData("/y", b"1", 9)]),
                store.multi([SetData("/nope", b"1")]),
                store.multi([SetData("/x", b"2", 1)]),
                return_exceptions=True,
            )
            assert [type(r) for r in res] == [type(None), BadVersionError, NoNodeError, type(None)]
            assert (await inner.get("/x"))[0] == b"2"
        finally:
            await inner.close()

    asyncio.run(main())
