"""Fixtures shared by the protocol tests (tests/test_protocol_*.py): a real in-process broker
(tests/broker_fixture.py) and a raw client.  A test module overrides ``broker`` when it needs
its own broker per test.

``zk_server`` (one throwaway ZooKeeper per test module that uses it) and ``zk_connect`` (a
connect string with a fresh chroot per test, so tests never see each other's znodes) skip, with
the reason, when zkServer.sh is not installed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from broker_fixture import BrokerFactory

from pybroker.testing.procutil import ctrl_c_as_at_a_terminal
from pybroker.testing.zookeeper import ZooKeeperServer, require_zookeeper


@pytest.fixture
def start_broker(tmp_path):
    """A factory of brokers with their own settings: start_broker(**{"key": "value"})."""
    with BrokerFactory(tmp_path) as factory:
        yield factory


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    """One broker for the tests that need no special settings (each uses its own topics)."""
    with BrokerFactory(tmp_path_factory.mktemp("shared")) as factory:
        yield factory()


@pytest.fixture
def broker(shared_broker):
    return shared_broker


@pytest.fixture
def client(broker):
    with broker.client() as c:
        yield c


@pytest.fixture(scope="module")
def zk_server() -> Iterator[ZooKeeperServer]:
    require_zookeeper()
    server = ZooKeeperServer()
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def zk_connect(zk_server: ZooKeeperServer) -> str:
    return f"{zk_server.connect}/t-{uuid.uuid4().hex[:12]}"


def pytest_configure(config):
    ctrl_c_as_at_a_terminal()  # (pybroker/testing/procutil.py: a run started with `cmd &`)
