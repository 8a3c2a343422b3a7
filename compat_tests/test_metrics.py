"""metrics.listener: a real broker's /metrics, scraped over HTTP and parsed with
prometheus_client's own parser, moves as kafka-python produces and consumes.

Names are Kafka's as the JMX exporter renders them (pybroker/exposition.py, docs/metrics.md).
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import UnknownTopicOrPartitionError
from kafka.structs import OffsetAndMetadata
from prometheus_client.parser import text_string_to_metric_families

from pybroker.testing import rawkafka
from pybroker.testing.cluster_harness import running_cluster
from pybroker.testing.procutil import free_port

N = 50
VALUE = b"v" * 100
RECORD_OVERHEAD_MAX = 16  # a v2 record's length, attributes, deltas, key/value lengths, headers
BATCH_HEADER = 61


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def total(samples: dict, name: str, **labels: str) -> float:
    """Sum over the samples of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, lv), v in samples.items() if n == name and want <= lv)


def wait_for(port: int, cond, timeout: float = 15.0) -> dict:
    """Scrape until ``cond(samples)`` holds (state the broker updates in the background)."""
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(port)
        if cond(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.2)


def test_metrics_follow_produce_and_consume(start_broker):
    port = free_port()
    b = start_broker(
        **{
            "metrics.listener": f"http://127.0.0.1:{port}",
            "auto.create.topics.enable": "false",
            "group.initial.rebalance.delay.ms": 0,
        }
    )
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        admin.create_topics([NewTopic("metered", 2, 1), NewTopic("raw", 1, 1)])
        before = scrape(port)
        assert value(before, "kafka_server_brokertopicmetrics_bytesin_total") == 0

        # N records in one batch (linger long, one flush) to partition 0
        producer = KafkaProducer(bootstrap_servers=b.bootstrap, linger_ms=5000, acks=1)
        futures = [producer.send("metered", VALUE, partition=0) for _ in range(N)]
        producer.flush()
        assert all(f.get(10).offset >= 0 for f in futures)
        producer.close()

        # an exactly known batch, and a produce to a partition that does not exist
        batch = rawkafka.record_batch_v2([(b"k", b"exact")])
        host, kport = b.bootstrap.rsplit(":", 1)
        with rawkafka.Conn(host, int(kport)) as c:
            c.send(rawkafka.produce_v3(1, "raw", 0, batch, acks=1))
            _, body = c.recv_frame()
            assert rawkafka.parse_produce_v3(body)[0][2] == 0
            c.send(rawkafka.produce_v3(2, "raw", 7, batch, acks=1))
            _, body = c.recv_frame()
            assert rawkafka.parse_produce_v3(body)[0][2] == 3  # UNKNOWN_TOPIC_OR_PARTITION
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_topics(["no-such-topic"])

        consumer = KafkaConsumer(
            "metered",
            bootstrap_servers=b.bootstrap,
            group_id="lagging",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            consumer_timeout_ms=10_000,
        )
        got = []
        for record in consumer:
            got.append(record)
            if len(got) == N:
                break
        assert len(got) == N
        consumer.commit({TopicPartition("metered", 0): OffsetAndMetadata(20, "", -1)})

        s = scrape(port)
        bytes_in = value(s, "kafka_server_brokertopicmetrics_bytesin_total", topic="metered")
        payload = N * len(VALUE)
        assert payload < bytes_in <= payload + BATCH_HEADER + N * RECORD_OVERHEAD_MAX
        # stored byte for byte: the log holds exactly what came in
        assert value(s, "kafka_log_log_size", topic="metered", partition="0") == bytes_in
        assert value(s, "kafka_log_log_size", topic="metered", partition="1") == 0
        assert value(s, "kafka_server_brokertopicmetrics_bytesin_total", topic="raw") == len(batch)
        assert value(s, "kafka_server_brokertopicmetrics_bytesin_total") == bytes_in + len(batch)
        assert value(s, "kafka_server_brokertopicmetrics_messagesin_total", topic="metered") == N
        assert value(s, "kafka_server_brokertopicmetrics_messagesin_total") == N + 1
        bytes_out = value(s, "kafka_server_brokertopicmetrics_bytesout_total", topic="metered")
        assert bytes_out >= bytes_in  # every record was fetched (some may be fetched twice)

        def requests(name: str, snap: dict) -> float:
            return total(snap, "kafka_network_requestmetrics_requests_total", request=name)

        for api in ("Produce", "Fetch", "FetchConsumer", "Metadata", "OffsetCommit"):
            assert requests(api, s) > requests(api, before), api
        assert requests("FetchFollower", s) == 0
        assert value(s, "kafka_network_requestmetrics_totaltimems_count", request="Produce") == (
            requests("Produce", s)
        )
        assert value(s, "pybroker_request_total_time_seconds_count", request="Fetch") == requests(
            "Fetch", s
        )
        errors = "kafka_network_requestmetrics_errors_total"
        assert value(s, errors, request="Produce", error="UNKNOWN_TOPIC_OR_PARTITION") == 1
        assert value(s, errors, request="DeleteTopics", error="UNKNOWN_TOPIC_OR_PARTITION") == 1
        assert value(s, errors, request="Produce", error="NONE") >= 2

        assert value(s, "kafka_server_replicamanager_partitioncount") == 3
        assert value(s, "kafka_server_replicamanager_leadercount") == 3
        assert value(s, "kafka_server_replicamanager_underreplicatedpartitions") == 0
        assert value(s, "kafka_controller_kafkacontroller_activecontrollercount") == 1
        assert value(s, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
        assert value(s, "kafka_controller_kafkacontroller_globaltopiccount") == 2
        assert value(s, "kafka_server_replicamanager_isrshrinks_total") == 0

        lag = {"consumergroup": "lagging", "topic": "metered"}
        assert value(s, "kafka_consumergroup_current_offset", partition="0", **lag) == 20
        assert value(s, "kafka_consumergroup_lag", partition="0", **lag) == N - 20
        assert value(s, "kafka_consumergroup_lag_sum", **lag) == N - 20
        assert value(s, "kafka_consumergroup_members", consumergroup="lagging") == 1
        assert value(s, "kafka_coordinator_group_groupmetadatamanager_numgroups") == 1

        conns = "kafka_server_socket_server_metrics_connection_count"
        assert value(s, conns, listener="PLAINTEXT", networkProcessor="0") >= 2
        idle = value(s, "kafka_network_socketserver_networkprocessoravgidlepercent")
        assert 0.0 <= idle <= 1.0
        assert value(s, "kafka_server_fetchsessioncache_numincrementalfetchsessions") >= 0

        # the group's members leave: the group stays with its offsets, the lag with it
        consumer.close()
        s = wait_for(port, lambda x: total(x, "kafka_consumergroup_members") == 0)
        assert value(s, "kafka_consumergroup_lag", partition="0", **lag) == N - 20
        assert value(s, "kafka_coordinator_group_groupmetadatamanager_numgroupsempty") == 1

        # a deleted topic's own series go; the all-topics totals stay
        admin.delete_topics(["raw"])
        s = wait_for(
            port,
            lambda x: (
                (
                    "kafka_server_brokertopicmetrics_bytesin_total",
                    frozenset({("topic", "raw")}),
                )
                not in x
            ),
        )
        assert ("kafka_log_log_size", frozenset({("topic", "raw"), ("partition", "0")})) not in s
        assert value(s, "kafka_server_brokertopicmetrics_bytesin_total") == bytes_in + len(batch)
    finally:
        admin.close()


def test_http_listener_routes(start_broker):
    port = free_port()
    start_broker(**{"metrics.listener": f"http://127.0.0.1:{port}"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/nothing-here", timeout=10)
    assert e.value.code == 404
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 405  # read-only: the method is refused first
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", data=b"x", method="GET")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 413
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", method="HEAD")
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200 and r.read() == b""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/metrics?x=1",
        headers={"Accept": "application/openmetrics-text; version=1.0.0"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.headers["Content-Type"].startswith("application/openmetrics-text")
        assert r.read().decode().rstrip().endswith("# EOF")


def test_cluster_replication_and_isr_metrics(tmp_path):
    """Three brokers on ZooKeeper, a partition on all three: the followers count what they
    copy, the leader what it serves them; a follower killed makes the leader count an ISR
    shrink and an under-replicated partition; exactly one broker is the active controller."""
    with running_cluster(tmp_path, overrides={"replica.lag.time.max.ms": 2000}) as c:
        # running_cluster started the brokers: give each its own metrics port and restart
        ports = {}
        for i, b in c.brokers.items():
            ports[i] = free_port()
            b.overrides["metrics.listener"] = f"http://127.0.0.1:{ports[i]}"
            c.restart(i)
        c.create_topic("replicated", partitions=1, rf=3)
        c.wait_isr_full("replicated")
        producer = KafkaProducer(bootstrap_servers=c.bootstrap, acks="all")
        for _ in range(20):
            producer.send("replicated", VALUE)
        producer.flush()
        producer.close()
        leader = c.leader_of("replicated", 0).leader
        followers = [i for i in c.ids if i != leader]
        scraped = {i: scrape(ports[i]) for i in c.ids}
        assert (
            sum(
                value(s, "kafka_controller_kafkacontroller_activecontrollercount")
                for s in scraped.values()
            )
            == 1
        )
        lead = scraped[leader]
        bytes_in = value(lead, "kafka_server_brokertopicmetrics_bytesin_total", topic="replicated")
        assert bytes_in > 20 * len(VALUE)
        assert value(lead, "kafka_server_brokertopicmetrics_replicationbytesout_total") >= (
            2 * bytes_in
        )
        assert value(lead, "kafka_server_replicamanager_leadercount") == 1
        assert value(lead, "kafka_server_replicamanager_underreplicatedpartitions") == 0
        for f in followers:
            s = wait_for(
                ports[f],
                lambda x: (
                    value(x, "kafka_server_brokertopicmetrics_replicationbytesin_total") >= bytes_in
                ),
            )
            assert value(s, "kafka_server_brokertopicmetrics_replicationbytesin_total") == bytes_in
            assert value(s, "kafka_server_replicamanager_partitioncount") == 1
            assert value(s, "kafka_server_replicamanager_leadercount") == 0
            assert value(s, "kafka_log_log_size", topic="replicated", partition="0") == bytes_in

        c.kill9(followers[0])
        s = wait_for(
            ports[leader],
            lambda x: value(x, "kafka_server_replicamanager_underreplicatedpartitions") == 1,
            timeout=30,
        )
        assert value(s, "kafka_server_replicamanager_underreplicatedpartitions") == 1
        assert value(s, "kafka_server_replicamanager_isrshrinks_total") == 1
    assert not c.stop_problems, c.stop_problems
