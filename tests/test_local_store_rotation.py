"""LocalStore's snapshot rotation (coord/metadata/local.py, docs/internals.md): the snapshot is
encoded and written off the event loop from a copy-on-write view of the tree, and a kill -9 at
any point of a rotation recovers every acknowledged write, racing writes included."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import signal
import subprocess
import sys
import threading

import pytest

from pybroker.coord.metadata import local_format
from pybroker.coord.metadata.local import LocalStore
from pybroker.coord.metadata.local_format import SnapshotView, decode_snapshot
from pybroker.coord.metadata.store import Create, Delete, NodeExistsError, SetData

# The child: fill a store until a rotation starts, hold the io thread at PHASE (mid-encoding:
# in the first node name the encoder joins off the loop; "raced": the same, released after the
# racing writes and waited for; "renamed": after the new snapshot's rename, before the old
# journals' unlink; "done": not held, the rotation finished), make writes that race it (sets,
# creates and deletes of nodes the snapshot holds, under parents it holds), print the tree it
# acknowledged, then kill -9 itself.
CHILD = """
import asyncio, json, os, signal, sys, threading
from pybroker.coord.metadata import local, local_format
from pybroker.coord.metadata.local import LocalStore
from pybroker.coord.metadata.store import Create, Delete, NodeExistsError, SetData

PHASE = sys.argv[2]
held, gate, armed = threading.Event(), threading.Event(), [False]
loop_thread = threading.current_thread()
real_join, real_fsync_dir = local_format.join, local._fsync_dir


def join(parent, child):
    if PHASE in ("encoding", "raced") and armed[0] and threading.current_thread() is not loop_thread:
        armed[0] = False
        held.set()
        gate.wait()
    return real_join(parent, child)


def fsync_dir(directory):
    real_fsync_dir(directory)
    if PHASE == "renamed" and armed[0] and threading.current_thread() is not loop_thread:
        armed[0] = False
        held.set()
        gate.wait()


local_format.join, local._fsync_dir = join, fsync_dir


def tree(s):
    return {
        p: [n.data.hex(), n.version, n.cversion, n.ctime, n.mtime, sorted(n.children)]
        for p, n in s._nodes.items()
    }


async def main():
    s = LocalStore(sys.argv[1], snapshot_bytes=40_000, fsync_interval_ms=60_000)
    await s.start()
    armed[0] = True
    await s.create("/t")
    await s.create("/u")
    i = 0
    while s._snapshot_job is None:
        await s.create(f"/t/n{i:05d}", b"d%d" % i * 8)
        i += 1
    job = s._snapshot_job
    if PHASE == "done":
        await asyncio.wrap_future(job)
    else:
        assert await asyncio.get_running_loop().run_in_executor(None, held.wait, 60)
    for k in range(0, i - 1, 7):
        await s.set(f"/t/n{k:05d}", b"racing %d" % k)
        await s.create(f"/t/n{k:05d}/c")
        await s.multi([Delete(f"/t/n{k + 1:05d}"), Create(f"/u/r{k:05d}", b"r"), SetData("/u", b"%d" % k)])
    assert job.done() == (PHASE == "done")
    if PHASE == "raced":  # the snapshot finished after the racing writes: recovery starts from it
        gate.set()
        await asyncio.wrap_future(job)
    sys.stdout.write(json.dumps(tree(s)))
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


asyncio.run(main())
"""


async def _tree(s: LocalStore) -> dict:
    """The whole tree as a client reads it (get_children/get from "/"), in the child's terms."""
    out = {}
    stack = ["/"]
    while stack:
        path = stack.pop()
        data, stat = await s.get(path)
        children = await s.get_children(path)
        out[path] = [data.hex(), stat.version, stat.cversion, stat.ctime, stat.mtime, children]
        stack.extend(path.rstrip("/") + "/" + c for c in children)
    return out


@pytest.mark.parametrize("phase", ["encoding", "raced", "renamed", "done"])
def test_kill_9_during_a_rotation_keeps_every_acknowledged_write(tmp_path, phase):
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), phase],
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    acknowledged = json.loads(done.stdout)
    assert len(acknowledged) > 500
    if phase == "encoding":
        assert (tmp_path / "snapshot.tmp").exists()  # killed before the snapshot was complete

    async def main() -> None:
        s = LocalStore(tmp_path)
        await s.start()
        assert await _tree(s) == acknowledged
        await s.close()

    asyncio.run(main(), debug=True)


def test_a_rotation_encodes_off_the_loop_and_the_loop_answers_meanwhile(tmp_path, monkeypatch):
    """The encoder (held in its first node name, wherever it runs) must not run on the loop's
    thread; while it is held the store answers reads and writes, which land in the new journal
    and not in the snapshot being written."""
    loop_thread = threading.current_thread()
    encoders: list[threading.Thread] = []
    held, gate = threading.Event(), threading.Event()
    real_join = local_format.join

    def join(parent: str, child: str) -> str:
        me = threading.current_thread()
        if not encoders:
            encoders.append(me)
            if me is not loop_thread:
                held.set()
                gate.wait(60)
        return real_join(parent, child)

    async def main() -> None:
        s = LocalStore(tmp_path, snapshot_bytes=20_000)
        await s.start()
        await s.create("/t")
        monkeypatch.setattr(local_format, "join", join)
        i = 0
        while s._snapshot_job is None:
            await s.create(f"/t/n{i:04d}", b"x" * 40)
            i += 1
        job = s._snapshot_job
        try:
            if not encoders:  # not encoded on the loop (yet): wait for the io thread
                loop = asyncio.get_running_loop()
                assert await loop.run_in_executor(None, held.wait, 60)
            assert encoders[0] is not loop_thread, "encoded on the event loop"
            # the rotation has started and not ended: the loop answers
            assert (await s.get("/t/n0000"))[0] == b"x" * 40
            await s.set("/t/n0000", b"after")
            await s.create("/t/during")
            await s.delete("/t/n0001")
            assert await s.exists("/t/n0001") is None
            assert not job.done()
        finally:
            gate.set()
        await asyncio.wrap_future(job)
        txid, snap = decode_snapshot((tmp_path / "snapshot").read_bytes(), "snapshot")
        assert txid == s._txid - 3  # the tree as of the rotation's start
        assert snap["/t/n0000"].data == b"x" * 40 and snap["/t/n0000"].version == 0
        assert "/t/n0001" in snap and "/t/during" not in snap
        assert len(snap["/t"].children) == i
        await s.close()

        s = LocalStore(tmp_path)
        await s.start()
        assert (await s.get("/t/n0000"))[0] == b"after"
        assert await s.exists("/t/during") is not None
        assert await s.exists("/t/n0001") is None
        assert len(await s.get_children("/t")) == i
        await s.close()

    asyncio.run(main(), debug=True)


def test_copy_on_write_keeps_the_frozen_view(tmp_path):
    """Every kind of change made while a snapshot's view is frozen (and undone by a failed
    multi) leaves the frozen view as it was and the live tree as a store without a snapshot
    would have it."""

    async def main() -> None:
        s = LocalStore(tmp_path / "a", snapshot_bytes=1 << 30)
        plain = LocalStore(tmp_path / "b", snapshot_bytes=1 << 30)
        for st in (s, plain):
            await st.start()
            await st.multi([Create("/p", b"p"), Create("/p/a", b"a"), Create("/p/b", b"b")])
        # as _rotate leaves it: the view frozen, its (here never finishing) writer pending
        s._frozen = frozen = SnapshotView(s._nodes)
        s._snapshot_job = concurrent.futures.Future()
        before = {p: (n.data, n.version, n.cversion, sorted(n.children)) for p, n in frozen.items()}
        for st in (s, plain):
            await st.set("/p/a", b"a2")
            await st.create("/p/c", b"c")
            await st.delete("/p/b")
            with pytest.raises(NodeExistsError):
                await st.multi([SetData("/p", b"p2"), Delete("/p/c"), Create("/p/a")])
            await st.create("/p/b", b"b2")
        after = {p: (n.data, n.version, n.cversion, sorted(n.children)) for p, n in frozen.items()}
        assert after == before
        untimed = [{p: v[:3] + v[5:] for p, v in (await _tree(st)).items()} for st in (s, plain)]
        assert untimed[0] == untimed[1]
        assert s._frozen is frozen
        for st in (s, plain):
            await st.close()

    asyncio.run(main(), debug=True)
