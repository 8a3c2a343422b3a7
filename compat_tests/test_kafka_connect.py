"""Apache Kafka Connect 3.9 in distributed mode (connect-runtime, on the Java tools'
classpath) against pybroker (issue 11): the worker creates its compacted internal topics
(config, offset, status), checks their cleanup.policy through DescribeConfigs, joins its
group and serves its REST API; a second start finds the topics already there
(CreateTopics answers TOPIC_ALREADY_EXISTS) and comes up again.  Connectors themselves need
plugin jars (FileStream*) that are not on the classpath yet."""

from __future__ import annotations

import json
import socket
import time
import urllib.request

import pytest
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType

from compat_tests import java
from compat_tests.helpers import unique_topic

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not java.java_available(), reason="java not found (OpenJDK 17 expected)"),
]

CONNECT_DISTRIBUTED = "org.apache.kafka.connect.cli.ConnectDistributed"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rest(port: int, path: str):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return json.loads(r.read())


def wait_for_worker(worker: java.JavaProcess, port: int, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert worker.is_running(), worker.result().stderr[-3000:]
        try:
            return rest(port, "/"), rest(port, "/connectors")
        except OSError:
            time.sleep(1)
    raise AssertionError(f"worker did not come up: {worker.result().stderr[-3000:]}")


def test_connect_distributed_worker(broker, tmp_path):
    try:
        java.classpath()
    except java.JavaDepsError as e:
        pytest.fail(f"{e}\n(run scripts/fetch-java-deps)", pytrace=False)
    prefix = unique_topic("connect")
    topics = {f"{prefix}-{kind}": kind for kind in ("configs", "offsets", "status")}
    port = free_port()
    props = tmp_path / "worker.properties"
    props.write_text(
        "\n".join(
            [
                f"bootstrap.servers={broker.bootstrap}",
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
            ]
        )
        + "\n"
    )
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
