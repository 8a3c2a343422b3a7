"""Apache Kafka 3.9 (java/pom.xml) vs pybroker, side by side, on this machine: one command, one table.

    python -m bench.run [--workloads W1,W2,...] [--runs 3] [--scale small|full] [--smoke]
                        [--results-dir bench/results] [--no-write] [--keep-logs DIR]

For each workload: start Apache Kafka (pybroker/testing/kafka_reference.py: KRaft, -Xmx512m),
set the workload up, run it `--runs` times, record the broker processes' peak RSS (VmHWM),
stop; then the same against pybroker (`python -m pybroker serve`, embedded metadata store; W6
uses ZooKeeper + 3 brokers, pybroker/testing/cluster_harness.py): bench/targets.py. The
workloads are bench/workloads/ (one module per family), the table and file bench/report.py.
Both run on loopback, log dirs under one temp dir on the same disk, no fsync (Kafka's default;
pybroker's too), and group.initial.rebalance.delay.ms=0. The table gives the median of the runs
per metric and the ratio pybroker / Kafka; results go to bench/results/<YYYY-MM-DD>.md with the
machine, the versions, the commands and every run's figure. docs/bench.md describes the
workloads.

--smoke: both brokers start, W1 with 2,000 records runs once on each, the table prints and
nothing is written (CI: compat_tests/test_bench_smoke.py).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench import clients
from bench.report import ROOT, Outcome, loadavg, log_excerpt, report, table, write_results
from bench.targets import KAFKA, PYBROKER, PYBROKER_OVERRIDES, RssSampler, start_target
from bench.workloads import SIZES, WORKLOADS
from bench.workloads.base import CPU_METRIC, GIB, Workload
from pybroker.testing import java
from pybroker.testing.procstat import cpu_seconds


def run_workload(w: Workload, kind: str, runs: int, sizes: dict, workdir: Path) -> Outcome:
    out = Outcome(load=[loadavg()])
    t_start = time.monotonic()
    print(f"[{time.strftime('%H:%M:%S')}] {w.wid} {kind}: starting", flush=True)
    try:
        target = start_target(kind, w.brokers, workdir, w.overrides, w.tls, w.kafka4)
    except Exception as e:  # noqa: BLE001 - recorded
        out.error = f"start failed: {type(e).__name__}: {str(e)[:3000]}"
        print(f"  {out.error}", flush=True)
        return out
    out.start_s = time.monotonic() - t_start
    try:
        with RssSampler(target.pids) as sampler:
            try:
                state = w.setup(target, sizes)
                for i in range(runs):
                    cpu0 = cpu_seconds(target.pids)
                    figures = w.run(target, state, i)
                    moved = figures.pop("_bytes", None)
                    if moved:  # the run's broker CPU time per GiB it produced/consumed
                        figures[CPU_METRIC] = (cpu_seconds(target.pids) - cpu0) / (moved / GIB)
                    for k, v in figures.items():
                        out.runs.setdefault(k, []).append(v)
                    shown = ", ".join(f"{k} {v:,.2f}" for k, v in figures.items())
                    print(f"  {w.wid} {kind} run {i + 1}/{runs}: {shown}", flush=True)
            except Exception as e:  # noqa: BLE001 - recorded with the broker's log
                tb = traceback.format_exc(limit=4)
                out.error = (
                    f"{type(e).__name__}: {str(e)[:4000]}\n--- traceback ---\n{tb[-2000:]}"
                    f"\n--- broker log excerpt ---\n{log_excerpt(target.logs())}"
                )
                print(f"  {w.wid} {kind} FAILED: {type(e).__name__}: {str(e)[:500]}", flush=True)
            out.peak_rss = sampler.hwm()
            out.sampled_rss = sampler.peak
            out.extra_rss = target.extra_rss()
    finally:
        try:
            target.stop()
        except Exception as e:  # noqa: BLE001
            msg = f"stop: {type(e).__name__}: {str(e)[:1000]}"
            out.error = f"{out.error}\n{msg}" if out.error else msg
        out.wall_s = time.monotonic() - t_start
        out.load.append(loadavg())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="e.g. W1,W3 (default: all)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scale", choices=["small", "full"], default="full")
    ap.add_argument("--smoke", action="store_true", help="W1, 2,000 records, 1 run; no file")
    ap.add_argument("--results-dir", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--keep-logs", help="keep broker data and logs in this dir")
    ap.add_argument(
        "--brokers",
        default=f"{KAFKA},{PYBROKER}",
        help="which side(s) to run: kafka,pybroker (default both); one side gives no ratios",
    )
    ap.add_argument(
        "--w8-topics", type=int, help="W8: this many topics of 100 partitions (default 100)"
    )
    ap.add_argument(
        "--pybroker-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one more broker config for pybroker only (repeatable), e.g. "
        "metrics.listener=http://127.0.0.1:0",
    )
    args = ap.parse_args(argv)
    for item in args.pybroker_override:
        key, sep, val = item.partition("=")
        if not sep:
            ap.error(f"--pybroker-override: expected KEY=VALUE, not {item!r}")
        PYBROKER_OVERRIDES[key.strip()] = val.strip()

    sizes = dict(SIZES[args.scale])
    if args.w8_topics:
        sizes["w8_topics"] = args.w8_topics
    if args.smoke:
        args.workloads, args.runs, args.no_write = "W1", 1, True
        clients.CLIENT_FAST_START = True
        sizes.update(SIZES["smoke"])
    wanted = [x.strip().upper() for x in args.workloads.split(",") if x.strip()]
    unknown = [x for x in wanted if x not in WORKLOADS]
    if unknown:
        ap.error(f"unknown workloads {unknown}; known: {', '.join(WORKLOADS)}")
    selected = [WORKLOADS[x] for x in wanted]
    kinds = [k for k in (KAFKA, PYBROKER) if k in args.brokers.split(",")]
    if not kinds:
        ap.error(f"--brokers: kafka and/or pybroker, not {args.brokers!r}")

    java.classpath()  # fetch the jars first (cached)
    base = Path(args.keep_logs) if args.keep_logs else Path(tempfile.mkdtemp(prefix="pybench-"))
    base.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Outcome]] = {}
    t0 = time.monotonic()
    try:
        for w in selected:
            for kind in kinds:
                workdir = base / f"{w.wid}-{kind}"
                results.setdefault(w.wid, {})[kind] = run_workload(
                    w, kind, args.runs, sizes, workdir
                )
                if not args.keep_logs:
                    shutil.rmtree(workdir, ignore_errors=True)
            if not args.no_write:  # after every workload, so a late failure keeps the rest
                done = selected[: selected.index(w) + 1]
                write_results(report(done, results, args, sizes, time.monotonic() - t0), args)
    finally:
        if not args.keep_logs:
            shutil.rmtree(base, ignore_errors=True)
    wall = time.monotonic() - t0
    print()
    print(table(selected, results))
    failed = [f"{wid} {kind}" for wid, r in results.items() for kind, o in r.items() if o.error]
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    if not args.no_write:
        path = write_results(report(selected, results, args, sizes, wall), args)
        print(f"\nresults: {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
