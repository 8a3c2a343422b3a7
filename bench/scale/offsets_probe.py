"""W21's offset lookup alone: one broker with ``--partitions`` empty partitions (topics of
100), then ``--rounds`` consumers of fresh groups (confluent-kafka, W21's settings) subscribing
to them all with no committed offsets, so librdkafka asks ListOffsets once per partition.
Every second (librdkafka's statistics) it prints the partitions' fetch states, the ListOffsets
and Fetch requests librdkafka has sent, and its out-queue and in-flight counts; per round the
time from the subscribe until no partition waits for its offset.

    python -m bench.scale.offsets_probe [--target pybroker-zk|pybroker|kafka-zk|kafka]
                                        [--partitions 10000] [--rounds 1] [--workdir DIR]

docs/scale.md ("Session 13: W21's offset lookup, offsets27") has what it showed.
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer

from bench.scale.harness import loadavg
from bench.scale.partitions import start_w21_target
from pybroker.testing.scale import PER_TOPIC, create_topics, topic_names, wait_all_answer

WAITING = ("none", "offset-query", "offset-wait")


class _Round:
    """Prints each statistics report; notes when no partition waits for its offset."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.all_have_offsets: float | None = None

    def __call__(self, raw: str) -> None:
        s = json.loads(raw)
        states = collections.Counter(
            p.get("fetch_state")
            for t in s.get("topics", {}).values()
            for k, p in t.get("partitions", {}).items()
            if k != "-1"
        )
        brokers = [b for b in s.get("brokers", {}).values() if b.get("nodeid", -1) >= 0]
        req = collections.Counter()
        for b in brokers:
            req.update(b.get("req", {}))
        queued = sum(b.get("outbuf_cnt", 0) for b in brokers)
        inflight = sum(b.get("waitresp_cnt", 0) for b in brokers)
        took = time.monotonic() - self.t0
        print(
            f"{took:6.1f} s  states {dict(states)}  ListOffsets sent {req['ListOffsets']}  "
            f"Fetch sent {req['Fetch']}  out-queue {queued}  in flight {inflight}",
            flush=True,
        )
        waiting = sum(states[st] for st in WAITING)
        if states and not waiting and self.all_have_offsets is None:
            self.all_have_offsets = took


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="pybroker-zk")
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--workdir")
    args = ap.parse_args(argv)
    wd = Path(args.workdir or tempfile.mkdtemp(prefix="offsets-probe-"))
    print(f"load before: {loadavg()}", flush=True)
    system = start_w21_target(args.target, wd)
    try:
        node = next(iter(system.nodes.values()))
        names = topic_names(args.partitions)
        create_topics(node.address, names, PER_TOPIC, 1, 600)
        wait_all_answer(node.address, names, PER_TOPIC, 600)
        time.sleep(3)
        for i in range(args.rounds):
            r = _Round()
            c = Consumer(
                {
                    "bootstrap.servers": f"{node.host}:{node.port}",
                    "group.id": f"offsets-probe-{i}-{time.time_ns()}",
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                    "fetch.max.bytes": 50 * 2**20,
                    "statistics.interval.ms": 1000,
                    "stats_cb": r,
                }
            )
            r.t0 = time.monotonic()
            c.subscribe(names)
            while r.all_have_offsets is None and time.monotonic() - r.t0 < 300:
                c.consume(10000, 0.5)
            c.close()
            print(
                f"{args.target} {args.partitions:,} partitions, round {i}: subscribe -> every "
                f"partition has its offset {r.all_have_offsets} s",
                flush=True,
            )
    finally:
        system.stop()
    print(f"load after: {loadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
