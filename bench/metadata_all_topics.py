"""Metadata for all topics at ``n`` partitions: pybroker (embedded store) and Apache Kafka 3.9
(KRaft, one node) side by side, both running at once and asked alternately (issue 27).

    python -m bench.metadata_all_topics [--partitions 1000] [--rounds 10] [--per-round 10]
                                        [--targets pybroker,kafka] [--profile FILE.txt]

Each request is timed twice: ``wire``, from sending the frame until its last byte arrived
(the broker's work and the transfer; what a client waits for), and ``decoded``, the same plus
decoding the answer with pybroker's Python codec (what bench/scale/'s W21 figure counts:
at 10,000 partitions the decode is most of it).  ``--profile``: py-spy (raw) of pybroker
during one more burst of requests.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.scale.harness import loadavg, start_kafka, start_pybroker
from pybroker.testing.scale import (
    METADATA,
    PER_TOPIC,
    Conn,
    create_topics,
    topic_names,
    wait_all_answer,
)
from pybroker.wire import codec


def timed(conn: Conn, version: int) -> tuple[float, float, int]:
    """(wire seconds, decoded seconds, response bytes) of one Metadata for all topics."""
    body = {"topics": None, "allow_auto_topic_creation": False}
    if version >= 8:
        body["include_topic_authorized_operations"] = False
    frame = codec.encode_request(METADATA, version, 7, "metadata-bench", body)
    t0 = time.perf_counter()
    data = conn.exchange_frame(frame)
    wire = time.perf_counter() - t0
    codec.decode_response(METADATA, version, data)
    return wire, time.perf_counter() - t0, len(data) + 4


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--per-round", type=int, default=10)
    ap.add_argument("--targets", default="pybroker,kafka")
    ap.add_argument("--profile")
    args = ap.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="metadata-all-"))
    names = topic_names(args.partitions)
    systems = {}
    try:
        targets = args.targets.split(",")
        if "pybroker" in targets:
            systems["pybroker"] = start_pybroker(workdir / "pybroker")
        if "kafka" in targets:
            systems["kafka"] = start_kafka(workdir / "kafka", heap="1g")
        for kind, system in systems.items():
            node = next(iter(system.nodes.values()))
            create_topics(node.address, names, PER_TOPIC, 1, 900)
            wait_all_answer(node.address, names, PER_TOPIC, 900)
            print(f"{kind}: {args.partitions} partitions answer (load {loadavg()})", flush=True)
        time.sleep(10)
        conns = {k: Conn(*next(iter(s.nodes.values())).address) for k, s in systems.items()}
        versions = {k: c.version(METADATA) for k, c in conns.items()}
        for k, c in conns.items():  # warm-up (pybroker's per-topic encoding cache, the JIT)
            for _ in range(5):
                timed(c, versions[k])
        wire: dict[str, list[float]] = {k: [] for k in conns}
        decoded: dict[str, list[float]] = {k: [] for k in conns}
        sizes: dict[str, int] = {}
        loads = [loadavg()]
        for _ in range(args.rounds):
            for k, c in conns.items():
                for _ in range(args.per_round):
                    w, d, n = timed(c, versions[k])
                    wire[k].append(w)
                    decoded[k].append(d)
                    sizes[k] = n
            loads.append(loadavg())
        print(f"\nMetadata, all topics, {args.partitions} partitions, version {versions}")
        print(f"load average during: {loads[0]} ... {loads[-1]}")
        for k in conns:
            print(
                f"{k}: wire median {statistics.median(wire[k]) * 1000:.1f} ms "
                f"(p10 {sorted(wire[k])[len(wire[k]) // 10] * 1000:.1f}), decoded median "
                f"{statistics.median(decoded[k]) * 1000:.1f} ms, {sizes[k]:,} bytes, "
                f"{len(wire[k])} requests"
            )
        if args.profile and "pybroker" in systems:
            pid = systems["pybroker"].pids()[0]
            spy = subprocess.Popen(
                ["py-spy", "record", "-r", "200", "-f", "raw", "-o", args.profile, "-p", str(pid)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(2)
            for _ in range(200):
                timed(conns["pybroker"], versions["pybroker"])
            spy.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                spy.wait(60)
            print(f"profile of 200 requests: {args.profile}")
        for c in conns.values():
            c.close()
    finally:
        for s in systems.values():
            s.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
