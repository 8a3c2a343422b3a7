"""How long the web console takes to show a topic of 10,000 partitions (pybroker/console/).

    python -m bench.console_render [--partitions 10000] [--runs 5]

Starts one pybroker (``metrics.listener`` on, ``loop.stall.warn.ms=50``), creates a topic of
``--partitions`` partitions with kafka-python, waits until the console's overview shows none
offline (every leader up), then measures, ``--runs`` times each:

* server time: the wall time of ``GET /topics/<name>`` (the first page of 1,000 partitions,
  plus the page size in bytes) and of ``GET /topics`` and ``GET /`` over HTTP from this process;
* browser time: headless Chromium (pybroker/testing/chromium.py) loading the same page with
  ``--dump-dom``, and loading a near-empty page (``/groups`` of a broker without groups) for
  the browser's own start-up cost, which the difference removes.

Prints every run and the medians, the broker's "event loop stalled" lines logged while
measuring and how many it logged in ``--idle`` seconds without requests before (a baseline), and the machine's load average (the figures depend on what else runs).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from pybroker.testing import chromium
from pybroker.testing.process import BrokerProcess
from pybroker.testing.procutil import free_port

ROOT = Path(__file__).resolve().parent.parent


def _get(url: str) -> tuple[float, int]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as r:
        body = r.read()
    return time.perf_counter() - started, len(body)


def _wait_for_leaders(url: str, partitions: int) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        with urllib.request.urlopen(url, timeout=120) as r:
            body = r.read().decode()
        if f'"partition-count">{partitions:,}<' in body and '"offline-count">0<' in body:
            return
        time.sleep(0.5)
    raise SystemExit("the topic's partitions did not all get a leader")


def _stalls(b: BrokerProcess) -> list[str]:
    return [line for line in b.output(100_000).splitlines() if "event loop stalled" in line]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--idle", type=float, default=15.0, help="seconds of idle baseline")
    args = ap.parse_args()
    from kafka.admin import KafkaAdminClient, NewTopic

    http = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        b = BrokerProcess(
            Path(tmp),
            overrides={"metrics.listener": f"http://127.0.0.1:{http}", "loop.stall.warn.ms": 50},
        )
        b.start()
        try:
            admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=300_000)
            t = time.perf_counter()
            admin.create_topics([NewTopic("wide", args.partitions, 1)], timeout_ms=300_000)
            admin.close()
            print(f"created {args.partitions} partitions in {time.perf_counter() - t:.1f} s")
            _wait_for_leaders(f"http://127.0.0.1:{http}/", args.partitions)
            base = f"http://127.0.0.1:{http}"
            time.sleep(5)  # the new leaders' start-up work is over
            idle_from = _stalls(b)
            time.sleep(args.idle)
            before = _stalls(b)
            print(
                f"event loop stalls over 50 ms in {args.idle} s idle: {len(before) - len(idle_from)}"
            )
            started = time.monotonic()
            results: dict[str, list[float]] = {}
            for run in range(args.runs):
                for name, path in (
                    ("GET /topics/wide", "/topics/wide"),
                    ("GET /topics/wide?page=10", "/topics/wide?page=10"),
                    ("GET /topics", "/topics"),
                    ("GET /", "/"),
                ):
                    took, size = _get(base + path)
                    results.setdefault(name, []).append(took)
                    print(f"run {run + 1}: {name}: {took * 1000:.0f} ms ({size:,} bytes)")
                _, page = chromium.timed_dump_dom(base + "/topics/wide")
                _, empty = chromium.timed_dump_dom(base + "/groups")
                results.setdefault("chromium /topics/wide", []).append(page)
                results.setdefault("chromium /groups (start-up)", []).append(empty)
                results.setdefault("chromium page minus start-up", []).append(page - empty)
                print(f"run {run + 1}: chromium: /topics/wide {page:.2f} s, empty {empty:.2f} s")
            print("\nmedians:")
            for name, xs in results.items():
                print(f"  {name}: {statistics.median(xs) * 1000:.0f} ms")
            stalls = _stalls(b)[len(before) :]
            took = time.monotonic() - started
            print(f"event loop stalls over 50 ms in {took:.0f} s of measuring: {len(stalls)}")
            for line in stalls[:20]:
                print("  " + line)
            with open("/proc/loadavg") as f:
                print(f"load average: {f.read().strip()}")
        finally:
            b.stop()


if __name__ == "__main__":
    main()
