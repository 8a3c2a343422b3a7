"""Summarize py-spy collapsed stacks (``--format raw --idle``) of a pybroker process.

    python -m bench.profiles.summarize bench/profiles/W1.txt [--top 15]

Only the event-loop (main) thread counts: stacks that start in ``_run_module_as_main``
(idle thread-pool workers are left out).  Prints the share of samples in which the loop was
idle (waiting in ``EpollSelector.select`` / uvloop's run), then the top frames as a share of
the busy samples: self time (the leaf function) and inclusive time (any frame on the stack),
grouped by function name (line numbers dropped).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter

_LINE = re.compile(r":\d+\)$")
IDLE_LEAVES = ("EpollSelector.select", "Loop.run_forever", "run_forever (uvloop")


def frame_name(frame: str) -> str:
    return _LINE.sub(")", frame)


def summarize(path: str, top: int = 15) -> str:
    total = idle = 0
    leaf: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    for line in open(path):
        stack, _, n = line.rstrip("\n").rpartition(" ")
        if not stack.startswith("_run_module_as_main"):
            continue
        count = int(n)
        frames = [frame_name(f) for f in stack.split(";")]
        total += count
        if any(frames[-1].startswith(x) for x in IDLE_LEAVES) or (
            "uvloop" in frames[-1] and "run_until_complete" in frames[-1]
        ):
            idle += count
            continue
        leaf[frames[-1]] += count
        for f in set(frames):
            incl[f] += count
    busy = total - idle
    if not total:
        return f"{path}: no event-loop samples"
    out = [
        f"{path}: {total} event-loop samples, idle {idle / total:.1%}, busy {busy / total:.1%}",
        f"  self (% of busy samples, top {top}):",
    ]
    out += [f"    {v / busy:6.1%}  {k}" for k, v in leaf.most_common(top)]
    out.append(f"  inclusive (% of busy samples, top {top} below the loop):")
    skip = ("_run_module_as_main", "_run_code", "<module>", "main (", "run (asyncio", "Runner.")
    skip += ("BaseEventLoop.run", "BaseEventLoop._run_once", "Handle._run", "Loop.run")
    rows = [(k, v) for k, v in incl.most_common() if not k.startswith(skip)]
    out += [f"    {v / busy:6.1%}  {k}" for k, v in rows[:top]]
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    for p in args.paths:
        print(summarize(p, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
