"""LocalStore's per-session and per-event work on the event loop as the tree grows (issue 27).

    python -m bench.session_scan [--partitions 10000,100000] [--trials 2] [--tree OLD_TREE]
                                 [--sessions 20] [--watches 10000]

Each run is a fresh process (its ``pybroker`` imported from ``--tree`` for the old code, from
this worktree for the new; runs alternate old/new) that fills an embedded metadata store with
W21's znodes for ``n`` partitions (bench/snapshot_stall.py's layout: topics of 100, 2 znodes a
partition and 3 a topic) plus one long-lived session's ephemeral, with a probe task sleeping
1 ms at a time on the loop, then:

* sessions: ``--sessions`` times what the store server does for a broker process that
  connects, registers and goes away: ``new_session()``, one ephemeral created for it,
  ``end_session()``; the time each call held the loop (median, max), the process CPU per
  session, the probe's longest stall meanwhile;
* rotations: three ``_rotate()`` calls, each waited for: the time ``_rotate()`` held the loop
  (median, max) and the probe's longest stall;
* watches: a RemoteStore client served by a StoreServer (a Unix socket, in this process)
  watches ``min(n, --watches)`` partition states, then every one is written (in a shuffled
  order, as leaderships move): the process CPU
  from the first write until the client has heard every event, and the probe's longest stall.

The long-lived session's ephemeral must survive every other session's end (checked).  Last,
the store is closed and started again: ``start()``'s wall and CPU seconds (the snapshot's
decode, the ephemerals' index, their expiry and a fresh snapshot, on the io thread).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def _state(leader: int, epoch: int) -> bytes:
    return json.dumps(
        {"controller_epoch": 1, "leader": leader, "version": 1, "leader_epoch": epoch, "isr": [1]},
        separators=(",", ":"),
    ).encode()


async def _fill(s, partitions: int, create) -> list[str]:  # noqa: ANN001
    """W21's znodes, as bench/snapshot_stall.py lays them out (copied: a child imports its
    ``pybroker`` from either tree, and this module from this one)."""
    await s.ensure_path("/brokers/topics")
    await s.ensure_path("/config/topics")
    states = []
    for t in range((partitions + 99) // 100):
        topic = f"/brokers/topics/topic-{t:05d}"
        count = min(100, partitions - t * 100)
        assignment = json.dumps(
            {"partitions": {str(p): [1] for p in range(count)}, "topic_id": "x" * 22, "version": 3}
        ).encode()
        ops = [create(topic, assignment), create(f"{topic}/partitions", b"")]
        for p in range(count):
            ops.append(create(f"{topic}/partitions/{p}", b""))
            ops.append(create(f"{topic}/partitions/{p}/state", _state(1, 0)))
            states.append(f"{topic}/partitions/{p}/state")
        ops.append(create(f"/config/topics/topic-{t:05d}", b'{"version":1,"config":{}}'))
        await s.multi(ops)
    return states


def _ms(seconds: list[float]) -> list[float]:
    return [round(statistics.median(seconds) * 1000, 2), round(max(seconds) * 1000, 2)]


def _child(partitions: int, sessions: int, watches: int) -> dict:
    from pybroker.coord.metadata.local import LocalStore
    from pybroker.coord.metadata.remote import RemoteStore
    from pybroker.coord.metadata.store import Create
    from pybroker.coord.metadata.store_server import StoreServer

    async def main() -> dict:
        with tempfile.TemporaryDirectory(prefix="session-scan-") as d:
            s = LocalStore(Path(d) / "meta", snapshot_bytes=1 << 40)
            await s.start()
            states = await _fill(s, partitions, Create)
            await s.ensure_path("/brokers/ids")
            keeper = s.new_session()
            await s.commit_for(keeper, [Create("/brokers/ids/0", b"keeper", ephemeral=True)])
            stop = False
            phase = ["idle"]
            stall: dict[str, float] = {}

            async def probe() -> None:
                last = time.perf_counter()
                while not stop:
                    await asyncio.sleep(0.001)
                    now = time.perf_counter()
                    stall[phase[0]] = max(stall.get(phase[0], 0.0), now - last - 0.001)
                    last = now

            probe_task = asyncio.create_task(probe())
            await asyncio.sleep(0.5)
            out: dict = {"znodes": len(s._nodes)}

            phase[0] = "sessions"
            starts, ends = [], []
            cpu0 = time.process_time()
            for i in range(sessions):
                t0 = time.perf_counter()
                sid = s.new_session()
                starts.append(time.perf_counter() - t0)
                await s.commit_for(sid, [Create(f"/brokers/ids/{i + 1}", b"b", ephemeral=True)])
                await asyncio.sleep(0.002)
                t0 = time.perf_counter()
                await s.end_session(sid)  # (never suspends: its scan and commit hold the loop)
                ends.append(time.perf_counter() - t0)
                await asyncio.sleep(0.002)
            cpu = time.process_time() - cpu0
            assert await s.get_children("/brokers/ids") == ["0"]
            out["new_session ms (median, max)"] = _ms(starts)
            out["end_session ms (median, max)"] = _ms(ends)
            out["CPU ms a session"] = round(cpu * 1000 / sessions, 2)

            phase[0] = "rotations"
            held = []
            for _ in range(3):
                t0 = time.perf_counter()
                s._rotate()
                held.append(time.perf_counter() - t0)
                await asyncio.wrap_future(s._snapshot_job)
                await s.set("/brokers/ids", b"")  # drops the finished rotation's view
            out["_rotate() ms (median, max)"] = _ms(held)

            phase[0] = "idle2"
            socket_dir = tempfile.mkdtemp(prefix="pbs-")
            server = StoreServer(s, Path(socket_dir) / "s.sock")
            await server.start()
            client = RemoteStore(Path(socket_dir) / "s.sock")
            await client.start()
            watched = states[:watches]
            heard = [0]
            all_heard = asyncio.Event()

            def on_event(_event) -> None:  # noqa: ANN001
                heard[0] += 1
                if heard[0] == len(watched):
                    all_heard.set()

            for k in range(0, len(watched), 500):
                await asyncio.gather(*(client.get(p, watch=on_event) for p in watched[k : k + 500]))
            await asyncio.sleep(0.5)
            phase[0] = "watches"
            cpu0, t0 = time.process_time(), time.perf_counter()
            for path in random.Random(1).sample(watched, len(watched)):  # any order
                await s.set(path, _state(2, 1))
                await asyncio.sleep(0)  # (a set never suspends: let the server send)
            await all_heard.wait()
            out["watches: fired"] = heard[0]
            out["watches: CPU s"] = round(time.process_time() - cpu0, 2)
            out["watches: wall s"] = round(time.perf_counter() - t0, 2)
            await client.close()
            await server.stop()
            os.rmdir(socket_dir)
            stop = True
            await probe_task
            out["stall ms (idle, sessions, rotations, watches)"] = [
                round(stall.get(k, 0.0) * 1000, 1)
                for k in ("idle", "sessions", "rotations", "watches")
            ]
            assert (await s.get("/brokers/ids/0"))[0] == b"keeper"
            await s.close()
            s = LocalStore(Path(d) / "meta", snapshot_bytes=1 << 40)
            cpu0, t0 = time.process_time(), time.perf_counter()
            await s.start()  # the snapshot's decode, the index, the keeper's expiry, a snapshot
            out["restart: start() wall s, CPU s"] = [
                round(time.perf_counter() - t0, 2),
                round(time.process_time() - cpu0, 2),
            ]
            assert await s.get_children("/brokers/ids") == []
            await s.close()
            return out

    return asyncio.run(main())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", default="10000,100000")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--tree", help="an old worktree to compare with (alternated)")
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--watches", type=int, default=10000)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.sessions, args.watches)))
        return 0
    trees = [("new", str(HERE.parent.parent))]
    if args.tree:
        trees.insert(0, ("old", args.tree))
    for trial in range(args.trials):
        for n in (int(x) for x in args.partitions.split(",")):
            for name, tree in trees if trial % 2 == 0 else trees[::-1]:
                env = dict(os.environ, PYTHONPATH=tree)
                load = os.getloadavg()[0]
                cmd = [sys.executable, str(HERE), "--child", str(n)]
                cmd += ["--sessions", str(args.sessions), "--watches", str(args.watches)]
                out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
                print(f"{n:7} {name:3} load {load:5.2f} {json.loads(out.stdout)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
