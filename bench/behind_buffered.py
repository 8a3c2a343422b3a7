"""The event loop's CPU to send a fetch answer's log region behind bytes the transport still
buffers (a client that pipelines requests and reads slowly: the answer before it is not out
yet), on each event loop (event.loop).

In one process: a KafkaConnection on a socket pair, a reader thread draining the other end;
``--rounds`` times, 4 MiB of bytes written through the transport (more than the socket takes)
and then an answer of a header and a ``--mib`` MiB region of a file, sent with the
connection's ``_send``.  Printed: the loop thread's CPU seconds (``time.thread_time``, the
reader's excluded) per GiB of regions.  Compare trees by running it with each on PYTHONPATH:

    PYTHONPATH=$PWD python -m bench.behind_buffered --loops asyncio,uvloop
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pybroker import event_loop
from pybroker.connection import KafkaConnection

EARLIER = 4 << 20  # bytes of the answer before: more than the socket buffers take


@dataclass
class Region:  # what PartitionLog.read hands out: a file region for sendfile
    file: Any
    position: int
    size: int


async def _send_behind(path: Path, size: int, rounds: int) -> float:
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    conn = KafkaConnection(services=None, max_request_bytes=1 << 20)
    await loop.connect_accepted_socket(lambda: conn, ours)
    got = [0]

    def drain() -> None:
        while chunk := theirs.recv(1 << 20):
            got[0] += len(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    cpu = 0.0
    with path.open("rb") as f:
        for _ in range(rounds):
            conn._write(b"e" * EARLIER)
            c0 = time.thread_time()
            await conn._send([b"head", Region(f, 0, size)])
            cpu += time.thread_time() - c0
    while got[0] < rounds * (EARLIER + 4 + size):
        await asyncio.sleep(0.01)
    conn.close()
    theirs.close()
    return cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loops", default="asyncio,uvloop")
    ap.add_argument("--mib", type=int, default=64, help="the region's size (MiB)")
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args(argv)
    size = args.mib << 20
    with tempfile.TemporaryDirectory(prefix="behind-") as tmp:
        path = Path(tmp) / "00000000000000000000.log"
        path.write_bytes(os.urandom(size))
        for name in args.loops.split(","):
            if not event_loop.available(name):
                print(f"{name}: not installed")
                continue
            cpu = event_loop.run(_send_behind(path, size, args.rounds), name)
            gib = args.rounds * size / (1 << 30)
            load = os.getloadavg()[0]
            print(
                f"{name}: loop CPU {cpu:.3f} s for {gib:.2f} GiB = {cpu / gib:.3f} s/GiB (load {load:.1f})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
