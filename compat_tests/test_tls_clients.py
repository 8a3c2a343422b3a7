"""SSL listeners with Kafka's own Java client and with kcat (librdkafka): the Java
VerifiableProducer writes over TLS with a PEM trust store (KIP-651's ssl.truststore.type=PEM),
kcat reads the records back over TLS, and the Java consumer reads them with mutual TLS
refused when it brings no certificate."""

from __future__ import annotations

import json
import shutil
import subprocess
from itertools import islice

import pytest

from pybroker.testing import java
from pybroker.testing.client_helpers import unique_topic
from pybroker.testing.debug_process import BrokerProcess
from pybroker.testing.procutil import free_port
from pybroker.testing.tls_certs import make_certs

pytestmark = pytest.mark.skipif(not java.java_available(), reason="java not found")


@pytest.fixture(params=["requested"])
def tls_broker(request, tmp_path):
    certs = make_certs(tmp_path / "certs")
    plain, secure = free_port(), free_port()
    b = BrokerProcess(
        tmp_path / "broker",
        port=plain,
        overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{secure}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://localhost:{secure}",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certs.server),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(certs.ca),
            "ssl.client.auth": request.param,
        },
    )
    b.start()
    try:
        yield b, f"localhost:{secure}", certs, tmp_path
    finally:
        b.stop()


def test_java_producer_and_kcat_consumer_over_tls(tls_broker):
    broker, bootstrap, certs, tmp = tls_broker
    topic, n = unique_topic("tls-java"), 200
    props = tmp / "client.properties"
    props.write_text(
        f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={certs.ca}\n"
    )
    r = java.run_main(
        java.VERIFIABLE_PRODUCER,
        [
            "--bootstrap-server", bootstrap, "--topic", topic, "--max-messages", str(n),
            "--producer.config", str(props), "--acks", "-1",
        ],
        timeout=120,
    )  # fmt: skip
    events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    acked = [e for e in events if e["name"] == "producer_send_success"]
    assert len(acked) == n, r.describe(3000)

    if shutil.which("kcat") is None:
        pytest.skip("kcat not installed")
    out = subprocess.run(
        [
            "kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
            "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={certs.ca}",
        ],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert sorted(int(v) for v in out.stdout.split()) == list(range(n))


@pytest.mark.parametrize("tls_broker", ["required"], indirect=True)
def test_java_client_with_a_client_certificate(tls_broker):
    """ssl.client.auth=required (mutual TLS): a Java client presenting its PEM key store is
    served; the same client without one is refused."""
    broker, bootstrap, certs, tmp = tls_broker
    topic = unique_topic("tls-mutual")
    props = tmp / "mutual.properties"
    props.write_text(
        "security.protocol=SSL\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={certs.ca}\n"
        "ssl.keystore.type=PEM\n"
        # Kafka's PEM key store in properties: the key and chain as single-line values
        "ssl.keystore.key=" + certs.client_key.read_text().replace("\n", "\\n") + "\n"
        "ssl.keystore.certificate.chain="
        + certs.client_cert.read_text().replace("\n", "\\n")
        + "\n"
    )
    r = java.run_main(
        java.VERIFIABLE_PRODUCER,
        [
            "--bootstrap-server", bootstrap, "--topic", topic, "--max-messages", "20",
            "--producer.config", str(props),
        ],
        timeout=120,
    )  # fmt: skip
    events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert len([e for e in events if e["name"] == "producer_send_success"]) == 20, r.describe(3000)
    props.write_text(
        "security.protocol=SSL\nssl.truststore.type=PEM\n"
        f"ssl.truststore.location={certs.ca}\nmax.block.ms=10000\n"
    )
    r = java.run_main(
        java.VERIFIABLE_PRODUCER,
        [
            "--bootstrap-server", bootstrap, "--topic", topic, "--max-messages", "1",
            "--producer.config", str(props),
        ],
        timeout=120,
    )  # fmt: skip
    events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert not [e for e in events if e["name"] == "producer_send_success"], r.describe(3000)
    # (TLS 1.3: the refusal comes after the client's side of the handshake; the Java client
    # sees closed connections and gives up when max.block.ms runs out)
    assert [e for e in events if e["name"] == "producer_send_error"], r.describe(3000)


def test_a_cluster_replicates_over_an_ssl_inter_broker_listener(tmp_path):
    """3 brokers on ZooKeeper with inter.broker.listener.name=SSL: followers fetch over TLS
    (host names checked against the certificate), acks=all produces complete, and after a
    kill -9 of the leader every acknowledged record is read from the new one."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    from pybroker.testing.cluster_harness import Cluster
    from pybroker.testing.zookeeper import ZooKeeperServer, zookeeper_available

    if not zookeeper_available():
        pytest.skip("ZooKeeper not installed")
    certs = make_certs(tmp_path / "certs")
    zk = ZooKeeperServer(tmp_path / "zookeeper")
    zk.start()
    cluster = Cluster(tmp_path, zk, 3)
    try:
        for b in cluster.brokers.values():
            ssl_port = free_port()
            b.overrides.update(
                {
                    "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SSL://127.0.0.1:{ssl_port}",
                    "inter.broker.listener.name": "SSL",
                    "ssl.keystore.type": "PEM",
                    "ssl.keystore.location": str(certs.server),
                    "ssl.truststore.type": "PEM",
                    "ssl.truststore.location": str(certs.ca),
                }
            )
        cluster.start()
        topic = unique_topic("tls-replicated")
        cluster.create_topic(topic, partitions=1, rf=3, configs={"min.insync.replicas": "3"})
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
        try:
            for i in range(200):
                producer.send(topic, b"r%d" % i).get(timeout=30)  # every replica has it
        finally:
            producer.close()
        leader = cluster.leader_of(topic, 0).leader
        cluster.kill9(leader)
        cluster.wait_new_leader(topic, 0, leader)
        consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, consumer_timeout_ms=10000)
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            got = [m.value for m in islice(consumer, 200)]  # not an idle 10 s after them
            end = consumer.end_offsets([tp])[tp]  # nothing after them either
        finally:
            consumer.close()
        assert got == [b"r%d" % i for i in range(200)] and end == 200
    finally:
        try:
            cluster.stop()
        finally:
            cluster.cleanup()
            zk.stop()
