"""LocalStore's sessions (coord/metadata/local.py, docs/internals.md): each session's ephemerals
are kept by session, so a session's start and end, and a snapshot rotation, cost what the
session owns (or nothing), never a walk of the whole tree; what clients see stays ZooKeeper's:
a session's end removes its ephemerals and only its, across rotations and restarts, and a
snapshot taken while the tree changes is the tree as of its txid, byte for byte."""

from __future__ import annotations

import asyncio
import random
import tempfile
import threading
from pathlib import Path

import pytest

from pybroker.coord.metadata.local import LocalStore
from pybroker.coord.metadata.local_format import encode_snapshot
from pybroker.coord.metadata.remote import RemoteStore
from pybroker.coord.metadata.store import (
    Create,
    Delete,
    NodeExistsError,
    NoNodeError,
    SetData,
    StoreError,
)
from pybroker.coord.metadata.store_server import StoreServer


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120), debug=True)


class NoScan(dict):
    """A node table that refuses to be walked: a session's start or end, or a rotation, that
    scans every znode fails here."""

    def _walked(self, *args, **kwargs):
        raise AssertionError("the whole node table was walked")

    __iter__ = keys = values = items = copy = _walked


async def _visible(s: LocalStore) -> dict[str, tuple[bytes, int]]:
    """/e's children as a client reads them: name -> (data, ephemeral owner)."""
    out = {}
    for name in await s.get_children("/e"):
        data, stat = await s.get(f"/e/{name}")
        out[name] = (data, stat.ephemeral_owner)
    return out


async def _hold_io_thread(s: LocalStore) -> threading.Event:
    """Park the store's io thread (its one worker) so the next snapshot job waits."""
    gate, parked = threading.Event(), threading.Event()

    def park() -> None:
        parked.set()
        gate.wait(60)

    s._executor.submit(park)
    assert await asyncio.get_running_loop().run_in_executor(None, parked.wait, 60)
    return gate


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_session_ends_with_only_its_own_ephemerals_across_rotations_and_restarts(tmp_path, seed):
    """Sessions create, delete (their own and others') and fail to create ephemerals (undone
    multis), end, and the store rotates (its encoder sometimes held while the churn goes on)
    and restarts; after every step the clients' view of /e is the model's: an ended session's
    ephemerals are all gone, every other one is there with its owner, and a restart leaves
    only the persistent nodes."""
    rnd = random.Random(seed)

    async def main() -> None:
        s = LocalStore(tmp_path, snapshot_bytes=2_000)
        await s.start()
        await s.multi([Create("/e"), Create("/e/base", b"persistent")])
        model: dict[str, tuple[bytes, int]] = {"base": (b"persistent", 0)}
        sessions: list[int] = []
        gate: threading.Event | None = None
        made = 0
        try:
            for step in range(400):
                roll = rnd.random()
                if roll < 0.1 or not sessions:
                    sessions.append(s.new_session())
                    assert sessions[-1] not in sessions[:-1] + [s.session_id]
                elif roll < 0.45:
                    sid = rnd.choice(sessions + [s.session_id])
                    name = f"n{made:04d}"
                    made += 1
                    await s.commit_for(sid, [Create(f"/e/{name}", b"%d" % step, ephemeral=True)])
                    model[name] = (b"%d" % step, sid)
                elif roll < 0.55:
                    sid = rnd.choice(sessions)
                    taken = rnd.choice(sorted(model))
                    with pytest.raises(NodeExistsError):  # the create is undone with the multi
                        await s.commit_for(
                            sid,
                            [Create(f"/e/u{step}", ephemeral=True), Create(f"/e/{taken}")],
                        )
                elif roll < 0.65 and len(model) > 1:
                    name = rnd.choice(sorted(set(model) - {"base"}))
                    if rnd.random() < 0.5:  # a delete undone by a failed multi, then a real one
                        with pytest.raises(NoNodeError):
                            await s.multi([Delete(f"/e/{name}"), SetData("/e/missing", b"")])
                    await s.delete(f"/e/{name}")
                    del model[name]
                elif roll < 0.8:
                    sid = sessions.pop(rnd.randrange(len(sessions)))
                    await s.end_session(sid)
                    model = {k: v for k, v in model.items() if v[1] != sid}
                elif roll < 0.9:
                    if gate is None and (s._snapshot_job is None or s._snapshot_job.done()):
                        gate = await _hold_io_thread(s)
                        s._rotate()
                    elif gate is not None:
                        gate.set()
                        await asyncio.wrap_future(s._snapshot_job)
                        gate = None
                elif gate is None:
                    await s.close()  # its own ephemerals go at close, the others' at the load
                    s = LocalStore(tmp_path, snapshot_bytes=2_000)
                    await s.start()
                    model = {k: v for k, v in model.items() if v[1] == 0}
                    sessions = []
                assert await _visible(s) == model, f"step {step}"
        finally:  # (a failed step must not leave the io thread parked)
            if gate is not None:
                gate.set()
        await s.close()
        s = LocalStore(tmp_path)
        await s.start()
        assert await _visible(s) == {k: v for k, v in model.items() if v[1] == 0}
        await s.close()

    run(main())


def test_session_start_end_and_rotation_never_walk_the_whole_tree(tmp_path):
    """new_session, end_session, close and _rotate touch what the session owns (or nothing):
    with a node table that refuses to be walked, they all work, and what they did is what a
    client sees, after a restart too."""

    async def main() -> None:
        s = LocalStore(tmp_path, snapshot_bytes=1 << 30)
        await s.start()
        await s.multi([Create("/e")] + [Create(f"/p{i}", b"x") for i in range(200)])
        s._nodes = NoScan(s._nodes)
        a, b = s.new_session(), s.new_session()
        await s.commit_for(a, [Create("/e/a1", ephemeral=True), Create("/e/a2", ephemeral=True)])
        await s.commit_for(b, [Create("/e/b1", ephemeral=True)])
        await s.create("/e/mine", ephemeral=True)
        s._rotate()
        await s.set("/p0", b"during")
        await s.end_session(a)
        assert await s.get_children("/e") == ["b1", "mine"]
        await asyncio.wrap_future(s._snapshot_job)
        await s.set("/p1", b"after")  # the finished rotation's view is dropped here
        await s.end_session(b)
        assert await s.get_children("/e") == ["mine"]
        await s.close()
        assert await _reopened_children(tmp_path) == []

    async def _reopened_children(path: Path) -> list[str]:
        s = LocalStore(path)
        await s.start()
        try:
            assert (await s.get("/p0"))[0] == b"during"
            return await s.get_children("/e")
        finally:
            await s.close()

    run(main())


def test_a_snapshot_taken_while_the_tree_changes_is_the_tree_as_of_its_txid(tmp_path):
    """Every kind of change made while the snapshot waits for its io thread (sets, creates
    and deletes, ephemerals and a session's end, undone multis, a node deleted and created
    again) leaves the snapshot's bytes those of the tree at the rotation."""

    async def main() -> None:
        s = LocalStore(tmp_path, snapshot_bytes=1 << 30)
        await s.start()
        await s.multi([Create("/t", b"t")] + [Create(f"/t/n{i}", b"%d" % i) for i in range(50)])
        sid = s.new_session()
        await s.commit_for(sid, [Create("/t/n3/e", b"eph", ephemeral=True)])
        gate = await _hold_io_thread(s)
        expected = encode_snapshot(s._txid, s._nodes)
        s._rotate()
        await s.set("/t/n0", b"changed")
        await s.create("/t/n1/child", b"new")
        await s.delete("/t/n2")
        await s.create("/t/n2", b"again")
        await s.end_session(sid)
        with pytest.raises(StoreError):
            await s.multi([Delete("/t/n4"), SetData("/t", b"t2"), Create("/t/n5")])
        await s.commit_for(s.new_session(), [Create("/t/seq-", ephemeral=True, sequence=True)])
        await s.multi([Delete("/t/n6"), Create("/t/n6", b"six"), SetData("/t/n6", b"6")])
        gate.set()
        await asyncio.wrap_future(s._snapshot_job)
        assert (tmp_path / "snapshot").read_bytes() == expected
        await s.close()

    run(main())


def test_a_broker_process_going_away_takes_only_its_ephemerals(tmp_path):
    """Through the store server: three clients (sessions) register ephemerals, sequential
    ones too, and watch each other's; one goes away: its nodes go (its watchers told), the
    others' stay; its own pending watches do not outlive it."""

    async def main() -> None:
        store = LocalStore(tmp_path / "meta")
        await store.start()
        sock_dir = Path(tempfile.mkdtemp(prefix="pybroker-test-"))
        server = StoreServer(store, sock_dir / "store.sock")
        await server.start()
        clients = [RemoteStore(server.socket_path) for _ in range(3)]
        try:
            for i, c in enumerate(clients):
                await c.start()
                await c.create(f"/brokers/ids/{i}", b"%d" % i, ephemeral=True, makepath=True)
                await c.create(f"/seq/{i}-", ephemeral=True, sequence=True, makepath=True)
            gone = []
            await clients[0].exists("/brokers/ids/1", watch=gone.append)
            for k in range(50):  # pending watches of the session that goes away
                await clients[1].exists(f"/nowhere/{k}", watch=lambda e: None)
            await clients[1].close()
            for _ in range(100):
                if gone:
                    break
                await asyncio.sleep(0.02)
            assert [e.path for e in gone] == ["/brokers/ids/1"]
            assert await clients[2].get_children("/brokers/ids") == ["0", "2"]
            assert sorted(n[0] for n in await clients[0].get_children("/seq")) == ["0", "2"]
            assert not store._data_watches.keys() & {f"/nowhere/{k}" for k in range(50)}
        finally:
            for c in clients:
                await c.close()
            await server.stop()
            sock_dir.rmdir()
        assert store._ephemerals == {}
        await store.close()

    run(main())
