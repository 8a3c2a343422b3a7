"""What a free-threaded CPython costs pybroker's hot paths (docs/multicore.md, option (c)).

    /path/to/python3.13t -m bench.freethreaded_cost      # from the repository root
    /path/to/python3.13  -m bench.freethreaded_cost      # the same version with the GIL

Times, in CPU microseconds per operation (time.process_time, so the machine's load distorts
them less than wall time), pybroker code that needs no compression library (only crc32c):

- decode a Produce v9 request carrying one 16 KiB batch of 100 records (the request codec);
- encode a Metadata v12 response of 1,000 partitions (the response codec, Python dicts);
- parse the batch headers and walk the 100 records of that batch (CRC-32C, varints);
- one request and answer through asyncio streams over a socketpair (the event loop's cost).

And with ``--threads 2`` the codec work in two threads at once: on a free-threaded build the
CPU time should not grow per operation and the wall time should halve on two idle cores; with
the GIL the wall time stays.  Prints one line per figure, then the interpreter's version and
whether the GIL is on.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import sysconfig
import threading
import time
import uuid

from pybroker.wire import codec
from pybroker.wire.record_walker import walk_batch
from pybroker.wire.records import build_batch, parse_batches

PRODUCE, METADATA = 0, 3


def produce_frame() -> bytes:
    batch = build_batch([(b"key-%d" % i, os.urandom(150), []) for i in range(100)])
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 30000,
        "topic_data": [
            {"name": "bench", "partition_data": [{"index": 0, "records": batch}]},
        ],
    }
    return codec.encode_request(PRODUCE, 9, 1, "bench", body), batch


def metadata_body() -> dict:
    return {
        "throttle_time_ms": 0,
        "brokers": [
            {"node_id": i, "host": f"10.0.0.{i}", "port": 9092, "rack": None} for i in range(3)
        ],
        "cluster_id": "c",
        "controller_id": 0,
        "topics": [
            {
                "error_code": 0,
                "name": f"topic-{t}",
                "topic_id": uuid.UUID(int=t + 1),
                "is_internal": False,
                "partitions": [
                    {
                        "error_code": 0,
                        "partition_index": p,
                        "leader_id": p % 3,
                        "leader_epoch": 0,
                        "replica_nodes": [p % 3, (p + 1) % 3, (p + 2) % 3],
                        "isr_nodes": [p % 3, (p + 1) % 3, (p + 2) % 3],
                        "offline_replicas": [],
                    }
                    for p in range(100)
                ],
                "topic_authorized_operations": -2147483648,
            }
            for t in range(10)
        ],
    }


def timed(fn, n: int) -> float:
    """CPU microseconds per call of fn() over n calls (after a warm-up)."""
    for _ in range(max(1, n // 10)):
        fn()
    t0 = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - t0) / n * 1e6


async def _echo_round_trips(n: int) -> float:
    a, b = socket.socketpair()
    ra, wa = await asyncio.open_connection(sock=a)
    rb, wb = await asyncio.open_connection(sock=b)
    msg = b"x" * 100

    async def serve() -> None:
        for _ in range(n):
            data = await rb.readexactly(len(msg))
            wb.write(data)

    server = asyncio.create_task(serve())
    t0 = time.process_time()
    for _ in range(n):
        wa.write(msg)
        await ra.readexactly(len(msg))
    cpu = time.process_time() - t0
    await server
    wa.close()
    wb.close()
    return cpu / n * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    frame, batch = produce_frame()
    body = metadata_body()
    (h,) = parse_batches(batch)

    def decode() -> None:
        codec.decode_request(memoryview(frame)[4:])

    def encode() -> None:
        codec.encode_response(METADATA, 12, 1, body)

    def walk() -> None:
        for hh in parse_batches(batch):
            walk_batch(batch, hh, max_record_bytes=1 << 20, max_uncompressed_bytes=1 << 24)

    n = args.n
    print(f"load average: {os.getloadavg()[0]:.1f}")
    print(f"decode Produce v9 (100 records, 16 KiB): {timed(decode, n * 5):.1f} CPU us")
    print(f"encode Metadata v12 (1,000 partitions): {timed(encode, n // 4):.1f} CPU us")
    print(f"walk a 100-record batch (CRC + records): {timed(walk, n * 2):.1f} CPU us")
    print(f"asyncio request + answer: {asyncio.run(_echo_round_trips(n * 5)):.1f} CPU us")

    def work() -> None:
        for _ in range(n // 8):
            encode()

    if args.threads > 1:
        t0, c0 = time.perf_counter(), time.process_time()
        work()
        one_wall, one_cpu = time.perf_counter() - t0, time.process_time() - c0
        threads = [threading.Thread(target=work) for _ in range(args.threads)]
        t0, c0 = time.perf_counter(), time.process_time()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(
            f"{args.threads} threads of the Metadata encode: wall {wall / one_wall:.2f}x and "
            f"CPU {cpu / one_cpu:.2f}x one thread's for {args.threads}x the work"
        )
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    ft = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    print(f"python {sys.version.split()[0]}, free-threaded build {ft}, GIL enabled {gil}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
