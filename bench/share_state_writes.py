"""Share-partition state writes (KIP-932) against an acks=all append: why the state lives in the
metadata store (docs/internals.md, "Where the state lives").

    python -m bench.share_state_writes [--records 20000] [--consumers 4]
                                       [--backends embedded,zookeeper]

For each backend (one broker on the embedded store; three brokers on a throwaway ZooKeeper,
RF 3, min.insync.replicas=2): a 1-partition topic gets ``--records`` records of 1 KiB
(ProducerPerformance), then ``--consumers`` KafkaShareConsumers 4.4 in one fresh share group
(java/kafka4/src/ShareConsumerPerf.java, implicit acknowledgement) read it all; the partition
leader's metrics give the state writes made meanwhile and their mean latency
(kafka_server_share_coordinator_metrics_write_total, pybroker_share_state_write_seconds_total).
Then 500 acks=all produce requests of 200 B, one at a time (confluent-kafka, linger.ms=0), give
the latency of the append a log-based design (Kafka's __share_group_state) would make per
write, as a client sees it.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import run as bench_run  # noqa: E402
from compat_tests import java  # noqa: E402
from compat_tests.cluster import Cluster  # noqa: E402
from compat_tests.procutil import free_port  # noqa: E402
from tests.zk_server import ZooKeeperServer  # noqa: E402

WRITES = "kafka_server_share_coordinator_metrics_write_total"
SECONDS = "pybroker_share_state_write_seconds_total"
ACCEPTED = 'kafka_server_sharegroupmetrics_recordacknowledgements_total{ackType="Accept"}'


def scrape(port: int) -> dict[str, float]:
    out = {}
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith((WRITES, SECONDS, ACCEPTED)):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
    return out


def append_latency(bootstrap: str, topic: str, n: int = 500) -> tuple[float, float]:
    """(mean, median) ms of an acks=all produce of 200 B, one request at a time."""
    import confluent_kafka as ck

    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    lat = []
    for i in range(50 + n):  # 50 to warm up
        t0 = time.perf_counter()
        p.produce(topic, b"x" * 200)
        p.flush(30)
        if i >= 50:
            lat.append(time.perf_counter() - t0)
    return statistics.mean(lat) * 1000, statistics.median(lat) * 1000


def measure(bootstrap: str, ports: list[int], rf: int, workdir: Path, args) -> None:  # type: ignore[no-untyped-def]
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic("shared", 1, rf), NewTopic("appends", 1, rf)])
    finally:
        admin.close()
    target = bench_run.Target(
        bench_run.PYBROKER, bootstrap, [], lambda: None, lambda: "", log_dirs=[workdir / "x"]
    )
    bench_run.wait_topics_ready(target, ["shared", "appends"], 1, timeout=120)
    bench_run.producer_perf(target, "shared", args.records, 1024, ["acks=1"])
    cp = java.compile_app("ShareConsumerPerf.java", workdir / "classes", kafka4=True)
    before = {p: scrape(p) for p in ports}
    r = bench_run.run_java(
        "ShareConsumerPerf",
        [bootstrap, "state-writes", "shared", args.consumers, args.records],
        timeout=1800,
        kafka4_cp=cp,
    )
    line = next(e for e in r.json_lines() if "acknowledged" in e)
    print(
        f"  {args.consumers} consumers: {line['acknowledged']} records acknowledged in "
        f"{line['seconds']:.1f} s ({line['acknowledged'] / line['seconds']:,.0f} records/s)"
    )
    for p in ports:
        a, b = scrape(p), before[p]
        writes = a.get(WRITES, 0) - b.get(WRITES, 0)
        if writes:
            secs = a.get(SECONDS, 0) - b.get(SECONDS, 0)
            acks = a.get(ACCEPTED, 0) - b.get(ACCEPTED, 0)
            print(
                f"  state writes on the leader: {writes:.0f}, mean {secs / writes * 1000:.2f} ms, "
                f"{acks / writes:.0f} records acknowledged per write"
            )
    mean, p50 = append_latency(bootstrap, "appends")
    print(f"  acks=all produce of 200 B, RF {rf}: mean {mean:.2f} ms, median {p50:.2f} ms")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--backends", default="embedded,zookeeper")
    args = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="share-state-writes-"))
    settings = {"group.initial.rebalance.delay.ms": 0}
    try:
        if "embedded" in args.backends:
            port = free_port("127.0.0.1")
            b = bench_run.BenchBroker(
                base / "embedded",
                overrides=dict(settings, **{"metrics.listener": f"http://127.0.0.1:{port}"}),
            )
            b.start()
            try:
                print("embedded metadata store, 1 broker:")
                measure(b.bootstrap, [port], 1, base / "embedded", args)
            finally:
                b.stop()
                b.cleanup()
        if "zookeeper" in args.backends:
            zk = ZooKeeperServer(base / "zookeeper")
            zk.start()
            cluster = Cluster(base / "cluster", zk, 3, dict(settings, **{"min.insync.replicas": 2}))
            ports = []
            for broker in cluster.brokers.values():
                broker.__class__ = bench_run.BenchBroker
                ports.append(free_port("127.0.0.1"))
                broker.overrides["metrics.listener"] = f"http://127.0.0.1:{ports[-1]}"
            try:
                cluster.start()
                print("ZooKeeper, 3 brokers, RF 3, min.insync.replicas=2:")
                measure(cluster.bootstrap, ports, 3, base / "cluster", args)
            finally:
                cluster.stop()
                cluster.cleanup()
                zk.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
