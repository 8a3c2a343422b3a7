"""Replication throttles (replication/throttle.py): Kafka's windowed rate, the throttled
replica lists, and the topic config check (Kafka's ThrottledReplicaListValidator)."""

from __future__ import annotations

import pytest

from pybroker.coord.cluster import validate_topic_configs
from pybroker.errors import ErrorCode, KafkaError
from pybroker.replication.throttle import WindowedRate, throttled_partitions


def test_windowed_rate_counts_at_least_ten_windows():
    rate = WindowedRate()  # 11 windows of 1 s
    rate.record(100_000, now_ms=0)
    # one second in: Kafka divides by (samples - 1) full windows, not by the elapsed second
    assert rate.rate(1000) == pytest.approx(10_000)
    for t in range(1000, 20_000, 1000):
        rate.record(50_000, now_ms=t)
    # a steady 50 kB/s: the old burst has left the 11 s window
    assert rate.rate(20_000) == pytest.approx(50_000, rel=0.11)
    assert rate.rate(60_000) == 0.0


def test_throttled_partitions_of_this_broker():
    assert throttled_partitions("*", 3) is None  # every partition
    assert throttled_partitions("0:1,0:3, 2:3,5:2", 3) == {0, 2}
    assert throttled_partitions("", 3) == set()
    assert throttled_partitions(None, 3) == set()


def test_throttled_replicas_config_check():
    for ok in ("*", "0:1,1:2", "", " 0:1 , 1:2 "):
        validate_topic_configs({"leader.replication.throttled.replicas": ok})
    with pytest.raises(KafkaError) as ei:
        validate_topic_configs({"follower.replication.throttled.replicas": "0-1"})
    assert ei.value.code == ErrorCode.INVALID_CONFIG
    assert "Must be the literal '*' or a list of replicas" in str(ei.value)
