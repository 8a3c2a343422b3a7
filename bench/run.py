"""Apache Kafka 3.9 (java/pom.xml) vs pybroker, side by side, on this machine: one command, one table.

    python -m bench.run [--workloads W1,W2,...] [--runs 3] [--scale small|full] [--smoke]
                        [--results-dir bench/results] [--no-write] [--keep-logs DIR]

For each workload: start Apache Kafka (bench/kafka_reference.py: KRaft, -Xmx512m), set the
workload up, run it `--runs` times, record the broker processes' peak RSS (VmHWM), stop; then
the same against pybroker (`python -m pybroker serve`, embedded metadata store; W6 uses
ZooKeeper + 3 brokers, compat_tests/cluster.py). Both run on loopback, log dirs under one temp
dir on the same disk, no fsync (Kafka's default; pybroker's too), and
group.initial.rebalance.delay.ms=0. The table gives the median of the runs per metric and the
ratio pybroker / Kafka; results go to bench/results/<YYYY-MM-DD>.md with the machine, the
versions, the commands and every run's figure. docs/bench.md describes the workloads.

--smoke: both brokers start, W1 with 2,000 records runs once on each, the table prints and
nothing is written (CI: compat_tests/test_bench_smoke.py).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import itertools
import json
import os
import platform
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import compaction, kafka_reference  # noqa: E402
from bench.procstat import cpu_seconds, rss_mib  # noqa: E402
from compat_tests import java, rawkafka  # noqa: E402
from compat_tests.broker_process import BrokerProcess  # noqa: E402
from compat_tests.procutil import free_port  # noqa: E402

HOST = "127.0.0.1"
KAFKA, PYBROKER = "kafka", "pybroker"
CLIENT_HEAP = "512m"  # the Java perf tools' heap
CLIENT_FAST_START = False  # --smoke: quick-starting client JVMs (serial GC, C1 only)
MIB = 1024 * 1024
GIB = 1024 * MIB
CPU_METRIC = "CPU s/GiB"  # broker CPU seconds (user + system, all threads) per GiB moved

# Both brokers: no initial rebalance delay (as the brief's "same settings where they map").
PYBROKER_OVERRIDES: dict[str, object] = {"group.initial.rebalance.delay.ms": 0}
KAFKA_OVERRIDES: dict[str, object] = {"group.initial.rebalance.delay.ms": 0}

# record counts etc. per scale; each full-scale run lasts roughly 5-30 s on a 2-core machine
SIZES = {
    "full": {
        "w1_records": 300_000,
        "w2_records": 500_000,
        "w3_records": 300_000,
        "w4_messages": 1_500,
        "w5_records": 200_000,
        "w6_records": 60_000,
        "w7_members": 10,
        "w8_topics": 100,
        "w8_parts_per_topic": 100,
        "w8_connections": 1_000,
        "w9_bytes": GIB,
        "w9_keys": 100_000,
        "w10_transactions": 2_000,
        "w15_partitions": 1_000,
        "w20_records": 200_000,
    },
    "small": {
        "w1_records": 30_000,
        "w2_records": 100_000,
        "w3_records": 30_000,
        "w4_messages": 300,
        "w5_records": 10_000,
        "w6_records": 20_000,
        "w7_members": 10,
        "w8_topics": 10,
        "w8_parts_per_topic": 100,
        "w8_connections": 100,
        "w9_bytes": 128 * MIB,
        "w9_keys": 12_500,
        "w10_transactions": 200,
        "w15_partitions": 1_000,
        "w20_records": 20_000,
    },
    "smoke": {"w1_records": 2_000},
}


# ------------------------------------------------------------------------------------------
# RSS of broker processes
# ------------------------------------------------------------------------------------------


class RssSampler:
    """Samples the summed VmRSS every `interval` s; `peak` is the largest sum seen. With
    `hwm()` (per-process VmHWM, summed) it gives the peak over the broker's whole life."""

    def __init__(self, pids: list[int], interval: float = 0.25):
        self.pids = pids
        self.interval = interval
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mib(self.pids))
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def hwm(self) -> float:
        return rss_mib(self.pids, "VmHWM")


# ------------------------------------------------------------------------------------------
# the brokers under test
# ------------------------------------------------------------------------------------------


class BenchBroker(BrokerProcess):
    """compat_tests' BrokerProcess without PYTHONASYNCIODEBUG (asyncio debug mode is a test
    aid that slows the event loop down)."""

    asyncio_debug = False


@dataclass
class Target:
    kind: str  # KAFKA or PYBROKER
    bootstrap: str
    pids: list[int]
    stop: Callable[[], None]
    logs: Callable[[], str]  # tail of the broker output(s), for failure reports
    brokers: int = 1
    extra_rss: Callable[[], dict[str, float]] = lambda: {}  # e.g. ZooKeeper's, not counted
    log_dirs: list[Path] = field(default_factory=list)  # the first broker's first
    tls_bootstrap: str | None = None  # the SSL listener(s), for workloads with tls=True
    tls_props: list[str] = field(default_factory=list)  # client properties for them

    @property
    def first(self) -> tuple[str, int]:
        host, port = self.bootstrap.split(",")[0].rsplit(":", 1)
        return host, int(port)


SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule"
BENCH_USER, BENCH_PASSWORD = "bench", "bench-secret"
BENCH_SCRAM = f"SCRAM-SHA-512=[name={BENCH_USER},password={BENCH_PASSWORD}]"


def _tls(workdir: Path, protocol: str = "SSL") -> tuple[dict[str, object], list[str]]:
    """Throwaway certificates: the brokers' ssl.* settings (a PEM key store) and the clients'
    properties (a PEM trust store).  ``protocol`` SASL_SSL: SCRAM-SHA-512 on top, as user
    BENCH_USER (each broker creates it its own way before it starts)."""
    from tests.tls_certs import make_certs

    certs = make_certs(workdir / "certs")
    broker: dict[str, object] = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.server),
    }
    client = [
        f"security.protocol={protocol}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={certs.ca}",
    ]
    if protocol == "SASL_SSL":
        broker["sasl.enabled.mechanisms"] = "SCRAM-SHA-512"
        broker["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"] = f"{SCRAM_JAAS} required;"
        client += [
            "sasl.mechanism=SCRAM-SHA-512",
            f'sasl.jaas.config={SCRAM_JAAS} required username="{BENCH_USER}" '
            f'password="{BENCH_PASSWORD}";',
        ]
    return broker, client


def start_target(
    kind: str,
    brokers: int,
    workdir: Path,
    overrides: dict[str, object] | None = None,
    tls: str = "",
    kafka4: bool = False,
) -> Target:
    """Kafka or pybroker, `brokers` of them; `overrides` (the workload's) go to both alike;
    `tls` ("SSL" or "SASL_SSL"): such a listener beside the PLAINTEXT one
    (Target.tls_bootstrap); `kafka4`: Kafka is Apache Kafka 4.4 (one node)."""
    workdir.mkdir(parents=True, exist_ok=True)
    ssl_broker, ssl_client = _tls(workdir, tls) if tls else ({}, [])
    if kind == KAFKA:
        props = dict(KAFKA_OVERRIDES, **(overrides or {}), **ssl_broker)
        if brokers == 1:
            ref = kafka_reference.start_kafka(
                workdir,
                overrides=props,
                ssl=bool(tls),
                secure_protocol=tls or "SSL",
                scram=BENCH_SCRAM if tls == "SASL_SSL" else None,
                kafka4=kafka4,
            )
        else:
            ref = kafka_reference.start_kafka_cluster(brokers, workdir, overrides=props)
        return Target(
            KAFKA,
            ref.bootstrap,
            [n.proc.pid for n in ref.nodes],
            lambda: ref.stop(check=False),
            lambda: "\n".join(f"--- node {n.node_id} ---\n{n.output(60)}" for n in ref.nodes),
            brokers,
            log_dirs=[n.workdir / "data" for n in ref.nodes],
            tls_bootstrap=f"127.0.0.1:{ref.nodes[0].ssl_port}" if tls else None,
            tls_props=ssl_client,
        )
    pyprops = dict(PYBROKER_OVERRIDES, **(overrides or {}))
    if brokers == 1:
        b = BenchBroker(workdir / "pybroker", overrides=pyprops)
        ssl_port = free_port("127.0.0.1") if tls else None
        if tls:
            b.overrides.update(
                {k: str(v) for k, v in ssl_broker.items()},
                listeners=f"PLAINTEXT://127.0.0.1:{b.port},{tls}://127.0.0.1:{ssl_port}",
            )
        if tls == "SASL_SSL":  # the user first, as README's add-scram
            props_file = workdir / "pybroker.properties"
            props_file.write_text("".join(f"{k}={v}\n" for k, v in b.settings().items()))
            subprocess.run(
                [sys.executable, "-m", "pybroker", "add-scram", str(props_file), BENCH_SCRAM],
                check=True,
                capture_output=True,
                timeout=120,
            )
        b.start()

        def stop_one() -> None:
            try:
                b.stop(timeout=60)
            finally:
                b.cleanup()

        return Target(
            PYBROKER,
            b.bootstrap,
            [b.pid],
            stop_one,
            lambda: b.output(80),
            log_dirs=[b.log_dir],
            tls_bootstrap=f"127.0.0.1:{ssl_port}" if tls else None,
            tls_props=ssl_client,
        )
    from compat_tests.cluster import Cluster
    from tests.zk_server import ZooKeeperServer

    zk = ZooKeeperServer(workdir / "zookeeper")
    zk.start()
    overrides = dict(pyprops, **{"min.insync.replicas": 2})
    overrides["default.replication.factor"] = min(3, brokers)
    cluster = Cluster(workdir, zk, brokers, overrides)
    for b in cluster.brokers.values():
        b.__class__ = BenchBroker
    try:
        cluster.start()
    except BaseException:
        cluster.cleanup()
        zk.stop()
        raise

    def stop_cluster() -> None:
        try:
            cluster.stop()
        finally:
            cluster.cleanup()
            zk.stop()

    return Target(
        PYBROKER,
        cluster.bootstrap,
        [b.pid for b in cluster.brokers.values()],
        stop_cluster,
        lambda: cluster.outputs(60),
        brokers,
        lambda: {"ZooKeeper": rss_mib([zk.proc.pid], "VmHWM")} if zk.proc else {},
        [b.log_dir for b in cluster.brokers.values()],
    )


# ------------------------------------------------------------------------------------------
# client helpers
# ------------------------------------------------------------------------------------------


class WorkloadError(RuntimeError):
    pass


def run_java(
    main_class: str, args: list[object], timeout: float, *, kafka4_cp: str | None = None
) -> java.JavaResult:
    """A Java tool with a benchmark JVM (512 MiB heap, default GC and JIT, not the fast-start
    flags compat_tests uses for short tools); ``kafka4_cp``: a Kafka 4.4 client program's
    classpath (its log4j2 configuration)."""
    cmd = java.java_command(
        main_class,
        [str(a) for a in args],
        heap=CLIENT_HEAP,
        fast_start=CLIENT_FAST_START,
        cp=kafka4_cp,
        log4j=None if kafka4_cp else java.TOOLS_LOG4J,
        jvm_args=[f"-Dlog4j2.configurationFile={java.KAFKA4_TOOLS_LOG4J2}"] if kafka4_cp else None,
    )
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        java._kill_group(proc, 9)
        out, err = proc.communicate()
    r = java.JavaResult(cmd, proc.returncode, out, err, time.monotonic() - start, timed_out)
    if not r.ok:
        raise WorkloadError(r.describe(3000))
    return r


def show_cmd(main_class: str, args: list[object]) -> str:
    short = main_class.rsplit(".", 1)[-1]
    return f"java -Xmx{CLIENT_HEAP} -cp $CP {short} " + " ".join(map(str, args))


def create_topics(
    target: Target, names: list[str], partitions: int, rf: int = 1, configs=None, batch=10
):
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=target.bootstrap, request_timeout_ms=300_000)
    try:
        for i in range(0, len(names), batch):
            admin.create_topics(
                [
                    NewTopic(n, partitions, rf, topic_configs=configs or {})
                    for n in names[i : i + batch]
                ],
                timeout_ms=300_000,
            )
    finally:
        admin.close()
    wait_topics_ready(target, names, partitions, timeout=600)


def metadata_v7(host: str, port: int, topics: list[str] | None, timeout: float = 30.0):
    from compat_tests.cluster import metadata_v7_request, parse_metadata_v7

    with rawkafka.Conn(host, port, timeout=timeout) as c:
        _corr, body = c.roundtrip(metadata_v7_request(1, topics))
    return parse_metadata_v7(body, -1)


def wait_topics_ready(target: Target, names: list[str], partitions: int, timeout: float) -> None:
    """Until Metadata lists every partition with a leader and ISR == replicas."""
    host, port = target.first
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            md = metadata_v7(host, port, names)
            ok = all(md.topic_errors.get(n) == 0 for n in names) and all(
                len(md.topic(n)) == partitions
                and all(
                    p.error == 0 and p.leader >= 0 and set(p.isr) == set(p.replicas)
                    for p in md.topic(n).values()
                )
                for n in names
            )
            if ok:
                return
            last = {n: md.topic_errors.get(n) for n in names[:3]}
        except (OSError, struct.error, AssertionError) as e:
            last = e
        time.sleep(0.3)
    raise WorkloadError(f"topics {names[:3]}... not ready within {timeout}s (last: {last})")


_PP_FINAL = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th"
)


def producer_perf(
    target: Target, topic: str, records: int, size: int, props: list[str], tls: bool = False
):
    """ProducerPerformance (over the secure listener with ``tls``: its client properties go
    in a --producer.config file, since --producer-props cannot carry values with '=')."""
    extra: list[object] = []
    if tls:
        config = Path(tempfile.mkdtemp(prefix="pp-")) / "producer.properties"
        config.write_text("".join(p + "\n" for p in target.tls_props))
        extra = ["--producer.config", config]
    args = [
        "--topic",
        topic,
        "--num-records",
        records,
        "--record-size",
        size,
        "--throughput",
        -1,
        *extra,
        "--producer-props",
        f"bootstrap.servers={target.tls_bootstrap if tls else target.bootstrap}",
        *props,
    ]
    r = run_java(java.PRODUCER_PERFORMANCE, args, timeout=900)
    found = list(_PP_FINAL.finditer(r.stdout))
    m = found[-1] if found else None
    if m is None or int(m.group(1)) != records:
        raise WorkloadError(f"ProducerPerformance summary missing or short\n{r.describe(3000)}")
    errors = java.java_errors(r.stderr + r.stdout)
    if errors:
        raise WorkloadError(f"ProducerPerformance reported errors: {errors}\n{r.describe(2000)}")
    return {
        "records/s": float(m.group(2)),
        "MB/s": float(m.group(3)),
        "avg ms": float(m.group(4)),
        "p99 ms": float(m.group(8)),
    }


def pp_cmd(topic: str, records: int, size: int, props: list[str]) -> str:
    return show_cmd(
        java.PRODUCER_PERFORMANCE,
        [
            "--topic",
            topic,
            "--num-records",
            records,
            "--record-size",
            size,
            "--throughput",
            -1,
            "--producer-props",
            "bootstrap.servers=<bootstrap>",
            *props,
        ],
    )


# ------------------------------------------------------------------------------------------
# workloads
# ------------------------------------------------------------------------------------------


@dataclass
class Metric:
    name: str
    unit: str
    higher_is_better: bool


@dataclass
class Workload:
    wid: str
    title: str
    metrics: list[Metric]
    setup: Callable[[Target, dict], dict]  # (target, sizes) -> state
    run: Callable[[Target, dict, int], dict[str, float]]  # (target, state, run index)
    commands: Callable[[dict], list[str]]  # (sizes) -> command lines for the results
    brokers: int = 1
    repeat: bool = True  # False: run() is called once, its lists are the runs
    overrides: dict[str, object] = field(default_factory=dict)  # broker configs, both brokers
    tls: str = ""  # "SSL" / "SASL_SSL": clients use such a listener (Target.tls_bootstrap)
    kafka4: bool = False  # the reference is Apache Kafka 4.4 (java/kafka4/pom.xml), not 3.9


def _no_setup(target: Target, sizes: dict) -> dict:
    return {"sizes": sizes}


# W1 ---------------------------------------------------------------------------------------
def w1_setup(target: Target, sizes: dict) -> dict:
    return {"sizes": sizes}


def w1_run(target: Target, st: dict, i: int) -> dict[str, float]:
    topic = f"w1-{i}-{uuid.uuid4().hex[:6]}"
    create_topics(target, [topic], 6)
    n = st["sizes"]["w1_records"]
    r = producer_perf(target, topic, n, 1024, ["acks=1"])
    return {"MB/s": r["MB/s"], "_bytes": n * 1024}


def w1_cmds(sizes: dict) -> list[str]:
    return [
        "topic: 6 partitions, RF 1 (fresh topic per run, kafka-python CreateTopics)",
        pp_cmd("w1-<run>", sizes["w1_records"], 1024, ["acks=1"]),
    ]


# W2 ---------------------------------------------------------------------------------------
W2_PROPS = ["acks=all", "enable.idempotence=true"]


def w2_run(target: Target, st: dict, i: int) -> dict[str, float]:
    topic = f"w2-{i}-{uuid.uuid4().hex[:6]}"
    create_topics(target, [topic], 6)
    n = st["sizes"]["w2_records"]
    r = producer_perf(target, topic, n, 100, W2_PROPS)
    return {"records/s": r["records/s"], "_bytes": n * 100}


def w2_cmds(sizes: dict) -> list[str]:
    return [
        "topic: 6 partitions, RF 1 (fresh topic per run)",
        pp_cmd("w2-<run>", sizes["w2_records"], 100, W2_PROPS),
    ]


# W3 ---------------------------------------------------------------------------------------
# The topic holds 10% more records than a run reads, so that no partition runs dry before the
# count is reached: a Java consumer whose next fetch holds only drained partitions waits out
# fetch.max.wait.ms (500 ms) while the other partitions' records sit in its buffer, which added
# 0.5-2 s to a 2-3 s run of either broker, depending on how the partitions happened to group.
W3_SPARE = 1.1


def w3_setup(target: Target, sizes: dict) -> dict:
    topic = "w3"
    create_topics(target, [topic], 6)
    producer_perf(target, topic, int(sizes["w3_records"] * W3_SPARE), 1024, ["acks=1"])
    return {"sizes": sizes, "topic": topic}


def _consumer_perf_args(bootstrap: str, topic: str, n: int, group: str) -> list[object]:
    return [
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--messages",
        n,
        "--group",
        group,
        "--timeout",
        60000,
    ]


def consumer_perf(args: list[object], n: int) -> dict[str, str]:
    """Run ConsumerPerformance; its figures row (column -> value), checked to have read n."""
    r = run_java(java.CONSUMER_PERFORMANCE, args, timeout=900)
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    head = next((k for k, ln in enumerate(lines) if ln.startswith("start.time")), None)
    if head is None or head + 1 >= len(lines):
        raise WorkloadError(f"ConsumerPerformance printed no figures\n{r.describe(3000)}")
    cols = [c.strip() for c in lines[head].split(",")]
    vals = [v.strip() for v in lines[head + 1].split(",")]
    row = dict(zip(cols, vals, strict=False))
    if int(float(row["data.consumed.in.nMsg"])) < n:
        raise WorkloadError(f"ConsumerPerformance read {row['data.consumed.in.nMsg']} of {n}")
    return row


def w3_run(target: Target, st: dict, i: int, tls: bool = False) -> dict[str, float]:
    n = st["sizes"]["w3_records"]
    bootstrap = target.tls_bootstrap if tls else target.bootstrap
    args = _consumer_perf_args(bootstrap, st["topic"], n, f"w3-{i}-{uuid.uuid4().hex[:6]}")
    if tls:
        config = Path(target.log_dirs[0]).parent / f"consumer-tls-{i}.properties"
        config.write_text("".join(p + "\n" for p in target.tls_props))
        args += ["--consumer.config", str(config)]
    row = consumer_perf(args, n)
    return {
        "MB/s": float(row["MB.sec"]),
        "fetch MB/s": float(row["fetch.MB.sec"]),
        "_bytes": n * 1024,
    }


def w3_cmds(sizes: dict) -> list[str]:
    n = sizes["w3_records"]
    return [
        "setup: topic w3, 6 partitions; " + pp_cmd("w3", int(n * W3_SPARE), 1024, ["acks=1"]),
        show_cmd(
            java.CONSUMER_PERFORMANCE, _consumer_perf_args("<bootstrap>", "w3", n, "w3-<run>")
        ),
    ]


# W4 ---------------------------------------------------------------------------------------
_E2E_PCT = re.compile(r"Percentiles: 50th = ([\d.]+), 99th = ([\d.]+), 99\.9th = ([\d.]+)")
_E2E_AVG = re.compile(r"Avg latency: ([\d.]+) ms")


def w4_run(target: Target, st: dict, i: int) -> dict[str, float]:
    topic = f"w4-{i}-{uuid.uuid4().hex[:6]}"
    create_topics(target, [topic], 1)
    n = st["sizes"]["w4_messages"]
    r = run_java(java.END_TO_END_LATENCY, [target.bootstrap, topic, n, 1, 100], timeout=900)
    m, a = _E2E_PCT.search(r.stdout), _E2E_AVG.search(r.stdout)
    if not m:
        raise WorkloadError(f"EndToEndLatency printed no percentiles\n{r.describe(3000)}")
    return {"p50 ms": float(m.group(1)), "p99 ms": float(m.group(2)), "avg ms": float(a.group(1))}


def w4_cmds(sizes: dict) -> list[str]:
    return [
        "topic: 1 partition (fresh per run)",
        show_cmd(
            java.END_TO_END_LATENCY, ["<bootstrap>", "w4-<run>", sizes["w4_messages"], 1, 100]
        ),
    ]


# W5 ---------------------------------------------------------------------------------------
W5_SIZE = 1024


def w5_run(target: Target, st: dict, i: int) -> dict[str, float]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    n = st["sizes"]["w5_records"]
    topic = f"w5-{i}-{uuid.uuid4().hex[:6]}"
    create_topics(target, [topic], 6)
    value = os.urandom(W5_SIZE)
    producer = KafkaProducer(bootstrap_servers=target.bootstrap, acks=1)
    try:
        producer.send(topic, value).get(timeout=30)  # metadata + connections before the clock
        t0 = time.perf_counter()
        for _ in range(n):
            producer.send(topic, value)
        producer.flush(timeout=600)
        produce_s = time.perf_counter() - t0
    finally:
        producer.close()
    total = n + 1
    consumer = KafkaConsumer(
        bootstrap_servers=target.bootstrap, enable_auto_commit=False, group_id=None
    )
    try:
        tps = [TopicPartition(topic, p) for p in range(6)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        if sum(end.values()) != total:
            raise WorkloadError(f"kafka-python: end offsets {end}, expected {total} records")
        got = 0
        t0 = time.perf_counter()
        deadline = time.monotonic() + 600
        while got < total:
            if time.monotonic() > deadline:
                raise WorkloadError(f"kafka-python consumer read {got} of {total}")
            for recs in consumer.poll(timeout_ms=500).values():
                got += len(recs)
        consume_s = time.perf_counter() - t0
    finally:
        consumer.close()
    return {
        "produce MB/s": n * W5_SIZE / MIB / produce_s,
        "consume MB/s": total * W5_SIZE / MIB / consume_s,
        "_bytes": (n + total) * W5_SIZE,
    }


def w5_cmds(sizes: dict) -> list[str]:
    return [
        f"kafka-python: KafkaProducer(acks=1) sends {sizes['w5_records']} x {W5_SIZE}-byte "
        "values (no key) to a fresh 6-partition topic, flush(); timed after one warm-up send",
        "kafka-python: KafkaConsumer(group_id=None) assign + seek_to_beginning, poll() until "
        "all records are read",
    ]


# W6 ---------------------------------------------------------------------------------------
W6_PROPS = ["acks=all"]


def w6_run(target: Target, st: dict, i: int) -> dict[str, float]:
    topic = f"w6-{i}-{uuid.uuid4().hex[:6]}"
    create_topics(target, [topic], 6, rf=3, configs={"min.insync.replicas": "2"})
    n = st["sizes"]["w6_records"]
    r = producer_perf(target, topic, n, 1024, W6_PROPS)
    return {"MB/s": r["MB/s"], "_bytes": n * 1024}


def w6_cmds(sizes: dict) -> list[str]:
    return [
        "Kafka: 3 KRaft nodes (node 1 broker+controller); pybroker: 3 brokers + ZooKeeper",
        "topic: 6 partitions, RF 3, min.insync.replicas=2 (fresh per run)",
        pp_cmd("w6-<run>", sizes["w6_records"], 1024, W6_PROPS),
    ]


# W7 ---------------------------------------------------------------------------------------
W7_PARTITIONS = 20
W7_CONSUMER = {"heartbeat_interval_ms": 1000, "session_timeout_ms": 10000}


def w7_setup(target: Target, sizes: dict) -> dict:
    create_topics(target, ["w7"], W7_PARTITIONS)
    return {"sizes": sizes, "topic": "w7"}


class ClientStuck(WorkloadError):
    """A kafka-python member stopped taking part in the group (see W7_ATTEMPTS)."""


# kafka-python 3.0.12 sometimes leaves a member silent after a rebalance: its poll() keeps
# returning, but it sends no heartbeat, JoinGroup or fetch again, so the group never settles
# (seen with Apache Kafka and pybroker alike, about one run in twenty). Such a run is
# abandoned after W7_STUCK_S and taken again with a fresh group; 'retries' counts them.
W7_ATTEMPTS = 3
W7_STUCK_S = 30


def w7_run(target: Target, st: dict, i: int) -> dict[str, float]:
    attempt = 0
    while True:
        try:
            figures = _w7_attempt(target, st, f"{i}-{attempt}")
        except ClientStuck:
            attempt += 1
            if attempt == W7_ATTEMPTS:
                raise
            continue
        figures["retries"] = float(attempt)
        return figures


def _w7_attempt(
    target: Target, st: dict, i: str, marks: dict[str, float] | None = None
) -> dict[str, float]:
    """One W7 run; ``marks`` (bench/rebalance_trace.py) gets the perf_counter() of the common
    subscribe (t0) and of member 0's close (t1)."""
    from kafka import KafkaConsumer

    members = st["sizes"]["w7_members"]
    group = f"w7-{i}-{uuid.uuid4().hex[:6]}"
    all_parts = set(range(W7_PARTITIONS))
    assignments: list[frozenset[int] | None] = [None] * members
    stop = [False] * members
    errors: list[str] = []
    ready = threading.Barrier(members + 1)

    def member(k: int) -> None:
        c = None
        try:
            c = KafkaConsumer(
                bootstrap_servers=target.bootstrap,
                group_id=group,
                client_id=f"{group}-m{k}",
                enable_auto_commit=False,
                **W7_CONSUMER,
            )
            # The topic's metadata first: a leader without it assigns nothing, then rejoins
            # when its refresh lands (kafka-python sends it retry_backoff_ms after the
            # bootstrap one), and the others learn of that from their next heartbeat.
            if not c.partitions_for_topic(st["topic"]):
                raise WorkloadError(f"member {k}: no metadata for {st['topic']}")
            ready.wait(60)
            c.subscribe([st["topic"]])
            while not stop[k]:
                c.poll(timeout_ms=100)
                assignments[k] = frozenset(tp.partition for tp in c.assignment())
        except Exception as e:  # noqa: BLE001 - reported
            errors.append(f"member {k}: {type(e).__name__}: {e}")
            with contextlib.suppress(threading.BrokenBarrierError):
                ready.abort()
        finally:
            assignments[k] = None
            if c is not None:
                c.close()

    def complete(live: list[int]) -> bool:
        got = [assignments[k] for k in live]
        if any(not a for a in got):
            return False
        union = set().union(*got)
        return union == all_parts and sum(len(a) for a in got) == W7_PARTITIONS

    threads = [
        threading.Thread(target=member, args=(k,), name=f"w7-m{k}", daemon=True)
        for k in range(members)
    ]
    for t in threads:
        t.start()
    try:
        ready.wait(60)
        t0 = time.perf_counter()  # every member subscribes now (the last join is this moment)
        if marks is not None:
            marks["t0"] = t0
        deadline = time.monotonic() + W7_STUCK_S
        live = list(range(members))
        while not complete(live):
            if errors:
                raise WorkloadError(f"W7: {errors}")
            if time.monotonic() > deadline:
                raise ClientStuck(f"W7: {members} members never all assigned")
            time.sleep(0.01)
        join_s = time.perf_counter() - t0
        time.sleep(1.0)  # settled
        t1 = time.perf_counter()
        if marks is not None:
            marks["t1"] = t1
        stop[0] = True  # member 0 leaves: close() sends LeaveGroup
        threads[0].join(30)
        live = list(range(1, members))
        deadline = time.monotonic() + W7_STUCK_S
        # the rest must move to a new assignment that covers all partitions without member 0
        while not complete(live):
            if errors:
                raise WorkloadError(f"W7: {errors}")
            if time.monotonic() > deadline:
                raise ClientStuck("W7: no rebalance after a member left")
            time.sleep(0.01)
        leave_s = time.perf_counter() - t1
    finally:
        for k in range(members):
            stop[k] = True
        for t in threads:
            t.join(30)
    return {"join s": join_s, "leave s": leave_s}


def w7_cmds(sizes: dict) -> list[str]:
    return [
        f"topic w7: {W7_PARTITIONS} partitions; {sizes['w7_members']} kafka-python "
        f"KafkaConsumer threads in one fresh group per run ({W7_CONSUMER}, range assignor), "
        "subscribe together (barrier), poll(100 ms)",
        "join s: from the common subscribe to all members holding a disjoint assignment "
        "covering every partition. Each member fetched the topic's metadata before the "
        "common subscribe (partitions_for_topic): without it, a group leader whose metadata "
        "refresh had not landed yet assigned nothing and rejoined. Still two modes, on both "
        "brokers, by timing: ~0.2 s when every member's JoinGroup arrives before the first "
        "generation completes; up to ~1.2 s when the first member(s) complete a generation "
        "alone (group.initial.rebalance.delay.ms=0) and learn of the next one from their next "
        "heartbeat (interval 1 s). The median shows the mode most runs landed in",
        "leave s: from member 0's close() (LeaveGroup) to the other 9 covering every partition",
        f"retries: runs taken again because a kafka-python member went silent after a "
        f"rebalance (a client bug in kafka-python 3.0.12, seen with both brokers): abandoned "
        f"after {W7_STUCK_S} s, at most {W7_ATTEMPTS - 1} retries per run",
    ]


# W8 ---------------------------------------------------------------------------------------
def metadata_v12_all(correlation_id: int) -> bytes:
    """Metadata v12 (flexible) for all topics: null topic array, no auto-creation."""
    body = b"\x00" + b"\x00" + b"\x00" + b"\x00"  # topics=null, auto=false, ops=false, tags
    return rawkafka.frame(
        rawkafka.request_header_v2(rawkafka.API_METADATA, 12, correlation_id, "bench") + body
    )


def w8_setup(target: Target, sizes: dict) -> dict:
    n, per = sizes["w8_topics"], sizes["w8_parts_per_topic"]
    names = [f"w8-{k:03d}" for k in range(n)]
    t0 = time.perf_counter()
    create_topics(target, names, per)
    return {"sizes": sizes, "create_s": time.perf_counter() - t0, "partitions": n * per}


def w8_run(target: Target, st: dict, i: int) -> dict[str, float]:
    host, port = target.first
    # Metadata v12, all topics: median of 20 on one connection, after one warm-up
    times = []
    size = 0
    with rawkafka.Conn(host, port, timeout=60) as c:
        for k in range(21):
            t = time.perf_counter()
            c.send(metadata_v12_all(k))
            got = c.recv_frame()
            if got is None or got[0] != k:
                raise WorkloadError(f"Metadata v12: bad answer {got and got[0]}")
            if k:
                times.append(time.perf_counter() - t)
            size = len(got[1])
    rss_parts = rss_mib(target.pids)
    # idle connections: each did one ApiVersions v0 exchange, then is held open
    conns = []
    n = st["sizes"]["w8_connections"]
    try:
        for k in range(n):
            c = rawkafka.Conn(host, port, timeout=30)
            conns.append(c)
            corr, _ = c.roundtrip(rawkafka.api_versions_v0(k))
            if corr != k:
                raise WorkloadError(f"ApiVersions on connection {k}: correlation {corr}")
        time.sleep(1.0)
        rss_conns = rss_mib(target.pids)
        t = time.perf_counter()
        with rawkafka.Conn(host, port, timeout=30) as c:
            c.roundtrip(metadata_v12_all(1))
        answer_s = time.perf_counter() - t
        # and the held connections still answer
        for k in (0, n // 2, n - 1):
            corr, _ = conns[k].roundtrip(rawkafka.api_versions_v0(10_000 + k))
            if corr != 10_000 + k:
                raise WorkloadError("held connection answered with a wrong correlation id")
    finally:
        for c in conns:
            c.close()
    return {
        "metadata ms": statistics.median(times) * 1000,
        "response KiB": size / 1024,
        "RSS MiB (partitions)": rss_parts,
        "RSS MiB (+conns)": rss_conns,
        "conn RSS KiB each": (rss_conns - rss_parts) * 1024 / n,
        "metadata ms (+conns)": answer_s * 1000,
        "create s": st["create_s"],
    }


def w8_cmds(sizes: dict) -> list[str]:
    n, per, c = sizes["w8_topics"], sizes["w8_parts_per_topic"], sizes["w8_connections"]
    return [
        f"setup: {n} topics x {per} partitions = {n * per} partitions, RF 1 (kafka-python "
        "CreateTopics, 10 topics per request; 'create s' is the time until Metadata shows all)",
        "metadata ms: Metadata v12 for all topics (null topic list) on one raw socket, median of "
        "20 round trips after a warm-up (time to the whole response frame; no client decoding)",
        "RSS MiB (partitions): the broker's VmRSS after that",
        f"RSS MiB (+conns): VmRSS with {c} more idle TCP connections held open, each after one "
        "ApiVersions v0 exchange; then one Metadata v12 on a new connection (metadata ms "
        "(+conns)) and ApiVersions on three held ones",
    ]


# W9 ---------------------------------------------------------------------------------------
# The cleaner's backoff is 15 s by default on both brokers: a clean would start up to 15 s
# after the topic turns compact. 500 ms on both keeps that wait out of the cleaner's MB/s.
W9_OVERRIDES: dict[str, object] = {"log.cleaner.backoff.ms": 500}
W9_TOPIC_CONFIGS = {
    "cleanup.policy": "delete",
    "retention.ms": "-1",
    "segment.bytes": str(compaction.SEGMENT_BYTES),
}


def w9_setup(target: Target, sizes: dict) -> dict:
    create_topics(target, ["w9-probe"], 1)
    return {"sizes": sizes}


def w9_run(target: Target, st: dict, i: int) -> dict[str, float]:
    topic = f"w9-{i}"
    create_topics(target, [topic], 1, configs=W9_TOPIC_CONFIGS)
    sizes = st["sizes"]
    compaction.fill(target.bootstrap, topic, sizes["w9_bytes"], sizes["w9_keys"], seed=9 + i)
    with compaction.LatencyProbe(target.bootstrap, "w9-probe") as probe:
        return compaction.measure_clean(
            target.bootstrap, target.pids, target.log_dirs[0], topic, probe
        )


def w9_cmds(sizes: dict) -> list[str]:
    n = sizes["w9_bytes"] // compaction.VALUE_SIZE
    return [
        "brokers: " + ", ".join(f"{k}={v}" for k, v in W9_OVERRIDES.items()),
        "topic w9-<run>: 1 partition, "
        + ", ".join(f"{k}={v}" for k, v in W9_TOPIC_CONFIGS.items()),
        f"fill (bench/compaction.py, confluent-kafka, acks=1, uncompressed): {n:,} records of "
        f"{compaction.VALUE_SIZE} B, keys drawn from {sizes['w9_keys']:,} (seeded), so 10% of "
        "the records are the latest of their key",
        f"probe: a confluent-kafka producer, acks=1, linger.ms=0, {compaction.PROBE_RATE} "
        f"records/s of 1 KiB to w9-probe; p99 over {compaction.IDLE_S:.0f} s idle, then over "
        "the clean",
        "clean: IncrementalAlterConfigs cleanup.policy=compact; timed until the broker's "
        "cleaner-offset-checkpoint reaches the active segment's base offset; MB/s and CPU "
        "s/GiB over the bytes of the inactive segments",
    ]


# W11, W12: W1 and W3 over TLS ----------------------------------------------------------------
def w11_run(target: Target, st: dict, i: int) -> dict[str, float]:
    topic = f"w11-{i}-{uuid.uuid4().hex[:6]}"
    create_topics(target, [topic], 6)
    n = st["sizes"]["w1_records"]
    r = producer_perf(target, topic, n, 1024, ["acks=1"], tls=True)
    return {"MB/s": r["MB/s"], "_bytes": n * 1024}


def w11_cmds(sizes: dict) -> list[str]:
    return [
        "both brokers: an SSL listener beside PLAINTEXT, ssl.keystore.type=PEM with a throwaway "
        "EC P-256 certificate (tests/tls_certs.py); clients: security.protocol=SSL, "
        "ssl.truststore.type=PEM",
        "topic: 6 partitions, RF 1 (fresh per run, created over PLAINTEXT)",
        pp_cmd("w11-<run>", sizes["w1_records"], 1024, ["acks=1", "security.protocol=SSL", "..."]),
    ]


def w12_run(target: Target, st: dict, i: int) -> dict[str, float]:
    return w3_run(target, st, i, tls=True)


def w12_cmds(sizes: dict) -> list[str]:
    n = sizes["w3_records"]
    return [
        "as W11's TLS set-up; setup over PLAINTEXT: topic w3, 6 partitions; "
        + pp_cmd("w3", int(n * W3_SPARE), 1024, ["acks=1"]),
        show_cmd(
            java.CONSUMER_PERFORMANCE,
            [
                *_consumer_perf_args("<ssl bootstrap>", "w3", n, "w3-<run>"),
                "--consumer.config",
                "<security.protocol=SSL, ssl.truststore.*>",
            ],
        ),
    ]


# W10: transactions -----------------------------------------------------------------------------
W10_PER_TXN, W10_SIZE = 100, 1024


def _txn_produce(bootstrap: str, topic: str, transactions: int) -> tuple[float, int]:
    """confluent-kafka's transactional producer: ``transactions`` of W10_PER_TXN records of
    W10_SIZE bytes over the topic's 6 partitions, each committed; (seconds, records)."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"w10-{uuid.uuid4().hex[:8]}",
            "linger.ms": 5,
        }
    )
    p.init_transactions(60)
    payload = b"x" * W10_SIZE
    start = time.perf_counter()
    for t in range(transactions):
        p.begin_transaction()
        for i in range(W10_PER_TXN):
            while True:
                try:
                    p.produce(topic, payload, partition=(t + i) % 6)
                    break
                except BufferError:
                    p.poll(0.01)
        p.commit_transaction(60)
    elapsed = time.perf_counter() - start
    return elapsed, transactions * W10_PER_TXN


def w10_run(target: Target, st: dict, i: int) -> dict[str, float]:
    topic = f"w10-{i}-{uuid.uuid4().hex[:6]}"
    create_topics(target, [topic], 6)
    seconds, n = _txn_produce(target.bootstrap, topic, st["sizes"]["w10_transactions"])
    config = Path(target.log_dirs[0]).parent / f"consumer-rc-{i}.properties"
    config.write_text("isolation.level=read_committed\n")
    args = _consumer_perf_args(target.bootstrap, topic, n, f"w10-{i}-{uuid.uuid4().hex[:6]}")
    row = consumer_perf([*args, "--consumer.config", str(config)], n)
    return {
        "transactions/s": st["sizes"]["w10_transactions"] / seconds,
        "records/s": n / seconds,
        "read_committed MB/s": float(row["MB.sec"]),
        "_bytes": 2 * n * W10_SIZE,
    }


def w10_cmds(sizes: dict) -> list[str]:
    t = sizes["w10_transactions"]
    return [
        "topic: 6 partitions, RF 1 (fresh per run)",
        f"confluent-kafka transactional producer (linger.ms=5): {t} transactions of "
        f"{W10_PER_TXN} records of {W10_SIZE} B, each begin / 100 produce / commit "
        "(init_transactions once); timed from the first begin to the last commit",
        show_cmd(
            java.CONSUMER_PERFORMANCE,
            [
                *_consumer_perf_args("<bootstrap>", "w10-<run>", t * W10_PER_TXN, "w10-<run>"),
                "--consumer.config",
                "<isolation.level=read_committed>",
            ],
        ),  # fmt: skip
        "CPU s/GiB over the produce and the consume (bytes counted twice)",
    ]


# W13, W14: W1 and W3 over SASL_SSL (SCRAM-SHA-512) -------------------------------------------
def w13_cmds(sizes: dict) -> list[str]:
    return [
        "both brokers: a SASL_SSL listener beside PLAINTEXT (W11's certificate; "
        "sasl.enabled.mechanisms=SCRAM-SHA-512, user bench: Kafka's kafka-storage format "
        "--add-scram, pybroker's add-scram); clients: security.protocol=SASL_SSL, "
        "sasl.mechanism=SCRAM-SHA-512",
        "topic: 6 partitions, RF 1 (fresh per run, created over PLAINTEXT)",
        pp_cmd(
            "w13-<run>", sizes["w1_records"], 1024, ["acks=1", "security.protocol=SASL_SSL", "..."]
        ),  # fmt: skip
    ]


def w14_cmds(sizes: dict) -> list[str]:
    return ["as W13's SASL_SSL set-up; otherwise as W12", *w12_cmds(sizes)[1:]]


# W15 --------------------------------------------------------------------------------------
W15_FETCHES = 200


def w15_setup(target: Target, sizes: dict) -> dict:
    topic = f"w15-{uuid.uuid4().hex[:6]}"
    n = sizes["w15_partitions"]
    create_topics(target, [topic], n)
    # Metadata shows leaders before the broker leads them all (Kafka): wait until a fetch of
    # every partition answers without an error
    host, port = target.first
    deadline = time.monotonic() + 120
    with rawkafka.Conn(host, port, timeout=60) as c:
        for k in itertools.count():
            resp, _ = _w15_fetch(c, k, topic, list(range(n)), 0, -1)
            errors = [p for t in resp["responses"] for p in t["partitions"] if p["error_code"]]
            if not errors:
                break
            if time.monotonic() > deadline:
                raise WorkloadError(f"{len(errors)} partitions still answer errors")
            time.sleep(0.5)
    return {"sizes": sizes, "topic": topic}


def _w15_fetch(conn, corr: int, topic: str, partitions: list[int], sid: int, epoch: int):
    from pybroker.wire.codec import decode_response, encode_request

    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 50 << 20,
        "isolation_level": 0,
        "session_id": sid,
        "session_epoch": epoch,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": p,
                        "current_leader_epoch": -1,
                        "fetch_offset": 0,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                    for p in partitions
                ],
            }
        ]
        if partitions
        else [],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    conn.send(encode_request(1, 12, corr, "bench-w15", body))
    got = conn.recv_frame()
    if got is None or got[0] != corr:
        raise WorkloadError(f"Fetch v12: bad answer {got and got[0]}")
    _, resp = decode_response(1, 12, corr.to_bytes(4, "big", signed=True) + got[1])
    if resp["error_code"] != 0:
        raise WorkloadError(f"Fetch v12: error {resp['error_code']}")
    return resp, len(got[1]) + 8


def w15_run(target: Target, st: dict, i: int) -> dict[str, float]:
    host, port = target.first
    n = st["sizes"]["w15_partitions"]
    parts = list(range(n))
    out: dict[str, float] = {}
    with rawkafka.Conn(host, port, timeout=60) as c:
        _w15_fetch(c, 0, st["topic"], parts, 0, -1)  # warm-up
        cpu0 = cpu_seconds(target.pids)
        for k in range(W15_FETCHES):
            _, full_size = _w15_fetch(c, 1 + k, st["topic"], parts, 0, -1)
        full = (cpu_seconds(target.pids) - cpu0) / W15_FETCHES
        resp, _ = _w15_fetch(c, 10_000, st["topic"], parts, 0, 0)  # open a session
        sid = resp["session_id"]
        if sid == 0:
            raise WorkloadError("the broker opened no fetch session")
        cpu0 = cpu_seconds(target.pids)
        for k in range(W15_FETCHES):
            resp, inc_size = _w15_fetch(c, 20_000 + k, st["topic"], [], sid, 1 + k)
            if resp["responses"]:
                raise WorkloadError("an incremental answer listed idle partitions")
        inc = (cpu_seconds(target.pids) - cpu0) / W15_FETCHES
        _w15_fetch(c, 30_000, st["topic"], [], sid, -1)  # close it
    out["full fetch CPU ms"] = full * 1000
    out["incremental fetch CPU ms"] = inc * 1000
    out["full / incremental"] = full / inc if inc > 0 else float("inf")
    out["full answer KiB"] = full_size / 1024
    out["incremental answer B"] = float(inc_size)
    return out


def w15_cmds(sizes: dict) -> list[str]:
    n = sizes["w15_partitions"]
    return [
        f"topic: {n} partitions, RF 1, no records (all idle)",
        f"full fetch CPU ms: broker CPU seconds over {W15_FETCHES} Fetch v12 requests naming all "
        f"{n} partitions (session_epoch -1, max_wait_ms 0, min_bytes 0), per request, on one raw "
        "socket after a warm-up",
        f"incremental fetch CPU ms: the same after one epoch-0 fetch opened a session: "
        f"{W15_FETCHES} incremental requests naming no partition (nothing changed), per request",
        "answer sizes: one full answer, one incremental answer (frame bytes)",
    ]


# W16 --------------------------------------------------------------------------------------
W16_MEMBERS, W16_PARTITIONS = 5, 10
# Kafka 3.9 serves KIP-848 once the consumer protocol is listed (pybroker's default lists it);
# group.consumer.heartbeat.interval.ms is 5 s on both (Kafka's default)
W16_OVERRIDES: dict[str, object] = {"group.coordinator.rebalance.protocols": "classic,consumer"}


def w16_setup(target: Target, sizes: dict) -> dict:
    topic = f"w16-{uuid.uuid4().hex[:6]}"
    create_topics(target, [topic], W16_PARTITIONS)
    workdir = Path(target.log_dirs[0]).parent / "w16"
    cp = java.compile_app("GroupConsumer.java", workdir / "classes", clients4=True)
    return {"sizes": sizes, "topic": topic, "cp": cp, "workdir": workdir}


def _w16_owned(proc: java.JavaProcess) -> set[str]:
    owned: set[str] = set()
    for line in proc.stdout_text().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("event") == "assigned":
            owned |= set(e["partitions"])
        elif e.get("event") in ("revoked", "lost"):
            owned -= set(e["partitions"])
    return owned


def _w16_time_to_stable(target: Target, st: dict, protocol: str, i: int) -> float:
    """Seconds from starting five Java 4.1 consumers to each owning two partitions."""
    group = f"w16-{protocol}-{i}-{uuid.uuid4().hex[:6]}"
    procs = []
    t0 = time.monotonic()
    try:
        for k in range(W16_MEMBERS):
            procs.append(
                java.start_main(
                    "GroupConsumer",
                    [target.bootstrap, group, st["topic"], "0", "0", f"group.protocol={protocol}"],
                    workdir=st["workdir"],
                    name=f"{group}-{k}",
                    cp=st["cp"],
                    log4j=None,
                )
            )
        want = W16_PARTITIONS // W16_MEMBERS
        while True:
            owned = [_w16_owned(p) for p in procs]
            if all(len(o) == want for o in owned) and len(set().union(*owned)) == W16_PARTITIONS:
                return time.monotonic() - t0
            if time.monotonic() - t0 > 180:
                raise WorkloadError(f"{protocol}: no stable assignment in 180 s: {owned}")
            time.sleep(0.05)
    finally:
        for p in procs:
            p.stop()


def w16_run(target: Target, st: dict, i: int) -> dict[str, float]:
    consumer = _w16_time_to_stable(target, st, "consumer", i)
    classic = _w16_time_to_stable(target, st, "classic", i)
    return {"consumer protocol s": consumer, "classic protocol s": classic}


def w16_cmds(sizes: dict) -> list[str]:
    return [
        f"topic: {W16_PARTITIONS} partitions, RF 1; brokers with "
        "group.coordinator.rebalance.protocols=classic,consumer (Kafka 3.9: KIP-848 enabled)",
        f"{W16_MEMBERS} processes of java/clients4/src/GroupConsumer.java (kafka-clients 4.1.1, "
        "-Xmx256m serial GC) started together in a fresh group, group.protocol=consumer then "
        "=classic: seconds from the first start until each owns "
        f"{W16_PARTITIONS // W16_MEMBERS} partitions (their assigned/revoked events); "
        "JVM start-up is in both figures",
    ]


# W17 --------------------------------------------------------------------------------------
# Kafka 3.9 serves the online migration with group.consumer.migration.policy (4.0's default,
# bidirectional, set on both brokers)
W17_OVERRIDES: dict[str, object] = dict(
    W16_OVERRIDES, **{"group.consumer.migration.policy": "bidirectional"}
)


def _w17_start(target: Target, st: dict, group: str, name: str, protocol: str):
    return java.start_main(
        "GroupConsumer",
        [target.bootstrap, group, st["topic"], "0", "0", f"group.protocol={protocol}"],
        workdir=st["workdir"],
        name=name,
        cp=st["cp"],
        log4j=None,
    )


def _w17_wait_split(procs: list, want: int, what: str, t0: float) -> float:
    while True:
        owned = [_w16_owned(p) for p in procs]
        if all(len(o) == want for o in owned) and len(set().union(*owned)) == W16_PARTITIONS:
            return time.monotonic() - t0
        if time.monotonic() - t0 > 180:
            raise WorkloadError(f"{what}: no even split in 180 s: {owned}")
        time.sleep(0.05)


def w17_run(target: Target, st: dict, i: int) -> dict[str, float]:
    """Two classic members hold the group; three consumer-protocol members join it (the
    upgrade); then those three leave (the downgrade)."""
    group = f"w17-{i}-{uuid.uuid4().hex[:6]}"
    classic = [_w17_start(target, st, group, f"{group}-c{k}", "classic") for k in range(2)]
    modern: list = []
    try:
        _w17_wait_split(classic, W16_PARTITIONS // 2, "classic members", time.monotonic())
        t0 = time.monotonic()
        modern = [_w17_start(target, st, group, f"{group}-k{k}", "consumer") for k in range(3)]
        upgrade = _w17_wait_split(classic + modern, 2, "after the upgrade", t0)
        t1 = time.monotonic()
        for p in modern:
            p.stop()
        downgrade = _w17_wait_split(classic, W16_PARTITIONS // 2, "after the downgrade", t1)
        return {"upgrade s": upgrade, "downgrade s": downgrade}
    finally:
        for p in classic + modern:
            p.stop()


def w17_cmds(sizes: dict) -> list[str]:
    return [
        f"topic: {W16_PARTITIONS} partitions, RF 1; brokers with "
        "group.coordinator.rebalance.protocols=classic,consumer and "
        "group.consumer.migration.policy=bidirectional (Kafka 3.9 and pybroker alike)",
        "2 GroupConsumer processes (kafka-clients 4.1.1) with group.protocol=classic own 5 "
        "partitions each; then 3 with group.protocol=consumer start: upgrade s = seconds until "
        "the 5 own 2 each; then the 3 stop (close: leave): downgrade s = seconds until the 2 "
        "classic members own 5 each again. JVM start-up is in the upgrade figure",
    ]


# W20 --------------------------------------------------------------------------------------
# Share groups (KIP-932): Apache Kafka 4.4 is the reference (3.9 has only their early-access
# v0); both brokers with their share-group defaults (records locks 30 s, 2,000 in-flight
# records per share-partition, max.poll.records 500 on the client)
W20_CONSUMERS = (1, 4, 8)
W20_SIZE = 1024


def w20_setup(target: Target, sizes: dict) -> dict:
    topic = f"w20-{uuid.uuid4().hex[:6]}"
    create_topics(target, [topic], 1)
    producer_perf(target, topic, sizes["w20_records"], W20_SIZE, ["acks=1"])
    workdir = Path(target.log_dirs[0]).parent / "w20"
    cp = java.compile_app("ShareConsumerPerf.java", workdir / "classes", kafka4=True)
    return {"sizes": sizes, "topic": topic, "cp": cp}


def _w20_read(target: Target, st: dict, consumers: int, i: int) -> dict[str, float]:
    """One fresh share group of ``consumers`` reads the topic whole; its figures and the broker's
    CPU seconds over the program's whole life (group set-up and JVM start included)."""
    n = st["sizes"]["w20_records"]
    group = f"w20-{consumers}-{i}-{uuid.uuid4().hex[:6]}"
    cpu0 = cpu_seconds(target.pids)
    r = run_java(
        "ShareConsumerPerf",
        [target.bootstrap, group, st["topic"], consumers, n],
        timeout=900,
        kafka4_cp=st["cp"],
    )
    cpu = cpu_seconds(target.pids) - cpu0
    line = next((e for e in r.json_lines() if "acknowledged" in e), None)
    if line is None or line["acknowledged"] < n:
        raise WorkloadError(f"ShareConsumerPerf: {line}\n{r.describe(3000)}")
    s = max(line["seconds"], 1e-3)
    return {
        f"{consumers} cons. delivered records/s": line["delivered"] / s,
        f"{consumers} cons. acknowledged records/s": line["acknowledged"] / s,
        f"{consumers} cons. {CPU_METRIC}": cpu / (n * W20_SIZE / GIB),
        f"{consumers} cons. redelivered": float(line["redelivered"]),
    }


def w20_run(target: Target, st: dict, i: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    for consumers in W20_CONSUMERS:
        figures.update(_w20_read(target, st, consumers, i))
    return figures


def w20_metrics() -> list[Metric]:
    out = []
    for c in W20_CONSUMERS:
        out += [
            Metric(f"{c} cons. delivered records/s", "records/s", True),
            Metric(f"{c} cons. acknowledged records/s", "records/s", True),
            Metric(f"{c} cons. {CPU_METRIC}", "s", False),
            Metric(f"{c} cons. redelivered", "", False),
        ]
    return out


def w20_cmds(sizes: dict) -> list[str]:
    n = sizes["w20_records"]
    return [
        "Kafka: Apache Kafka 4.4.0 (java/kafka4/pom.xml; KRaft, one node, share groups on by "
        "default, share.coordinator.state.topic RF 1), not 3.9; pybroker with its defaults",
        "setup: topic w20-<id>, 1 partition, RF 1; " + pp_cmd("w20-<id>", n, W20_SIZE, ["acks=1"]),
        "per run, for 1, 4 and 8 consumers, a fresh share group: `java -Xmx512m -cp $KAFKA4_CP "
        f"ShareConsumerPerf <bootstrap> w20-<c>-<run> w20-<id> <c> {n}` "
        "(java/kafka4/src/ShareConsumerPerf.java: kafka-clients 4.4.0, one KafkaShareConsumer "
        "per thread in one JVM, implicit acknowledgement, share.auto.offset.reset=earliest set "
        "through the Admin client first): records/s = records delivered (each delivery) and "
        "offsets acknowledged (the acknowledgement commit callbacks) over the seconds from the "
        "first record received to the last acknowledgement confirmed; CPU s/GiB = broker CPU "
        "seconds over the program's whole life per GiB of records read; redelivered = "
        "deliveries with a delivery count above 1",
    ]


WORKLOADS: dict[str, Workload] = {
    w.wid: w
    for w in [
        Workload(
            "W1",
            "produce 1 KiB, acks=1, 6 partitions (ProducerPerformance)",
            [Metric("MB/s", "MB/s", True), Metric(CPU_METRIC, "s", False)],
            w1_setup,
            w1_run,
            w1_cmds,
        ),
        Workload(
            "W2",
            "produce 100 B, acks=all, idempotent (ProducerPerformance)",
            [Metric("records/s", "records/s", True), Metric(CPU_METRIC, "s", False)],
            _no_setup,
            w2_run,
            w2_cmds,
        ),
        Workload(
            "W3",
            "consume 1 KiB records (ConsumerPerformance)",
            [
                Metric("MB/s", "MB/s", True),
                Metric("fetch MB/s", "MB/s", True),
                Metric(CPU_METRIC, "s", False),
            ],
            w3_setup,
            w3_run,
            w3_cmds,
        ),
        Workload(
            "W4",
            "end-to-end latency, 100 B, acks=1 (EndToEndLatency)",
            [Metric("p50 ms", "ms", False), Metric("p99 ms", "ms", False)],
            _no_setup,
            w4_run,
            w4_cmds,
        ),
        Workload(
            "W5",
            "kafka-python producer / consumer, 1 KiB",
            [
                Metric("produce MB/s", "MB/s", True),
                Metric("consume MB/s", "MB/s", True),
                Metric(CPU_METRIC, "s", False),
            ],
            _no_setup,
            w5_run,
            w5_cmds,
        ),
        Workload(
            "W6",
            "3 brokers, RF=3, acks=all produce 1 KiB (ProducerPerformance)",
            [Metric("MB/s", "MB/s", True), Metric(CPU_METRIC, "s", False)],
            _no_setup,
            w6_run,
            w6_cmds,
            brokers=3,
        ),
        Workload(
            "W7",
            "consumer-group rebalance, 10 kafka-python members",
            [
                Metric("join s", "s", False),
                Metric("leave s", "s", False),
                Metric("retries", "", False),
            ],
            w7_setup,
            w7_run,
            w7_cmds,
        ),
        Workload(
            "W8",
            "scale: 10,000 partitions, 1,000 idle connections",
            [
                Metric("create s", "s", False),
                Metric("metadata ms", "ms", False),
                Metric("response KiB", "KiB", False),
                Metric("RSS MiB (partitions)", "MiB", False),
                Metric("RSS MiB (+conns)", "MiB", False),
                Metric("conn RSS KiB each", "KiB", False),
                Metric("metadata ms (+conns)", "ms", False),
            ],
            w8_setup,
            w8_run,
            w8_cmds,
        ),
        Workload(
            "W9",
            "log cleaner: compact 1 GiB, 10% live keys; produce p99 meanwhile",
            [
                Metric("cleaner MB/s", "MB/s", True),
                Metric(CPU_METRIC, "s", False),
                Metric("produce p99 ms idle", "ms", False),
                Metric("produce p99 ms cleaning", "ms", False),
                Metric("p99 cleaning / idle", "", False),
                Metric("log left %", "%", False),
            ],
            w9_setup,
            w9_run,
            w9_cmds,
            overrides=W9_OVERRIDES,
        ),
        Workload(
            "W10",
            "transactions: 100 records of 1 KiB per transaction, 6 partitions; read_committed "
            "consume",
            [
                Metric("transactions/s", "txn/s", True),
                Metric("records/s", "records/s", True),
                Metric("read_committed MB/s", "MB/s", True),
                Metric(CPU_METRIC, "s", False),
            ],
            w1_setup,
            w10_run,
            w10_cmds,
        ),
        Workload(
            "W11",
            "W1 over TLS: produce 1 KiB, acks=1, 6 partitions, SSL listener",
            [Metric("MB/s", "MB/s", True), Metric(CPU_METRIC, "s", False)],
            w1_setup,
            w11_run,
            w11_cmds,
            tls="SSL",
        ),
        Workload(
            "W12",
            "W3 over TLS: consume 1 KiB records (ConsumerPerformance), SSL listener",
            [
                Metric("MB/s", "MB/s", True),
                Metric("fetch MB/s", "MB/s", True),
                Metric(CPU_METRIC, "s", False),
            ],
            w3_setup,
            w12_run,
            w12_cmds,
            tls="SSL",
        ),
        Workload(
            "W13",
            "W1 over SASL_SSL (SCRAM-SHA-512): produce 1 KiB, acks=1, 6 partitions",
            [Metric("MB/s", "MB/s", True), Metric(CPU_METRIC, "s", False)],
            w1_setup,
            w11_run,
            w13_cmds,
            tls="SASL_SSL",
        ),
        Workload(
            "W14",
            "W3 over SASL_SSL (SCRAM-SHA-512): consume 1 KiB records (ConsumerPerformance)",
            [
                Metric("MB/s", "MB/s", True),
                Metric("fetch MB/s", "MB/s", True),
                Metric(CPU_METRIC, "s", False),
            ],
            w3_setup,
            w12_run,
            w14_cmds,
            tls="SASL_SSL",
        ),
        Workload(
            "W15",
            "fetch sessions: a consumer of 1,000 idle partitions, full vs incremental fetches",
            [
                Metric("full fetch CPU ms", "ms", False),
                Metric("incremental fetch CPU ms", "ms", False),
                Metric("full / incremental", "", True),
                Metric("full answer KiB", "KiB", False),
                Metric("incremental answer B", "B", False),
            ],
            w15_setup,
            w15_run,
            w15_cmds,
        ),
        Workload(
            "W16",
            "KIP-848: five Java 4.1 consumers to a stable assignment, consumer vs classic",
            [
                Metric("consumer protocol s", "s", False),
                Metric("classic protocol s", "s", False),
            ],
            w16_setup,
            w16_run,
            w16_cmds,
            overrides=W16_OVERRIDES,
        ),
        Workload(
            "W17",
            "KIP-848 online migration: classic group upgraded by consumer members, then downgraded",
            [Metric("upgrade s", "s", False), Metric("downgrade s", "s", False)],
            w16_setup,
            w17_run,
            w17_cmds,
            overrides=W17_OVERRIDES,
        ),
        Workload(
            "W20",
            "share groups (KIP-932): 1 partition, 1/4/8 share consumers (Kafka 4.4 reference)",
            w20_metrics(),
            w20_setup,
            w20_run,
            w20_cmds,
            kafka4=True,
        ),
    ]
}


# ------------------------------------------------------------------------------------------
# running and reporting
# ------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    runs: dict[str, list[float]] = field(default_factory=dict)  # metric -> one value per run
    peak_rss: float | None = None  # MiB, summed VmHWM of the broker processes
    sampled_rss: float | None = None  # MiB, largest sampled sum of VmRSS
    extra_rss: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    start_s: float | None = None
    wall_s: float | None = None
    load: list[str] = field(default_factory=list)  # /proc/loadavg 1-min before, after

    def median(self, metric: str) -> float | None:
        vals = self.runs.get(metric)
        return statistics.median(vals) if vals else None


def log_excerpt(text: str, max_lines: int = 25) -> str:
    keys = ("ERROR", "WARNING", "Traceback", "Error", "Exception", "WARN")
    lines = [ln for ln in text.splitlines() if any(k in ln for k in keys)]
    return "\n".join(lines[-max_lines:]) or "\n".join(text.splitlines()[-max_lines:])


def run_workload(w: Workload, kind: str, runs: int, sizes: dict, workdir: Path) -> Outcome:
    out = Outcome(load=[loadavg()])
    t_start = time.monotonic()
    print(f"[{time.strftime('%H:%M:%S')}] {w.wid} {kind}: starting", flush=True)
    try:
        target = start_target(kind, w.brokers, workdir, w.overrides, w.tls, w.kafka4)
    except Exception as e:  # noqa: BLE001 - recorded
        out.error = f"start failed: {type(e).__name__}: {str(e)[:3000]}"
        print(f"  {out.error}", flush=True)
        return out
    out.start_s = time.monotonic() - t_start
    try:
        with RssSampler(target.pids) as sampler:
            try:
                state = w.setup(target, sizes)
                for i in range(runs):
                    cpu0 = cpu_seconds(target.pids)
                    figures = w.run(target, state, i)
                    moved = figures.pop("_bytes", None)
                    if moved:  # the run's broker CPU time per GiB it produced/consumed
                        figures[CPU_METRIC] = (cpu_seconds(target.pids) - cpu0) / (moved / GIB)
                    for k, v in figures.items():
                        out.runs.setdefault(k, []).append(v)
                    shown = ", ".join(f"{k} {v:,.2f}" for k, v in figures.items())
                    print(f"  {w.wid} {kind} run {i + 1}/{runs}: {shown}", flush=True)
            except Exception as e:  # noqa: BLE001 - recorded with the broker's log
                tb = traceback.format_exc(limit=4)
                out.error = (
                    f"{type(e).__name__}: {str(e)[:4000]}\n--- traceback ---\n{tb[-2000:]}"
                    f"\n--- broker log excerpt ---\n{log_excerpt(target.logs())}"
                )
                print(f"  {w.wid} {kind} FAILED: {type(e).__name__}: {str(e)[:500]}", flush=True)
            out.peak_rss = sampler.hwm()
            out.sampled_rss = sampler.peak
            out.extra_rss = target.extra_rss()
    finally:
        try:
            target.stop()
        except Exception as e:  # noqa: BLE001
            msg = f"stop: {type(e).__name__}: {str(e)[:1000]}"
            out.error = f"{out.error}\n{msg}" if out.error else msg
        out.wall_s = time.monotonic() - t_start
        out.load.append(loadavg())
    return out


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def fmt(v: float | None) -> str:
    if v is None:
        return "—"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def ratio(k: float | None, p: float | None) -> str:
    if k is None or p is None or k == 0:
        return "—"
    return f"{p / k:.2f}"


def table(selected: list[Workload], results: dict[str, dict[str, Outcome]]) -> str:
    rows = [
        "| workload | metric | Kafka | pybroker | ratio pybroker/Kafka |",
        "|---|---|---|---|---|",
    ]
    for w in selected:
        res = results.get(w.wid, {})
        k, p = res.get(KAFKA, Outcome()), res.get(PYBROKER, Outcome())
        for m in w.metrics:
            better = "higher" if m.higher_is_better else "lower"
            kv, pv = k.median(m.name), p.median(m.name)
            kcell = fmt(kv) if kv is not None else ("FAILED" if k.error else "—")
            pcell = fmt(pv) if pv is not None else ("FAILED" if p.error else "—")
            rows.append(
                f"| {w.wid} | {m.name} ({better} is better) | {kcell} | {pcell} | {ratio(kv, pv)} |"
            )
        rows.append(
            f"| {w.wid} | broker peak RSS MiB | {fmt(k.peak_rss)} | {fmt(p.peak_rss)} "
            f"| {ratio(k.peak_rss, p.peak_rss)} |"
        )
    return "\n".join(rows)


def _cmd_out(cmd: list[str]) -> str:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd=ROOT)
        return (r.stdout + r.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"<{e}>"


def machine_facts() -> dict[str, str]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    return {
        "cores (nproc)": str(os.cpu_count()),
        "cpu": cpu,
        "memory": mem,
        "kernel": platform.release(),
        "disk (log dirs)": _cmd_out(["df", "-h", "--output=source,fstype", tempfile.gettempdir()])
        .splitlines()[-1]
        .strip(),
    }


def versions() -> dict[str, str]:
    import kafka

    rev = _cmd_out(["git", "rev-parse", "--short", "HEAD"])
    dirty = _cmd_out(["git", "status", "--porcelain", "--", "pybroker"])
    if dirty:
        rev += f" + {len(dirty.splitlines())} uncommitted change(s) under pybroker/"
    zk = _cmd_out(["dpkg-query", "-W", "-f=${Version}", "zookeeper"])
    return {
        "Apache Kafka": f"{java.kafka_version()} (KRaft, org.apache.kafka:kafka_2.13 from Maven "
        f"Central; -Xms{kafka_reference.HEAP} -Xmx{kafka_reference.HEAP}, G1)",
        "pybroker": f"git {rev}",
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "Java": _cmd_out([java.java_executable() or "java", "-version"]).splitlines()[0],
        "kafka-python": kafka.__version__,
        "ZooKeeper (pybroker W6)": zk if zk and "no packages" not in zk else "n/a",
    }


def report(
    selected: list[Workload],
    results: dict[str, dict[str, Outcome]],
    args: argparse.Namespace,
    sizes: dict,
    wall_s: float,
) -> str:
    now = dt.datetime.now()
    lines = [f"# pybroker vs Apache Kafka — {now:%Y-%m-%d %H:%M}", ""]
    lines += [
        f"`python -m bench.run {' '.join(sys.argv[1:])}` (scale {args.scale}, "
        f"{args.runs} run(s) per workload and broker, median shown; total {wall_s / 60:.1f} min)",
        "",
        table(selected, results),
        "",
        "Ratio = pybroker / Kafka (above 1 is better for pybroker where higher is better, worse "
        "where lower is better). MB = MiB (as the Java tools count). Broker peak RSS = VmHWM of "
        "the broker process(es), summed over the 3 brokers for W6, over the broker's whole life "
        "in that workload (start, setup, all runs).",
        "",
        "## Machine",
        "",
    ]
    lines += [f"- {k}: {v}" for k, v in machine_facts().items()]
    lines += [
        "- Client and broker share the machine's cores: every figure includes the client's "
        "CPU use (the Java tools, kafka-python), on both sides alike.",
        "- The 1-minute load average before and after each broker's part is in 'Every run'. "
        "The bench's own client and broker keep it at about 2-3 on 2 cores; a higher value "
        "means other work shared the cores, and Kafka's and pybroker's parts of one workload "
        "may then have seen different load.",
        "",
        "## Versions and settings",
        "",
    ]
    lines += [f"- {k}: {v}" for k, v in versions().items()]
    lines += [
        "- Kafka: bench/kafka_reference.py (one KRaft node = broker + controller; W6: 3 nodes, "
        "node 1 broker+controller). Overrides: "
        + ", ".join(f"{k}={v}" for k, v in KAFKA_OVERRIDES.items())
        + ". Its heap is fixed at 512 MiB (-Xms = -Xmx, pages touched as used), which "
        "dominates its RSS.",
        "- pybroker: `python -m pybroker serve --override listeners=... --override log.dirs=... "
        + " ".join(f"--override {k}={v}" for k, v in PYBROKER_OVERRIDES.items())
        + "` (embedded metadata store; asyncio debug off). W6: 3 brokers on one private "
        "ZooKeeper (compat_tests/cluster.py settings, min.insync.replicas=2, "
        "default.replication.factor=3); ZooKeeper's RSS is listed separately, not in the table.",
        "- Open-file limit (RLIMIT_NOFILE soft/hard) inherited by both brokers: "
        + "/".join(
            str(x) for x in __import__("resource").getrlimit(__import__("resource").RLIMIT_NOFILE)
        )
        + ".",
        "- Neither broker fsyncs per write (Kafka's default log.flush.* unset; pybroker the "
        "same). Log dirs: one temp dir on the same disk for both.",
        f"- Java tools: `java -Xmx{CLIENT_HEAP}` default JVM flags, classpath "
        "`.cache/java/classpath.txt` (scripts/fetch-java-deps).",
        "",
        "## Commands",
        "",
    ]
    for w in selected:
        lines.append(f"- **{w.wid}** {w.title}")
        lines += [f"  - `{c}`" if c.startswith("java") else f"  - {c}" for c in w.commands(sizes)]
    lines += ["", "## Every run", ""]
    lines += ["| workload | broker | metric | runs | median |", "|---|---|---|---|---|"]
    for w in selected:
        for kind in (KAFKA, PYBROKER):
            o = results.get(w.wid, {}).get(kind)
            if o is None:
                continue
            for metric, vals in o.runs.items():
                lines.append(
                    f"| {w.wid} | {kind} | {metric} | {', '.join(fmt(v) for v in vals)} "
                    f"| {fmt(o.median(metric))} |"
                )
            extra = "".join(f"; {k} peak RSS {fmt(v)} MiB" for k, v in o.extra_rss.items())
            lines.append(
                f"| {w.wid} | {kind} | (broker) | start {fmt(o.start_s)} s, workload wall "
                f"{fmt(o.wall_s)} s; peak RSS {fmt(o.peak_rss)} MiB (VmHWM), largest sampled "
                f"VmRSS {fmt(o.sampled_rss)} MiB{extra}; load average (1 min) before/after "
                f"{' / '.join(o.load)} | |"
            )
    failures = [
        (w.wid, kind, o) for w in selected for kind, o in results.get(w.wid, {}).items() if o.error
    ]
    if failures:
        lines += ["", "## Failures", ""]
        for wid, kind, o in failures:
            lines += [f"### {wid} on {kind}", "", "```", o.error.rstrip(), "```", ""]
    return "\n".join(lines) + "\n"


def write_results(text: str, args: argparse.Namespace) -> Path:
    out_dir = Path(args.results_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{dt.date.today():%Y-%m-%d}.md"
    path.write_text(text)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="e.g. W1,W3 (default: all)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scale", choices=["small", "full"], default="full")
    ap.add_argument("--smoke", action="store_true", help="W1, 2,000 records, 1 run; no file")
    ap.add_argument("--results-dir", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--keep-logs", help="keep broker data and logs in this dir")
    ap.add_argument(
        "--brokers",
        default=f"{KAFKA},{PYBROKER}",
        help="which side(s) to run: kafka,pybroker (default both); one side gives no ratios",
    )
    ap.add_argument(
        "--w8-topics", type=int, help="W8: this many topics of 100 partitions (default 100)"
    )
    ap.add_argument(
        "--pybroker-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one more broker config for pybroker only (repeatable), e.g. "
        "metrics.listener=http://127.0.0.1:0",
    )
    args = ap.parse_args(argv)
    for item in args.pybroker_override:
        key, sep, val = item.partition("=")
        if not sep:
            ap.error(f"--pybroker-override: expected KEY=VALUE, not {item!r}")
        PYBROKER_OVERRIDES[key.strip()] = val.strip()

    sizes = dict(SIZES[args.scale])
    if args.w8_topics:
        sizes["w8_topics"] = args.w8_topics
    if args.smoke:
        global CLIENT_FAST_START
        args.workloads, args.runs, args.no_write = "W1", 1, True
        CLIENT_FAST_START = True
        sizes.update(SIZES["smoke"])
    wanted = [x.strip().upper() for x in args.workloads.split(",") if x.strip()]
    unknown = [x for x in wanted if x not in WORKLOADS]
    if unknown:
        ap.error(f"unknown workloads {unknown}; known: {', '.join(WORKLOADS)}")
    selected = [WORKLOADS[x] for x in wanted]
    kinds = [k for k in (KAFKA, PYBROKER) if k in args.brokers.split(",")]
    if not kinds:
        ap.error(f"--brokers: kafka and/or pybroker, not {args.brokers!r}")

    java.classpath()  # fetch the jars first (cached)
    base = Path(args.keep_logs) if args.keep_logs else Path(tempfile.mkdtemp(prefix="pybench-"))
    base.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Outcome]] = {}
    t0 = time.monotonic()
    try:
        for w in selected:
            for kind in kinds:
                workdir = base / f"{w.wid}-{kind}"
                results.setdefault(w.wid, {})[kind] = run_workload(
                    w, kind, args.runs, sizes, workdir
                )
                if not args.keep_logs:
                    shutil.rmtree(workdir, ignore_errors=True)
            if not args.no_write:  # after every workload, so a late failure keeps the rest
                done = selected[: selected.index(w) + 1]
                write_results(report(done, results, args, sizes, time.monotonic() - t0), args)
    finally:
        if not args.keep_logs:
            shutil.rmtree(base, ignore_errors=True)
    wall = time.monotonic() - t0
    print()
    print(table(selected, results))
    failed = [f"{wid} {kind}" for wid, r in results.items() for kind, o in r.items() if o.error]
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    if not args.no_write:
        path = write_results(report(selected, results, args, sizes, wall), args)
        print(f"\nresults: {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
