"""Fixtures shared by the protocol tests (tests/test_protocol_*.py): a real in-process broker
(tests/broker_fixture.py) and a raw client.  A test module overrides ``broker`` when it needs
its own broker per test."""

from __future__ import annotations

import pytest
from broker_fixture import BrokerFactory


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
