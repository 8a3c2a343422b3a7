"""What metrics.listener costs the produce and fetch paths: broker CPU per request, with and
without it, on a fixed request stream (so the figure does not depend on how clients batch).

    python -m bench.metrics_overhead [--phases 20] [--produce 3000] [--fetch 1500]

Two pybrokers run side by side, one without and one with ``metrics.listener``.  Each phase
sends both the same pipelined requests over one connection each, one broker after the other
(the order alternating between phases) -- Produce v9 acks=1 with one 16 KiB batch (16
records of 1 KiB) to one of 6 partitions, then Fetch v12 (sessionless) of 64 KiB from one
partition -- and reads each broker process's CPU time (user + system, /proc) around it.
Prints microseconds of broker CPU per request per phase, the medians, and the median of the
per-phase ratios.  Pairing each phase of one broker with the same phase of the other, a few
seconds apart, keeps the drift of a shared machine's load out of the comparison.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pybroker.testing.process import BrokerProcess
from pybroker.testing.procstat import cpu_seconds
from pybroker.testing.procutil import free_port
from pybroker.wire import codec
from pybroker.wire.records import build_batch

ROOT = Path(__file__).resolve().parent.parent

PARTITIONS = 6
WINDOW = 8  # requests in flight


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)


def _roundtrips(sock: socket.socket, frames: list[bytes]) -> list[bytes]:
    """Send ``frames`` keeping WINDOW in flight; the response bodies (after the size)."""
    out, sent = [], 0
    while len(out) < len(frames):
        while sent < len(frames) and sent - len(out) < WINDOW:
            sock.sendall(frames[sent])
            sent += 1
        size = int.from_bytes(_recv_exact(sock, 4), "big")
        out.append(_recv_exact(sock, size))
    return out


def _produce_frames(n: int) -> list[bytes]:
    batch = build_batch([(None, b"x" * 1024, []) for _ in range(16)])
    return [
        codec.encode_request(
            0,
            9,
            i,
            "bench",
            {
                "transactional_id": None,
                "acks": 1,
                "timeout_ms": 10_000,
                "topic_data": [
                    {"name": "m", "partition_data": [{"index": i % PARTITIONS, "records": batch}]}
                ],
            },
        )
        for i in range(n)
    ]


def _fetch_frames(n: int, per_partition: int) -> list[bytes]:
    return [
        codec.encode_request(
            1,
            12,
            i,
            "bench",
            {
                "replica_id": -1,
                "max_wait_ms": 0,
                "min_bytes": 0,
                "max_bytes": 1 << 20,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": "m",
                        "partitions": [
                            {
                                "partition": i % PARTITIONS,
                                "current_leader_epoch": -1,
                                "fetch_offset": (i * 16 * 4) % max(per_partition - 64, 1),
                                "last_fetched_epoch": -1,
                                "log_start_offset": -1,
                                "partition_max_bytes": 64 * 1024,
                            }
                        ],
                    }
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            },
        )
        for i in range(n)
    ]


def _start(workdir: Path, metrics: bool) -> BrokerProcess:
    overrides: dict[str, object] = {"num.partitions": PARTITIONS}
    if metrics:
        overrides["metrics.listener"] = f"http://127.0.0.1:{free_port()}"
    b = BrokerProcess(workdir, overrides=overrides)
    b.start()
    return b


def _phase(b: BrokerProcess, sock: socket.socket, frames: list[bytes], api: int) -> float:
    """Broker CPU microseconds per request over ``frames``."""
    t0 = cpu_seconds([b.pid])
    answers = _roundtrips(sock, frames)
    t1 = cpu_seconds([b.pid])
    if api == 0:
        _, body = codec.decode_response(0, 9, answers[-1])
        assert body["responses"][0]["partition_responses"][0]["error_code"] == 0, body
    else:
        assert all(len(a) > 40_000 for a in answers), "fetches must return records"
    return (t1 - t0) / len(frames) * 1e6


def micro() -> dict[str, float]:
    """The metric code's own cost, timed in this process (microseconds): what a Produce of one
    partition and a Fetch answering one partition add (the two clock reads around the handler
    included)."""
    import timeit

    from pybroker.metrics import BrokerMetrics

    m = BrokerMetrics()
    pc = time.perf_counter
    entry = {
        "index": 0,
        "error_code": 0,
        "base_offset": 1,
        "log_append_time_ms": -1,
        "log_start_offset": 0,
        "record_errors": [],
        "error_message": None,
    }
    produce_resp = {"responses": [{"name": "m", "partition_responses": [entry]}]}
    fetch_resp = {
        "error_code": 0,
        "responses": [{"topic": "m", "partitions": [{"partition_index": 0, "error_code": 0}]}],
    }

    def produce() -> None:
        t = pc()
        m.produced("m", 16534, 16)
        m.request(0, 9, {}, produce_resp, pc() - t)

    def fetch() -> None:
        t = pc()
        m.consumed("m", 66000)
        m.request(1, 12, {"replica_id": -1}, fetch_resp, pc() - t)

    out = {}
    for name, fn in (("produce", produce), ("fetch", fetch)):
        out[name] = min(timeit.repeat(fn, number=100_000, repeat=5)) / 100_000 * 1e6
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phases", type=int, default=20)
    ap.add_argument("--micro-only", action="store_true", help="only the in-process timing")
    ap.add_argument(
        "--aa",
        action="store_true",
        help="A/A: neither broker gets the listener (how far apart two equal brokers measure)",
    )
    ap.add_argument("--produce", type=int, default=3000, help="Produce requests per phase")
    ap.add_argument("--fetch", type=int, default=1500, help="Fetch requests per phase")
    ap.add_argument(
        "--start-with-first",
        action="store_true",
        help="start the broker with the listener first (the A/A run shows the second one "
        "started measuring differently)",
    )
    args = ap.parse_args(argv)
    cost = micro()
    print(
        f"metric code, timed in process: {cost['produce']:.2f} us per Produce (1 partition), "
        f"{cost['fetch']:.2f} us per Fetch (1 partition answered)"
    )
    if args.micro_only:
        return 0
    produce = _produce_frames(args.produce)
    fetch = _fetch_frames(args.fetch, per_partition=args.produce // PARTITIONS * 16)
    ratios: dict[str, list[float]] = {"produce": [], "fetch": []}
    pair = "broker A / broker B, both without" if args.aa else "without / with metrics.listener"
    names = ("on A", "on B") if args.aa else ("without", "with")
    figures: dict[tuple[str, bool], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="pybench-metrics-") as tmp:
        brokers = {
            m: _start(Path(tmp) / f"metrics-{int(m)}", m and not args.aa)
            for m in ((True, False) if args.start_with_first else (False, True))
        }
        socks = {}
        try:
            for m, b in brokers.items():
                socks[m] = socket.create_connection((b.host, b.port))
                meta = codec.encode_request(
                    3, 4, 0, "bench", {"topics": [{"name": "m"}], "allow_auto_topic_creation": True}
                )
                _roundtrips(socks[m], [meta])
            time.sleep(1.0)  # the leaders take up their partitions
            for m in brokers:
                _roundtrips(socks[m], produce)  # warm up; the first phase's data to fetch
            for k in range(args.phases):
                order = (False, True) if k % 2 == 0 else (True, False)
                got = {}
                for what, frames, api in (("produce", produce, 0), ("fetch", fetch, 1)):
                    for m in order:
                        got[(what, m)] = _phase(brokers[m], socks[m], frames, api)
                        figures.setdefault((what, m), []).append(got[(what, m)])
                    ratios[what].append(got[(what, True)] / got[(what, False)])
                print(
                    f"phase {k + 1:2d}: produce {got[('produce', False)]:6.1f} / "
                    f"{got[('produce', True)]:6.1f} us, fetch {got[('fetch', False)]:6.1f} / "
                    f"{got[('fetch', True)]:6.1f} us ({pair})"
                )
        finally:
            for s in socks.values():
                s.close()
            for b in brokers.values():
                b.stop()
                b.cleanup()
    for what in ("produce", "fetch"):
        off = statistics.median(figures[(what, False)])
        on = statistics.median(figures[(what, True)])
        r = statistics.median(ratios[what])
        print(
            f"{what}: median {off:.1f} us/request {names[0]}, {on:.1f} {names[1]}; "
            f"median of the paired ratios {(r - 1) * 100:+.1f} %"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
