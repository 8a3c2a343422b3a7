"""Apache Kafka Connect 3.9 in distributed mode (connect-runtime, on the Java tools'
classpath) against pybroker (issue 11): the worker creates its compacted internal topics
(config, offset, status), checks their cleanup.policy through DescribeConfigs, joins its
group and serves its REST API; a second start finds the topics already there
(CreateTopics answers TOPIC_ALREADY_EXISTS) and comes up again.  With connect-file on the
classpath (java/apps/pom.xml), a FileStreamSource -> topic -> FileStreamSink pipeline copies a
file exactly, lines appended later included; the broker cleans the internal topics (one
segment a second), and a new worker resumes from them: lines written while no worker ran are
copied once."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

import pytest
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType

from pybroker.testing import java
from pybroker.testing.client_helpers import assign_consumer, unique_topic
from pybroker.testing.procutil import free_port

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not java.java_available(), reason="java not found (OpenJDK 17 expected)"),
]

CONNECT_DISTRIBUTED = "org.apache.kafka.connect.cli.ConnectDistributed"


def rest(port: int, path: str, body: dict | None = None, method: str | None = None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=data,
        method=method or ("POST" if data is not None else "GET"),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        text = r.read()
    return json.loads(text) if text else None


def wait_for_worker(worker: java.JavaProcess, port: int, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert worker.is_running(), worker.result().stderr[-3000:]
        try:
            return rest(port, "/"), rest(port, "/connectors")
        except OSError:
            time.sleep(1)
    raise AssertionError(f"worker did not come up: {worker.result().stderr[-3000:]}")


def worker_properties(bootstrap: str, prefix: str, port: int, tmp_path) -> Path:
    """One distributed worker's settings: internal topics <prefix>-configs/offsets/status."""
    props = tmp_path / "worker.properties"
    props.write_text(
        "\n".join(
            [
                f"bootstrap.servers={bootstrap}",
                "offset.flush.interval.ms=1000",
                f"group.id={prefix}",
                "key.converter=org.apache.kafka.connect.json.JsonConverter",
                "value.converter=org.apache.kafka.connect.json.JsonConverter",
                f"config.storage.topic={prefix}-configs",
                f"offset.storage.topic={prefix}-offsets",
                f"status.storage.topic={prefix}-status",
                "config.storage.replication.factor=1",
                "offset.storage.replication.factor=1",
                "status.storage.replication.factor=1",
                f"listeners=http://127.0.0.1:{port}",
                f"plugin.path={tmp_path}",
                # internal topics roll a segment a second (KIP-605 per-topic settings), so that
                # the cleaner works on them while the worker runs
                *(
                    f"{kind}.storage.{setting}"
                    for kind in ("config", "offset", "status")
                    for setting in ("segment.ms=1000", "min.cleanable.dirty.ratio=0.01")
                ),
            ]
        )
        + "\n"
    )
    return props


def test_connect_distributed_worker(broker, tmp_path):
    with java.deps_or_fail():
        java.classpath()
    prefix = unique_topic("connect")
    topics = {f"{prefix}-{kind}": kind for kind in ("configs", "offsets", "status")}
    port = free_port()
    props = worker_properties(broker.bootstrap, prefix, port, tmp_path)
    for start in range(2):  # the second start finds its topics there
        worker = java.start_main(
            CONNECT_DISTRIBUTED, [str(props)], workdir=tmp_path, name=f"connect{start}"
        )
        try:
            info, connectors = wait_for_worker(worker, port)
            assert info["version"].startswith("3.") and info["kafka_cluster_id"]
            assert connectors == []
        finally:
            result = worker.stop()
        assert "ERROR" not in result.stdout + result.stderr, result.stderr[-3000:]

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="compat-admin")
    try:
        assert set(topics) <= set(admin.list_topics())
        described = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, t) for t in topics]
        )
    finally:
        admin.close()
    for t in topics:  # kafka-python 3: {type: {name: {config: {"value": ...}}}}
        assert described["topic"][t]["cleanup.policy"]["value"] == "compact", described


def wait_until(what: str, check, worker: java.JavaProcess, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            assert value, f"{what}: {worker.result().stderr[-3000:]}"
            return value
        assert worker.is_running(), worker.result().stderr[-3000:]
        time.sleep(0.5)


def wait_for_removing_clean(broker, prefix: str, timeout: float = 60.0) -> list[str]:
    """The broker's cleans of the <prefix>-configs/offsets/status partitions that removed
    records, waited for (the broker logs each clean)."""
    pattern = re.compile(
        rf"cleaned {prefix}-(?:configs|offsets|status)-\d+: .*?, ([1-9]\d*) of \d+ records removed"
    )
    deadline = time.monotonic() + timeout
    while True:
        cleans = pattern.findall(broker.output(max_lines=100_000))
        if cleans or time.monotonic() > deadline:
            assert cleans, broker.output()
            return cleans
        assert broker.is_running(), broker.output()
        time.sleep(0.2)


# one backend (CI time): test_connect_distributed_worker runs Connect's internal topics and
# group on both; cleaning on ZooKeeper is test_compaction's
@pytest.mark.parametrize("backend", ["embedded"], indirect=True)
@pytest.mark.broker_overrides({"log.cleaner.backoff.ms": 100})
def test_connect_file_source_to_file_sink(broker, tmp_path):
    """FileStreamSource -> topic -> FileStreamSink on one distributed worker: the sink file
    is the source file, byte for byte, and the topic holds its lines in order."""
    with java.deps_or_fail():
        cp = java.apps_classpath()
    prefix = unique_topic("connect")
    topic = f"{prefix}-lines"
    port = free_port()
    props = worker_properties(broker.bootstrap, prefix, port, tmp_path)
    source, sink = tmp_path / "in.txt", tmp_path / "out.txt"
    # ASCII only: FileStreamSource records its position in characters but skips bytes when it
    # resumes (Connect 3.9's own behaviour), so a multi-byte character before the position
    # would make a restarted source re-read lines whatever the broker
    lines = [f'line {i:04d} {{"k": [{i}], "s": "a,b"}}\t{"x" * (i % 37)} ' for i in range(500)]
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    strings = "org.apache.kafka.connect.storage.StringConverter"

    worker = java.start_main(CONNECT_DISTRIBUTED, [str(props)], workdir=tmp_path, cp=cp)
    try:
        wait_for_worker(worker, port)
        plugins = {p["class"] for p in rest(port, "/connector-plugins")}
        assert "org.apache.kafka.connect.file.FileStreamSourceConnector" in plugins, plugins
        common = {"tasks.max": "1", "key.converter": strings, "value.converter": strings}
        rest(
            port,
            "/connectors",
            {
                "name": "file-source",
                "config": {
                    **common,
                    "connector.class": "FileStreamSource",
                    "file": str(source),
                    "topic": topic,
                },
            },
        )
        rest(
            port,
            "/connectors",
            {
                "name": "file-sink",
                "config": {
                    **common,
                    "connector.class": "FileStreamSink",
                    "file": str(sink),
                    "topics": topic,
                },
            },
        )
        want = source.read_bytes()
        wait_until(
            "sink file complete",
            lambda: sink.exists() and len(sink.read_bytes()) >= len(want),
            worker,
        )
        # lines appended to the source while the pipeline runs follow
        more = [f"appended {i} ~!@#$%^&*()" for i in range(50)]
        with source.open("a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in more))
        want = source.read_bytes()
        wait_until("appended lines copied", lambda: len(sink.read_bytes()) >= len(want), worker)
        time.sleep(1.5)  # nothing more may follow
        for name in ("file-source", "file-sink"):
            status = rest(port, f"/connectors/{name}/status")
            assert status["connector"]["state"] == "RUNNING", status
            assert [t["state"] for t in status["tasks"]] == ["RUNNING"], status
    finally:
        result = worker.stop()
    assert sink.read_bytes() == want
    assert "ERROR" not in result.stdout + result.stderr, result.stderr[-3000:]

    # the broker cleans the worker's internal topics (records removed) before a new worker
    # reads them.  Only closed segments are cleaned, and a segment closes at the first write
    # a second after it opened: the worker writes in bursts (its connectors' start, the first
    # records, its shutdown), and the segments holding the many duplicate topic-status records
    # close at its shutdown's status writes, so the clean that removes them comes during or
    # after worker.stop() (a cleaner backoff later, longer on a loaded machine)
    wait_for_removing_clean(broker, prefix)

    # lines written while no worker runs: a new worker reads the connectors from the config
    # topic, the source's file position from the offset topic and the sink's from its group
    # (all compacted), and copies only the new lines
    later = [f"while stopped {i}" for i in range(40)]
    with source.open("a", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in later))
    want = source.read_bytes()
    worker = java.start_main(
        CONNECT_DISTRIBUTED, [str(props)], workdir=tmp_path, cp=cp, name="connect-again"
    )
    try:
        wait_for_worker(worker, port)
        wait_until(
            "lines copied after restart", lambda: len(sink.read_bytes()) >= len(want), worker
        )
        time.sleep(1.5)  # nothing more may follow (no line copied twice)
        assert sorted(rest(port, "/connectors")) == ["file-sink", "file-source"]
    finally:
        result = worker.stop()
    assert sink.read_bytes() == want
    assert "ERROR" not in result.stdout + result.stderr, result.stderr[-3000:]
    more += later

    consumer = assign_consumer(broker.bootstrap, topic, [0], auto_offset_reset="earliest")
    try:
        consumer.seek_to_beginning()
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < len(lines) + len(more) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(records)
    finally:
        consumer.close()
    assert [r.value.decode() for r in got] == lines + more
    assert [r.offset for r in got] == list(range(len(lines) + len(more)))
