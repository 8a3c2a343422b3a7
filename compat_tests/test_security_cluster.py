"""A secured 3-broker cluster on ZooKeeper: brokers replicate over a SASL_SSL inter-broker
listener (SCRAM-SHA-512, the broker user added with `python -m pybroker add-scram` before the
first start), ACLs made through one broker take effect on all of them, a kill -9 of a leader
fails over, and a user with ACLs (librdkafka over SASL_SSL) reads exactly what it wrote."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from pybroker.testing.client_helpers import unique_topic
from pybroker.testing.cluster_harness import Cluster, wait_until
from pybroker.testing.procutil import free_port
from pybroker.testing.tls_certs import make_certs
from pybroker.testing.zookeeper import ZooKeeperServer, zookeeper_available

pytestmark = pytest.mark.timeout(420)
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule"


def _user(sasl_bootstrap: str, ca: Path, user: str, mech: str = "SCRAM-SHA-256", **extra):
    return {
        "bootstrap.servers": sasl_bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": mech,
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
        "ssl.ca.location": str(ca),
        **extra,
    }


def _produce(conf: dict, topic: str, values: list[bytes], idempotent: bool = True) -> list:
    p = Producer({**conf, "acks": "all", "enable.idempotence": idempotent})
    errors: list = []
    for i, v in enumerate(values):
        p.produce(topic, v, partition=i % 3, on_delivery=lambda e, m: e and errors.append(e))
        p.poll(0)
    p.flush(60)
    return errors


def test_secured_cluster_replicates_fails_over_and_shares_acls(tmp_path):
    if not zookeeper_available():
        pytest.skip("ZooKeeper not installed")
    certs = make_certs(tmp_path / "certs")
    zk = ZooKeeperServer(tmp_path / "zookeeper")
    zk.start()
    cluster = Cluster(tmp_path, zk, 3)
    sasl_ports = {}
    try:
        for i, b in cluster.brokers.items():
            sasl_ports[i] = free_port()
            b.overrides.update(
                {
                    "listeners": f"PLAINTEXT://127.0.0.1:{b.port},"
                    f"SASL_SSL://127.0.0.1:{sasl_ports[i]}",
                    "advertised.listeners": f"PLAINTEXT://127.0.0.1:{b.port},"
                    f"SASL_SSL://localhost:{sasl_ports[i]}",
                    "inter.broker.listener.name": "SASL_SSL",
                    "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
                    "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                    "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                        f'{SCRAM_JAAS} required username="admin" password="admin-secret";'
                    ),
                    "ssl.keystore.type": "PEM",
                    "ssl.keystore.location": str(certs.server),
                    "ssl.truststore.type": "PEM",
                    "ssl.truststore.location": str(certs.ca),
                    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                    # admin: the brokers' own user; ANONYMOUS: the harness's PLAINTEXT probes
                    "super.users": "User:admin;User:ANONYMOUS",
                }
            )
        props = tmp_path / "server.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in cluster.brokers[0].settings().items()))
        r = subprocess.run(
            [sys.executable, "-m", "pybroker", "add-scram", str(props),
             "SCRAM-SHA-512=[name=admin,password=admin-secret]",
             "SCRAM-SHA-256=[name=alice,password=alice-secret]"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        cluster.start()
        topic, group = unique_topic("secure"), unique_topic("readers")
        cluster.create_topic(topic, partitions=3, rf=3, configs={"min.insync.replicas": "2"})
        cluster.wait_isr_full(topic)  # the followers fetch over SASL_SSL

        def admin_via(broker: int) -> AdminClient:
            return AdminClient(
                _user(f"localhost:{sasl_ports[broker]}", certs.ca, "admin", "SCRAM-SHA-512")
            )

        write = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice",
                           "*", AclOperation.WRITE, AclPermissionType.ALLOW)  # fmt: skip
        read = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice",
                          "*", AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip
        grp = AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:alice",
                         "*", AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip
        admin0 = admin_via(0)  # (kept: the futures need their client alive)
        for f in admin0.create_acls([write, read, grp]).values():
            f.result(30)
        # each broker learns the ACLs from ZooKeeper in its own time, as Kafka's brokers from
        # /kafka-acl-changes: wait until every broker describes all three before alice writes
        alices = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice",
                                  None, AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
        admins = {i: admin_via(i) for i in cluster.ids}  # (kept: the futures need them alive)

        def every_broker_has_them() -> bool:
            return all(len(a.describe_acls(alices).result(30)) == 3 for a in admins.values())

        wait_until(every_broker_has_them, 60, 0.2, "alice's ACLs on every broker")
        alice = _user(",".join(f"localhost:{p}" for p in sasl_ports.values()), certs.ca, "alice")
        first = [f"a{i}".encode() for i in range(300)]
        assert _produce(alice, topic, first) == []  # leaders on every broker took the ACLs
        leader = cluster.leader_of(topic, 0).leader
        cluster.kill9(leader)
        cluster.wait_new_leader(topic, 0, leader)
        second = [f"b{i}".encode() for i in range(100)]
        assert _produce(alice, topic, second) == []
        cluster.restart(leader)
        cluster.wait_isr_full(topic)

        c = Consumer({**alice, "group.id": group, "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + 60
            while len(got) < 400 and time.monotonic() < deadline:
                m = c.poll(1.0)
                if m is None:
                    continue
                if m.error():
                    raise KafkaException(m.error())
                got.append(m.value())
        finally:
            c.close()
        assert sorted(got) == sorted(first + second)

        # revoked through another broker: every broker stops alice writing
        other = next(i for i in cluster.ids if i != 0)
        admin_other = admin_via(other)
        deleted = admin_other.delete_acls(
            [AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                              "User:alice", None, AclOperation.WRITE, AclPermissionType.ANY)]
        )  # fmt: skip
        for f in deleted.values():
            assert len(f.result(30)) == 1

        def refused() -> bool:
            errs = _produce(
                {**alice, "message.timeout.ms": 5000}, topic, [b"x", b"y", b"z"], idempotent=False
            )
            return len(errs) == 3 and all("AUTHORIZATION" in e.name() for e in errs)

        wait_until(refused, 60, 1.0, "alice refused on every partition's leader")
    finally:
        try:
            cluster.stop()
        finally:
            cluster.cleanup()
            zk.stop()
