"""A secured broker as README describes it (SASL_SSL with SCRAM, ACLs, users added with
`python -m pybroker add-scram`), used by real programs: Kafka's kafka-acls (AclCommand) adds
and lists ACLs as the admin, confluent-kafka (librdkafka) and Kafka's Java client produce and
consume as a user with ACLs (kafka-console-consumer too), and are refused where the ACLs do
not allow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer

from compat_tests import java
from compat_tests.broker_process import BrokerProcess
from compat_tests.helpers import unique_topic
from compat_tests.procutil import free_port

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from tls_certs import make_certs  # noqa: E402

pytestmark = pytest.mark.timeout(300)
ACL_COMMAND = "kafka.admin.AclCommand"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("secured")
    certs = make_certs(tmp / "certs")
    plain, secure = free_port(), free_port()
    b = BrokerProcess(
        tmp / "broker",
        port=plain,
        overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{secure}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_SSL://localhost:{secure}",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                f'{SCRAM_JAAS} required username="admin" password="admin-secret";'
            ),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certs.server),
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            # the PLAINTEXT listener's clients (here: none but the test's set-up) are ANONYMOUS
            "super.users": "User:admin",
        },
    )
    # users before the first start, as README says (kafka-storage format --add-scram's syntax)
    props = tmp / "server.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in b.settings().items()))
    r = subprocess.run(
        [sys.executable, "-m", "pybroker", "add-scram", str(props),
         "SCRAM-SHA-512=[name=admin,password=admin-secret]",
         "SCRAM-SHA-256=[name=alice,password=alice-secret,iterations=8192]"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    b.start()
    admin = tmp / "admin.properties"
    admin.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        f'sasl.jaas.config={SCRAM_JAAS} required username="admin" password="admin-secret";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={certs.ca}\n"
    )
    try:
        yield {"broker": b, "bootstrap": f"localhost:{secure}", "certs": certs,
               "admin": admin, "tmp": tmp}  # fmt: skip
    finally:
        b.stop()


def _alice(s, **extra) -> dict:
    return {
        "bootstrap.servers": s["bootstrap"],
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-256",
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
        "ssl.ca.location": str(s["certs"].ca),
        **extra,
    }


def _acls(s, *args: str) -> java.JavaResult:
    return java.run_main(
        ACL_COMMAND,
        ["--bootstrap-server", s["bootstrap"], "--command-config", str(s["admin"]), *args],
        timeout=120,
    )


def _create_topic(s, topic: str) -> None:
    r = java.run_main(
        java.TOPIC_COMMAND,
        ["--bootstrap-server", s["bootstrap"], "--command-config", str(s["admin"]),
         "--create", "--topic", topic, "--partitions", "2", "--replication-factor", "1"],
        timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.describe(3000)


def test_kafka_acls_then_librdkafka_as_a_user(secured):
    s = secured
    topic, group, other = unique_topic("orders"), unique_topic("readers"), unique_topic("other")
    _create_topic(s, topic)
    _create_topic(s, other)
    r = _acls(s, "--add", "--allow-principal", "User:alice", "--operation", "Write",
              "--operation", "Read", "--topic", topic)  # fmt: skip
    assert r.returncode == 0, r.describe(3000)
    r = _acls(s, "--add", "--allow-principal", "User:alice", "--operation", "Read",
              "--group", group)  # fmt: skip
    assert r.returncode == 0, r.describe(3000)
    listed = _acls(s, "--list", "--topic", topic)
    assert listed.returncode == 0 and "User:alice" in listed.stdout, listed.describe(3000)
    assert "WRITE" in listed.stdout and "READ" in listed.stdout

    p = Producer(_alice(s))
    for i in range(50):
        p.produce(topic, value=f"m{i}".encode(), partition=i % 2)
    assert p.flush(30) == 0
    errors = []
    p2 = Producer(_alice(s, **{"message.timeout.ms": 10000}))
    p2.produce(other, b"x", on_delivery=lambda err, msg: errors.append(err))
    p2.flush(30)
    assert errors and errors[0] is not None and "TOPIC_AUTHORIZATION_FAILED" in errors[0].name()

    c = Consumer(_alice(s, **{"group.id": group, "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    got = []
    try:
        while len(got) < 50:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                raise KafkaException(m.error())
            got.append(m.value())
        c.commit(asynchronous=False)
    finally:
        c.close()
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(50))


def test_java_client_as_a_user_and_a_wrong_password(secured):
    s = secured
    topic = unique_topic("java-sec")
    _create_topic(s, topic)
    r = _acls(s, "--add", "--allow-principal", "User:alice", "--operation", "Write",
              "--topic", topic)  # fmt: skip
    assert r.returncode == 0, r.describe(3000)
    props = s["tmp"] / "alice.properties"
    props.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\n"
        f'sasl.jaas.config={SCRAM_JAAS} required username="alice" password="alice-secret";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={s['certs'].ca}\n"
    )
    r = java.run_main(
        java.VERIFIABLE_PRODUCER,
        ["--bootstrap-server", s["bootstrap"], "--topic", topic, "--max-messages", "100",
         "--producer.config", str(props), "--acks", "-1"],
        timeout=120,
    )  # fmt: skip
    events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert len([e for e in events if e["name"] == "producer_send_success"]) == 100, r.describe(3000)
    # kafka-console-consumer over SASL_SSL with the same client.properties: READ on the topic
    # and on its consumer groups (prefixed, as the tool names them console-consumer-<n>)
    r = _acls(s, "--add", "--allow-principal", "User:alice", "--operation", "Read",
              "--topic", topic)  # fmt: skip
    assert r.returncode == 0, r.describe(3000)
    r = _acls(s, "--add", "--allow-principal", "User:alice", "--operation", "Read",
              "--group", "console-consumer-", "--resource-pattern-type", "prefixed")  # fmt: skip
    assert r.returncode == 0, r.describe(3000)
    r = java.run_main(
        CONSOLE_CONSUMER,
        ["--bootstrap-server", s["bootstrap"], "--topic", topic, "--from-beginning",
         "--max-messages", "100", "--timeout-ms", "30000", "--consumer.config", str(props)],
        timeout=120,
    )  # fmt: skip
    assert r.returncode == 0 and not r.timed_out, r.describe(3000)
    assert sorted(int(v) for v in r.stdout.split()) == list(range(100)), r.describe(3000)
    props.write_text(props.read_text().replace("alice-secret", "wrong") + "max.block.ms=10000\n")
    r = java.run_main(
        java.VERIFIABLE_PRODUCER,
        ["--bootstrap-server", s["bootstrap"], "--topic", topic, "--max-messages", "1",
         "--producer.config", str(props)],
        timeout=120,
    )  # fmt: skip
    events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert not [e for e in events if e["name"] == "producer_send_success"]
    assert "Authentication failed" in r.stdout + r.stderr, r.describe(3000)
