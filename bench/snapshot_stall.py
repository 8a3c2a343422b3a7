"""The event loop's longest stall during one LocalStore snapshot rotation (issue 27).

    python -m bench.snapshot_stall [--partitions 10000,100000] [--trials 2] [--tree OLD_TREE]
                                   [--count]

Each run is a fresh process (its ``pybroker`` imported from ``--tree`` for the old code, from
this worktree for the new; runs alternate old/new) that fills an embedded metadata store with
W21's znodes for ``n`` partitions (topics of 100: /brokers/topics/<t> with its assignment,
.../partitions, .../partitions/<p>, .../partitions/<p>/state, /config/topics/<t>), then, with a
task writing partition states back to back and a probe task sleeping 1 ms at a time on the
loop, calls ``_rotate()`` and waits for its snapshot job.  Prints per run: the longest gap the
probe saw beyond its 1 ms (the loop's longest stall) before and during the rotation, the time
``_rotate()`` itself held the loop, the rotation's wall time until the snapshot is renamed, the
writes answered meanwhile, the process CPU of the rotation, the full garbage collections (any
thread's) meanwhile and the longest, the snapshot's bytes and znodes.

``--count``: fill the store with its default ``snapshot_bytes`` instead, then write every
partition's state three times, and count the rotations each part triggers and the znodes they
encoded (how the trigger's rate follows the tree).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
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


async def _fill(s, partitions: int, create, config: bytes) -> list[str]:  # noqa: ANN001
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
        ops.append(create(f"/config/topics/topic-{t:05d}", config))
        await s.multi(ops)
    return states


def _child(partitions: int) -> dict:
    from pybroker.coord.metadata.local import LocalStore
    from pybroker.coord.metadata.store import Create

    async def main() -> dict:
        with tempfile.TemporaryDirectory(prefix="snapshot-stall-") as d:
            s = LocalStore(d, snapshot_bytes=1 << 40)
            await s.start()
            config = b'{"version":1,"config":{}}'
            states = await _fill(s, partitions, Create, config)
            stop = False
            measuring = [False]
            stall = {"before": 0.0, "during": 0.0}
            writes = [0]

            async def probe() -> None:
                last = time.perf_counter()
                while not stop:
                    await asyncio.sleep(0.001)
                    now = time.perf_counter()
                    key = "during" if measuring[0] else "before"
                    stall[key] = max(stall[key], now - last - 0.001)
                    last = now

            async def writer() -> None:
                rnd = random.Random(1)
                while not stop:
                    await s.set(rnd.choice(states), _state(rnd.randrange(3), writes[0]))
                    if measuring[0]:
                        writes[0] += 1
                    await asyncio.sleep(0)

            full_gcs: list[float] = []
            gc_start = [0.0]

            def gc_timer(phase: str, info: dict) -> None:
                if info["generation"] == 2 and measuring[0]:
                    if phase == "start":
                        gc_start[0] = time.perf_counter()
                    else:
                        full_gcs.append(time.perf_counter() - gc_start[0])

            gc.callbacks.append(gc_timer)
            tasks = [asyncio.create_task(probe()), asyncio.create_task(writer())]
            await asyncio.sleep(1.0)
            cpu0, t0 = time.process_time(), time.perf_counter()
            measuring[0] = True
            s._rotate()
            held = time.perf_counter() - t0
            await asyncio.wrap_future(s._snapshot_job)
            wall = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
            measuring[0] = False
            stop = True
            await asyncio.gather(*tasks)
            out = {
                "znodes": len(s._nodes),
                "snapshot bytes": (Path(d) / "snapshot").stat().st_size,
                "stall before ms": round(stall["before"] * 1000, 1),
                "stall during ms": round(stall["during"] * 1000, 1),
                "_rotate() ms": round(held * 1000, 1),
                "rotation wall ms": round(wall * 1000, 1),
                "rotation CPU ms": round(cpu * 1000, 1),
                "writes during": writes[0],
                "full GCs during (longest ms)": [
                    len(full_gcs),
                    round(max(full_gcs, default=0.0) * 1000, 1),
                ],
            }
            await s.close()
            return out

    return asyncio.run(main())


def _child_count(partitions: int) -> dict:
    """Fill the store with its default snapshot_bytes and count the rotations the fill makes
    (the trigger's rate as the tree grows) and the znodes each rotation encoded."""
    from pybroker.coord.metadata.local import LocalStore
    from pybroker.coord.metadata.store import Create

    async def main() -> dict:
        with tempfile.TemporaryDirectory(prefix="snapshot-stall-") as d:
            s = LocalStore(d)
            await s.start()
            encoded: list[int] = []
            rotate = s._rotate

            def counted() -> None:
                encoded.append(len(s._nodes))
                rotate()

            s._rotate = counted
            states = await _fill(s, partitions, Create, b'{"version":1,"config":{}}')
            filled = (len(encoded), sum(encoded))
            for rounds in range(3):  # three leader changes of every partition
                for path in states:
                    await s.set(path, _state(rounds % 3, rounds + 1))
            await s.close()
            return {
                "znodes": len(s._nodes),
                "fill: rotations, znodes encoded": filled,
                "3 state writes a partition: rotations, znodes encoded": (
                    len(encoded) - filled[0],
                    sum(encoded) - filled[1],
                ),
            }

    return asyncio.run(main())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", default="10000,100000")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--tree", help="an old worktree to compare with (alternated)")
    ap.add_argument("--count", action="store_true", help="count the rotations of a fill instead")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps((_child_count if args.count else _child)(args.child)))
        return 0
    trees = [("new", str(HERE.parent.parent))]
    if args.tree:
        trees.insert(0, ("old", args.tree))
    for trial in range(args.trials):
        for n in (int(x) for x in args.partitions.split(",")):
            for name, tree in trees if trial % 2 == 0 else trees[::-1]:
                env = dict(os.environ, PYTHONPATH=tree)
                load = os.getloadavg()[0]
                out = subprocess.run(
                    [sys.executable, str(HERE), "--child", str(n)]
                    + (["--count"] if args.count else []),
                    check=True,
                    capture_output=True,
                    text=True,
                    env=env,
                ).stdout
                print(f"{n:7} {name:3} load {load:5.2f} {json.loads(out)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
