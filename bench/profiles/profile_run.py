"""Profile pybroker under one bench workload: py-spy on the broker(s), CPU split per second.

    python -m bench.profiles.profile_run W1 [--runs 1] [--no-profile] [--out bench/profiles]
                                         [--event-loop asyncio|uvloop] [--w8-topics 40]

Starts pybroker exactly as bench/targets.py does (BenchBroker: no asyncio debug; W6: ZooKeeper +
3 brokers), runs the workload's setup, then runs the workload `--runs` times while

* ``py-spy record --nonblocking`` samples every broker process twice: once without idle
  frames into ``<out>/<W>[-<n>].svg`` (flamegraph) and once with ``--idle`` into
  ``<out>/<W>[-<n>].txt`` (collapsed stacks; the epoll wait shows how idle the loop was),
* a sampler thread reads utime+stime every 0.5 s of the broker(s), ZooKeeper, and the client
  (this process: kafka-python threads; its java children: the Java tools), and the machine's
  /proc/stat (busy, iowait, steal, idle),

and prints one JSON line per run with the figures, the CPU split and the load averages.
``--no-profile`` runs the same without py-spy (to measure the profiler's cost or a loop).
``--event-loop`` sets PYBROKER_EVENT_LOOP for the broker; only a pybroker with event-loop
selection reads it (the uvloop figures in docs/performance.md came from a scratch copy).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.report import loadavg
from bench.targets import PYBROKER, start_target
from bench.workloads import SIZES, WORKLOADS
from pybroker.testing import procstat

ROOT = Path(__file__).resolve().parent.parent.parent

KINDS = ("broker", "zookeeper", "client", "profiler")


def classify(pid: int) -> str:
    cmd = procstat.cmdline(pid)
    if "-m pybroker" in cmd:
        return "broker"
    if "org.apache.zookeeper.server" in cmd:
        return "zookeeper"
    if "py-spy" in cmd:
        return "profiler"
    return "client"


Snapshot = tuple[dict[int, tuple[str, float]], tuple[int, int, int, int]]


def snapshot() -> Snapshot:
    """CPU seconds of this process and each process below it (by kind), machine ticks."""
    out: dict[int, tuple[str, float]] = {}
    me = os.getpid()
    for pid in procstat.descendants(me):
        c = procstat.process_cpu_seconds(pid)
        if c is not None:
            out[pid] = ("client" if pid == me else classify(pid), c)
    return out, procstat.machine_jiffies()


def cpu_sampler(interval: float = 0.5) -> procstat.Sampler[Snapshot]:
    """Per-interval CPU of broker / zookeeper / client processes and the machine's busy share."""
    return procstat.Sampler(snapshot, interval)


def _row(dt: float, prev: Snapshot, cur: Snapshot) -> dict[str, float]:
    """Cores each kind used between two snapshots ``dt`` s apart."""
    row = dict.fromkeys(KINDS, 0.0)
    for pid, (kind, c) in cur[0].items():
        before = prev[0].get(pid, (kind, c if kind == "broker" else 0.0))[1]
        row[kind] += max(c - before, 0.0) / dt
    d = [a - b for a, b in zip(cur[1], prev[1], strict=True)]
    total = max(d[3], 1)
    ncpu = os.cpu_count() or 1
    row["machine busy"] = d[0] / total * ncpu
    row["iowait"] = d[1] / total * ncpu
    row["steal"] = d[2] / total * ncpu
    return row


def summary(cpu: procstat.Sampler[Snapshot]) -> dict[str, float]:
    """Mean over the run (cores), and the median of the busiest half of the samples of the
    broker (the steady part, without JVM start and topic creation)."""
    s = cpu.samples
    rows = [_row(t - t0, a, b) for (t0, a), (t, b) in zip(s, s[1:], strict=False) if t > t0]
    if not rows:
        return {}
    keys = ["broker", "client", "zookeeper", "profiler", "machine busy", "iowait", "steal"]
    out = {f"mean {k} cores": statistics.fmean(r[k] for r in rows) for k in keys}
    busy = sorted(rows, key=lambda r: r["broker"] + r["client"])[len(rows) // 2 :]
    for k in keys:
        out[f"steady {k} cores"] = statistics.median(r[k] for r in busy)
    return {k: round(v, 3) for k, v in out.items()}


def start_pyspy(pids: list[int], out: Path, wid: str, suffix: str) -> list[subprocess.Popen]:
    procs = []
    for n, pid in enumerate(pids):
        tag = f"{wid}{suffix}" + (f"-broker{n}" if len(pids) > 1 else "")
        for fmt, ext, idle in (("flamegraph", "svg", False), ("raw", "txt", True)):
            cmd = [
                "py-spy",
                "record",
                "--nonblocking",
                "--rate",
                "100",
                "--pid",
                str(pid),
                "--format",
                fmt,
                "-o",
                str(out / f"{tag}.{ext}"),
            ]
            if idle:
                cmd.append("--idle")
            procs.append(
                subprocess.Popen(
                    cmd,
                    stdout=subprocess.DEVNULL,
                    stderr=open(out / f".{tag}.{ext}.log", "w"),  # noqa: SIM115
                    start_new_session=True,
                )
            )
    time.sleep(1.0)  # let the samplers attach
    return procs


def stop_pyspy(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
    for p in procs:
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("workload")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench" / "profiles"))
    ap.add_argument("--suffix", default="")
    ap.add_argument("--event-loop", choices=["asyncio", "uvloop"])
    ap.add_argument("--w8-topics", type=int, default=40)
    args = ap.parse_args()
    if args.event_loop:
        os.environ["PYBROKER_EVENT_LOOP"] = args.event_loop
    w = WORKLOADS[args.workload.upper()]
    sizes = dict(SIZES["full"], w8_topics=args.w8_topics)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="pyprof-"))
    target = start_target(PYBROKER, w.brokers, workdir)
    try:
        state = w.setup(target, sizes)
        for i in range(args.runs):
            load_before = loadavg()
            procs = [] if args.no_profile else start_pyspy(target.pids, out, w.wid, args.suffix)
            t0 = time.monotonic()
            try:
                with cpu_sampler() as cpu:
                    figures = w.run(target, state, i)
            finally:
                stop_pyspy(procs)
            print(
                json.dumps(
                    {
                        "workload": w.wid,
                        "run": i,
                        "event_loop": os.environ.get("PYBROKER_EVENT_LOOP", "default"),
                        "profiled": not args.no_profile,
                        "figures": figures,
                        "wall s": round(time.monotonic() - t0, 2),
                        "cpu": summary(cpu),
                        "load 1m before/after": [load_before, loadavg()],
                    }
                ),
                flush=True,
            )
    finally:
        target.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
