"""Dynamic broker configs (KIP-226) and broker loggers (KIP-412) against real brokers, altered
with Apache Kafka 3.9's own kafka-configs (kafka.admin.ConfigCommand --bootstrap-server) and
seen by clients: a per-broker and a cluster-wide default value take effect without a restart
(message.max.bytes: a larger produce gets MESSAGE_TOO_LARGE; log.retention.ms: old segments
go), survive a restart, revert when deleted, and DescribeConfigs reports their sources; on a
two-broker ZooKeeper cluster a default set through one broker reaches the other."""

from __future__ import annotations

import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
from kafka.errors import MessageSizeTooLargeError

from pybroker.testing import java
from pybroker.testing.cluster_harness import running_cluster, wait_until

CONFIG_COMMAND = "kafka.admin.ConfigCommand"


@pytest.fixture(scope="module")
def java_cp() -> str:
    with java.deps_or_fail():
        return java.classpath()


def kafka_configs(bootstrap: str, *args: str, ok: bool = True) -> java.JavaResult:
    r = java.run_main(CONFIG_COMMAND, ["--bootstrap-server", bootstrap, *args], timeout=120)
    if ok:
        assert r.ok, r.describe()
    return r


def described(bootstrap: str, broker_id: int) -> dict[str, dict]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        res = admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, str(broker_id))],
            include_synonyms=True,
            config_filter="all",
        )
    finally:
        admin.close()
    return res["broker"][str(broker_id)]


def produce(bootstrap: str, topic: str, size: int, partition: int = 0) -> bool:
    """True if a record of ``size`` bytes is acknowledged, False on MESSAGE_TOO_LARGE."""
    p = KafkaProducer(bootstrap_servers=bootstrap, max_request_size=10_000_000, retries=0)
    try:
        p.send(topic, b"x" * size, partition=partition).get(timeout=30)
        return True
    except MessageSizeTooLargeError:
        return False
    finally:
        p.close()


def create(bootstrap: str, topic: str, partitions: int = 1, **configs: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs)])
    finally:
        admin.close()


def test_per_broker_and_default_configs_apply_live_and_survive_a_restart(
    java_cp, start_broker, backend
):
    b = start_broker(**{"log.retention.check.interval.ms": "300"})
    topic = f"dyn-{uuid.uuid4().hex[:8]}"
    create(b.bootstrap, topic, **{"segment.bytes": "6000"})
    assert produce(b.bootstrap, topic, 5000)

    kafka_configs(
        b.bootstrap, "--entity-type", "brokers", "--entity-name", "0",
        "--alter", "--add-config", "message.max.bytes=3000",
    )  # fmt: skip
    assert not produce(b.bootstrap, topic, 5000)
    assert produce(b.bootstrap, topic, 1000)
    out = kafka_configs(b.bootstrap, "--entity-type", "brokers", "--entity-name", "0", "--describe")
    assert "message.max.bytes=3000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:" in out.stdout

    # the cluster-wide default sits below the per-broker value
    kafka_configs(
        b.bootstrap, "--entity-type", "brokers", "--entity-default",
        "--alter", "--add-config", "message.max.bytes=100000",
    )  # fmt: skip
    assert not produce(b.bootstrap, topic, 5000)
    entry = described(b.bootstrap, 0)["message.max.bytes"]
    assert (entry["value"], entry["config_source"]) == ("3000", "DYNAMIC_BROKER_CONFIG")
    assert [s["source"] for s in entry["synonyms"]] == [
        "DYNAMIC_BROKER_CONFIG",
        "DYNAMIC_DEFAULT_BROKER_CONFIG",
        "DEFAULT_CONFIG",
    ]

    b.restart()
    assert not produce(b.bootstrap, topic, 5000)
    assert described(b.bootstrap, 0)["message.max.bytes"]["config_source"] == (
        "DYNAMIC_BROKER_CONFIG"
    )

    # deleting the per-broker value: the default applies
    kafka_configs(
        b.bootstrap, "--entity-type", "brokers", "--entity-name", "0",
        "--alter", "--delete-config", "message.max.bytes",
    )  # fmt: skip
    assert produce(b.bootstrap, topic, 5000)
    entry = described(b.bootstrap, 0)["message.max.bytes"]
    assert (entry["value"], entry["config_source"]) == ("100000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    out = kafka_configs(b.bootstrap, "--entity-type", "brokers", "--entity-default", "--describe")
    assert "message.max.bytes=100000 sensitive=false" in out.stdout

    # retention: nothing is old enough under the default 7 days; a dynamic 1 ms removes the
    # closed segments at the next check
    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=b.bootstrap)
    try:
        assert consumer.beginning_offsets([tp])[tp] == 0
        kafka_configs(
            b.bootstrap, "--entity-type", "brokers", "--entity-default",
            "--alter", "--add-config", "log.retention.ms=1",
        )  # fmt: skip
        wait_until(lambda: consumer.beginning_offsets([tp])[tp] > 0, 30, 0.3, "retention")
    finally:
        consumer.close()


def test_static_only_and_unsupported_configs_are_refused(java_cp, broker):
    r = kafka_configs(
        broker.bootstrap, "--entity-type", "brokers", "--entity-name", "0",
        "--alter", "--add-config", "log.dirs=/elsewhere", ok=False,
    )  # fmt: skip
    assert r.returncode != 0
    assert "InvalidRequestException: Cannot update these configs dynamically: Set(log.dirs)" in (
        r.stdout + r.stderr
    )
    r = kafka_configs(
        broker.bootstrap, "--entity-type", "brokers", "--entity-default",
        "--alter", "--add-config", "num.io.threads=16", ok=False,
    )  # fmt: skip
    assert "num.io.threads" in r.stdout + r.stderr and r.returncode != 0
    assert described(broker.bootstrap, 0)["log.dirs"]["read_only"] is True


def test_broker_loggers(java_cp, broker):
    args = ("--entity-type", "broker-loggers", "--entity-name", "0")
    kafka_configs(broker.bootstrap, *args, "--alter", "--add-config", "pybroker.server=DEBUG")
    out = kafka_configs(broker.bootstrap, *args, "--describe").stdout
    assert "pybroker.server=DEBUG sensitive=false synonyms={}" in out
    assert "root=INFO sensitive=false" in out
    kafka_configs(broker.bootstrap, *args, "--alter", "--delete-config", "pybroker.server")
    out = kafka_configs(broker.bootstrap, *args, "--describe").stdout
    assert "pybroker.server=INFO sensitive=false" in out  # back to root's level
    r = kafka_configs(
        broker.bootstrap, *args, "--alter", "--add-config", "pybroker.server=LOUD", ok=False
    )
    assert "Cannot set the log level of pybroker.server to LOUD" in r.stdout + r.stderr


def test_default_reaches_every_broker_of_a_zookeeper_cluster(java_cp, tmp_path):
    with running_cluster(tmp_path, size=2) as cluster:
        topic = f"dyn-{uuid.uuid4().hex[:8]}"
        cluster.create_topic(topic, partitions=2, rf=1)
        md = cluster.metadata([topic]).topic(topic)
        on = {md[p].leader: p for p in md}  # broker id -> a partition it leads
        assert set(on) == {0, 1}
        first = cluster.brokers[0].bootstrap
        second = cluster.brokers[1].bootstrap

        kafka_configs(
            first, "--entity-type", "brokers", "--entity-default",
            "--alter", "--add-config", "message.max.bytes=3000",
        )  # fmt: skip
        wait_until(
            lambda: described(second, 1)["message.max.bytes"]["value"] == "3000",
            30, 0.2, "the default on broker 1",
        )  # fmt: skip
        assert described(second, 1)["message.max.bytes"]["config_source"] == (
            "DYNAMIC_DEFAULT_BROKER_CONFIG"
        )
        assert not produce(cluster.bootstrap, topic, 5000, partition=on[1])
        assert not produce(cluster.bootstrap, topic, 5000, partition=on[0])

        # a per-broker value for broker 1 only (sent to broker 1, as the admin client does)
        kafka_configs(
            second, "--entity-type", "brokers", "--entity-name", "1",
            "--alter", "--add-config", "message.max.bytes=100000",
        )  # fmt: skip
        assert produce(cluster.bootstrap, topic, 5000, partition=on[1])
        assert not produce(cluster.bootstrap, topic, 5000, partition=on[0])

        cluster.restart(1)
        cluster.wait_isr_full(topic, partitions=2)
        assert described(second, 1)["message.max.bytes"]["config_source"] == (
            "DYNAMIC_BROKER_CONFIG"
        )
        assert produce(cluster.bootstrap, topic, 5000, partition=on[1])
        assert not produce(cluster.bootstrap, topic, 5000, partition=on[0])
    assert not cluster.stop_problems


def test_advertised_listeners_per_broker(java_cp, broker):
    """Kafka's per-broker advertised.listeners: the broker registers the new endpoint and
    Metadata answers it; at the cluster-wide level it is refused."""
    port = broker.bootstrap.rsplit(":", 1)[1]
    kafka_configs(
        broker.bootstrap, "--entity-type", "brokers", "--entity-name", "0",
        "--alter", "--add-config", f"advertised.listeners=PLAINTEXT://localhost:{port}",
    )  # fmt: skip

    def hosts() -> list[str]:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            return [b["host"] for b in admin.describe_cluster()["brokers"]]
        finally:
            admin.close()

    wait_until(lambda: hosts() == ["localhost"], 30, 0.2, "the new advertised host")
    entry = described(broker.bootstrap, 0)["advertised.listeners"]
    assert entry["value"] == f"PLAINTEXT://localhost:{port}"
    assert (entry["config_source"], entry["read_only"]) == ("DYNAMIC_BROKER_CONFIG", False)
    r = kafka_configs(
        broker.bootstrap, "--entity-type", "brokers", "--entity-default",
        "--alter", "--add-config", f"advertised.listeners=PLAINTEXT://localhost:{port}", ok=False,
    )  # fmt: skip
    assert "Cannot update these configs at default cluster level, broker id must be specified" in (
        r.stdout + r.stderr
    )
    r = kafka_configs(
        broker.bootstrap, "--entity-type", "brokers", "--entity-name", "0",
        "--alter", "--add-config", "advertised.listeners=OTHER://localhost:1", ok=False,
    )  # fmt: skip
    assert "must be a subset of listeners" in r.stdout + r.stderr


def _served_ca(host: str, port: int, cas: dict[str, str]) -> str | None:
    """Which CA the certificate an SSL listener presents now chains to (a fresh handshake)."""
    import socket
    import ssl

    for name, ca in cas.items():
        ctx = ssl.create_default_context(cafile=ca)
        try:
            with socket.create_connection((host, port), timeout=10) as raw:
                with ctx.wrap_socket(raw, server_hostname="localhost"):
                    return name
        except ssl.SSLError:
            continue
    return None


def test_ssl_listener_key_store_changes_live(java_cp, tmp_path):
    """listener.name.ssl.ssl.keystore.location per broker: new TLS connections get the new
    certificate at once; a broken store is refused naming the key; passwords need Kafka's
    password.encoder.secret, which pybroker does not have."""

    from pybroker.testing.debug_process import BrokerProcess
    from pybroker.testing.procutil import free_port
    from pybroker.testing.tls_certs import make_certs

    first, second = make_certs(tmp_path / "one"), make_certs(tmp_path / "two")
    plain, secure = free_port(), free_port()
    b = BrokerProcess(
        tmp_path / "broker",
        port=plain,
        overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{secure}",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(first.server),
        },
    )
    b.start()
    try:
        cas = {"one": str(first.ca), "two": str(second.ca)}
        assert _served_ca("127.0.0.1", secure, cas) == "one"
        key = "listener.name.ssl.ssl.keystore.location"
        kafka_configs(
            b.bootstrap, "--entity-type", "brokers", "--entity-name", "0",
            "--alter", "--add-config", f"{key}={second.server}",
        )  # fmt: skip
        assert _served_ca("127.0.0.1", secure, cas) == "two"
        entry = described(b.bootstrap, 0)[key]
        assert entry["config_source"] == "DYNAMIC_BROKER_CONFIG"
        assert [s["name"] for s in entry["synonyms"]] == [key, "ssl.keystore.location"]

        r = kafka_configs(
            b.bootstrap, "--entity-type", "brokers", "--entity-name", "0",
            "--alter", "--add-config", f"{key}={tmp_path / 'missing.pem'}", ok=False,
        )  # fmt: skip
        assert r.returncode != 0 and "ssl.keystore.location" in r.stdout + r.stderr
        r = kafka_configs(
            b.bootstrap, "--entity-type", "brokers", "--entity-name", "0",
            "--alter", "--add-config", "listener.name.ssl.ssl.key.password=secret", ok=False,
        )  # fmt: skip
        assert "Password encoder secret not configured" in r.stdout + r.stderr
        assert _served_ca("127.0.0.1", secure, cas) == "two"

        b.restart()
        assert _served_ca("127.0.0.1", secure, cas) == "two"
    finally:
        b.stop()
        b.cleanup()


def _answers(bootstrap: str, conns: list) -> bool:
    """A new connection from 127.0.0.1 gets an ApiVersions answer (kept open in ``conns``)."""
    from pybroker.testing import rawkafka

    host, port = bootstrap.rsplit(":", 1)
    c = rawkafka.Conn(host, int(port), timeout=10)
    try:  # a connection over the limit is closed at once: before or after the request
        c.send(rawkafka.api_versions_v0(1))
        got = c.recv_frame()
    except (OSError, EOFError):
        got = None
    if got is None or got[0] != 1:
        c.close()
        return False
    conns.append(c)
    return True


@pytest.mark.broker_overrides({"max.connections.per.ip": "3"})
def test_connections_per_ip(java_cp, broker):
    """Kafka's max.connections.per.ip and its overrides, static and then dynamic: a connection
    over the limit from an address is closed at once; raising the limit live lets more in."""
    conns: list = []

    def close_all() -> None:
        for c in conns:
            c.close()
        conns.clear()

        def one_more() -> bool:  # the broker has seen the closes
            ok = _answers(broker.bootstrap, conns) and _answers(broker.bootstrap, conns)
            ok = ok and _answers(broker.bootstrap, conns)
            for c in conns:
                c.close()
            conns.clear()
            return ok

        wait_until(one_more, 30, 0.2, "connections released")

    try:
        for _ in range(3):
            assert _answers(broker.bootstrap, conns)
        assert not _answers(broker.bootstrap, conns)  # the fourth from 127.0.0.1
        close_all()
        kafka_configs(
            broker.bootstrap, "--entity-type", "brokers", "--entity-default",
            "--alter", "--add-config", "max.connections.per.ip.overrides=127.0.0.1:5",
        )  # fmt: skip

        # kafka-configs' own connections from 127.0.0.1 count until the broker sees them close
        def five_answer() -> bool:
            ok = all(_answers(broker.bootstrap, conns) for _ in range(5))
            if not ok:
                for c in conns:
                    c.close()
                conns.clear()
            return ok

        wait_until(five_answer, 30, 0.2, "five connections from 127.0.0.1")
        assert not _answers(broker.bootstrap, conns)
        close_all()
        entry = described(broker.bootstrap, 0)["max.connections.per.ip.overrides"]
        assert (entry["value"], entry["config_source"]) == (
            "127.0.0.1:5",
            "DYNAMIC_DEFAULT_BROKER_CONFIG",
        )
        assert described(broker.bootstrap, 0)["max.connections.per.ip"]["config_source"] == (
            "STATIC_BROKER_CONFIG"
        )
    finally:
        for c in conns:
            c.close()
