"""W21: one broker, ``n`` partitions (topics of 100, RF 1; CreateTopics 50 topics at a time):
time (and broker CPU) until every partition answers ListOffsets; RSS and open descriptors at
rest; Metadata for all topics (time, bytes); a producer writing round-robin to min(n,
10,000) partitions and a consumer group reading them (MB/s, broker CPU s per GiB; then a
second group given its start offsets, so without librdkafka's offset lookup); a clean
restart and a restart after kill -9 until the broker listens and until every partition
answers.  pybroker with its embedded store (``--w21-metadata zookeeper``: on ZooKeeper)
beside Kafka in KRaft mode (one node).

The command is bench/scale/cli.py; docs/scale.md discusses the curves.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from bench.clients import produce_retrying
from bench.scale.harness import (
    GIB,
    MIB,
    Node,
    Results,
    System,
    profiled,
    run_on_each,
    start_kafka,
    start_pybroker,
    uuid_hex,
)
from pybroker.testing.procstat import cpu_seconds, cpu_split, rss_mib
from pybroker.testing.scale import (
    PER_TOPIC,
    UNREACHABLE,
    Conn,
    create_topics,
    metadata,
    open_fds,
    topic_names,
    wait_all_answer,
)

RECORD_BYTES = 1024
PRODUCE_PARTITIONS = 10_000
PRODUCE_BYTES = 256 * MIB


def _wait_listening(node: Node, timeout_s: float) -> float:
    """Seconds until the node answers Metadata (a broker that listens and serves)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if not node.running():
            raise RuntimeError(f"broker {node.node_id} exited during start")
        try:
            with Conn(*node.address, timeout_s=10) as c:
                md = metadata(c, [])
            if md.controller in md.brokers:
                return time.monotonic() - t0
        except UNREACHABLE:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"broker {node.node_id} not listening within {timeout_s}s")


def _restart(
    system: System, node: Node, names: list[str], how: str, res: Results, n: int, timeout_s: float
) -> None:
    w = "W21"
    t0 = time.monotonic()
    if how == "clean":
        code = node.terminate(timeout_s)
        res.add(w, n, system, "clean shutdown: SIGTERM -> exit (s)", time.monotonic() - t0)
        res.add(w, n, system, "clean shutdown: exit code", code)
    else:
        node.kill9()
    t0 = time.monotonic()
    node.restart()
    listening = _wait_listening(node, timeout_s)
    serving = wait_all_answer(node.address, names, PER_TOPIC, timeout_s, poll_s=1.0)
    serving += listening
    pid = node.pid()
    res.add(w, n, system, f"restart after {how}: start -> listening (s)", listening)
    res.add(w, n, system, f"restart after {how}: start -> every partition answers (s)", serving)
    res.add(
        w, n, system, f"restart after {how}: CPU until then (s)", cpu_seconds([pid] if pid else [])
    )


class _FetchStats:
    """librdkafka's statistics (every second) during the consume: its Fetch requests to the
    broker, and when the last partition left offset-query / offset-wait (librdkafka asks
    ListOffsets for each partition that has no committed offset, one request per partition;
    until the last answer the partitions that have one are long-polled alone, each a Fetch
    naming all of them: docs/scale.md, consume12), with the broker's CPU then; and the
    hold (offsets14): how many ListOffsets librdkafka had made but not handed to its
    connection (``offset-wait``, out-queue empty, only the Fetch in flight) and how many it
    had sent before, which sets how long the hold lasts."""

    def __init__(self, pids: list[int], t0: float) -> None:
        self.pids, self.t0 = pids, t0
        self.fetches = 0
        self.held = 0
        self.sent_before_hold = 0
        self.waiting_until: float | None = None  # seconds from subscribe
        self.cpu_at_all_active: float | None = None
        self.fetches_at_all_active = 0

    def __call__(self, raw: str) -> None:
        s = json.loads(raw)
        brokers = [b for b in s.get("brokers", {}).values() if b.get("nodeid", -1) >= 0]
        self.fetches = sum(b.get("req", {}).get("Fetch", 0) for b in brokers)
        if self.waiting_until is not None:
            return
        states = [
            p.get("fetch_state")
            for t in s.get("topics", {}).values()
            for k, p in t.get("partitions", {}).items()
            if k != "-1"
        ]
        # made but not sent (a fresh group: one ListOffsets per partition; "offset-wait"
        # also counts answers the main thread has not handled yet, hence made - sent)
        sent = sum(b.get("req", {}).get("ListOffsets", 0) for b in brokers)
        held = states.count("offset-wait") + states.count("active") - sent
        queued = sum(b.get("outbuf_cnt", 0) for b in brokers)
        inflight = sum(b.get("waitresp_cnt", 0) for b in brokers)
        if held > self.held and queued == 0 and inflight <= 1:
            self.held, self.sent_before_hold = held, sent
        if states and not any(st in _OFFSET_STATES for st in states):
            self.waiting_until = time.monotonic() - self.t0
            self.cpu_at_all_active = cpu_seconds(self.pids)
            self.fetches_at_all_active = self.fetches


_OFFSET_STATES = ("none", "offset-query", "offset-wait")


def producer_config(bootstrap: str) -> dict[str, Any]:
    """W21's producer (confluent-kafka): acks=1, 50 ms linger, queues deep enough for the
    whole produce."""
    return {
        "bootstrap.servers": bootstrap,
        "acks": 1,
        "linger.ms": 50,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_000_000,
        "enable.idempotence": False,
    }


def assign_from_zero(consumer: Any, partitions: list) -> None:
    """on_assign: every partition from offset 0 (no ListOffsets)."""
    for tp in partitions:
        tp.offset = 0
    consumer.assign(partitions)


def _produce_consume(system: System, node: Node, names: list[str], res: Results, n: int) -> None:
    """A producer writing round-robin to the first PRODUCE_PARTITIONS partitions (1 KiB
    records), then one consumer of a group reading them all back (confluent-kafka)."""
    from confluent_kafka import Consumer, Producer

    w = "W21"
    parts = [(t, p) for t in names for p in range(PER_TOPIC)][:PRODUCE_PARTITIONS]
    records = PRODUCE_BYTES // RECORD_BYTES
    value = os.urandom(RECORD_BYTES)
    bootstrap = f"{node.host}:{node.port}"
    pids = system.pids()
    producer = Producer(producer_config(bootstrap))
    failures = [0]

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures[0] += 1

    with profiled(system, f"w21-{n}-produce"):
        c0, t0 = cpu_seconds(pids), time.monotonic()
        for i in range(records):
            t, p = parts[i % len(parts)]
            produce_retrying(producer, t, value, partition=p, on_delivery=delivered)
            if i % 10000 == 0:
                producer.poll(0)
        left = producer.flush(600)
        took = time.monotonic() - t0
        c1 = cpu_seconds(pids)
    moved = records * RECORD_BYTES
    res.add(w, n, system, f"produce to {len(parts):,} partitions (MB/s)", moved / MIB / took)
    res.add(w, n, system, "produce: broker CPU s per GiB", (c1 - c0) / (moved / GIB))
    res.add(w, n, system, "produce: failed deliveries", failures[0] + left)
    topics = sorted({t for t, _ in parts})
    stats = _FetchStats(pids, time.monotonic())
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"w21-{uuid_hex()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 * MIB,
            "statistics.interval.ms": 1000,
            "stats_cb": stats,
        }
    )
    with profiled(system, f"w21-{n}-consume"):
        c0, t0 = cpu_seconds(pids), time.monotonic()
        stats.t0 = t0
        consumer.subscribe(topics)
        got = 0
        first = None
        while got < records and time.monotonic() - t0 < 900:
            for m in consumer.consume(10000, 1.0):
                if m.error() is None:
                    got += 1
                    if first is None:
                        first = time.monotonic()
        took = time.monotonic() - t0
        c1 = cpu_seconds(pids)
        consumer.close()
    res.add(w, n, system, "consumer group: subscribe -> first record (s)", (first or t0) - t0)
    res.add(
        w,
        n,
        system,
        "consumer group: read all (MB/s, from subscribe)",
        got * RECORD_BYTES / MIB / took,
    )
    res.add(
        w,
        n,
        system,
        "consume: broker CPU s per GiB",
        (c1 - c0) / (max(got, 1) * RECORD_BYTES / GIB),
    )
    res.add(w, n, system, "consume: records read / written", f"{got:,} / {records:,}")
    res.add(w, n, system, "consume: Fetch requests (librdkafka's count)", stats.fetches)
    if stats.waiting_until is not None and stats.cpu_at_all_active is not None:
        # the bimodal figure's cause: how long some partitions waited for their ListOffsets
        # answer while the others were long-polled (consume12)
        res.add(
            w,
            n,
            system,
            "consume: subscribe -> every partition has its offset (s, to 1 s)",
            stats.waiting_until,
        )
        res.add(
            w,
            n,
            system,
            "consume: broker CPU / Fetch requests until then",
            f"{stats.cpu_at_all_active - c0:.2f} s / {stats.fetches_at_all_active}",
        )
        res.add(
            w,
            n,
            system,
            "consume: ListOffsets librdkafka held / had sent before (offsets14)",
            f"{stats.held:,} / {stats.sent_before_hold:,}",
        )
    _read_from_zero(Consumer, system, n, bootstrap, topics, records, res)


def _read_from_zero(
    consumer_cls: Any,
    system: System,
    n: int,
    bootstrap: str,
    topics: list[str],
    records: int,
    res: Results,
) -> None:
    """The same read by a second group whose consumer gives every partition its start offset
    (0) when assigned, so librdkafka asks no ListOffsets: the broker's reading without the
    client's offset-lookup hold, whose length is librdkafka's race (docs/scale.md,
    offsets14), comparable across brokers and runs."""
    w = "W21"
    pids = system.pids()

    consumer = consumer_cls(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"w21-zero-{uuid_hex()}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 * MIB,
        }
    )
    with profiled(system, f"w21-{n}-consume-from-zero"):
        c0, t0 = cpu_seconds(pids), time.monotonic()
        consumer.subscribe(topics, on_assign=assign_from_zero)
        got = 0
        while got < records and time.monotonic() - t0 < 900:
            got += sum(m.error() is None for m in consumer.consume(10000, 1.0))
        took = time.monotonic() - t0
        c1 = cpu_seconds(pids)
        consumer.close()
    moved = max(got, 1) * RECORD_BYTES
    res.add(
        w,
        n,
        system,
        "consume, start offsets given (no ListOffsets): broker CPU s per GiB (MB/s)",
        f"{(c1 - c0) / (moved / GIB):.1f} ({moved / MIB / took:.1f})",
    )
    res.add(w, n, system, "consume, start offsets given: records read", f"{got:,}")


def w21(system: System, n: int, res: Results, timeout_s: float) -> None:
    w = "W21"
    names = topic_names(n)
    node = next(iter(system.nodes.values()))
    pids = system.pids()
    s0 = cpu_split(pids)
    c0, t0 = cpu_seconds(pids), time.monotonic()
    create_topics(node.address, names, PER_TOPIC, 1, timeout_s)
    res.add(w, n, system, "create: CreateTopics answered (s)", time.monotonic() - t0)
    wait_all_answer(node.address, names, PER_TOPIC, timeout_s)
    res.add(w, n, system, "create: until every partition answers (s)", time.monotonic() - t0)
    res.add(w, n, system, "create: broker CPU (s)", cpu_seconds(pids) - c0)
    s1 = cpu_split(pids)
    # the kernel's part (system) moves with the disk's history: on this ext4 (no journal) a
    # new inode skips over every free inode deleted in the last minutes, one buffer lookup
    # each (docs/scale.md, scale12): the user part is the broker's own work
    res.add(
        w,
        n,
        system,
        "create: broker CPU user / system (s)",
        f"{s1[0] - s0[0]:.2f} / {s1[1] - s0[1]:.2f}",
    )
    time.sleep(10)
    pid = node.pid()
    assert pid is not None
    res.add(w, n, system, "RSS at rest (MiB)", rss_mib([pid]))
    res.add(w, n, system, "open descriptors at rest", open_fds(pid))
    times, size = [], 0
    with Conn(*node.address, timeout_s=300) as c:
        for _ in range(3):
            md = metadata(c, None)
            times.append(md.seconds)
            size = md.response_bytes
    res.add(w, n, system, "Metadata, all topics (ms, median of 3)", sorted(times)[1] * 1000)
    res.add(w, n, system, "Metadata, all topics (bytes)", size)
    _produce_consume(system, node, names, res, n)
    time.sleep(5)
    _restart(system, node, names, "clean", res, n, timeout_s)
    time.sleep(5)
    _restart(system, node, names, "kill -9", res, n, timeout_s)


def start_w21_target(kind: str, wd: Path) -> System:
    """One broker of W21's kind: pybroker, pybroker-zk, kafka (KRaft) or kafka-zk."""
    if kind == "pybroker":
        return start_pybroker(wd, brokers=1)
    if kind == "pybroker-zk":
        return start_pybroker(wd, brokers=1, metadata_mode="zookeeper")
    if kind == "kafka-zk":
        return start_kafka(wd, brokers=1, metadata_mode="zookeeper", heap=W21_KAFKA_HEAP)
    return start_kafka(wd, brokers=1, heap=W21_KAFKA_HEAP)


def run_w21(size: int, targets: list[str], workdir: Path, res: Results, timeout_s: float):
    run_on_each(
        "W21", w21, start_w21_target, size, targets, workdir, res, timeout_s, record_start=True
    )


W21_KAFKA_HEAP = "2g"
