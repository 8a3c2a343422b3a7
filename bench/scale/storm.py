"""W23's storm alone, repeated: ``--idle`` idle client connections held open, then ``--storms``
storms of 1,000 connects in one second (each connecting and asking ApiVersions v3), a produce
probe (acks 1, one 100-byte record, 10 ms apart, a process of its own) meanwhile; the storm's
connections are closed after each storm.  Per storm: the produce p99 during it, the longest
event-loop stall logged, connects failed, and the broker's CPU per connect (the storm's CPU
less the probe's, its rate measured over 2 quiet seconds just before).

    python -m bench.scale.storm [--idle 2000] [--storms 3] [--profile FILE]
                                [--target pybroker|kafka] [--results FILE]

``--profile`` runs py-spy (raw) on the broker during the storms.  The full W23 (ticks and
all) is bench/scale/connections.py; docs/scale.md's W23 section has the figures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.scale.connections import STORM, ProduceProbe, p99_ms
from bench.scale.harness import _stalls, loadavg, log, start_kafka, start_pybroker
from pybroker.testing.procstat import cpu_seconds
from pybroker.testing.scale import Clients, create_topics, wait_all_answer


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--idle", type=int, default=2000)
    ap.add_argument("--storms", type=int, default=3)
    ap.add_argument("--target", default="pybroker")
    ap.add_argument("--profile")
    ap.add_argument("--stall-ms", type=int, help="pybroker's loop.stall.warn.ms (default 100)")
    ap.add_argument("--results")
    args = ap.parse_args(argv)
    wd = Path(tempfile.mkdtemp(prefix="storm-"))
    load0 = loadavg()
    if args.target == "pybroker":
        overrides: dict[str, object] = {"max.connections.per.ip": 1_000_000}
        if args.stall_ms is not None:
            overrides["loop.stall.warn.ms"] = args.stall_ms
        system = start_pybroker(wd, overrides=overrides)
    else:
        system = start_kafka(wd)
    rows: list[str] = []
    try:
        node = next(iter(system.nodes.values()))
        create_topics(node.address, ["storm"], 1, 1, 120)
        wait_all_answer(node.address, ["storm"], 1, 120, poll_s=0.5)
        pid = node.pid()
        assert pid is not None
        idle = Clients(node.address)
        took = idle.open(args.idle)
        log(f"{args.idle} idle connections in {took:.2f} s ({idle.failed} failed)")
        time.sleep(3)
        spy = None
        if args.profile:
            spy = subprocess.Popen(
                [
                    "py-spy",
                    "record",
                    "--nonblocking",
                    "-r",
                    "200",
                    "-f",
                    "raw",
                    "-o",
                    args.profile,
                    "-p",
                    str(pid),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(1)
        lat: list[float] = []
        try:
            for i in range(args.storms):
                probe = ProduceProbe(node.address, "storm")  # the quiet window's CPU
                c0, t0 = cpu_seconds([pid]), time.monotonic()
                time.sleep(2)
                quiet = (cpu_seconds([pid]) - c0) / (time.monotonic() - t0)
                probe.latencies()
                probe = ProduceProbe(node.address, "storm")  # the storm's
                since = time.time()
                c0, t0 = cpu_seconds([pid]), time.monotonic()
                storm = Clients(node.address)
                answered = storm.open(STORM, spread_s=1.0)
                cpu = cpu_seconds([pid]) - c0 - quiet * (time.monotonic() - t0)
                time.sleep(0.5)
                storm_lat = probe.latencies()
                lat += storm_lat
                stall = _stalls(system, since)
                row = (
                    f"| {i + 1} | {answered:.2f} | {storm.failed} | {cpu / STORM * 1000:.3f} "
                    f"| {p99_ms(storm_lat) or 0:.1f} | {_median(storm_lat):.1f} | {stall if stall is not None else '-'} "
                    f"| {loadavg()} |"
                )
                log(row)
                rows.append(row)
                storm.close()
                time.sleep(1)
        finally:
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(60)
        idle.close()
    finally:
        system.stop()
    p99 = p99_ms(lat)
    text = (
        f"\n## {dt.datetime.now():%Y-%m-%d %H:%M} `python -m bench.scale.storm "
        f"{' '.join(argv if argv is not None else sys.argv[1:])}`\n\n"
        f"{args.target}, {args.idle:,} idle connections; load before {load0}, after "
        f"{loadavg()}; {os.cpu_count()} cores.  Produce probe (from the storm's start to 0.5 s "
        f"after its last answer), all storms: {len(lat)} produces, p99 {p99 or 0:.1f} ms, max "
        f"{max(lat, default=0) * 1000:.1f} ms.\n\n"
        "| storm | all answered after (s) | failed | broker CPU per connect (ms) "
        "| produce p99 (ms) | produce median (ms) | longest stall logged (ms) | load |\n"
        "|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    print(text)
    if args.results:
        with open(args.results, "a") as f:
            f.write(text)
    return 0


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2] * 1000 if values else 0.0


if __name__ == "__main__":
    sys.exit(main())
