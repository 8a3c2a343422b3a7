"""Metadata for all topics at n partitions (W21's topics, 100 partitions each): the broker's
answer timed on the wire (request sent -> last byte read, raw socket) beside the same request
timed with the bench's decoding (pybroker.testing.scale.metadata, what W21 reports).

    python -m bench.scale.metadata_wire --partitions 10000 --modes embedded,zookeeper
"""

from __future__ import annotations

import argparse
import shutil
import socket
import struct
import tempfile
import time
from pathlib import Path

from bench.scale.harness import loadavg, start_pybroker
from pybroker.testing.scale import Conn, create_topics, metadata, wait_all_answer

PER_TOPIC = 100
# Metadata v12, header v2: topics null, allow_auto_topic_creation false,
# include_topic_authorized_operations false, no tagged fields
_BODY = b"\x00\x00\x00\x00"


def wire_ms(address: tuple[str, int], rounds: int = 5) -> tuple[float, int]:
    """Median ms from sending the request to reading the answer's last byte; answer bytes."""
    took, size = [], 0
    for cid in range(rounds):
        client = b"metadata-wire"
        req = struct.pack(">hhih", 3, 12, cid, len(client)) + client + b"\x00" + _BODY
        with socket.create_connection(address) as s:
            t0 = time.perf_counter()
            s.sendall(struct.pack(">i", len(req)) + req)
            size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
            got = 0
            while got < size:
                chunk = s.recv(1 << 20)
                if not chunk:
                    raise ConnectionError("closed mid-answer")
                got += len(chunk)
            took.append((time.perf_counter() - t0) * 1000)
    return sorted(took)[rounds // 2], size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--modes", default="embedded,zookeeper")
    args = ap.parse_args()
    names = [f"s{i:05d}" for i in range(args.partitions // PER_TOPIC)]
    for mode in args.modes.split(","):
        workdir = Path(tempfile.mkdtemp(prefix=f"metadata-wire-{mode}-"))
        system = start_pybroker(workdir, brokers=1, metadata_mode=mode)
        try:
            node = system.nodes[0]
            create_topics(node.address, names, PER_TOPIC, 1, 300)
            wait_all_answer(node.address, names, PER_TOPIC, 300)
            time.sleep(5)
            wire, size = wire_ms(node.address)
            with Conn(*node.address, timeout_s=300) as c:
                decoded = sorted(metadata(c, None).seconds * 1000 for _ in range(3))
            print(
                f"{mode}: n={args.partitions:,} wire {wire:.1f} ms ({size:,} bytes), "
                f"decoded by the bench {decoded[1]:.1f} ms (median of 3), load {loadavg()}",
                flush=True,
            )
        finally:
            system.stop()
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
