"""The periodic recovery-point work (``HostedLogs.checkpoint_loop``, every
log.flush.offset.checkpoint.interval.ms) with ``n`` logs written since the last one (issue 27,
flush27): the process's CPU seconds (every thread) and wall seconds of one pass, for each tree
given, the trees alternating in each round.  A tree's own ``checkpoint_loop`` runs (with
PYTHONPATH at that tree): until session 13 it flushed every written log (``flush_all``); now
it writes the checkpoint files only (Kafka's checkpointLogRecoveryOffsets).

    python -m bench.checkpoint_work --trees OLD,NEW [--logs 10000] [--rounds 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def one_pass(directory: Path, logs: int) -> dict:
    """In the child (PYTHONPATH = the tree): ``logs`` logs with a leader's batch each (their
    segment, leader-epoch checkpoint and directory written since the last pass), then one
    pass of the tree's checkpoint_loop."""
    import pybroker
    from pybroker.hosted_logs import HostedLogs
    from pybroker.log.checkpoints import RECOVERY_POINT_CHECKPOINT
    from pybroker.log.manager import LogManager
    from pybroker.log.partition_log import LogConfig
    from pybroker.wire.records import build_batch, parse_batches

    shutil.rmtree(directory, ignore_errors=True)
    mgr = LogManager(directory, LogConfig())
    mgr.load_all()
    for p in range(logs):
        plog = mgr.get_or_create(f"t{p // 100:04d}", p % 100)
        buf = bytearray(build_batch([(None, b"v" * 100, [])] * 10, timestamp=1))
        plog.append(buf, parse_batches(buf), leader_epoch=1)
        plog.high_watermark = plog.log_end_offset
    mgr.epoch_writer.stop()  # (the new logs' epoch files written: not the pass's work)
    checkpoint = directory / RECOVERY_POINT_CHECKPOINT
    checkpoint.unlink(missing_ok=True)  # (the pass ends once it wrote it again)
    os.sync()

    async def run() -> tuple[float, float]:
        owner = SimpleNamespace(
            config=SimpleNamespace(log_flush_offset_checkpoint_interval_ms=0), logs=mgr
        )
        cpu0, t0 = _cpu(), time.perf_counter()
        task = asyncio.create_task(HostedLogs.checkpoint_loop(owner))  # type: ignore[arg-type]
        while not checkpoint.exists():
            await asyncio.sleep(0.001)
        wall, cpu = time.perf_counter() - t0, _cpu() - cpu0
        task.cancel()
        return cpu, wall

    cpu, wall = asyncio.run(run())
    rp = sum(lg.recovery_point for lg in mgr.logs.values())
    return {"tree": str(Path(pybroker.__file__).parents[1]), "cpu_s": cpu, "wall_s": wall, "rp": rp}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trees", required=True, help="comma-separated checkouts (old,new)")
    ap.add_argument("--logs", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    base = Path(args.dir or tempfile.mkdtemp(prefix="checkpoint-work-"))
    if args.child:
        print(json.dumps(one_pass(base, args.logs)))
        return 0
    results: dict[str, list[dict]] = {}
    for _ in range(args.rounds):
        for tree in args.trees.split(","):
            out = subprocess.run(
                [sys.executable, __file__, "--child", "--trees", tree]
                + ["--logs", str(args.logs), "--dir", str(base / "logs")],
                env=dict(os.environ, PYTHONPATH=tree),
                capture_output=True,
                text=True,
                check=True,
            )
            r = json.loads(out.stdout.strip().splitlines()[-1])
            results.setdefault(tree, []).append(r)
            print(
                f"{tree}: {args.logs} logs: cpu {r['cpu_s']:.3f} s, wall {r['wall_s']:.3f} s,"
                f" recovery points sum {r['rp']}  (load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
