"""A clean shutdown's log close (LogManager.close) at ``n`` partitions, one thread per dir
against num.recovery.threads.per.data.dir threads (issue 27): each log with a few records,
closed (a flush and an fsynced producer-state snapshot each), runs alternating.

    python -m bench.log_close [--partitions 1000] [--threads 1,8] [--rounds 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from pybroker.log.manager import LogManager
from pybroker.log.partition_log import LogConfig
from pybroker.wire.records import build_batch, parse_batches


def one_close(directory: Path, partitions: int, threads: int) -> float:
    """Seconds of LogManager.close over ``partitions`` logs with 10 records each."""
    shutil.rmtree(directory, ignore_errors=True)
    mgr = LogManager(directory, LogConfig())
    mgr.load_all()
    for p in range(partitions):
        plog = mgr.get_or_create(f"t{p // 100:04d}", p % 100)
        buf = bytearray(build_batch([(None, b"v" * 100, [])] * 10, timestamp=1))
        plog.append(buf, parse_batches(buf))
        plog.high_watermark = plog.log_end_offset
    t0 = time.perf_counter()
    mgr.close(threads_per_dir=threads)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--threads", default="1,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", help="where the log dir goes (default: a temporary dir)")
    args = ap.parse_args(argv)
    base = Path(args.dir or tempfile.mkdtemp(prefix="log-close-"))
    counts = [int(t) for t in args.threads.split(",")]
    times: dict[int, list[float]] = {t: [] for t in counts}
    try:
        for _ in range(args.rounds):
            for t in counts:
                load = Path("/proc/loadavg").read_text().split()[0]
                took = one_close(base / "logs", args.partitions, t)
                times[t].append(took)
                print(f"{args.partitions} partitions, {t} thread(s): {took:.2f} s (load {load})")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    for t, ts in times.items():
        print(f"{t} thread(s): median {sorted(ts)[len(ts) // 2]:.2f} s of {len(ts)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
