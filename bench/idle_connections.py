"""RSS a broker process holds per idle client connection (issue 27, W23's row without the rest
of W23).

    python -m bench.idle_connections [--connections 5000] [--tree DIR]

Starts ``pybroker serve`` (embedded store, a fresh data dir) from ``--tree`` (default: this
checkout; another tree compares old and new code), opens and closes 200 connections to warm
up, then opens ``--connections`` connections that each ask ApiVersions v3 once and stay open;
prints the broker's RSS before and after and the difference per connection.  The client side
is this process (RLIMIT_NOFILE raised to the hard limit).  Kafka's figure beside it is W23's
(`python -m bench.scale --workloads W23 --targets kafka`).
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pybroker.wire import codec


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss_kib(pid: int) -> int:
    return int(Path(f"/proc/{pid}/status").read_text().split("VmRSS:")[1].split()[0])


def measure(tree: Path, connections: int) -> dict[str, float]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    port = _free_port()
    with tempfile.TemporaryDirectory() as d:
        broker = subprocess.Popen(
            [
                sys.executable, "-m", "pybroker", "serve",
                "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                "--override", f"log.dirs={d}/logs",
            ],
            env=dict(os.environ, PYTHONPATH=str(tree)),
            cwd=tree,  # python -m puts the working directory first on sys.path
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        socks: list[socket.socket] = []
        try:
            for _ in range(150):
                try:
                    socket.create_connection(("127.0.0.1", port)).close()
                    break
                except OSError:
                    time.sleep(0.2)
            warm = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
            for s in warm:
                s.close()
            time.sleep(1.0)
            before = _rss_kib(broker.pid)
            request = codec.encode_request(
                18, 3, 1, "idle", {"client_software_name": "b", "client_software_version": "1"}
            )
            for _ in range(connections):
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall(request)
                socks.append(s)
            for s in socks:
                size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
                s.recv(size, socket.MSG_WAITALL)
            time.sleep(2.0)
            after = _rss_kib(broker.pid)
        finally:
            for s in socks:
                s.close()
            broker.terminate()
            broker.wait(60)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return {
        "rss_before_kib": before,
        "rss_after_kib": after,
        "kib_per_connection": (after - before) / connections,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--connections", type=int, default=5000)
    ap.add_argument("--tree", type=Path, default=Path(__file__).resolve().parent.parent)
    args = ap.parse_args()
    r = measure(args.tree, args.connections)
    print(
        f"{args.tree}: {args.connections} idle connections: RSS {r['rss_before_kib']} -> "
        f"{r['rss_after_kib']} KiB, {r['kib_per_connection']:.2f} KiB per connection"
    )


if __name__ == "__main__":
    main()
