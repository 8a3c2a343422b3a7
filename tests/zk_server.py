"""Fixtures around a throwaway real ZooKeeper (pybroker.testing.zookeeper, shipped with the
package for the pytest plugin; the server class is re-exported here).

Fixtures: ``zk_server`` (one server per test module that imports it) and ``zk_connect`` (a
connect string with a fresh chroot per test, so tests never see each other's znodes).  Both
skip, with the reason, when zkServer.sh is not installed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from pybroker.testing.procutil import free_port  # noqa: F401
from pybroker.testing.zookeeper import (  # noqa: F401
    ZK_SERVER_SH,
    ZooKeeperServer,
    zookeeper_available,
)


def require_zookeeper() -> None:
    if not zookeeper_available():
        pytest.skip(f"ZooKeeper not installed ({ZK_SERVER_SH} or java missing)")


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
