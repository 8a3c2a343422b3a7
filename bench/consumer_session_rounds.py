"""The broker's CPU per round of a consumer's incremental fetch session (KIP-227) over many
partitions (issue 27): old and new code side by side.

    python -m bench.consumer_session_rounds --partitions 10000 --trees /tmp/old,. --runs 3

Starts one ``pybroker serve`` per tree (embedded store, a fresh data dir; each tree on
PYTHONPATH), creates a topic of ``--partitions`` partitions on each, opens a consumer session
(a full Fetch v12 of every partition at its log end, session epoch 0), then, for each tree in
turn, ``--rounds`` incremental fetches (no partition named, ``max_wait_ms`` 0): idle rounds
(nothing changed), then rounds each after a Produce of one record to ``--changed`` partitions
(the Produce's CPU included: the same in both trees).  With ``--max-wait-ms`` W the rounds
ask ``min_bytes`` 1: an idle round parks W ms in the purgatory.  The broker's CPU (/proc utime + stime)
over the rounds, per round.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pybroker.cli.client import Connection
from pybroker.testing.client import AdminClient
from pybroker.wire.records import build_batch

FETCH, PRODUCE = 1, 0
TICK = os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _load1() -> float:
    return os.getloadavg()[0]


class Target:
    def __init__(self, tree: Path, partitions: int, work: Path, max_wait_ms: int = 0) -> None:
        self.tree = tree
        self.max_wait_ms = max_wait_ms
        self.partitions = partitions
        self.port = _free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "pybroker", "serve",
                "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "--override", f"log.dirs={work}/logs",
            ],
            env=dict(os.environ, PYTHONPATH=str(tree)),
            cwd=tree,  # python -m puts the working directory first on sys.path
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.topic = "rounds"
        self.conn: Connection | None = None
        self.session_id = 0
        self.epoch = 0
        self.moved: dict[int, int] = {}  # partition -> the position to send next

    def start(self) -> None:
        bootstrap = f"127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port)).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        with AdminClient(bootstrap, timeout=600) as admin:
            admin.create_topic(self.topic, partitions=self.partitions)
        self.conn = Connection("127.0.0.1", self.port, timeout_s=120)
        self.conn.connect()
        body = self._fetch(
            [
                {
                    "partition": p,
                    "current_leader_epoch": -1,
                    "fetch_offset": 0,
                    "log_start_offset": -1,
                    "partition_max_bytes": 1 << 20,
                }
                for p in range(self.partitions)
            ],
            0,
            0,
        )
        self.session_id, self.epoch = body["session_id"], 1
        assert self.session_id != 0, body["error_code"]
        # (partitions whose leader was not ready at the full fetch are answered once more)
        quiet = 0
        for _ in range(120):
            quiet = 0 if self.round()["responses"] else quiet + 1
            if quiet == 3:
                break
            time.sleep(0.5)

    def _fetch(self, parts: list[dict], session_id: int, epoch: int) -> dict:
        assert self.conn is not None
        req = {
            "replica_id": -1,
            "max_wait_ms": self.max_wait_ms if session_id else 0,
            "min_bytes": 1 if self.max_wait_ms and session_id else 0,
            "max_bytes": 50 << 20,
            "isolation_level": 0,
            "session_id": session_id,
            "session_epoch": epoch,
            "topics": [{"topic": self.topic, "partitions": parts}] if parts else [],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        _, body = self.conn.request(FETCH, req, version=12)
        return body

    def round(self) -> dict:
        """One incremental fetch naming the partitions whose position moved (as a consumer:
        past the records the last answer brought)."""
        moved = [
            {
                "partition": p,
                "current_leader_epoch": -1,
                "fetch_offset": offset,
                "log_start_offset": -1,
                "partition_max_bytes": 1 << 20,
            }
            for p, offset in self.moved.items()
        ]
        body = self._fetch(moved, self.session_id, self.epoch)
        assert body["error_code"] == 0, body["error_code"]
        self.epoch += 1
        self.moved = {
            e["partition_index"]: e["high_watermark"]
            for t in body["responses"]
            for e in t["partitions"]
            if e["records"]
        }
        return body

    def produce(self, partitions: list[int]) -> None:
        assert self.conn is not None
        records = build_batch([(None, b"v", [])], timestamp=1)
        self.conn.request(
            PRODUCE,
            {
                "transactional_id": None,
                "acks": 1,
                "timeout_ms": 10000,
                "topic_data": [
                    {
                        "name": self.topic,
                        "partition_data": [{"index": p, "records": records} for p in partitions],
                    }
                ],
            },
            version=8,
        )

    def measure(self, rounds: int, changed: int) -> tuple[float, float]:
        """(broker CPU ms per idle round, per round after a Produce to ``changed``
        partitions); the partitions produced to are spread over the topic."""
        cpu0 = _cpu_s(self.proc.pid)
        for _ in range(rounds):
            got = self.round()["responses"]
            assert not got, str(got)[:600]
        idle = (_cpu_s(self.proc.pid) - cpu0) / rounds * 1000
        step = max(1, self.partitions // max(changed, 1))
        cpu0 = _cpu_s(self.proc.pid)
        for i in range(rounds):
            parts = [(i + k * step) % self.partitions for k in range(changed)]
            self.produce(parts)
            got = self.round()["responses"]
            assert sum(len(t["partitions"]) for t in got) == len(set(parts)), got
        busy = (_cpu_s(self.proc.pid) - cpu0) / rounds * 1000
        return idle, busy

    def stop(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--changed", type=int, default=10)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--max-wait-ms",
        type=int,
        default=0,
        help="the incremental fetches' max_wait_ms (min_bytes 1): idle rounds park that long",
    )
    ap.add_argument("--trees", default=str(Path(__file__).resolve().parent.parent))
    args = ap.parse_args(argv)
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-session-rounds-") as d:
        targets = [
            Target(t, args.partitions, Path(d) / str(i), args.max_wait_ms)
            for i, t in enumerate(trees)
        ]
        try:
            for t in targets:
                t0 = time.monotonic()
                t.start()
                print(f"{t.tree}: topic and session ready in {time.monotonic() - t0:.0f} s")
            for run in range(args.runs):
                for t in targets:
                    before = _load1()
                    idle, busy = t.measure(args.rounds, args.changed)
                    print(
                        f"run {run} {t.tree}: {args.partitions} partitions, broker CPU per "
                        f"round: idle {idle:.2f} ms, after a produce to {args.changed} "
                        f"partitions {busy:.2f} ms (load {before:.1f} -> {_load1():.1f})",
                        flush=True,
                    )
        finally:
            for t in targets:
                t.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
