"""Client quotas (KIP-13/KIP-219/KIP-546) with Kafka's own tools and clients, on both
metadata backends: kafka-configs (kafka.admin.ConfigCommand) alters and describes quotas
through AlterClientQuotas/DescribeClientQuotas; Kafka's ProducerPerformance under a
producer_byte_rate quota of 1 MiB/s runs at that rate (within 10 %, from the tool's own
report); a kafka-python consumer under a consumer_byte_rate quota is throttled and reads
every record; the quotas survive a restart.

The brokers run with quota.window.num=2 (Kafka's setting; 11 by default): the rate is
measured over at least one full one-second window, so the burst a fresh sensor allows is one
second's worth instead of ten and a 30-second run shows the quota's rate.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest

from pybroker.testing import java
from pybroker.testing.client_helpers import create_topic

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not java.java_available(), reason="java not found (OpenJDK 17 expected)"),
]

CONFIG_COMMAND = "kafka.admin.ConfigCommand"
MIB = 1024 * 1024
WINDOWS = {"quota.window.num": 2}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def configs(broker, *args: str) -> java.JavaResult:
    r = java.run_main(CONFIG_COMMAND, ["--bootstrap-server", broker.bootstrap, *args], timeout=90)
    assert r.ok, r.describe()
    return r


def described(broker, *args: str) -> list[str]:
    """kafka-configs --describe's lines, sorted (its order follows the broker's answer)."""
    out = configs(broker, "--describe", *args).stdout
    return sorted(line.strip() for line in out.splitlines() if line.startswith("Quota configs"))


def test_kafka_configs_alters_and_describes_client_quotas(start_broker):
    broker = start_broker()
    configs(broker, "--alter", "--add-config", "producer_byte_rate=1048576,request_percentage=50",
            "--entity-type", "clients", "--entity-name", "perf")  # fmt: skip
    configs(broker, "--alter", "--add-config", "consumer_byte_rate=2000",
            "--entity-type", "clients", "--entity-default")  # fmt: skip
    configs(broker, "--alter", "--add-config", "producer_byte_rate=3000",
            "--entity-type", "users", "--entity-name", "alice",
            "--entity-type", "clients", "--entity-name", "app 1")  # fmt: skip
    configs(broker, "--alter", "--add-config", "consumer_byte_rate=4000",
            "--entity-type", "users", "--entity-default")  # fmt: skip
    assert described(broker, "--entity-type", "clients", "--entity-name", "perf") == [
        "Quota configs for client-id 'perf' are producer_byte_rate=1048576.0, "
        "request_percentage=50.0"
    ]
    assert described(broker, "--entity-type", "clients", "--entity-default") == [
        "Quota configs for the default client-id are consumer_byte_rate=2000.0"
    ]
    # every client-id entity (ANY, not strict on users: alice's app 1 too)
    assert described(broker, "--entity-type", "clients") == sorted(
        [
            "Quota configs for client-id 'perf' are producer_byte_rate=1048576.0, "
            "request_percentage=50.0",
            "Quota configs for the default client-id are consumer_byte_rate=2000.0",
        ]
    )
    assert described(broker, "--entity-type", "users", "--entity-name", "alice",
                     "--entity-type", "clients", "--entity-name", "app 1") == [
        "Quota configs for user-principal 'alice', client-id 'app 1' are producer_byte_rate=3000.0"
    ]  # fmt: skip
    assert described(broker, "--entity-type", "users") == [
        "Quota configs for the default user-principal are consumer_byte_rate=4000.0"
    ]
    # removal
    configs(broker, "--alter", "--delete-config", "request_percentage",
            "--entity-type", "clients", "--entity-name", "perf")  # fmt: skip
    assert described(broker, "--entity-type", "clients", "--entity-name", "perf") == [
        "Quota configs for client-id 'perf' are producer_byte_rate=1048576.0"
    ]
    # the quotas are in the metadata store: a restarted broker answers the same
    broker.restart()
    assert described(broker, "--entity-type", "clients", "--entity-name", "perf") == [
        "Quota configs for client-id 'perf' are producer_byte_rate=1048576.0"
    ]
    assert described(broker, "--entity-type", "users") == [
        "Quota configs for the default user-principal are consumer_byte_rate=4000.0"
    ]


SUMMARY = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\)")


# one backend (CI time): the throttle does not depend on it; a quota set on ZooKeeper and
# learnt through its znode is test_a_quota_altered_through_one_broker_holds_on_every_broker's
@pytest.mark.parametrize("backend", ["embedded"], indirect=True)
def test_producer_byte_rate_holds_producer_performance_to_the_quota(start_broker):
    """The issue's test: kafka-configs --add-config producer_byte_rate=1048576 on client-id
    perf, then ProducerPerformance with client.id=perf (1000-byte records, unthrottled on its
    side) runs at 1 MiB/s within 10 %, by its own summary (MB/sec is MiB of record values
    per second; the requests' framing adds about 2 %)."""
    broker = start_broker(**WINDOWS)
    topic = unique("quota-perf")
    create_topic(broker.bootstrap, topic, partitions=1)
    configs(broker, "--alter", "--add-config", "producer_byte_rate=1048576",
            "--entity-type", "clients", "--entity-name", "perf")  # fmt: skip
    records, size = 20_000, 1000
    r = java.run_main(
        java.PRODUCER_PERFORMANCE,
        ["--topic", topic, "--num-records", str(records), "--record-size", str(size),
         "--throughput", "-1", "--producer-props", f"bootstrap.servers={broker.bootstrap}",
         "client.id=perf"],
        timeout=200,
    )  # fmt: skip
    assert r.ok, r.describe()
    summary = SUMMARY.findall(r.stdout)[-1]
    sent, per_sec, mb_per_sec = int(summary[0]), float(summary[1]), float(summary[2])
    assert sent == records, r.stdout
    rate = per_sec * size / MIB  # the same as its MB/sec, with more digits
    print(f"ProducerPerformance under a 1 MiB/s quota: {rate:.3f} MiB/s ({mb_per_sec} MB/sec)")
    assert 0.9 <= rate <= 1.1, r.stdout


# one backend (CI time), as the producer's above
@pytest.mark.parametrize("backend", ["embedded"], indirect=True)
def test_consumer_byte_rate_holds_a_kafka_python_consumer(start_broker):
    """consumer_byte_rate=1 MiB/s on client-id slow-reader: reading 8 MiB takes the quota's
    time (the bytes read stay within the quota over the elapsed time plus two windows: the
    first window's allowance and one fetch), the client is told its throttle time, and every
    record arrives once, in order.  Read unthrottled the same records take well under a
    second on this broker."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    broker = start_broker(**WINDOWS)
    topic = unique("quota-fetch")
    create_topic(broker.bootstrap, topic, partitions=1)
    n, size = 8192, 1024
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, client_id="loader")
    for i in range(n):
        producer.send(topic, i.to_bytes(4, "big") + bytes(size - 4))
    producer.flush(timeout=60)
    producer.close()
    configs(broker, "--alter", "--add-config", "consumer_byte_rate=1048576",
            "--entity-type", "clients", "--entity-name", "slow-reader")  # fmt: skip
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        client_id="slow-reader",
        group_id=None,
        enable_auto_commit=False,
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        got: list[int] = []
        started = time.monotonic()
        deadline = started + 60
        while len(got) < n and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(int.from_bytes(r.value[:4], "big") for r in records)
        elapsed = time.monotonic() - started
        throttle_max = max(
            v
            for group in consumer.metrics().values()
            for name, v in group.items()
            if name == "throttle-time-max" and isinstance(v, int | float) and v == v
        )
    finally:
        consumer.close()
    assert got == list(range(n))
    read = n * size / MIB
    print(
        f"8 MiB read under a 1 MiB/s quota in {elapsed:.1f} s; largest throttle {throttle_max} ms"
    )
    assert read <= 1.0 * (elapsed + 2), (read, elapsed)
    assert throttle_max > 0


def _produce_throttle(host: str, port: int, topic: str, partition: int, client_id: str) -> int:
    """A 150 KB Produce v3 (hand-built bytes) as ``client_id``: its answer's throttle_time_ms."""
    import struct

    from pybroker.testing import rawkafka

    records = rawkafka.record_batch_v2([(None, bytes(150_000))])
    body = rawkafka.kstring(None) + struct.pack(">hi", -1, 10_000)
    body += struct.pack(">i", 1) + rawkafka.kstring(topic)
    body += struct.pack(">i", 1) + struct.pack(">i", partition)
    body += struct.pack(">i", len(records)) + records
    with rawkafka.Conn(host, port) as c:
        _, answer = c.roundtrip(rawkafka.frame(rawkafka.request_header(0, 3, 1, client_id) + body))
    r = rawkafka.Reader(answer)
    for _ in range(r.take(">i")):
        r.string()
        for _ in range(r.take(">i")):
            _p, error, _offset, _time = r.take(">ihqq")
            assert error == 0, error
    return r.take(">i")


def test_a_quota_altered_through_one_broker_holds_on_every_broker(tmp_path):
    """Three brokers on ZooKeeper: kafka-configs through broker 0 sets producer_byte_rate on
    client-id capped; each broker, leading one partition, throttles that client id (each
    learns of the quota by watching its znode), and not another client id."""
    from pybroker.testing.cluster_harness import running_cluster, wait_until

    with running_cluster(tmp_path) as cluster:
        topic = unique("quota-cluster")
        cluster.create_topic(topic, partitions=3, rf=1)
        leaders = {p: info.leader for p, info in cluster.metadata([topic]).topic(topic).items()}
        assert sorted(leaders.values()) == [0, 1, 2], leaders
        r = java.run_main(CONFIG_COMMAND, ["--bootstrap-server", cluster.brokers[0].bootstrap,
                          "--alter", "--add-config", "producer_byte_rate=10000",
                          "--entity-type", "clients", "--entity-name", "capped"], timeout=90)  # fmt: skip
        assert r.ok, r.describe()
        for p, leader in leaders.items():
            b = cluster.brokers[leader]
            assert _produce_throttle(b.host, b.port, topic, p, "uncapped") == 0
            wait_until(
                lambda b=b, p=p: _produce_throttle(b.host, b.port, topic, p, "capped") > 0,
                timeout=10,
                what=f"broker {leader} to throttle client-id capped",
            )
    assert not cluster.stop_problems, cluster.stop_problems
