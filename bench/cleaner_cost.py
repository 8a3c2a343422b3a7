"""The log cleaner's work on files in process, without a broker: CPU and wall time of one clean
(``pybroker.log.cleaner_job.run_clean_job``: map the dirty range, write the ``.cleaned``
segments) of a W9-shaped log, for one or more pybroker checkouts run alternately.

    python -m bench.cleaner_cost                                   # 1 GiB like W9, this checkout
    python -m bench.cleaner_cost --pythonpath /old/checkout --pythonpath .  --runs 3
    python -m bench.cleaner_cost --profile /tmp/clean.txt          # py-spy raw (collapsed) stacks

The log (made once, kept under ``--dir``): ``--mib`` of ``--record-bytes`` records in
batches of about 1 MiB (as librdkafka's batch.size=1MiB makes them in W9), keys drawn with a
fixed seed from ``--keys`` keys, 64 MiB segments, uncompressed unless ``--codec``.  Each run
cleans every segment but the last (the active one) with the broker's defaults (128 MiB
dedupe buffer, one thread) and segment.bytes 64 MiB, then deletes the ``.cleaned`` files.
Figures: CPU seconds (user + system of the child process running the clean) and wall
seconds per GiB cleaned.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from crc32c import crc32c

from pybroker.wire.primitives import write_varint
from pybroker.wire.records import HEADER, HEADER_SIZE, LOG_OVERHEAD, compress

MIB = 1 << 20
SEGMENT_BYTES = 64 * MIB
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

# Runs in the child, with the checkout under test first on sys.path.
_CHILD = r"""
import json, os, resource, sys, time
from pathlib import Path
from pybroker.log.cleaner_job import CleanJob, SegmentRef, run_clean_job
d = Path(sys.argv[1])
logs = sorted(p for p in d.iterdir() if p.name.endswith(".log"))
bases = [int(p.name[:-4]) for p in logs]
refs = [SegmentRef(b, p, p.stat().st_size, n) for b, p, n in zip(bases, logs, bases[1:])]
job = CleanJob(directory=d, segments=refs, first_dirty=0, first_uncleanable=bases[-1],
    map_capacity=int(sys.argv[2]), segment_bytes=64 << 20, index_interval_bytes=4096,
    max_index_bytes=10 << 20, delete_retention_ms=86_400_000, io_buffer_size=512 << 10,
    aborted=[], last_batches={}, now=int(time.time() * 1000))
r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
result = run_clean_job(job)
t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
for p in d.glob("*.cleaned"):
    p.unlink()
print(json.dumps({"cpu": r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime,
    "sys": r1.ru_stime - r0.ru_stime, "wall": t1 - t0, "bytes": sum(r.size for r in refs),
    "written": result.stats.bytes_written, "removed": result.stats.records_removed,
    "read": result.stats.records_read}))
"""


def make_log(directory: Path, mib: int, keys: int, record_bytes: int, codec: int) -> None:
    """The W9-shaped log (see the module docstring); kept if already there."""
    if (directory / "done").exists():
        return
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(1)
    value = os.urandom(record_bytes)
    per_batch = max(1, MIB // (record_bytes + 25))
    n = mib * MIB // record_bytes
    ts0 = 1_700_000_000_000
    offset = size = 0
    f = open(directory / f"{0:020d}.log", "wb")  # noqa: SIM115 - rolled below
    try:
        while offset < n:
            count = min(per_batch, n - offset)
            body = bytearray()
            for delta in range(count):
                key = b"key-%07d" % rng.randrange(keys)
                rec = bytearray(b"\x00")
                write_varint(rec, delta // 100)
                write_varint(rec, delta)
                write_varint(rec, len(key))
                rec += key
                write_varint(rec, len(value))
                rec += value
                write_varint(rec, 0)
                write_varint(body, len(rec))
                body += rec
            batch = bytearray(HEADER_SIZE) + compress(codec, bytes(body))
            HEADER.pack_into(
                batch, 0, offset, len(batch) - LOG_OVERHEAD, 0, 2, 0, codec, count - 1,
                ts0 + offset, ts0 + offset + (count - 1) // 100, -1, -1, -1, count,
            )  # fmt: skip
            batch[17:21] = crc32c(memoryview(batch)[21:]).to_bytes(4, "big")
            if size + len(batch) > SEGMENT_BYTES:
                f.close()
                f = open(directory / f"{offset:020d}.log", "wb")  # noqa: SIM115
                size = 0
            f.write(batch)
            size += len(batch)
            offset += count
    finally:
        f.close()
    (directory / f"{offset:020d}.log").touch()  # the active segment
    (directory / "done").touch()


def run_once(pythonpath: str, directory: Path, capacity: int, profile: str | None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(Path(pythonpath).resolve())}
    cmd = [sys.executable, "-c", _CHILD, str(directory), str(capacity)]
    if profile:
        cmd = ["py-spy", "record", "-r", "200", "-f", "raw", "-o", profile, "--", *cmd]
    # (cwd: not a checkout, whose pybroker/ would come before PYTHONPATH's with ``-c``)
    out = subprocess.run(
        cmd, env=env, check=True, capture_output=True, text=True, cwd=directory
    ).stdout
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--codec", choices=sorted(CODECS), default="none")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "cleaner-cost")
    ap.add_argument("--pythonpath", action="append", help="a checkout to measure (repeatable)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--profile", help="write py-spy raw stacks of the (last) run here")
    args = ap.parse_args()
    name = f"{args.mib}m-{args.keys}k-{args.record_bytes}b-{args.codec}"
    directory = args.dir / name
    make_log(directory, args.mib, args.keys, args.record_bytes, CODECS[args.codec])
    # the broker's default map: 128 MiB dedupe buffer, one thread, load factor 0.9
    from pybroker.log.cleaner import CleanerConfig

    capacity = CleanerConfig().map_capacity
    for run in range(args.runs):
        for path in args.pythonpath or ["."]:
            last = run == args.runs - 1 and path == (args.pythonpath or ["."])[-1]
            r = run_once(path, directory, capacity, args.profile if last else None)
            gib = r["bytes"] / (1 << 30)
            print(
                f"{path}: {r['cpu'] / gib:.2f} CPU-s/GiB (system {r['sys'] / gib:.2f}), "
                f"{r['wall'] / gib:.2f} s/GiB wall, {r['bytes'] / MIB / r['wall']:.0f} MB/s; "
                f"{r['removed']:,} of {r['read']:,} records removed, "
                f"{r['written'] / MIB:.1f} MiB written; load {os.getloadavg()[0]:.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
