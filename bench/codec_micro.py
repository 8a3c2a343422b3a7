"""Micro-benchmark of the protocol codec (issue 28): microseconds per decode and encode of a few
representative messages, for one or more source trees run alternately.

    python -m bench.codec_micro [--tree OLD --tree NEW] [--rounds 3] [--repeat 7]

Each tree runs in a child process (``PYTHONPATH=<tree>``), so the codec measured is the
tree's; rounds alternate the trees.  A message body is filled from its schema declaration
(wire/schema.py, the same in every tree): every field present in the version, integers 1,
names of 12 characters, records of 1 KiB, ``--elements`` entries in the top-level arrays (1 in
nested ones), tagged fields absent.  Timed: the broker's side (a request frame decoded with
``decode_request``, its answer encoded with ``encode_response``) and a follower's Fetch
answer decoded (``decode_response``).  Per case: process CPU time of a batch of calls over
the batch, the minimum of ``--repeat`` batches and over the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any

# (label, api key, version, elements in each top-level array)
CASES = [
    ("Produce v9", 0, 9, 3),
    ("Fetch v12", 1, 12, 10),
    ("Fetch v15", 1, 15, 10),
    ("Metadata v12", 3, 12, 10),
    ("OffsetCommit v8", 8, 8, 1),
    ("OffsetCommit v9", 8, 9, 1),
    ("JoinGroup v9", 11, 9, 3),
    ("Heartbeat v4", 12, 4, 1),
    ("ApiVersions v3", 18, 3, 60),
]


def _value(f: Any, version: int, elements: int) -> Any:
    if f.is_array:
        n = elements
        if f.is_struct:
            return [_struct(f.fields, version, 1) for _ in range(n)]
        return [_scalar(f.element_type) for _ in range(n)]
    if f.is_struct:
        return _struct(f.fields, version, 1)
    return _scalar(f.type)


def _scalar(t: str) -> Any:
    if t == "string":
        return "topic-name-1"
    if t == "bytes":
        return b"b" * 64
    if t == "records":
        return b"r" * 1024
    if t == "uuid":
        return uuid.UUID(int=12345)
    if t == "bool":
        return True
    if t == "float64":
        return 1.5
    return 1


def _struct(fields: Any, version: int, elements: int) -> dict:
    return {
        f.name: _value(f, version, elements)
        for f in fields
        if version in f.versions and f.tag is None
    }


def _time(fn: Any, repeat: int) -> float:
    n = 1
    while True:  # a batch of at least ~20 ms
        t = time.process_time()
        for _ in range(n):
            fn()
        if time.process_time() - t > 0.02:
            break
        n *= 2
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, (time.process_time() - t) / n)
    return best * 1e6


def child(repeat: int) -> dict[str, float]:
    from pybroker.wire import codec  # noqa: PLC0415  (the tree's codec, from PYTHONPATH)
    from pybroker.wire.schema import SCHEMAS  # noqa: PLC0415

    out = {}
    for label, key, version, elements in CASES:
        a = SCHEMAS.by_key[key]
        request = _struct(a.request.fields, version, elements)
        response = _struct(a.response.fields, version, elements)
        frame = memoryview(codec.encode_request(key, version, 7, "client-1", request)[4:])
        out[f"{label} request decode"] = _time(lambda f=frame: codec.decode_request(f), repeat)
        out[f"{label} response encode"] = _time(
            lambda k=key, v=version, b=response: codec.encode_response(k, v, 7, b), repeat
        )
        if key == 1:
            answer = memoryview(codec.encode_response(key, version, 7, response)[0][4:])
            out[f"{label} response decode"] = _time(
                lambda k=key, v=version, f=answer: codec.decode_response(k, v, f), repeat
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", action="append", help="a source tree (default: this one)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        json.dump(child(args.repeat), sys.stdout)
        return
    trees = args.tree or [os.getcwd()]
    best: dict[str, dict[str, float]] = {t: {} for t in trees}
    for _ in range(args.rounds):
        for tree in trees:
            env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
            cmd = [
                sys.executable,
                os.path.abspath(__file__),
                "--child",
                "--repeat",
                str(args.repeat),
            ]
            got = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True).stdout)
            for case, us in got.items():
                best[tree][case] = min(us, best[tree].get(case, float("inf")))
    print(f"load average: {os.getloadavg()[0]:.2f}")
    print(f"{'case':40}" + "".join(f"{os.path.basename(t.rstrip('/'))[-14:]:>16}" for t in trees))
    for case in best[trees[0]]:
        row = "".join(f"{best[t][case]:14.2f}us" for t in trees)
        if len(trees) == 2:
            row += f"  x{best[trees[0]][case] / best[trees[1]][case]:.2f}"
        print(f"{case:40}{row}")


if __name__ == "__main__":
    main()
