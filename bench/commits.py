"""W18 (offset commits) and W19 (transactions): pybroker's coordinator storages beside Kafka 3.9.

    python -m bench.commits                        # W18 and W19, every target, 15 s each
    python -m bench.commits --workloads W18 --groups 16,256 --seconds 15
    python -m bench.commits --targets kafka,zk1-zookeeper,zk1-kafka --runs 3
    python -m bench.commits --no-write             # print only (else bench/results/<date>-commits.md)
    python -m bench.commits --workloads W18 --client-stats   # + librdkafka's requests per commit

W18: ``--groups`` consumer groups (16 and 256), each one confluent-kafka consumer subscribed to a
1-partition topic that commits a new offset synchronously after every poll
(``poll(0)`` then ``commit(offsets=..., asynchronous=False)``: what a consumer with
enable.auto.commit=false does), for ``--seconds``.  Figures: commits/s over all groups, and
the p50 / p99 of one commit call; the broker's and the client process's share of a core and CPU
per commit over the timed part; with ``--client-stats`` each consumer's librdkafka statistics
every second, from which the requests per commit by API (and the frames sent and received and
the broker threads' wake-ups) over the timed part.

W19: ``--producers`` confluent-kafka transactional producers (16), each running begin /
produce one 100 B record to its own partition of a 16-partition topic / commit, for
``--seconds``.  Figures: transactions/s over all producers, p50 / p99 of one transaction.

The clients run in a subprocess of their own (one thread per consumer or producer: the
commit and the transaction calls release the GIL while librdkafka waits), started after a
warm-up in which every consumer joined its group and made one commit (every producer one
transaction), so the timed part is steady state.

Targets (``--targets``, in this order, each started fresh for each workload and group count,
so Kafka and pybroker alternate):

    kafka             Apache Kafka 3.9 from pybroker/testing/kafka_reference.py, one KRaft node (Kafka's
                      coordinators never write offsets or transaction state to the metadata
                      quorum, ZooKeeper or KRaft, so KRaft changes nothing here); offsets and
                      transaction state in __consumer_offsets / __transaction_state (RF 1)
    embedded-<s>      pybroker with the embedded metadata store
    zk1-<s>           pybroker on a 1-node ZooKeeper (Debian's zookeeper, forceSync=yes: every
                      write fsynced before it is answered)
    zk3-<s>           pybroker on a 3-node ZooKeeper ensemble on this machine

with <s> the storage of offsets and transaction state: ``zookeeper`` (the default: the metadata
store) or ``kafka`` (offsets.storage=kafka, transaction.state.storage=kafka), and an optional
``-c<N>`` suffix for a node of N broker processes (``node.cores=N``, docs/multicore.md), e.g.
``zk1-kafka-c2``: the coordinators' partitions spread over the processes, as over Kafka's
request handler threads, and an optional ``-uvloop`` or ``-asyncio`` suffix for the broker's
event loop (``event.loop``), e.g. ``zk1-kafka-uvloop``.  The 1-minute
load average is recorded before and after each target's part (the machine may be shared).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.profiles.profile_run import start_pyspy, stop_pyspy
from pybroker.testing.process import BrokerProcess
from pybroker.testing.procstat import Sampler, cpu_seconds
from pybroker.testing.zookeeper import ZooKeeperEnsemble

TARGETS = [
    "kafka",
    "embedded-zookeeper",
    "embedded-kafka",
    "zk1-zookeeper",
    "zk1-kafka",
    "zk3-zookeeper",
    "zk3-kafka",
]
KAFKA_STORAGE = {
    "offsets.storage": "kafka",
    "transaction.state.storage": "kafka",
    "offsets.topic.replication.factor": 1,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
}
W19_PARTITIONS = 16
RECORD = b"x" * 100


# ------------------------------------------------------------------------------ clients


def _pct(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] * 1000 if values else float("nan")
    return statistics.quantiles(values, n=100)[q - 1] * 1000


def client_w18(bootstrap: str, groups: int, seconds: float, tag: str, stats: bool) -> dict:
    from confluent_kafka import Consumer, TopicPartition

    topic = f"w18-{tag}"
    consumers = []
    # librdkafka's statistics (``--client-stats``): each consumer's last report, whose
    # per-broker "req" counts by API say what the client sent for each commit
    reports: list[list[dict]] = [[] for _ in range(groups)]
    for i in range(groups):
        config: dict = {
            "bootstrap.servers": bootstrap,
            "group.id": f"w18-{tag}-{i}",
            "enable.auto.commit": False,
            "session.timeout.ms": 45000,
            "auto.offset.reset": "earliest",
        }
        if stats:
            config["statistics.interval.ms"] = 1000
            config["stats_cb"] = lambda js, out=reports[i]: out.append(json.loads(js))
        c = Consumer(config)
        c.subscribe([topic])
        consumers.append(c)
    # warm-up: every consumer owns the partition and has committed once
    deadline = time.monotonic() + 300
    pending = set(range(groups))
    while pending and time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            if i not in pending:
                c.poll(0)  # a joined consumer keeps polling (max.poll.interval.ms)
                continue
            c.poll(0.05)
            if c.assignment():
                try:
                    c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
                    pending.discard(i)
                except Exception:  # noqa: BLE001 (rebalancing still: try again)
                    pass
    if pending:
        raise RuntimeError(f"{len(pending)} consumers never joined their group")
    start = threading.Barrier(groups + 1)
    stop_at = [0.0]
    counts = [0] * groups
    latencies: list[list[float]] = [[] for _ in range(groups)]
    errors: list[str] = []

    def run(i: int) -> None:
        c = consumers[i]
        lat = latencies[i]
        n = 2
        start.wait()
        try:
            while time.monotonic() < stop_at[0]:
                c.poll(0)
                t = time.perf_counter()
                c.commit(offsets=[TopicPartition(topic, 0, n)], asynchronous=False)
                lat.append(time.perf_counter() - t)
                n += 1
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
        counts[i] = n - 2

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(groups)]
    for t in threads:
        t.start()
    stop_at[0] = time.monotonic() + seconds
    first = [len(r) for r in reports]
    t0 = time.perf_counter()
    wall0 = time.time()
    cpu0 = os.times()
    start.wait()
    for t in threads:
        t.join()
    cpu1 = os.times()
    elapsed = time.perf_counter() - t0
    wall1 = time.time()
    requests = _requests_by_api(reports, first) if stats else {}
    for c in consumers:
        c.close()
    lat = [x for per in latencies for x in per]
    client_cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    return {
        "timed": [wall0, wall1, sum(counts)],
        "commits/s": sum(counts) / elapsed,
        "p50 ms": _pct(lat, 50),
        "p99 ms": _pct(lat, 99),
        "client cores": client_cpu / elapsed,
        "client us/commit": client_cpu / max(1, sum(counts)) * 1e6,
        "requests/commit": requests,
        "errors": errors[:5],
    }


def _requests_by_api(reports: list[list[dict]], first: list[int]) -> dict:
    """Requests sent per OffsetCommit by API (and the broker threads' wake-ups, and the
    transmitted / received frames), from each consumer's first and last statistics report
    in the timed part, summed over the consumers and the brokers they talk to."""
    totals: dict[str, float] = {}
    for rs, k in zip(reports, first, strict=True):
        if len(rs) < k + 2:
            continue
        a, b = rs[k], rs[-1]
        for name, after in b.get("brokers", {}).items():
            before = a.get("brokers", {}).get(name, {})
            if after.get("nodeid", -1) < 0 and not after.get("req"):
                continue
            for api, n in after.get("req", {}).items():
                d = n - before.get("req", {}).get(api, 0)
                if d:
                    totals[api] = totals.get(api, 0) + d
            for key in ("wakeups", "tx", "rx"):
                totals[f"({key})"] = (
                    totals.get(f"({key})", 0) + after.get(key, 0) - before.get(key, 0)
                )
    commits = totals.get("OffsetCommit", 0)
    if not commits:
        return {}
    return {api: round(n / commits, 3) for api, n in sorted(totals.items())}


def client_w19(bootstrap: str, producers: int, seconds: float, tag: str) -> dict:
    from confluent_kafka import Producer

    topic = f"w19-{tag}"
    ps = []
    for i in range(producers):
        p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": f"w19-{tag}-{i}",
                "linger.ms": 0,
            }
        )
        p.init_transactions(60)
        p.begin_transaction()
        p.produce(topic, RECORD, partition=i % W19_PARTITIONS)
        p.commit_transaction(60)
        ps.append(p)
    start = threading.Barrier(producers + 1)
    stop_at = [0.0]
    counts = [0] * producers
    latencies: list[list[float]] = [[] for _ in range(producers)]
    errors: list[str] = []

    def run(i: int) -> None:
        p = ps[i]
        lat = latencies[i]
        start.wait()
        n = 0
        try:
            while time.monotonic() < stop_at[0]:
                t = time.perf_counter()
                p.begin_transaction()
                p.produce(topic, RECORD, partition=i % W19_PARTITIONS)
                p.commit_transaction(60)
                lat.append(time.perf_counter() - t)
                n += 1
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
        counts[i] = n

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(producers)]
    for t in threads:
        t.start()
    stop_at[0] = time.monotonic() + seconds
    t0 = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    for p in ps:
        p.flush(10)
    lat = [x for per in latencies for x in per]
    return {
        "transactions/s": sum(counts) / elapsed,
        "p50 ms": _pct(lat, 50),
        "p99 ms": _pct(lat, 99),
        "errors": errors[:5],
    }


def run_client(
    kind: str, bootstrap: str, n: int, seconds: float, tag: str, stats: bool = False
) -> dict:
    """The client in its own process (the harness's threads stay out of its GIL)."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.commits",
            f"client-{kind}",
            bootstrap,
            str(n),
            str(seconds),
            tag,
            *(["stats"] if stats else []),
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 600,
        cwd=Path(__file__).resolve().parent.parent,
    )
    if out.returncode != 0:
        raise RuntimeError(f"client {kind} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------ targets


@dataclass
class Running:
    name: str
    bootstrap: str
    stop: Callable[[], None]
    notes: list[str] = field(default_factory=list)
    broker_pids: list[int] = field(default_factory=list)  # Kafka's JVM or pybroker
    zk_pids: list[int] = field(default_factory=list)


def cpu_sampler(running: Running) -> Sampler[tuple[float, float]]:
    """(broker CPU s, ZooKeeper CPU s) every 0.25 s, so that the CPU spent in the client's
    timed part (its wall-clock bounds) can be cut out of a whole run."""
    return Sampler(lambda: (cpu_seconds(running.broker_pids), cpu_seconds(running.zk_pids)))


def start_target(name: str, workdir: Path) -> Running:
    if name == "kafka":
        from pybroker.testing.kafka_reference import start_kafka

        ref = start_kafka(workdir / "kafka")
        return Running(
            name,
            ref.bootstrap,
            lambda: ref.stop(check=False),
            [ref.version],
            [n.proc.pid for n in ref.nodes if n.proc is not None],
        )
    backend, storage, *rest = name.split("-")
    overrides: dict[str, object] = {"group.initial.rebalance.delay.ms": 0}
    for option in rest:
        if option in ("asyncio", "uvloop"):  # "-uvloop": event.loop
            overrides["event.loop"] = option
        else:  # "-c<N>": a node of N broker processes
            overrides["node.cores"] = int(option.removeprefix("c"))
    if storage == "kafka":
        overrides.update(KAFKA_STORAGE)
    ensemble = None
    connect = None
    if backend.startswith("zk"):
        ensemble = ZooKeeperEnsemble(int(backend[2:]))
        try:
            ensemble.start()
        except BaseException:
            ensemble.stop()
            raise
        connect = ensemble.connect
    broker = BrokerProcess(workdir / name, zookeeper_connect=connect, overrides=overrides)
    try:
        broker.start(timeout=120)
    except BaseException:
        if ensemble is not None:
            ensemble.stop()
        raise

    running = Running(name, broker.bootstrap, lambda: None, broker_pids=[broker.pid or 0])
    if ensemble is not None:
        running.zk_pids = [z.proc.pid for z in ensemble.servers if z.proc is not None]

    def stop() -> None:
        try:
            broker.stop()
            # the coordinators' group commit (coord/metadata/batching.py), logged at close
            running.notes += [
                line.split("group commit: ", 1)[1]
                for line in broker.output(400).splitlines()
                if "group commit: " in line
            ]
        finally:
            if ensemble is not None:
                ensemble.stop()

    running.stop = stop
    return running


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if (
            md is not None
            and len(md.partitions) == partitions
            and all(p.leader >= 0 for p in md.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} has no leaders")


def load1() -> float:
    return os.getloadavg()[0]


def cpu_model() -> str:
    """/proc/cpuinfo's "model name" (the same machine type can differ between sessions)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# ------------------------------------------------------------------------------ the run


@dataclass
class Result:
    workload: str
    n: int
    target: str
    figures: dict
    load_before: float
    load_after: float


def run(args: argparse.Namespace) -> list[Result]:
    results: list[Result] = []
    work = Path(tempfile.mkdtemp(prefix="bench-commits-"))
    try:
        cases: list[tuple[str, int]] = []
        if "W18" in args.workloads:
            cases += [("W18", g) for g in args.groups]
        if "W19" in args.workloads:
            cases += [("W19", p) for p in args.producers]
        for workload, n in cases:
            for rnd in range(args.runs):
                for target in args.targets:
                    tag = f"{target}-{n}-{rnd}-{int(time.time())}"
                    before = load1()
                    try:
                        running = start_target(target, work / tag)
                    except Exception as e:  # noqa: BLE001 (reported, the run goes on)
                        r = Result(
                            workload, n, target, {"error": f"start: {e}"[-2000:]}, before, load1()
                        )
                        results.append(r)
                        print(_row(r), flush=True)
                        continue
                    try:
                        if workload == "W18":
                            create_topic(running.bootstrap, f"w18-{tag}", 1)
                            spies = _profile(args, running, f"W18-{n}-{target}-{rnd}")
                            try:
                                with cpu_sampler(running) as cpu:
                                    figures = run_client(
                                        "w18",
                                        running.bootstrap,
                                        n,
                                        args.seconds,
                                        tag,
                                        args.client_stats,
                                    )
                            finally:
                                stop_pyspy(spies)
                            _cpu_figures(figures, cpu)
                        else:
                            create_topic(running.bootstrap, f"w19-{tag}", W19_PARTITIONS)
                            figures = run_client("w19", running.bootstrap, n, args.seconds, tag)
                    except Exception as e:  # noqa: BLE001 (reported, the run goes on)
                        figures = {"error": str(e)[-2000:]}
                    finally:
                        running.stop()
                    if running.notes and "error" not in figures:
                        figures["notes"] = running.notes
                    r = Result(workload, n, target, figures, before, load1())
                    results.append(r)
                    print(_row(r), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def _profile(args: argparse.Namespace, running: Running, tag: str) -> list[subprocess.Popen]:
    """py-spy on a pybroker target (``--profile DIR``): flamegraph + idle-inclusive raw stacks
    (bench/profiles/profile_run.py's samplers)."""
    if not args.profile or running.name == "kafka":
        return []
    out = Path(args.profile)
    out.mkdir(parents=True, exist_ok=True)
    return start_pyspy(list(running.broker_pids), out, tag, "")


def _cpu_figures(figures: dict, cpu: Sampler[tuple[float, float]]) -> None:
    """The broker's (and ZooKeeper's) share of a core and CPU per commit in the timed part."""
    t0, t1, commits = figures.pop("timed")
    ends = cpu.within(t0, t1)
    if ends is None or commits <= 0:
        return
    (a, (broker_a, zk_a)), (b, (broker_b, zk_b)) = ends
    secs, broker, zk = b - a, broker_b - broker_a, zk_b - zk_a
    if secs <= 0:
        return
    figures["broker cores"] = broker / secs
    figures["broker us/commit"] = broker / (commits * secs / (t1 - t0)) * 1e6
    if zk:
        figures["zookeeper cores"] = zk / secs


def _row(r: Result) -> str:
    f = r.figures
    if "error" in f:
        return f"{r.workload} n={r.n:>3} {r.target:<20} ERROR {f['error'][:300]}"
    rate = f.get("commits/s", f.get("transactions/s"))
    err = f" errors={f['errors']}" if f.get("errors") else ""
    err += "".join(f" [{note}]" for note in f.get("notes", []) if "round trips" in note)
    if "broker cores" in f:
        err += f"  broker {f['broker cores']:.2f} cores, {f['broker us/commit']:.0f} us/commit"
    if "zookeeper cores" in f:
        err += f", ZooKeeper {f['zookeeper cores']:.2f} cores"
    if "client cores" in f:
        err += f"; client {f['client cores']:.2f} cores, {f['client us/commit']:.0f} us/commit"
    if f.get("requests/commit"):
        err += f"; per commit {f['requests/commit']}"
    return (
        f"{r.workload} n={r.n:>3} {r.target:<20} {rate:>9,.0f}/s  p50 {f['p50 ms']:6.2f} ms"
        f"  p99 {f['p99 ms']:7.2f} ms  load {r.load_before:.2f}->{r.load_after:.2f}{err}"
    )


def _median_table(results: list[Result]) -> str:
    rows = [
        "| workload | n | target | rate/s | p50 ms | p99 ms | load 1m |",
        "|---|---|---|---|---|---|---|",
    ]
    keys = dict.fromkeys((r.workload, r.n, r.target) for r in results)
    for w, n, t in keys:
        rs = [
            r
            for r in results
            if (r.workload, r.n, r.target) == (w, n, t) and "error" not in r.figures
        ]
        if not rs:
            rows.append(f"| {w} | {n} | {t} | error | | | |")
            continue
        key = "commits/s" if w == "W18" else "transactions/s"
        med = statistics.median(r.figures[key] for r in rs)
        p50 = statistics.median(r.figures["p50 ms"] for r in rs)
        p99 = statistics.median(r.figures["p99 ms"] for r in rs)
        loads = ", ".join(f"{r.load_before:.1f}->{r.load_after:.1f}" for r in rs)
        rows.append(f"| {w} | {n} | {t} | {med:,.0f} | {p50:.2f} | {p99:.2f} | {loads} |")
    return "\n".join(rows)


def write_results(results: list[Result], args: argparse.Namespace, path: Path) -> None:
    rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent,
    ).stdout.strip()
    lines = [
        f"# {time.strftime('%Y-%m-%d')}: W18 offset commits, W19 transactions (bench/commits.py)",
        "",
        f"Command: `python -m bench.commits {' '.join(sys.argv[1:])}` at {rev}; "
        f"{os.cpu_count()} cores ({cpu_model()}), Python {platform.python_version()}, "
        f"{args.seconds} s per run, "
        f"{args.runs} run(s) per figure (medians).",
        "",
        _median_table(results),
        "",
        "Every run:",
        "",
        *[f"    {_row(r)}" for r in results],
        "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("client-w18", "client-w19"):
        bootstrap, n, seconds, tag = argv[1], int(argv[2]), float(argv[3]), argv[4]
        if argv[0] == "client-w18":
            print(json.dumps(client_w18(bootstrap, n, seconds, tag, argv[5:] == ["stats"])))
        else:
            print(json.dumps(client_w19(bootstrap, n, seconds, tag)))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="W18,W19")
    parser.add_argument("--groups", default="16,256", help="W18 group counts")
    parser.add_argument("--producers", default="16", help="W19 producer counts")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument(
        "--client-stats",
        action="store_true",
        help="W18: librdkafka statistics every second (requests per commit by API)",
    )
    parser.add_argument(
        "--profile", default="", help="py-spy the pybroker targets into this folder"
    )
    parser.add_argument("--results-dir", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)
    args.workloads = args.workloads.split(",")
    args.groups = [int(g) for g in args.groups.split(",")]
    args.producers = [int(p) for p in args.producers.split(",")]
    args.targets = args.targets.split(",")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores", flush=True)
    results = run(args)
    print()
    print(_median_table(results))
    if not args.no_write:
        path = Path(args.results_dir) / f"{time.strftime('%Y-%m-%d')}-commits.md"
        write_results(results, args, path)
        print(f"\nwritten to {path}")
    return 0 if all("error" not in r.figures for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
