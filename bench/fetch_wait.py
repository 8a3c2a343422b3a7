"""When does a long-poll Fetch with nothing to read get its answer, under W18's commit load?

Issue 28 (session 9): librdkafka's consumers sent fewer Fetches per second to pybroker than
to Kafka under W18 at 256 groups.  This bench starts a target (bench.commits' targets), runs
W18's client (``--groups`` consumers committing after each poll, in its own process) and, in
this process, two probes on their own connections during the client's timed part:

* a Fetch (v11, ``max_wait_ms`` 500, ``min_bytes`` 1) of an empty partition, sent again as soon
  as it is answered: the time to its answer minus max_wait_ms is how late the long poll is;
* an ApiVersions every 50 ms: the round trip of a request answered at once, the broker's
  queueing delay under the same load.

    python -m bench.fetch_wait --groups 64 --targets kafka,zk1-kafka --seconds 15

Printed per target: the Fetch's excess over max_wait_ms and the ApiVersions round trip (p50 /
p90 / p99 ms), and librdkafka's Fetches per consumer per second (its statistics).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

from bench.commits import create_topic, load1, run_client, start_target
from pybroker.cli.client import Connection

FETCH, API_VERSIONS = 1, 18
MAX_WAIT_MS = 500


def _fetch_body(topic: str) -> dict:
    return {
        "replica_id": -1,
        "max_wait_ms": MAX_WAIT_MS,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": -1,
                        "fetch_offset": 0,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


class Probes:
    """The two probes' (wall time sent, seconds to the answer), until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        host, port = bootstrap.split(",")[0].rsplit(":", 1)
        self.address = (host, int(port))
        self.topic = topic
        self.fetches: list[tuple[float, float]] = []
        self.versions: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._fetch, daemon=True),
            threading.Thread(target=self._versions, daemon=True),
        ]

    def _conn(self) -> Connection:
        c = Connection(*self.address, timeout_s=60)
        c.connect()
        return c

    def _fetch(self) -> None:
        c = self._conn()
        body = _fetch_body(self.topic)
        while not self.stop.is_set():
            sent = time.time()
            t = time.perf_counter()
            c.request(FETCH, body, version=11)
            self.fetches.append((sent, time.perf_counter() - t))

    def _versions(self) -> None:
        c = self._conn()
        body = {"client_software_name": "probe", "client_software_version": "1"}
        while not self.stop.is_set():
            sent = time.time()
            t = time.perf_counter()
            c.request(API_VERSIONS, body, version=3)
            self.versions.append((sent, time.perf_counter() - t))
            time.sleep(0.05)

    def __enter__(self) -> Probes:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(5)


def _pcts(values: list[float]) -> str:
    if len(values) < 3:
        return f"n={len(values)}"
    q = statistics.quantiles(values, n=100)
    return f"n={len(values)} p50 {q[49]:.1f} p90 {q[89]:.1f} p99 {q[98]:.1f} max {max(values):.1f}"


def run(target: str, groups: int, seconds: float, work: Path) -> None:
    tag = f"{target}-{groups}-{int(time.time())}"
    before = load1()
    running = start_target(target, work / tag)
    try:
        create_topic(running.bootstrap, f"w18-{tag}", 1)
        create_topic(running.bootstrap, f"probe-{tag}", 1)
        with Probes(running.bootstrap, f"probe-{tag}") as probes:
            figures = run_client("w18", running.bootstrap, groups, seconds, tag, True)
        wall0, wall1, _ = figures["timed"]
        fetch = [
            (d * 1000 - MAX_WAIT_MS) for s, d in probes.fetches if wall0 <= s and s + d <= wall1
        ]
        versions = [d * 1000 for s, d in probes.versions if wall0 <= s and s + d <= wall1]
        per_commit = figures["requests/commit"]
        fetch_rate = per_commit.get("Fetch", 0) * figures["commits/s"] / groups
        print(
            f"{target} groups={groups} commits/s {figures['commits/s']:.0f} "
            f"p50 {figures['p50 ms']:.1f} ms | librdkafka Fetch/consumer/s {fetch_rate:.2f} | "
            f"probe Fetch late by (ms) {_pcts(fetch)} | ApiVersions rtt (ms) {_pcts(versions)} "
            f"| load {before:.1f} -> {load1():.1f}",
            flush=True,
        )
    finally:
        running.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--targets", default="kafka,zk1-kafka")
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-fetch-wait-"))
    for _ in range(args.runs):
        for target in args.targets.split(","):
            run(target, args.groups, args.seconds, work)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
