"""OffsetStore (pybroker/coord/group/offsets.py) on both backends: LocalStore and a real
ZooKeeper."""

from __future__ import annotations

import asyncio
import collections
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pybroker.clock import ManualClock
from pybroker.coord.group.offsets import CommittedOffset, OffsetStore, decode_offset, encode_offset
from pybroker.coord.metadata import paths
from pybroker.coord.metadata.local import LocalStore
from pybroker.coord.metadata.paths import component_to_name, name_to_component
from pybroker.coord.metadata.store import (
    BadVersionError,
    ConnectionLossError,
    MetadataStore,
    validate_path,
)
from pybroker.coord.metadata.zk import ZooKeeperStore
from pybroker.testing.zookeeper import require_zookeeper

T0 = 1_700_000_000_000


class Backend:
    """Opens stores of one kind on one namespace; ``restart`` closes them all and opens a new
    one (a broker restart: for the local store the tree is re-read from its files)."""

    def __init__(self, kind: str, tmp_path: Path, connect: str | None) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.connect = connect
        self.clock = ManualClock(T0)
        self.opened: list[MetadataStore] = []

    async def open(self) -> MetadataStore:
        if self.kind == "local":
            store: MetadataStore = LocalStore(self.tmp_path / "meta", self.clock)
        else:
            store = ZooKeeperStore(self.connect, 6000, connect_timeout_s=10)
        await store.start()
        self.opened.append(store)
        return store

    async def restart(self) -> MetadataStore:
        await self.close_all()
        return await self.open()

    async def close_all(self) -> None:
        while self.opened:
            await self.opened.pop().close()


@pytest.fixture(params=["local", "zookeeper"])
def backend(request, tmp_path):
    if request.param == "zookeeper":
        require_zookeeper()
        connect = request.getfixturevalue("zk_connect")
    else:
        connect = None
    return Backend(request.param, tmp_path, connect)


def with_store(fn):
    """Test body gets (store, backend), run with asyncio.run(debug=True); stores are closed."""

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


class Spy:
    """Counts the store calls an OffsetStore makes; can make the next multi fail."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self.calls: collections.Counter[str] = collections.Counter()
        self.fail_multi: BaseException | None = None
        self.hold_before: dict[str, asyncio.Event] = {}  # call waits for the event first
        self.hold_after: dict[str, asyncio.Event] = {}  # result waits for the event

    def __getattr__(self, name):
        attr = getattr(self.store, name)
        if not asyncio.iscoroutinefunction(attr):
            return attr

        async def call(*args, **kwargs):
            self.calls[name] += 1
            if name == "multi" and self.fail_multi is not None:
                exc, self.fail_multi = self.fail_multi, None
                raise exc
            if name in self.hold_before:
                await self.hold_before[name].wait()
            result = await attr(*args, **kwargs)
            if name in self.hold_after:
                await self.hold_after[name].wait()
            return result

        return call

    def reset(self) -> None:
        self.calls.clear()


def co(offset: int, ts: int = T0, epoch: int = 3, metadata: str = "", expire=None):
    return CommittedOffset(offset, epoch, metadata, ts, expire)


async def raw(store: MetadataStore, group: str, topic: str, p: int) -> dict:
    data, _ = await store.get(paths.consumer_offset(group, topic, p))
    return json.loads(data)


# --------------------------------------------------------------------------- encoding


def test_encode_decode_roundtrip():
    c = CommittedOffset(12, 4, 'm"é\u2603', T0, T0 + 5)
    data = encode_offset(c)
    assert json.loads(data) == {
        "version": 1,
        "offset": 12,
        "leader_epoch": 4,
        "metadata": 'm"é\u2603',
        "commit_timestamp": T0,
        "expire_timestamp": T0 + 5,
    }
    assert decode_offset(data, 0) == c
    assert b"expire_timestamp" not in encode_offset(co(1))
    assert decode_offset(b"42", 77) == CommittedOffset(42, -1, "", 77)
    assert decode_offset(b" 7\n", 1) == CommittedOffset(7, -1, "", 1)
    with pytest.raises(ValueError):
        decode_offset(b"x", 0)


@given(st.text())
def test_name_components_are_bijective_and_valid(name):
    c = name_to_component(name)
    validate_path(f"/consumers/{c}")
    assert component_to_name(c) == name


def test_plain_names_are_unchanged():
    for name in ("my-group", "console-consumer-123", "a.b_c", "topic.x-1", "grüppe"):
        assert name_to_component(name) == name
    assert name_to_component("a/b") == "a%2Fb"
    assert name_to_component("50%") == "50%25"
    assert name_to_component("") == "%"
    assert name_to_component("..") == "%2E%2E"


# --------------------------------------------------------------------------- the store


@with_store
async def test_commit_survives_restart(store, backend):
    offsets = OffsetStore(store, backend.clock)
    assert await offsets.load("g") == {}
    committed = {
        ("orders", 0): co(10, metadata="first", epoch=0),
        ("orders", 1): co(20, metadata='{"json": "inside"} é', epoch=7),
        ("events", 5): co(0, metadata="", epoch=-1, expire=T0 + 1000),
    }
    await offsets.commit("g", committed)
    await offsets.commit("g", {("orders", 0): co(11, T0 + 1, epoch=1, metadata="second")})
    expected = {**committed, ("orders", 0): co(11, T0 + 1, epoch=1, metadata="second")}
    assert await offsets.load("g") == expected

    store = await backend.restart()
    fresh = OffsetStore(store, backend.clock)
    assert fresh.cached("g") is None
    assert await fresh.load("g") == expected
    assert await raw(store, "g", "orders", 1) == {
        "version": 1,
        "offset": 20,
        "leader_epoch": 7,
        "metadata": '{"json": "inside"} é',
        "commit_timestamp": T0,
    }
    # and it keeps committing on the znodes it found (SetData, not Create)
    await fresh.commit("g", {("orders", 1): co(21), ("orders", 2): co(1)})
    assert (await OffsetStore(store, backend.clock).load("g"))[("orders", 1)] == co(21)


@with_store
async def test_fetch_from_cache_and_one_multi_per_commit(store, backend):
    spy = Spy(store)
    offsets = OffsetStore(spy, backend.clock, timestamp_refresh_ms=60_000)
    await offsets.commit("g", {("t", p): co(p) for p in range(10)})
    spy.reset()
    for i in range(1, 4):
        await offsets.commit("g", {("t", p): co(p + i, T0 + i) for p in range(10)})
        assert await offsets.load("g") == {("t", p): co(p + i, T0 + i) for p in range(10)}
        assert offsets.cached("g") == await offsets.load("g")
    assert spy.calls == {"multi": 3}  # no reads, no parent checks: one round trip per commit

    # a copy: callers cannot corrupt the cache
    offsets.cached("g").clear()
    assert len(await offsets.load("g")) == 10

    # identical commits (only the timestamp moves) are not written within the refresh interval
    spy.reset()
    same = {("t", p): co(p + 3, T0 + 30_000) for p in range(10)}
    await offsets.commit("g", same)
    assert spy.calls == {}
    assert (await offsets.load("g"))[("t", 0)].commit_timestamp == T0 + 3  # what is stored
    # ... but a changed one in the same commit is, alone
    await offsets.commit("g", {**same, ("t", 0): co(100, T0 + 30_000)})
    assert spy.calls == {"multi": 1}
    assert (await raw(store, "g", "t", 1))["commit_timestamp"] == T0 + 3
    # after the refresh interval the timestamp is written again
    await offsets.commit("g", {("t", 1): co(4, T0 + 60_003)})
    assert (await raw(store, "g", "t", 1))["commit_timestamp"] == T0 + 60_003
    # metadata or epoch changes are never skipped
    await offsets.commit("g", {("t", 1): co(4, T0 + 60_004, metadata="x")})
    await offsets.commit("g", {("t", 1): co(4, T0 + 60_005, metadata="x", epoch=9)})
    assert await raw(store, "g", "t", 1) == json.loads(
        encode_offset(co(4, T0 + 60_005, metadata="x", epoch=9))
    )
    assert spy.calls == {"multi": 4}

    # refresh 0: every commit is written
    eager = OffsetStore(store, backend.clock, timestamp_refresh_ms=0)
    await eager.commit("h", {("t", 0): co(1)})
    await eager.commit("h", {("t", 0): co(1, T0 + 1)})
    assert (await raw(store, "h", "t", 0))["commit_timestamp"] == T0 + 1


@with_store
async def test_cas_conflict_is_atomic_and_retried(store, backend):
    one_try = OffsetStore(store, backend.clock, max_attempts=1)
    await one_try.commit("g", {("a", 0): co(1), ("b", 0): co(1)})
    # another writer updates b/0 behind the cache's back
    await store.set(paths.consumer_offset("g", "b", 0), encode_offset(co(50, metadata="other")))
    with pytest.raises(BadVersionError):
        await one_try.commit("g", {("a", 0): co(2), ("b", 0): co(2), ("c", 0): co(2)})
    # nothing of the failed multi landed: a/0 unchanged, c's topic znode not created
    assert (await raw(store, "g", "a", 0))["offset"] == 1
    assert (await raw(store, "g", "b", 0))["offset"] == 50
    assert await store.exists(f"{paths.CONSUMERS}/g/offsets/c") is None
    # the failed commit marked the cache stale: the next load re-reads
    assert (await one_try.load("g"))[("b", 0)] == co(50, metadata="other")

    # with retries the conflict is resolved by re-reading the group
    await store.set(paths.consumer_offset("g", "a", 0), encode_offset(co(60)))
    spy = Spy(store)
    retrying = OffsetStore(spy, backend.clock)
    await retrying.load("g")
    await store.set(paths.consumer_offset("g", "a", 0), encode_offset(co(61)))
    spy.reset()
    await retrying.commit("g", {("a", 0): co(3), ("b", 0): co(3), ("c", 0): co(3)})
    assert spy.calls["multi"] == 2
    expected = {("a", 0): co(3), ("b", 0): co(3), ("c", 0): co(3)}
    assert await retrying.load("g") == expected
    assert await OffsetStore(store, backend.clock).load("g") == expected


@with_store
async def test_parents_created_by_another_broker(store, backend):
    """Two OffsetStores (two brokers, one after the other owning the group): the second's
    cache says the parents are missing; the Create of the parent fails and is retried."""
    a = OffsetStore(store, backend.clock)
    b = OffsetStore(store, backend.clock)
    assert await a.load("g") == {}
    assert await b.load("g") == {}
    await b.commit("g", {("t", 0): co(5)})
    await a.commit("g", {("t", 1): co(6), ("u", 0): co(7)})
    # a partition znode created behind the back: Create fails with NodeExists, then SetData
    await b.commit("g", {("v", 0): co(8)})
    await a.commit("g", {("v", 0): co(9)})
    assert await OffsetStore(store, backend.clock).load("g") == {
        ("t", 0): co(5),
        ("t", 1): co(6),
        ("u", 0): co(7),
        ("v", 0): co(9),
    }


@with_store
async def test_store_errors_reach_the_caller_and_force_a_reread(store, backend):
    spy = Spy(store)
    offsets = OffsetStore(spy, backend.clock)
    await offsets.commit("g", {("t", 0): co(1)})
    spy.fail_multi = ConnectionLossError("lost")
    with pytest.raises(ConnectionLossError):
        await offsets.commit("g", {("t", 0): co(2)})
    spy.reset()
    assert await offsets.load("g") == {("t", 0): co(1)}  # re-read: the write did not happen
    assert spy.calls["get"] == 1
    await offsets.commit("g", {("t", 0): co(3)})
    assert await OffsetStore(store, backend.clock).load("g") == {("t", 0): co(3)}


@with_store
async def test_overlapping_writes_to_one_group_are_queued_and_merged(store, backend):
    spy = Spy(store)
    offsets = OffsetStore(spy, backend.clock)
    await offsets.commit("g", {("t", 0): co(1), ("t", 1): co(1)})
    gate = spy.hold_before["multi"] = asyncio.Event()
    first = asyncio.ensure_future(offsets.commit("g", {("t", 0): co(2)}))
    await asyncio.sleep(0.01)  # its multi is in flight (held)
    spy.reset()
    tasks = [
        *(
            asyncio.ensure_future(offsets.commit("g", {("t", 0): co(10 + i), ("t", 1): co(20 + i)}))
            for i in range(5)
        ),
        asyncio.ensure_future(offsets.commit("g", {("u", 0): co(7)})),  # another member
        asyncio.ensure_future(offsets.delete_offsets("g", [("t", 1)])),
        asyncio.ensure_future(offsets.commit("g", {("t", 1): co(99)})),
    ]
    await asyncio.sleep(0.01)
    assert spy.calls == {}  # all queued behind the first
    assert await offsets.load("g") == {("t", 0): co(1), ("t", 1): co(1)}  # what is stored
    del spy.hold_before["multi"]
    gate.set()
    await asyncio.gather(first, *tasks)
    # the six commits were one multi, then the delete, then the last commit: in call order
    assert spy.calls == {"multi": 3}
    expected = {("t", 0): co(14), ("t", 1): co(99), ("u", 0): co(7)}
    assert await offsets.load("g") == expected
    assert await OffsetStore(store, backend.clock).load("g") == expected


@with_store
async def test_merged_commits_share_the_outcome(store, backend):
    spy = Spy(store)
    offsets = OffsetStore(spy, backend.clock)
    await offsets.commit("g", {("t", 0): co(1)})
    gate = spy.hold_before["multi"] = asyncio.Event()
    first = asyncio.ensure_future(offsets.commit("g", {("t", 0): co(2)}))
    await asyncio.sleep(0.01)
    a = asyncio.ensure_future(offsets.commit("g", {("t", 0): co(3)}))
    b = asyncio.ensure_future(offsets.commit("g", {("t", 1): co(3)}))
    cancelled = asyncio.ensure_future(offsets.commit("g", {("t", 2): co(3)}))
    await asyncio.sleep(0.01)
    cancelled.cancel()  # the caller gives up: its write still goes ahead with the others
    spy.fail_multi = ConnectionLossError("lost")  # taken by the merged multi
    del spy.hold_before["multi"]
    gate.set()
    await first
    for t in (a, b):
        with pytest.raises(ConnectionLossError):
            await t
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert await offsets.load("g") == {("t", 0): co(2)}  # re-read: nothing of the merged multi
    await offsets.commit("g", {("t", 1): co(4)})
    assert await OffsetStore(store, backend.clock).load("g") == {("t", 0): co(2), ("t", 1): co(4)}


@with_store
async def test_delete_group(store, backend):
    offsets = OffsetStore(store, backend.clock)
    await offsets.commit("g", {("t", 0): co(1), ("u", 3): co(2)})
    await offsets.commit("keep", {("t", 0): co(9)})
    await offsets.delete_group("g")
    await offsets.delete_group("g")  # idempotent
    await offsets.delete_group("never-existed")
    assert await offsets.load("g") == {}
    assert await store.exists(f"{paths.CONSUMERS}/g") is None
    assert await offsets.groups() == ["keep"]
    await offsets.commit("g", {("t", 0): co(3)})  # the cache knows the parents are gone
    store = await backend.restart()
    fresh = OffsetStore(store, backend.clock)
    assert await fresh.load("g") == {("t", 0): co(3)}
    assert await fresh.load("keep") == {("t", 0): co(9)}


@with_store
async def test_delete_offsets_removes_emptied_parents(store, backend):
    spy = Spy(store)
    offsets = OffsetStore(spy, backend.clock)
    await offsets.commit("g", {("t", 0): co(1), ("t", 1): co(2), ("u", 0): co(3)})
    spy.reset()
    await offsets.delete_offsets("g", [("t", 0), ("u", 0), ("missing", 7)])
    assert spy.calls == {"multi": 1}
    assert await offsets.load("g") == {("t", 1): co(2)}
    assert await store.get_children(f"{paths.CONSUMERS}/g/offsets") == ["t"]
    await offsets.delete_offsets("g", [("t", 1)])
    assert await store.exists(f"{paths.CONSUMERS}/g") is None
    assert await offsets.groups() == []
    await offsets.commit("g", {("t", 1): co(4)})
    assert await OffsetStore(store, backend.clock).load("g") == {("t", 1): co(4)}


@with_store
async def test_expire(store, backend):
    clock = backend.clock
    offsets = OffsetStore(store, clock)
    await offsets.commit(
        "g",
        {
            ("t", 0): co(1, ts=T0),
            ("t", 1): co(2, ts=T0 + 100),
            ("t", 2): co(3, ts=T0, expire=T0 + 10_000),  # explicit retention: kept until then
            ("u", 0): co(4, ts=T0 + 50),
        },
    )
    assert await offsets.expire("g", older_than_ms=T0) == 0
    clock.advance(1000)
    assert await offsets.expire("g", older_than_ms=T0 + 51) == 2  # t/0 and u/0
    assert await offsets.load("g") == {
        ("t", 1): co(2, ts=T0 + 100),
        ("t", 2): co(3, expire=T0 + 10_000),
    }
    assert await store.get_children(f"{paths.CONSUMERS}/g/offsets") == ["t"]
    clock.advance(10_000)
    assert await offsets.expire("g", older_than_ms=T0) == 1  # t/2 by its expire timestamp
    assert await offsets.expire("g", older_than_ms=T0 + 101) == 1
    assert await offsets.expire("g", older_than_ms=T0 + 10**9) == 0
    assert await offsets.groups() == []
    assert await OffsetStore(store, clock).load("g") == {}


@with_store
async def test_groups_and_odd_names(store, backend):
    offsets = OffsetStore(store, backend.clock)
    assert await offsets.groups() == []
    names = ["a", "b/c", "", ".", "50%", "spaces and ünïcode"]
    for i, name in enumerate(names):
        await offsets.commit(name, {("t", 0): co(i)})
    # a group znode without offsets (an old consumer's ids/owners) is not listed
    await store.ensure_path(f"{paths.CONSUMERS}/old-consumer/ids")
    assert await offsets.groups() == sorted(names)
    fresh = OffsetStore(store, backend.clock)
    assert await fresh.groups() == sorted(names)
    for i, name in enumerate(names):
        assert await fresh.load(name) == {("t", 0): co(i)}
    # deleting the last offsets of a group with other children keeps the group znode
    await fresh.commit("old-consumer", {("t", 0): co(1)})
    await fresh.delete_offsets("old-consumer", [("t", 0)])
    assert await store.get_children(f"{paths.CONSUMERS}/old-consumer") == ["ids"]
    assert "old-consumer" not in await fresh.groups()


@with_store
async def test_legacy_decimal_znodes(store, backend):
    path = paths.consumer_offset("old", "t", 3)
    await store.create(path, b"1234", makepath=True)
    await store.create(paths.consumer_offset("old", "t", 4), b"not an offset")
    await store.create(paths.consumer_offset("old", "t", 5), b"{}")
    await store.create(f"{paths.CONSUMERS}/old/offsets/t/not-a-partition")
    _, stat = await store.get(path)
    offsets = OffsetStore(store, backend.clock)
    assert await offsets.load("old") == {("t", 3): CommittedOffset(1234, -1, "", stat.mtime)}
    # the undecodable ones are overwritten by a commit (their versions are known)
    await offsets.commit("old", {("t", 3): co(1235), ("t", 4): co(1), ("t", 5): co(2)})
    assert await raw(store, "old", "t", 3) == json.loads(encode_offset(co(1235)))
    assert await OffsetStore(store, backend.clock).load("old") == {
        ("t", 3): co(1235),
        ("t", 4): co(1),
        ("t", 5): co(2),
    }
    # the foreign child keeps the topic znode when its offsets are deleted
    await offsets.delete_offsets("old", [("t", 3), ("t", 4), ("t", 5)])
    assert await store.get_children(f"{paths.CONSUMERS}/old/offsets/t") == ["not-a-partition"]


@with_store
async def test_concurrent_commits_to_many_groups(store, backend):
    offsets = OffsetStore(store, backend.clock)
    groups = [f"group-{i}" for i in range(20)]

    async def consumer(i: int, group: str) -> None:
        for n in range(3):
            await offsets.commit(group, {(f"t{p}", p): co(i * 100 + n, T0 + n) for p in range(3)})

    await asyncio.gather(*(consumer(i, g) for i, g in enumerate(groups)))
    fresh = OffsetStore(store, backend.clock)
    assert await fresh.groups() == sorted(groups)
    loaded = await asyncio.gather(*(fresh.load(g) for g in groups))
    for i, got in enumerate(loaded):
        assert got == {(f"t{p}", p): co(i * 100 + 2, T0 + 2) for p in range(3)}


@with_store
async def test_concurrent_first_loads_share_one_read(store, backend):
    writer = OffsetStore(store, backend.clock)
    await writer.commit("g", {("t", p): co(p) for p in range(5)})
    spy = Spy(store)
    offsets = OffsetStore(spy, backend.clock)
    results = await asyncio.gather(*(offsets.load("g") for _ in range(10)))
    assert all(r == results[0] for r in results) and len(results[0]) == 5
    assert spy.calls["get"] == 5


@with_store
async def test_read_overlapping_a_write_is_not_trusted(store, backend):
    await OffsetStore(store, backend.clock).commit("g", {("t", 0): co(1)})
    spy = Spy(store)
    offsets = OffsetStore(spy, backend.clock)
    gate = spy.hold_after["get"] = asyncio.Event()
    loading = asyncio.ensure_future(offsets.load("g"))
    await asyncio.sleep(0.05)  # the read has seen t/0 and is held
    await offsets.delete_group("g")
    gate.set()
    assert await loading == {("t", 0): co(1)}  # it read before the delete ...
    assert await offsets.load("g") == {}  # ... so it was installed stale and is read again
    await offsets.commit("g", {("t", 0): co(2)})
    assert await OffsetStore(store, backend.clock).load("g") == {("t", 0): co(2)}


@with_store
async def test_forget_drops_the_cache(store, backend):
    a = OffsetStore(store, backend.clock)
    await a.commit("g", {("t", 0): co(1)})
    b = OffsetStore(store, backend.clock)  # the group moves to another broker ...
    await b.commit("g", {("t", 0): co(2)})
    a.forget("g")  # ... and back
    assert a.cached("g") is None
    assert await a.load("g") == {("t", 0): co(2)}
    await a.commit("g", {("t", 0): co(3)})
    assert await OffsetStore(store, backend.clock).load("g") == {("t", 0): co(3)}


@with_store
async def test_cancelled_callers(store, backend):
    spy = Spy(store)
    offsets = OffsetStore(spy, backend.clock)
    await offsets.commit("g", {("t", 0): co(1)})
    gate = spy.hold_before["multi"] = asyncio.Event()
    in_flight = asyncio.ensure_future(offsets.commit("g", {("t", 0): co(2)}))
    await asyncio.sleep(0.01)
    queued = asyncio.ensure_future(offsets.commit("g", {("t", 1): co(5)}))
    await asyncio.sleep(0.01)
    queued.cancel()  # queued: it still goes ahead
    in_flight.cancel()  # its multi in flight: outcome unknown (here: never sent)
    del spy.hold_before["multi"]
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await in_flight
    await offsets.commit("g", {("t", 2): co(6)})  # queued behind the others: done after them
    expected = {("t", 0): co(1), ("t", 1): co(5), ("t", 2): co(6)}
    assert await OffsetStore(store, backend.clock).load("g") == expected
    assert await offsets.load("g") == expected


@with_store
async def test_forget_all_answers_what_another_coordinator_committed(store, backend):
    """Issue 10, defect 1: broker D held a group's offsets from its term as coordinator; C
    committed since.  After forget_all (coordination moved) D answers C's commit, and a
    commit at D of the value it had cached is written, not skipped as unchanged."""
    d = OffsetStore(store, backend.clock)
    c = OffsetStore(store, backend.clock)
    await d.commit("g", {("t", 0): co(20)})
    await c.commit("g", {("t", 0): co(30)})
    assert (await d.load("g"))[("t", 0)] == co(20)  # its previous term's cache
    d.forget_all()
    assert (await d.load("g"))[("t", 0)] == co(30)
    await c.commit("g", {("t", 0): co(20)})
    d.forget_all()
    await d.commit("g", {("t", 0): co(30)})
    assert (await OffsetStore(store, backend.clock).load("g"))[("t", 0)] == co(30)
