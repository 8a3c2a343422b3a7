"""Spark's format("kafka") over SASL_SSL with ACLs, configured with kafka.* options as a Spark
user does (kafka.security.protocol, kafka.sasl.mechanism, kafka.sasl.jaas.config, a PEM trust
store): a batch read and a streaming read (availableNow into files) see exactly what was
written, as a user whose ACLs allow READ on the topic and on Spark's consumer groups
(prefixed "spark-kafka-"), and a user without them is refused."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pybroker.testing.procutil import free_port
from pybroker.testing.tls_certs import make_certs
from spark_it.kafkadata import Rec, create_topic, produce, unique_topic
from spark_it.pipelines import topic_to_files
from spark_it.sparkio import batch_read, comparable, read_parquet_dir

pytestmark = pytest.mark.timeout(300)
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def _secure_options(port: int, ca: Path, user: str) -> dict[str, str]:
    return {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": f'{PLAIN} required username="{user}" password="{user}-secret";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(ca),
        "kafka.ssl.endpoint.identification.algorithm": "",
    }


def test_batch_and_streaming_reads_over_sasl_ssl_with_acls(spark, start_broker, tmp_path):
    certs = make_certs(tmp_path / "certs")
    port, secure = free_port(), free_port()
    b = start_broker(
        port=port,
        **{
            "listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{secure}",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": (
                f'{PLAIN} required user_alice="alice-secret" user_mallory="mallory-secret";'
            ),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certs.server),
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:ANONYMOUS",  # the PLAINTEXT listener: the test's set-up
        },
    )
    plain = b.bootstrap  # PLAINTEXT: topic, data and ACLs set up as an admin would
    topic = unique_topic("spark-secure")
    create_topic(plain, topic, 2)
    base = int(time.time() * 1000) - 60_000
    sent = produce(plain, topic, [Rec(b"k%d" % i, b"v%d" % i, i % 2, base + i) for i in range(40)])
    from kafka import KafkaAdminClient
    from kafka.admin import (
        ACL,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourceType,
    )

    admin = KafkaAdminClient(bootstrap_servers=plain)
    try:
        result = admin.create_acls(
            [
                ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                    ResourcePattern(ResourceType.TOPIC, topic)),
                ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                    ResourcePattern(ResourceType.GROUP, "spark-kafka-",
                                    ACLResourcePatternType.PREFIXED)),
            ]
        )  # fmt: skip
        assert not result["failed"], result
    finally:
        admin.close()

    bootstrap = f"localhost:{secure}"
    alice = _secure_options(secure, certs.ca, "alice")
    got = batch_read(spark, bootstrap, subscribe=topic, **alice)
    print(f"\nbatch over SASL_SSL: {len(got)} of {len(sent)}")
    assert comparable(got) == comparable(sent)

    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    topic_to_files.run(spark, bootstrap, topic, out, ckpt, extra_options=alice)
    streamed = read_parquet_dir(spark, out)
    print(f"stream over SASL_SSL: {len(streamed)} of {len(sent)}")
    assert comparable(streamed) == comparable(sent)

    mallory = _secure_options(secure, certs.ca, "mallory")
    with pytest.raises(Exception, match="(?i)authoriz"):
        batch_read(spark, bootstrap, subscribe=topic, **mallory)
