"""metrics.listener's configuration and the counters behind /metrics (sans-I/O); the scraped
endpoint of a real broker is compat_tests/test_metrics.py."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pybroker.config import ConfigError, build_config
from pybroker.errors import ErrorCode
from pybroker.exposition import _quantile, render
from pybroker.metrics import BrokerMetrics
from pybroker.read_model import Snapshot


def test_the_listener_is_off_by_default_and_parsed_when_set():
    assert build_config({"log.dirs": "/tmp/x"}).metrics_listener is None
    cfg = build_config({"log.dirs": "/tmp/x", "metrics.listener": "http://127.0.0.1:9308"})
    assert (cfg.metrics_listener.host, cfg.metrics_listener.port) == ("127.0.0.1", 9308)
    assert str(cfg.metrics_listener) == "http://127.0.0.1:9308"
    cfg = build_config({"log.dirs": "/tmp/x", "metrics.listener": "http://[::1]:0"})
    assert (cfg.metrics_listener.host, cfg.metrics_listener.port) == ("::1", 0)


@pytest.mark.parametrize(
    "bad", ["127.0.0.1:9308", "https://127.0.0.1:9308", "http://host", "http://h:70000"]
)
def test_a_bad_listener_is_refused_naming_the_key(bad):
    with pytest.raises(ConfigError, match="'metrics.listener'"):
        build_config({"log.dirs": "/tmp/x", "metrics.listener": bad})


def test_the_kafka_listeners_port_is_refused():
    with pytest.raises(ConfigError, match="'metrics.listener'"):
        build_config(
            {
                "log.dirs": "/tmp/x",
                "listeners": "PLAINTEXT://127.0.0.1:9092",
                "metrics.listener": "http://127.0.0.1:9092",
            }
        )


def test_errors_are_counted_per_api_and_code_as_kafka_counts_them():
    m = BrokerMetrics()
    produce_answer = {
        "responses": [
            {
                "name": "t",
                "partition_responses": [
                    {"index": 0, "error_code": 0, "record_errors": []},
                    {"index": 7, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
                ],
            }
        ],
        "throttle_time_ms": 0,
    }
    m.request(0, 9, {}, produce_answer, 0.002)
    fetch_answer = {"error_code": 0, "responses": [{"partitions": [{"error_code": 0}]}]}
    m.request(1, 12, {"replica_id": 2}, fetch_answer, 0.3)
    assert m.errors == {
        ("Produce", 0): 1,
        ("Produce", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION): 1,
        ("Fetch", 0): 2,
    }
    assert m.requests == {("Produce", 9): 1, ("Fetch", 12): 1, ("FetchFollower", 12): 1}


def test_deleted_topics_leave_the_totals_monotonic():
    m = BrokerMetrics()
    m.produced("a", 100, 2)
    m.produced("b", 50, 1)
    m.consumed("a", 100)
    m.retire_topics(["a"])
    assert list(m.topics) == ["a"]
    assert m.totals() == [150, 3, 100]


def test_quantiles_interpolate_within_a_bucket():
    m = BrokerMetrics()
    for _ in range(100):
        m.request(3, 12, {}, None, 0.0002)  # the first bucket: 0 - 0.5 ms
    counts = m.latency["Metadata"]
    assert _quantile(counts, 0.5) == pytest.approx(0.25)
    assert math.isnan(_quantile([0] * len(counts), 0.5))


def test_a_snapshot_renders_and_parses():
    m = BrokerMetrics()
    m.produced("t", 1000, 10)
    m.request(0, 9, {}, {"responses": []}, 0.001)
    snap = Snapshot(
        broker_id=0,
        offline_replicas=2,
        log_dirs=[("/d1", 0), ("/d2", 1)],
        topics_in={"t": [1000, 10, 0]},
        totals=m.totals(),
        requests=dict(m.requests),
        latency={k: list(v) for k, v in m.latency.items()},
    )
    body, content_type = render(snap)
    assert content_type.startswith("text/plain")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(body.decode())
        for s in f.samples
    }
    assert samples[("kafka_server_brokertopicmetrics_bytesin_total", (("topic", "t"),))] == 1000
    assert samples[("kafka_server_brokertopicmetrics_bytesin_total", ())] == 1000
    assert samples[("kafka_server_replicamanager_offlinereplicacount", ())] == 2
    assert samples[("kafka_log_logmanager_offlinelogdirectorycount", ())] == 1
    offline = "kafka_log_logmanager_logdirectoryoffline"
    assert samples[(offline, (("logDirectory", "/d2"),))] == 1
    assert samples[(offline, (("logDirectory", "/d1"),))] == 0
    key = (
        "kafka_network_requestmetrics_requests_total",
        (("request", "Produce"), ("version", "9")),
    )
    assert samples[key] == 1
    q = ("kafka_network_requestmetrics_totaltimems", (("quantile", "0.99"), ("request", "Produce")))
    assert 0.5 < samples[q] <= 1.0


def test_quota_throttle_time_is_counted_per_quota_type():
    snap = Snapshot(broker_id=0, totals=[0, 0, 0], quota_throttle_ms={"producer_byte_rate": 1500})
    body, _ = render(snap)
    samples = {
        s.labels["type"]: s.value
        for fam in text_string_to_metric_families(body.decode())
        if fam.name == "pybroker_quota_throttle_time_ms"
        for s in fam.samples
        if s.name.endswith("_total")
    }
    assert samples == {"Produce": 1500, "Fetch": 0, "Request": 0, "ConnectionCreation": 0}
