"""Broker CPU per GiB of produced records, per codec: the cost of append validation.

pybroker only.  Starts ``python -m pybroker serve`` (embedded metadata store, a temp log dir)
with the given PYTHONPATH, so two checkouts can be compared, creates one topic per codec and
sends pre-built Produce v9 requests (acks=1, one batch of ``--records`` records of
``--record-bytes`` bytes each, half random and half repeated bytes, so every codec compresses
about 2:1), a few in flight.  The client builds every batch before the timing starts; the figure
is the broker process's user+system CPU seconds (/proc/<pid>/stat) during the sends, divided by
the GiB of uncompressed record values sent.

    python -m bench.validation_cost --mib 256                      # this checkout
    python -m bench.validation_cost --mib 256 --pythonpath /tmp/old  # another checkout
    python -m bench.validation_cost --codecs lz4 --topic-codec zstd  # recompression's cost
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pybroker.wire import codec
from pybroker.wire.records import build_batch

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
IN_FLIGHT = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Conn:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.corr = 0

    def send(self, api_key: int, version: int, body: dict) -> None:
        self.corr += 1
        self.sock.sendall(codec.encode_request(api_key, version, self.corr, "bench", body))

    def recv(self, api_key: int, version: int) -> dict:
        (n,) = struct.unpack(">i", self._exact(4))
        return codec.decode_response(api_key, version, self._exact(n))[1]

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            buf += chunk
        return bytes(buf)


def _produce_body(topic: str, batch: bytes) -> dict:
    return {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 30000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    }


def _batches(codec_id: int, count: int, records: int, size: int) -> list[bytes]:
    rnd = random.Random(codec_id)
    out = []
    for _ in range(count):
        values = [
            rnd.randbytes(size // 2) + bytes([rnd.randrange(256)]) * (size - size // 2)
            for _ in range(records)
        ]
        out.append(build_batch([(None, v, []) for v in values], compression=codec_id))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256, help="MiB of record values per codec")
    ap.add_argument("--records", type=int, default=1000, help="records per batch")
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--codecs", default=",".join(CODECS))
    ap.add_argument("--pythonpath", default=None, help="PYTHONPATH of the broker")
    ap.add_argument(
        "--topic-codec",
        default="producer",
        help="the topics' compression.type (other than producer: the broker recompresses)",
    )
    args = ap.parse_args()
    batch_bytes = args.records * args.record_bytes
    count = max(1, args.mib * 2**20 // batch_bytes)
    distinct = 8  # batches are reused round-robin: the broker cannot tell
    port = _free_port()
    env = dict(os.environ)
    if args.pythonpath:
        env["PYTHONPATH"] = args.pythonpath
    with tempfile.TemporaryDirectory(prefix="pybroker-vcost-") as tmp:
        broker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pybroker",
                "serve",
                "--override",
                f"listeners=PLAINTEXT://127.0.0.1:{port}",
                "--override",
                f"log.dirs={tmp}/data",
                "--override",
                "log.segment.bytes=268435456",
            ],
            env=env,
            cwd=tmp,  # not this checkout: -m would import pybroker from the cwd
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            while "pybroker started" not in (broker.stderr.readline() or "pybroker started"):
                pass
            conn = _Conn(port)
            print(
                f"{'codec':8} {'wire MiB':>9} {'GiB values':>10} {'broker CPU s':>12} "
                f"{'CPU-s/GiB':>10}"
            )
            for name in args.codecs.split(","):
                topic = f"vcost-{name}-{args.topic_codec}"
                conn.send(
                    19,
                    5,
                    {
                        "topics": [
                            {
                                "name": topic,
                                "num_partitions": 1,
                                "replication_factor": 1,
                                "assignments": [],
                                "configs": [
                                    {"name": "compression.type", "value": args.topic_codec}
                                ],
                            }
                        ],
                        "timeout_ms": 10000,
                        "validate_only": False,
                    },
                )
                conn.recv(19, 5)
                time.sleep(0.5)
                frames = _batches(CODECS[name], distinct, args.records, args.record_bytes)
                wire = 0
                cpu0 = _cpu_seconds(broker.pid)
                pending = 0
                for i in range(count):
                    b = frames[i % distinct]
                    wire += len(b)
                    conn.send(0, 9, _produce_body(topic, b))
                    pending += 1
                    if pending >= IN_FLIGHT:
                        r = conn.recv(0, 9)
                        code = r["responses"][0]["partition_responses"][0]["error_code"]
                        assert code == 0, r
                        pending -= 1
                for _ in range(pending):
                    conn.recv(0, 9)
                cpu = _cpu_seconds(broker.pid) - cpu0
                gib = count * batch_bytes / 2**30
                print(f"{name:8} {wire / 2**20:9.0f} {gib:10.3f} {cpu:12.2f} {cpu / gib:10.2f}")
        finally:
            broker.terminate()
            broker.wait(30)


if __name__ == "__main__":
    main()
