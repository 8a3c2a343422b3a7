"""A secured broker as README describes it (SASL_SSL with SCRAM, ACLs, users added with
`python -m pybroker add-scram`), used by real programs: Kafka's kafka-acls (AclCommand) adds
and lists ACLs as the admin, confluent-kafka (librdkafka) and Kafka's Java client produce and
consume as a user with ACLs (kafka-console-consumer too), and are refused where the ACLs do
not allow.  Debian's kcat (librdkafka 2.0.2, whose SCRAM client-final nonce repeats its own
nonce) logs in with both SCRAM mechanisms, and README's secured example runs as written."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
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
         "SCRAM-SHA-256=[name=alice,password=alice-secret,iterations=8192]",
         "SCRAM-SHA-512=[name=alice,password=alice-secret]"],
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


def _kcat(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    assert shutil.which("kcat"), "kcat missing: scripts/install-test-deps installs it"
    return subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True, timeout=60)


def test_kcat_scram_sha_256_and_512_over_sasl_ssl(secured):
    """librdkafka before 2.6.1 sends r=<client nonce><server nonce> (Kafka 3.8.1+ accepts it):
    Debian 12's kcat logs in with each mechanism and round-trips a record."""
    s = secured
    topic = unique_topic("kcat-scram")
    _create_topic(s, topic)
    r = _acls(s, "--add", "--allow-principal", "User:alice", "--operation", "Write",
              "--operation", "Read", "--topic", topic)  # fmt: skip
    assert r.returncode == 0, r.describe(3000)
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        auth = ["-b", s["bootstrap"], "-X", "security.protocol=SASL_SSL",
                "-X", f"sasl.mechanisms={mech}", "-X", "sasl.username=alice",
                "-X", "sasl.password=alice-secret", "-X", f"ssl.ca.location={s['certs'].ca}"]  # fmt: skip
        p = _kcat(*auth, "-P", "-t", topic, "-p", "0", "-K:", stdin=f"{mech}:hello\n")
        assert p.returncode == 0 and "nonce" not in p.stderr, p.stderr
        p = _kcat(*auth, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e",
                  "-f", "%k=%s\n")  # fmt: skip
        assert p.returncode == 0, p.stderr
        assert f"{mech}=hello" in p.stdout.splitlines(), (p.stdout, p.stderr)


def _readme_tool_commands() -> tuple[str, str]:
    """The kafka-acls and kcat commands README's "A secured broker" gives for Kafka's own
    tools and other clients (inline code spans, possibly wrapped over lines)."""
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = text[text.index("## A secured broker") :]
    section = section[: section.index("\n## ", 1)]
    section = re.sub(r"```.*?```", "", section, flags=re.S)  # the prose's spans only
    spans = [" ".join(c.split()) for c in re.findall(r"`([^`]+)`", section)]
    acls = next(c for c in spans if c.startswith("kafka-acls.sh "))
    kcat = next(c for c in spans if c.startswith("kcat "))
    return acls, kcat


def test_readme_secured_example_with_kcat_as_written(secured):
    """README's kafka-acls and kcat commands, literally: the broker's address, ca.pem and
    admin.properties are the fixture's; kafka-acls.sh is Kafka 3.9's class on PATH.  kcat is
    Debian's (librdkafka 2.0.2, whose SCRAM client-final nonce repeats its own nonce)."""
    s = secured
    work = s["tmp"] / "readme"
    (work / "bin").mkdir(parents=True)
    shutil.copy(s["certs"].ca, work / "ca.pem")
    shutil.copy(s["admin"], work / "admin.properties")
    cmd = shlex.join(java.java_command(ACL_COMMAND, []))
    (work / "bin" / "kafka-acls.sh").write_text(f'#!/bin/sh\nexec {cmd} "$@"\n')
    (work / "bin" / "kafka-acls.sh").chmod(0o755)
    env = {**os.environ, "PATH": f"{work / 'bin'}:{os.environ['PATH']}"}
    acls, kcat = (c.replace("localhost:9094", s["bootstrap"]) for c in _readme_tool_commands())
    assert "orders" in kcat and "-e" in kcat.split(), kcat
    _create_topic(s, "orders")
    r = _acls(s, "--add", "--allow-principal", "User:alice", "--operation", "Read",
              "--operation", "Write", "--topic", "orders")  # fmt: skip
    assert r.returncode == 0, r.describe(3000)
    p = Producer(_alice(s, **{"sasl.mechanisms": "SCRAM-SHA-512"}))
    p.produce("orders", key=b"k", value=b"hello")
    assert p.flush(30) == 0
    r = subprocess.run(["bash", "-c", acls], cwd=work, env=env, capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0 and "User:alice" in r.stdout, (acls, r.stdout, r.stderr)
    r = subprocess.run(["bash", "-c", kcat], cwd=work, env=env, capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0 and "nonce" not in r.stderr, (kcat, r.stdout, r.stderr)
    assert "hello" in r.stdout.splitlines(), (kcat, r.stdout, r.stderr)
