"""The harness itself: ZooKeeper comes up, a broker starts, answers, stops cleanly, restarts."""

from __future__ import annotations

import socket

from kazoo.client import KazooClient

from pybroker.testing import rawkafka


def test_zookeeper_fixture(zookeeper):
    zk = KazooClient(hosts=zookeeper.connect, timeout=10)
    zk.start(timeout=10)
    try:
        zk.ensure_path("/compat-harness/probe")
        assert "probe" in zk.get_children("/compat-harness")
    finally:
        zk.stop()
        zk.close()


def test_broker_starts_answers_and_stops(broker):
    with rawkafka.Conn(broker.host, broker.port) as c:
        corr, body = c.roundtrip(rawkafka.api_versions_v0(42))
    error, ranges = rawkafka.parse_api_versions_v0(body)
    assert corr == 42 and error == 0
    print(f"[{broker.backend}] ApiVersions ranges: {sorted(ranges.items())}")
    for key in (0, 1, 2, 3, 18):  # Produce, Fetch, ListOffsets, Metadata, ApiVersions
        assert key in ranges, f"api key {key} not advertised"
    assert broker.log_dir.is_dir()
    broker.stop()
    with socket.socket() as s:
        assert s.connect_ex((broker.host, broker.port)) != 0, "port still open after stop"
    broker.restart()
    with rawkafka.Conn(broker.host, broker.port) as c:
        corr, _ = c.roundtrip(rawkafka.api_versions_v0(43))
    assert corr == 43
    broker.kill9()
    broker.restart()
