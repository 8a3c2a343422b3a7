"""W21's offset lookup alone: one broker with ``--partitions`` empty partitions (topics of
100), then ``--rounds`` consumers of fresh groups (confluent-kafka, W21's settings) subscribing
to them all with no committed offsets, so librdkafka asks ListOffsets once per partition.
Every second (librdkafka's statistics) it prints the partitions' fetch states, the ListOffsets
and Fetch requests librdkafka has sent, its out-queue and in-flight counts and how often its
broker thread woke up; per round the time from the subscribe until no partition waits for its
offset, and the hold (ListOffsets made but not handed to the connection) with the requests sent
before it.  ``--debug topic,protocol,queue`` has librdkafka write its own debug log to stderr
(each "Wake-up: fetch start" is one op its broker thread serves before any request it has
queued: docs/scale.md, offsets14).

    python -m bench.scale.offsets_probe [--target pybroker-zk|pybroker|kafka-zk|kafka]
                                        [--partitions 10000] [--rounds 1] [--workdir DIR]
                                        [--debug CONTEXTS]

docs/scale.md ("Session 13: W21's offset lookup, offsets27" and "Session 14: what holds
librdkafka's ListOffsets, offsets14") has what it showed.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer

from bench.scale.harness import loadavg
from bench.scale.partitions import start_w21_target
from pybroker.testing.scale import PER_TOPIC, create_topics, topic_names, wait_all_answer

WAITING = ("none", "offset-query", "offset-wait")
_TICK = os.sysconf("SC_CLK_TCK")


def broker_threads_cpu() -> float:
    """CPU seconds of this process's librdkafka broker threads for real brokers (named
    rdk:broker<id> by librdkafka; the bootstrap and coordinator handles are rdk:broker-1)."""
    total = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if not re.fullmatch(r"rdk:broker\d+", f.read().strip()):
                    continue
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _TICK


class _Round:
    """Prints each statistics report; notes when no partition waits for its offset, and the
    hold: the reports in which ListOffsets librdkafka has made (``offset-wait``) are neither
    in its out-queue nor in flight (only the Fetch is), how many were held, how many had been
    answered before, and how often its broker thread woke up meanwhile."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.all_have_offsets: float | None = None
        self.wakeups = 0
        self.held = 0
        self.answered_before = 0
        self.hold_wakeups = 0
        self.hold_reports = 0
        self.cpu = 0.0
        self.hold_cpu = 0.0

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
        wakeups = sum(b.get("wakeups", 0) for b in brokers)
        woke, self.wakeups = wakeups - self.wakeups, wakeups
        cpu = broker_threads_cpu()
        used, self.cpu = cpu - self.cpu, cpu
        took = time.monotonic() - self.t0
        print(
            f"{took:6.1f} s  states {dict(states)}  ListOffsets sent {req['ListOffsets']}  "
            f"Fetch sent {req['Fetch']}  out-queue {queued}  in flight {inflight}  "
            f"broker thread wake-ups {woke} (its CPU {used:.2f} s)",
            flush=True,
        )
        # made but not sent: every partition here needs one ListOffsets (a fresh group);
        # "offset-wait" also counts those answered whose answer the main thread has not
        # handled yet, hence made - sent
        held = states["offset-wait"] + states["active"] - req["ListOffsets"]
        if held > 0 and queued == 0 and inflight <= 1:
            self.hold_reports += 1
            self.hold_wakeups += woke
            self.hold_cpu += used
            if held > self.held:
                self.held, self.answered_before = held, req["ListOffsets"]
        waiting = sum(states[st] for st in WAITING)
        if states and not waiting and self.all_have_offsets is None:
            self.all_have_offsets = took


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="pybroker-zk")
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--workdir")
    ap.add_argument(
        "--debug", help="librdkafka debug contexts (e.g. topic,protocol), logged by it to stderr"
    )
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
            conf = {
                "bootstrap.servers": f"{node.host}:{node.port}",
                "group.id": f"offsets-probe-{i}-{time.time_ns()}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "fetch.max.bytes": 50 * 2**20,
                "statistics.interval.ms": 1000,
                "stats_cb": r,
            }
            if args.debug:
                conf["debug"] = args.debug
            c = Consumer(conf)
            r.t0 = time.monotonic()
            c.subscribe(names)
            while r.all_have_offsets is None and time.monotonic() - r.t0 < 300:
                c.consume(10000, 0.5)
            c.close()
            print(
                f"{args.target} {args.partitions:,} partitions, round {i}: subscribe -> every "
                f"partition has its offset {r.all_have_offsets} s; held {r.held} ListOffsets "
                f"in {r.hold_reports} reports (1 s each) after {r.answered_before} sent, "
                f"broker thread wake-ups in them {r.hold_wakeups}, its CPU {r.hold_cpu:.2f} s",
                flush=True,
            )
    finally:
        system.stop()
    print(f"load after: {loadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
