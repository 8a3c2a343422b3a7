"""The pytest plugin (pybroker/testing/pytest_plugin.py), run as a user runs it: a test module
that uses only its fixtures, in a separate pytest process (pytester's runpytest_subprocess),
talking to the brokers with kafka-python.

The plugin is loaded through its pytest11 entry point when pybroker is installed with it;
otherwise (an editable install made before the entry point existed) with ``-p``.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pybroker.testing.client import AdminClient
from pybroker.testing.process import BrokerProcess
from pybroker.testing.zookeeper import zookeeper_available

pytest_plugins = ["pytester"]

PLUGIN = "pybroker.testing.pytest_plugin"
ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(autouse=True)
def _inner_pythonpath(monkeypatch: pytest.MonkeyPatch) -> None:
    """The inner pytest runs in pytester's directory: it imports pybroker (and, in the
    cluster test, compat_tests) from this checkout."""
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    )


# A user's test module: produce and consume one record with kafka-python.
ROUND_TRIP = """
import json, os
from kafka import KafkaConsumer, KafkaProducer


def test_round_trip(kafka_broker, kafka_topic):
    topic = kafka_topic(partitions=2)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers)
    sent = producer.send(topic, key=b"k", value=b"hello", partition=1).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=kafka_broker.bootstrap_servers,
        group_id="readers",
        auto_offset_reset="earliest",
        consumer_timeout_ms=30000,
    )
    record = next(consumer)
    consumer.close()
    assert (record.partition, record.offset, record.key, record.value) == (1, sent.offset, b"k", b"hello")
    with open(os.environ["REPORT"], "a") as f:
        f.write(json.dumps({"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                            "bootstrap": kafka_broker.bootstrap_servers, "topic": topic}) + "\\n")
"""


def plugin_args() -> list[str]:
    """``-p`` the plugin unless its entry point is installed (then pytest loads it itself)."""
    installed = importlib.metadata.entry_points(group="pytest11")
    if any(ep.value == PLUGIN for ep in installed):
        return []
    return ["-p", PLUGIN]


def reports(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider", *args)


def test_the_fixtures_give_a_broker_and_a_topic_a_client_can_use(pytester, tmp_path, monkeypatch):
    report = tmp_path / "report.jsonl"
    monkeypatch.setenv("REPORT", str(report))
    pytester.makepyfile(test_user=ROUND_TRIP)
    result = run(pytester, "-q")
    result.assert_outcomes(passed=1)
    (line,) = reports(report)
    assert line["bootstrap"].startswith("127.0.0.1:")
    assert line["topic"].startswith("test_round_trip-")


def test_under_xdist_each_worker_has_its_own_broker(pytester, tmp_path, monkeypatch):
    report = tmp_path / "report.jsonl"
    monkeypatch.setenv("REPORT", str(report))
    # six tests: xdist's load scheduling hands both workers some at once
    pytester.makepyfile(
        test_user=ROUND_TRIP.replace(
            "def test_round_trip(kafka_broker, kafka_topic):",
            "import pytest\n\n@pytest.mark.parametrize('n', range(6))\n"
            "def test_round_trip(kafka_broker, kafka_topic, n):",
        )
    )
    result = run(pytester, "-q", "-n", "2")
    result.assert_outcomes(passed=6)
    lines = reports(report)
    by_worker: dict[str, set[str]] = {}
    for line in lines:
        by_worker.setdefault(line["worker"], set()).add(line["bootstrap"])
    assert sorted(by_worker) == ["gw0", "gw1"], by_worker
    # one broker per worker for the whole session, and not the same one
    assert all(len(b) == 1 for b in by_worker.values()), by_worker
    assert by_worker["gw0"] != by_worker["gw1"]
    assert len({line["topic"] for line in lines}) == 6


def test_kafka_bootstrap_points_the_fixtures_at_a_running_kafka(pytester, tmp_path):
    """The inner test stops after creating its topic until this test has seen the topic on
    the second broker; after the run the topic is gone from it (deleted at teardown)."""
    second = BrokerProcess(tmp_path / "second").start()
    try:
        handshake = tmp_path / "handshake"
        handshake.mkdir()
        pytester.makepyfile(
            test_user=f"""
import time
from pathlib import Path
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

HANDSHAKE = Path({str(handshake)!r})


def test_against_the_given_broker(kafka_broker, kafka_topic):
    assert kafka_broker.bootstrap_servers == {second.bootstrap!r}
    topic = kafka_topic(partitions=3, configs={{"cleanup.policy": "compact"}})
    (HANDSHAKE / "topic").write_text(topic)
    deadline = time.monotonic() + 60
    while not (HANDSHAKE / "seen").exists():
        assert time.monotonic() < deadline, "the outer test did not see the topic"
        time.sleep(0.05)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers)
    producer.send(topic, key=b"k", value=b"v", partition=2).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap_servers,
                             consumer_timeout_ms=30000)
    consumer.assign([TopicPartition(topic, 2)])
    consumer.seek_to_beginning()
    assert next(consumer).value == b"v"
    consumer.close()
"""
        )
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            *plugin_args(),
            "-p",
            "no:cacheprovider",
            "-q",
            f"--kafka-bootstrap={second.bootstrap}",
            "test_user.py",
        ]
        inner = pytester.popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + 60
            while not (handshake / "topic").exists():
                assert inner.poll() is None, inner.communicate()[0].decode()
                assert time.monotonic() < deadline, "the inner test never created its topic"
                time.sleep(0.05)
            topic = (handshake / "topic").read_text()
            with AdminClient(second.bootstrap) as admin:
                error, leaders = admin.metadata([topic]).topics[topic]
            assert error == 0 and sorted(leaders) == [0, 1, 2]
            assert second.is_running()
            (handshake / "seen").write_text("")
            out, _ = inner.communicate(timeout=120)
        finally:
            if inner.poll() is None:
                inner.kill()
                inner.wait()
        assert inner.returncode == 0, out.decode()
        assert b"1 passed" in out, out.decode()
        with AdminClient(second.bootstrap) as admin:
            deadline = time.monotonic() + 30
            while admin.metadata([topic]).topics[topic][0] == 0:
                assert time.monotonic() < deadline, f"{topic} still exists after the run"
                time.sleep(0.05)
            assert admin.metadata([topic]).topics[topic][0] == 3  # UNKNOWN_TOPIC_OR_PARTITION
    finally:
        try:
            second.stop()
        finally:
            second.cleanup()


def test_kafka_bootstrap_names_an_address_nothing_answers_on(pytester):
    pytester.makepyfile(test_user="def test_x(kafka_broker):\n    pass\n")
    result = run(pytester, "-q", "--kafka-bootstrap=127.0.0.1:1")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*--kafka-bootstrap=127.0.0.1:1: no broker there answered*"])


def test_kafka_broker_config_sets_the_started_broker(pytester):
    pytester.makepyfile(
        test_user="""
from kafka import KafkaProducer


def test_auto_created_topic_has_three_partitions(kafka_broker):
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers)
    producer.send("auto-created", b"x").get(timeout=30)
    assert producer.partitions_for("auto-created") == {0, 1, 2}
    producer.close()
"""
    )
    result = run(pytester, "-q", "--kafka-broker-config", "num.partitions=3")
    result.assert_outcomes(passed=1)


def test_a_topic_the_broker_refuses_fails_the_test_with_kafkas_error(pytester):
    pytester.makepyfile(
        test_user="""
def test_replication_factor_above_the_brokers(kafka_topic):
    kafka_topic(replication_factor=3)
"""
    )
    result = run(pytester, "-q")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*INVALID_REPLICATION_FACTOR (38)*"])


CLUSTER_TEST = """
import time
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from pybroker.testing import rawkafka
from pybroker.testing.cluster_harness import metadata_v7_request, parse_metadata_v7


def metadata(host, port, topic):
    with rawkafka.Conn(host, port, timeout=5) as c:
        _, body = c.roundtrip(metadata_v7_request(1, [topic]))
    return parse_metadata_v7(body, port)


def test_three_brokers(kafka_cluster):
    assert len(kafka_cluster.bootstrap_servers.split(",")) == 3
    admin = KafkaAdminClient(bootstrap_servers=kafka_cluster.bootstrap_servers)
    admin.create_topics([NewTopic("replicated", 3, 3)])
    admin.close()
    for broker in kafka_cluster.brokers.values():
        deadline = time.monotonic() + 30
        while True:
            md = metadata(broker.host, broker.port, "replicated")
            parts = md.topic("replicated")
            if len(parts) == 3 and all(len(p.isr) == 3 for p in parts.values()):
                break
            assert time.monotonic() < deadline, (broker.bootstrap, md)
            time.sleep(0.1)
        assert sorted(md.brokers) == [0, 1, 2]
        assert md.controller_id in (0, 1, 2)
    producer = KafkaProducer(bootstrap_servers=kafka_cluster.bootstrap_servers, acks="all")
    producer.send("replicated", b"r", partition=0).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=kafka_cluster.bootstrap_servers,
                             consumer_timeout_ms=30000)
    consumer.assign([TopicPartition("replicated", 0)])
    consumer.seek_to_beginning()
    assert next(consumer).value == b"r"
    consumer.close()
"""


@pytest.mark.skipif(not zookeeper_available(), reason="Debian's ZooKeeper is not installed")
def test_kafka_cluster_gives_three_brokers_that_all_answer_metadata(pytester):
    pytester.makepyfile(test_user=CLUSTER_TEST)
    result = run(pytester, "-q")
    result.assert_outcomes(passed=1)


def test_kafka_cluster_without_zookeeper_skips_saying_why(pytester, monkeypatch):
    monkeypatch.setenv("ZK_SERVER_SH", "/nonexistent/zkServer.sh")
    pytester.makepyfile(test_user="def test_x(kafka_cluster):\n    pass\n")
    result = run(pytester, "-q", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*kafka_cluster needs ZooKeeper: /nonexistent/zkServer.sh*"])


def test_the_readme_example_passes(pytester):
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Testing your code against a real broker", 1)[1]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    pytester.makepyfile(test_readme=example)
    result = run(pytester, "-q")
    result.assert_outcomes(passed=1)


def test_the_pytest11_entry_point_loads_the_plugin_without_p(pytester, tmp_path, monkeypatch):
    """The package's metadata as pip writes it (setuptools' egg_info from pyproject.toml,
    put first on the path) registers the plugin: no -p, no conftest."""
    meta = tmp_path / "meta"
    meta.mkdir()
    subprocess.run(
        [sys.executable, "-c", "from setuptools import setup; setup()", "-q", "egg_info"]
        + ["--egg-base", str(meta)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(meta), str(ROOT)]))
    pytester.makepyfile(test_user="def test_x(kafka_topic):\n    assert kafka_topic()\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1)


def _kafka_jars() -> bool:
    from pybroker.testing import java

    return java.java_available()


@pytest.mark.skipif(not _kafka_jars(), reason="Apache Kafka's jars (scripts/fetch-java-deps)")
def test_kafka_topic_against_apache_kafka(pytester, tmp_path, monkeypatch):
    """--kafka-bootstrap at a real Apache Kafka 3.9 (KRaft): kafka_topic's CreateTopics and
    DeleteTopics through pybroker's codec work there as they do on pybroker, and a refusal
    carries Kafka's own message."""
    from pybroker.testing.kafka_reference import start_kafka

    report = tmp_path / "report.jsonl"
    monkeypatch.setenv("REPORT", str(report))
    pytester.makepyfile(
        test_user=ROUND_TRIP
        + "\n\ndef test_refused(kafka_topic):\n    kafka_topic(replication_factor=3)\n"
    )
    with start_kafka(tmp_path / "kafka") as kafka:
        result = run(pytester, "-q", f"--kafka-bootstrap={kafka.bootstrap}")
        result.assert_outcomes(passed=1, failed=1)
        result.stdout.fnmatch_lines(["*INVALID_REPLICATION_FACTOR (38)*only 1 broker*"])
        (line,) = reports(report)
        assert line["bootstrap"] == kafka.bootstrap
        with AdminClient(kafka.bootstrap) as admin:
            deadline = time.monotonic() + 30
            while line["topic"] in admin.metadata().topics:
                assert time.monotonic() < deadline, "the topic was not deleted"
                time.sleep(0.1)
