"""pytest plugin: a real Kafka broker (pybroker) for your tests, registered through the
``pytest11`` entry point (``pybroker``).  Fixtures: ``kafka_broker`` (session: a ``python -m
pybroker serve`` process on a free loopback port, ``.bootstrap_servers``; one per xdist worker;
``--kafka-bootstrap=HOST:PORT`` points at another Kafka instead), ``kafka_topic`` (function: a
factory that creates a topic and deletes it after the test) and ``kafka_cluster`` (session:
three brokers on a private ZooKeeper).  Options: ``--kafka-bootstrap`` and
``--kafka-broker-config KEY=VALUE``.  Details: docs/testing.md and docs/internals.md
("pybroker/testing/pytest_plugin.py").
"""

from __future__ import annotations

import re
import uuid
import warnings
from collections.abc import Callable, Iterator
from typing import Protocol

import pytest

from pybroker.testing.client import AdminClient, KafkaError, broker_ready, parse_bootstrap
from pybroker.testing.cluster import LocalCluster
from pybroker.testing.process import BrokerProcess, BrokerStartError
from pybroker.testing.zookeeper import ZK_SERVER_SH, zookeeper_available

# what a test broker runs with beyond Kafka's defaults (consumer groups form at once; short
# session timeouts allowed)
FAST_SETTINGS: dict[str, str] = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "100",
}
TOPIC_DELETION_DISABLED = 73


class KafkaBroker(Protocol):
    """What ``kafka_broker`` yields: a started BrokerProcess or an ExternalBroker."""

    @property
    def bootstrap_servers(self) -> str: ...


class ExternalBroker:
    """A Kafka given with --kafka-bootstrap (not started nor stopped by the plugin)."""

    def __init__(self, bootstrap_servers: str) -> None:
        self.bootstrap_servers = bootstrap_servers

    def __repr__(self) -> str:
        return f"ExternalBroker({self.bootstrap_servers!r})"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pybroker", "Kafka brokers for tests (pybroker)")
    group.addoption(
        "--kafka-bootstrap",
        metavar="HOST:PORT",
        default=None,
        help="use this running Kafka for the kafka_broker fixture instead of starting a "
        "pybroker (HOST:PORT[,HOST:PORT...])",
    )
    group.addoption(
        "--kafka-broker-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker setting for the brokers the plugin starts (repeatable)",
    )


def pytest_report_header(config: pytest.Config) -> str | None:
    bootstrap = config.getoption("kafka_bootstrap")
    if bootstrap:
        return f"kafka_broker: external Kafka at {bootstrap} (--kafka-bootstrap)"
    return None


def broker_config(config: pytest.Config) -> dict[str, str]:
    """FAST_SETTINGS updated with every --kafka-broker-config KEY=VALUE."""
    settings = dict(FAST_SETTINGS)
    for item in config.getoption("kafka_broker_config"):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise pytest.UsageError(f"--kafka-broker-config expects KEY=VALUE, got {item!r}")
        settings[key.strip()] = value.strip()
    return settings


def _external(bootstrap: str) -> ExternalBroker:
    try:
        servers = parse_bootstrap(bootstrap)
    except ValueError as e:
        raise pytest.UsageError(f"--kafka-bootstrap: {e}") from None
    if not any(broker_ready(host, port) for host, port in servers):
        raise pytest.UsageError(
            f"--kafka-bootstrap={bootstrap}: no broker there answered ApiVersions and Metadata"
        )
    return ExternalBroker(bootstrap)


@pytest.fixture(scope="session")
def kafka_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaBroker]:
    bootstrap = request.config.getoption("kafka_bootstrap")
    if bootstrap:
        yield _external(bootstrap)
        return
    broker = BrokerProcess(
        tmp_path_factory.mktemp("kafka-broker"), overrides=broker_config(request.config)
    )
    try:
        try:
            broker.start()
        except BrokerStartError as e:
            pytest.fail(f"kafka_broker did not start: {e}", pytrace=False)
        yield broker
        broker.stop()  # SIGTERM; asserts a clean exit
    finally:
        broker.cleanup()


def topic_name_for(node_name: str) -> str:
    """A topic name unique to this call: the test's name (characters Kafka does not allow in
    topic names replaced) and a random suffix."""
    stem = re.sub(r"[^a-zA-Z0-9._-]+", "-", node_name).strip("-.")[:180] or "test"
    return f"{stem}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def kafka_topic(
    kafka_broker: KafkaBroker, request: pytest.FixtureRequest
) -> Iterator[Callable[..., str]]:
    if isinstance(kafka_broker, BrokerProcess) and not kafka_broker.is_running():
        pytest.fail(
            f"the kafka_broker process has exited\n{kafka_broker.output(60)}", pytrace=False
        )
    admin = AdminClient(kafka_broker.bootstrap_servers)
    created: list[str] = []

    def create(
        partitions: int = 1,
        replication_factor: int = 1,
        configs: dict[str, str] | None = None,
        name: str | None = None,
    ) -> str:
        topic = name or topic_name_for(request.node.name)
        admin.create_topic(topic, partitions, replication_factor, configs)
        created.append(topic)
        return topic

    try:
        yield create
        for topic in created:
            try:
                admin.delete_topic(topic)
            except KafkaError as e:
                if e.code != TOPIC_DELETION_DISABLED:
                    raise
                warnings.warn(f"kafka_topic: {topic} left behind: {e}", stacklevel=1)
    finally:
        admin.close()


@pytest.fixture(scope="session")
def kafka_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    if not zookeeper_available():
        pytest.skip(
            f"kafka_cluster needs ZooKeeper: {ZK_SERVER_SH} and java (Debian: apt-get install "
            "zookeeper; ZK_SERVER_SH names another zkServer.sh)"
        )
    cluster = LocalCluster(
        tmp_path_factory.mktemp("kafka-cluster"), size=3, overrides=broker_config(request.config)
    )
    try:
        cluster.start()
        yield cluster
        problems = cluster.stop()
        assert not problems, f"kafka_cluster brokers did not stop cleanly: {problems}"
    finally:
        cluster.cleanup()
