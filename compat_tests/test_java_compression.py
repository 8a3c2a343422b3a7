"""The Java producer's compressed batches (gzip, snappy-java xerial, KafkaLZ4BlockOutputStream,
zstd-jni) pass pybroker's append validation (pybroker/log/validator.py) and read back whole;
ListOffsets -3 and by timestamp walk them too.  Skipped when java is absent."""

from __future__ import annotations

import uuid

import pytest
from kafka import KafkaConsumer, TopicPartition

from pybroker.testing import java
from pybroker.testing.client_helpers import create_topic

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not java.java_available(), reason="java not found (OpenJDK 17 expected)"),
    pytest.mark.shared_broker,  # a broker per backend: each test uses a topic of its own
]


@pytest.fixture(scope="session")
def java_cp() -> str:
    with java.deps_or_fail():
        return java.classpath()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_java_producer_compressed_batches_are_accepted(broker, java_cp, tmp_path, codec):
    topic, n = f"jcodec-{codec}-{uuid.uuid4().hex[:6]}", 3000
    create_topic(broker.bootstrap, topic, partitions=1)
    props = tmp_path / "producer.properties"
    props.write_text(f"compression.type={codec}\nlinger.ms=20\nbatch.size=65536\n")
    r = java.run_main(
        java.VERIFIABLE_PRODUCER,
        [
            "--bootstrap-server", broker.bootstrap, "--topic", topic, "--max-messages", str(n),
            "--acks", "-1", "--producer.config", str(props),
        ],
        timeout=120,
    )  # fmt: skip
    assert r.ok, r.describe()
    events = r.json_lines()
    errors = [e for e in events if e["name"] == "producer_send_error"]
    assert not errors, errors[:3]
    assert len([e for e in events if e["name"] == "producer_send_success"]) == n
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=10000
    )
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        values = []
        while len(values) < n:
            batch = consumer.poll(timeout_ms=5000)
            if not batch:
                break
            values += [m.value for m in batch.get(tp, [])]
        assert sorted(int(v) for v in values) == list(range(n))
        # ListOffsets by timestamp (v1+) walks a compressed stored batch
        first = consumer.offsets_for_times({tp: 0})[tp]
        assert first is not None and first.offset == 0
    finally:
        consumer.close()
    assert "Traceback" not in broker.output(max_lines=5000)
