"""W21's reading alone, repeated: one broker with ``--partitions`` partitions (topics of 100),
256 MiB of 1 KiB records written round-robin to the first min(n, 10,000) of them (W21's
produce), then ``--rounds`` consumers of fresh groups that give every partition offset 0 on
assignment (W21's "consume, start offsets given": no ListOffsets) read it all back.  Per round:
the broker's CPU and MB/s, librdkafka's Fetch count (its statistics) during the reading, then
``--idle`` seconds of the same consumer polling with nothing left to read (each Fetch an empty
long-poll naming every partition), whose broker CPU per Fetch (less the broker's CPU in as many
seconds with no client, measured before the round) is the per-partition part of a Fetch
without bytes.  ``--profile FILE`` runs py-spy (raw, ``--rate`` a second) on a pybroker
broker during each round's reading (FILE.round<i>).

    python -m bench.scale.read_probe [--target pybroker-zk|pybroker|kafka-zk|kafka]
                                     [--partitions 10000] [--rounds 3] [--idle 10]
                                     [--profile FILE --rate 250]

docs/scale.md ("Session 14: the reading alone, read14") has what it showed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer

from bench.clients import produce_retrying
from bench.scale.harness import GIB, MIB, loadavg
from bench.scale.partitions import (
    PRODUCE_BYTES,
    PRODUCE_PARTITIONS,
    RECORD_BYTES,
    assign_from_zero,
    producer_config,
    start_w21_target,
)
from pybroker.testing.procstat import cpu_seconds
from pybroker.testing.scale import PER_TOPIC, create_topics, topic_names, wait_all_answer


class _Stats:
    """librdkafka's statistics every second: Fetch requests sent and bytes received from the
    broker (the brokers with a node id)."""

    def __init__(self) -> None:
        self.fetches = 0
        self.rx = 0

    def __call__(self, raw: str) -> None:
        s = json.loads(raw)
        brokers = [b for b in s.get("brokers", {}).values() if b.get("nodeid", -1) >= 0]
        self.fetches = sum(b.get("req", {}).get("Fetch", 0) for b in brokers)
        self.rx = sum(b.get("rxbytes", 0) for b in brokers)


def _produce(bootstrap: str, names: list[str]) -> int:
    parts = [(t, p) for t in names for p in range(PER_TOPIC)][:PRODUCE_PARTITIONS]
    records = PRODUCE_BYTES // RECORD_BYTES
    value = os.urandom(RECORD_BYTES)
    producer = Producer(producer_config(bootstrap))
    for i in range(records):
        t, p = parts[i % len(parts)]
        produce_retrying(producer, t, value, partition=p)
        if i % 10000 == 0:
            producer.poll(0)
    assert producer.flush(600) == 0
    return records


def _spy(out: str, rate: int, pid: int) -> subprocess.Popen:
    spy = subprocess.Popen(
        ["py-spy", "record", "-r", str(rate), "-f", "raw", "-o", out, "-p", str(pid)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.5)  # (attached)
    return spy


def _round(
    bootstrap: str,
    topics: list[str],
    records: int,
    pids: list[int],
    i: int,
    idle: float,
    spy_args: list | None,
) -> None:
    stats = _Stats()
    # the broker's own CPU with no client, as long as the idle polling below
    b0 = cpu_seconds(pids)
    time.sleep(idle)
    base = (cpu_seconds(pids) - b0) / idle

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-probe-{i}-{time.time_ns()}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 * MIB,
            "statistics.interval.ms": 1000,
            "stats_cb": stats,
        }
    )
    spy = _spy(*spy_args) if spy_args else None
    c0, t0 = cpu_seconds(pids), time.monotonic()
    consumer.subscribe(topics, on_assign=assign_from_zero)
    got = 0
    while got < records and time.monotonic() - t0 < 600:
        got += sum(m.error() is None for m in consumer.consume(10000, 0.2))
    took = time.monotonic() - t0
    c1 = cpu_seconds(pids)
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(60)
    # the statistics of the reading: wait for the next report
    consumer.poll(1.2)
    f1, rx1 = stats.fetches, stats.rx
    c2, t2 = cpu_seconds(pids), time.monotonic()
    while time.monotonic() - t2 < idle:
        consumer.poll(0.5)
    consumer.poll(1.2)
    c3, f3 = cpu_seconds(pids), stats.fetches
    t3 = time.monotonic()
    consumer.close()
    cpu = c1 - c0
    moved = got * RECORD_BYTES
    idle_fetches = f3 - f1
    idle_cpu = c3 - c2 - base * (t3 - t2)
    per_fetch = idle_cpu / idle_fetches if idle_fetches else float("nan")
    print(
        f"round {i}: read {got:,} records in {took:.2f} s ({moved / MIB / took:.1f} MB/s), "
        f"broker CPU {cpu:.2f} s ({cpu / (moved / GIB):.2f} CPU-s per GiB); Fetches by then "
        f"{f1} ({rx1 / MIB:.0f} MiB received); idle {t3 - t2:.1f} s: {idle_fetches} empty "
        f"Fetches, broker CPU {c3 - c2:.2f} s, {idle_cpu:.2f} s above its {base:.3f} CPU-s a second "
        f"with no client ({per_fetch * 1000:.1f} ms a Fetch); "
        f"load {loadavg()}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="pybroker-zk")
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--idle", type=float, default=10.0)
    ap.add_argument("--profile", help="py-spy raw output file (pybroker targets)")
    ap.add_argument("--rate", type=int, default=250)
    ap.add_argument("--workdir")
    args = ap.parse_args(argv)
    wd = Path(args.workdir or tempfile.mkdtemp(prefix="read-probe-"))
    print(f"load before: {loadavg()}", flush=True)
    system = start_w21_target(args.target, wd)
    try:
        node = next(iter(system.nodes.values()))
        bootstrap = f"{node.host}:{node.port}"
        names = topic_names(args.partitions)
        create_topics(node.address, names, PER_TOPIC, 1, 600)
        wait_all_answer(node.address, names, PER_TOPIC, 600)
        records = _produce(bootstrap, names)
        topics = names[: -(-PRODUCE_PARTITIONS // PER_TOPIC)]
        time.sleep(3)
        pids = system.pids()
        for i in range(args.rounds):
            spy = None
            if args.profile:  # the reading only
                spy = [f"{args.profile}.round{i}", args.rate, node.pid()]
            _round(bootstrap, topics, records, pids, i, args.idle, spy)
    finally:
        system.stop()
    print(f"load after: {loadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
