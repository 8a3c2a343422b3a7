"""Scale benchmarks W21-W24 (issue 27): pybroker beside Apache Kafka 3.9 at Kafka's upper limits.

    python -m bench.scale [--workloads W21,W22,W23,W24] [--sizes 1000,10000,100000]
                          [--targets pybroker,kafka] [--results FILE] [--keep DIR]

The workloads: bench/scale/partitions.py (W21), failover.py (W22), connections.py (W23),
groups.py (W24); what they share: harness.py.  Every figure goes to ``--results`` (default
bench/results/<date>-scale.md) with the command, the load average before and after, and the
machine.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.scale import harness
from bench.scale.connections import run_w23
from bench.scale.failover import run_w22
from bench.scale.groups import run_w24
from bench.scale.harness import (
    ROOT,
    Results,
    loadavg,
)
from bench.scale.partitions import run_w21

WORKLOADS = {"W21": run_w21, "W22": run_w22, "W23": run_w23, "W24": run_w24}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="W21,W22,W23,W24")
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--targets", default="pybroker,kafka")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--workdir")
    ap.add_argument("--results")
    ap.add_argument("--keep", action="store_true", help="keep the brokers' dirs and logs")
    ap.add_argument(
        "--profile", help="py-spy (raw) profiles of pybroker processes per step into DIR"
    )
    args = ap.parse_args(argv)
    harness.KEEP = args.keep
    harness.PROFILE_DIR = Path(args.profile) if args.profile else None
    if harness.PROFILE_DIR:
        harness.PROFILE_DIR.mkdir(parents=True, exist_ok=True)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="scale-"))
    workdir.mkdir(parents=True, exist_ok=True)
    date = dt.date.today().isoformat()
    path = Path(args.results) if args.results else ROOT / "bench" / "results" / f"{date}-scale.md"
    res = Results(path)
    cmd = "python -m bench.scale " + " ".join(argv if argv is not None else sys.argv[1:])
    load0 = loadavg()
    try:
        for wid in args.workloads.split(","):
            for size in [int(s) for s in args.sizes.split(",")]:
                WORKLOADS[wid](size, args.targets.split(","), workdir, res, args.timeout)
        text = (
            f"\n## {dt.datetime.now():%Y-%m-%d %H:%M} `{cmd}`\n\n"
            f"Load average before: {load0}; after: {loadavg()}.  {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, git {_git_rev()}.\n\n{res.table()}\n"
        )
        with open(path, "a") as f:
            f.write(text)
        print(text, flush=True)
    finally:
        harness.remove_work_dirs()
    return 0


def _git_rev() -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip()
    return "?"


if __name__ == "__main__":
    sys.exit(main())
