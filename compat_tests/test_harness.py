"""The harness itself: ZooKeeper comes up, a broker starts, answers, stops cleanly, restarts."""

from __future__ import annotations

import socket

from kazoo.client import KazooClient

from compat_tests.shared_broker import SharedBroker
from compat_tests.wire_tap import WireTap
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


def test_a_shared_broker_fails_the_test_whose_part_of_the_output_has_a_traceback(tmp_path):
    """SharedBroker (the `shared_broker` marker's broker): a traceback in a test's part of the
    output, or the broker gone, is that test's failure and not the next one's; a broker that
    exited 0 on SIGTERM retires cleanly."""
    shared = SharedBroker(tmp_path / "broker", None, {})
    try:
        b = shared.begin("first")
        assert shared.end("first") == ""
        assert shared.begin("second") is b
        with open(b.stderr_path, "ab") as out:  # as the broker's logging writes one
            out.write(b'Traceback (most recent call last):\n  File "x.py"\nValueError: boom\n')
        problem = shared.end("second")
        assert "traceback" in problem and "ValueError: boom" in problem, problem
        shared.begin("third")
        assert shared.end("third") == ""  # the second test's traceback is not the third's
        shared.begin("fourth")
        b.kill9()
        assert "exited during the test" in shared.end("fourth")
        shared.begin("fifth")  # a fresh start
        assert b.is_running() and shared.end("fifth") == ""
        assert shared.retire() == "" and not b.is_running()
    finally:
        shared.process.cleanup()


def test_a_reset_tap_records_only_connections_made_after_it(tmp_path):
    shared = SharedBroker(tmp_path / "broker", None, {})
    try:
        b = shared.begin("tap")
        with WireTap((b.host, b.port)) as tap:
            before = rawkafka.Conn(tap.host, tap.port)
            before.roundtrip(rawkafka.api_versions_v0(1))
            assert len(tap.exchanges(18)) == 1
            tap.reset()
            assert tap.exchanges(18) == []
            assert before.closed_by_peer(10)  # reset closed it
            before.close()
            with rawkafka.Conn(tap.host, tap.port) as after:
                assert after.roundtrip(rawkafka.api_versions_v0(3))[0] == 3
            assert [e.version for e in tap.exchanges(18)] == [0]
        assert shared.end("tap") == "" and shared.retire() == ""
    finally:
        shared.process.cleanup()
