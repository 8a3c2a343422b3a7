"""Full-collection pauses with and without the broker's GC policy (pybroker/gc_policy.py).

    python -m bench.gc_pauses [--objects 2000000]

A process whose event loop runs while a worker thread allocates ``--objects`` long-lived
objects (three tracked objects each, as a partition's state is many small ones), once with
Python's defaults and once with GcPolicy installed, each in a fresh subprocess; prints the
number of full collections, their CPU (thread CPU of the collecting thread) and the longest.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import time


class _Held:
    def __init__(self, i: int) -> None:
        self.i = i
        self.d = {"a": [i]}
        self.me = self


def _child(objects: int, policy: bool) -> dict:
    pauses: list[float] = []
    started = [0.0]

    def timer(phase: str, info: dict) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            started[0] = time.thread_time()
        else:
            pauses.append((time.thread_time() - started[0]) * 1000.0)

    async def main() -> None:
        from pybroker.gc_policy import GcPolicy

        held: list[_Held] = []
        gp = GcPolicy(asyncio.get_running_loop())
        if policy:
            gp.install()
        gc.callbacks.append(timer)
        try:
            await asyncio.to_thread(lambda: held.extend(_Held(i) for i in range(objects)))
        finally:
            gc.callbacks.remove(timer)
            if policy:
                gp.uninstall()

    asyncio.run(main())
    return {
        "full collections": len(pauses),
        "CPU ms": round(sum(pauses)),
        "longest ms": round(max(pauses, default=0.0), 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", type=int, default=2_000_000)
    ap.add_argument("--child", choices=["defaults", "policy"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.objects, args.child == "policy")))
        return 0
    for mode in ("defaults", "policy"):
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.gc_pauses",
                "--objects",
                str(args.objects),
                "--child",
                mode,
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        print(f"{mode:9} {json.loads(out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
