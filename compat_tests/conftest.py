"""Fixtures: a real ZooKeeper and real pybroker processes on free loopback ports.

- `zookeeper` (session): a throwaway Debian ZooKeeper server (pybroker/testing/zookeeper.py);
  `.connect` is "host:port".
- `backend` ("embedded" | "zookeeper"): every test that uses a broker runs on both.
  Pick one with `-k embedded` / `-k zookeeper` or PYBROKER_BACKENDS=embedded.  A test or
  module marked `multicore` runs a third time as "multicore": a node of two broker processes
  (node.cores=2, docs/multicore.md) on the embedded store.
- `start_broker(**overrides)` (function): starts `python -m pybroker serve` with
  listeners/log.dirs/broker.id (and zookeeper.connect with a fresh chroot on the zookeeper
  backend) plus Kafka-named overrides: start_broker(**{"num.partitions": 3}).
- `broker`: start_broker() with the overrides of a `@pytest.mark.broker_overrides({...})`.
- `storage` ("zookeeper" | "kafka"): a test that names it runs with each storage of committed
  offsets and transaction state (offsets.storage and transaction.state.storage; "kafka" with
  the internal topics' replication factor 1 on one broker), and its brokers get them
  (`storage_overrides(storage)`).  Pick one with PYBROKER_STORAGES=kafka.

Every broker a test started is killed at teardown; a broker still running is first stopped
with SIGTERM and must exit 0, and a broker that logged a Python traceback fails the test
(unless marked `allow_broker_tracebacks`): clients retry, so an internal error would otherwise
pass unseen. A failing test gets each broker's stderr appended to its report.
"""

from __future__ import annotations

import os

import pytest

from pybroker.testing.client_helpers import ALL_STORAGES, storage_overrides
from pybroker.testing.debug_process import BrokerProcess
from pybroker.testing.zookeeper import ZK_SERVER_SH, ZooKeeperServer, zookeeper_available

ALL_BACKENDS = ["embedded", "zookeeper"]
MULTICORE = "multicore"  # node.cores=2 on the embedded store, for tests marked multicore
MULTICORE_OVERRIDES = {"node.cores": "2"}


def _storages() -> list[str]:
    wanted = os.environ.get("PYBROKER_STORAGES")
    if not wanted:
        return ALL_STORAGES
    chosen = [s.strip() for s in wanted.split(",") if s.strip()]
    if set(chosen) - set(ALL_STORAGES):
        raise pytest.UsageError(f"PYBROKER_STORAGES: unknown storage(s) in {chosen}")
    return chosen


def _backends(multicore: bool = False) -> list[str]:
    wanted = os.environ.get("PYBROKER_BACKENDS")
    if not wanted:
        return ALL_BACKENDS + ([MULTICORE] if multicore else [])
    chosen = [b.strip() for b in wanted.split(",") if b.strip()]
    unknown = set(chosen) - set(ALL_BACKENDS) - {MULTICORE}
    if not multicore:
        chosen = [b for b in chosen if b != MULTICORE]
    if unknown:
        raise pytest.UsageError(f"PYBROKER_BACKENDS: unknown backend(s) {sorted(unknown)}")
    return chosen


# Test files that share one machine-wide resource run on one xdist worker: the network
# namespace harness owns the 10.213.0.0/24 route and removes namespaces it takes for a dead
# run's.
ONE_WORKER = {"test_netns.py", "test_network_partitions.py", "test_cluster_fault_injection.py"}


def pytest_xdist_make_scheduler(config, log):
    """Under ``pytest -n N`` (scripts/test-all): a test module's tests go to one worker (its
    module-scoped clusters start once), and the ONE_WORKER modules all to the same one.
    (xdist's own ``loadgroup`` does not group under pytest 9, hence a scheduler.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "netns" if os.path.basename(module) in ONE_WORKER else module

    return ModuleScheduling(config, log)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "broker_overrides(dict): Kafka-named settings for the `broker` fixture"
    )
    config.addinivalue_line(
        "markers",
        "allow_broker_tracebacks: do not fail the test when the broker logs a Python traceback",
    )
    config.addinivalue_line(
        "markers", "multicore: run the test on a node.cores=2 node too (backend 'multicore')"
    )


def pytest_generate_tests(metafunc):
    chosen = any(  # a test that names its backends itself
        "backend"
        in (m.args[0].replace(" ", "").split(",") if isinstance(m.args[0], str) else m.args[0])
        for m in metafunc.definition.iter_markers("parametrize")
    )
    if "backend" in metafunc.fixturenames and not chosen:
        marked = metafunc.definition.get_closest_marker("multicore") is not None
        metafunc.parametrize("backend", _backends(marked), indirect=True)


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    """The coord layer's ZooKeeperServer (pybroker/testing/zookeeper.py), one per session."""
    if not zookeeper_available():
        pytest.fail(
            f"ZooKeeper not installed ({ZK_SERVER_SH} or java missing): "
            "run scripts/install-test-deps",
            pytrace=False,
        )
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def backend(request) -> str:
    return request.param


@pytest.fixture(params=_storages())
def storage(request) -> str:
    return request.param


@pytest.fixture
def start_broker(request, backend, tmp_path):
    """Factory: start_broker(**overrides) -> BrokerProcess (running)."""
    started: list[BrokerProcess] = []
    request.node._pybrokers = started
    zk_connect = request.getfixturevalue("zookeeper").connect if backend == "zookeeper" else None
    chosen = request.getfixturevalue("storage") if "storage" in request.fixturenames else None
    base = storage_overrides(chosen) if chosen else {}

    def factory(**overrides) -> BrokerProcess:
        settings = dict(MULTICORE_OVERRIDES) if backend == MULTICORE else {}
        settings.update(base)
        settings.update({k.replace("__", "."): v for k, v in overrides.items()})
        b = BrokerProcess(
            tmp_path / f"broker{len(started)}",
            zookeeper_connect=zk_connect,
            overrides=settings,
        )
        started.append(b)
        b.start()
        return b

    yield factory

    errors = []
    for b in started:
        try:
            if b.is_running():
                b.stop()
        except AssertionError as e:
            errors.append(f"{b.bootstrap}: {e}")
        finally:
            b.cleanup()
    if errors:
        pytest.fail("broker did not shut down cleanly:\n" + "\n".join(errors), pytrace=False)
    if request.node.get_closest_marker("allow_broker_tracebacks") is None:
        for b in started:
            excerpt = b.traceback_excerpt()
            if excerpt:
                pytest.fail(
                    f"the broker logged a traceback (an unexpected error inside pybroker; mark "
                    f"the test allow_broker_tracebacks if intended):\n{excerpt}",
                    pytrace=False,
                )


@pytest.fixture
def broker(request, start_broker) -> BrokerProcess:
    marker = request.node.get_closest_marker("broker_overrides")
    overrides = dict(marker.args[0]) if marker else {}
    return start_broker(**overrides)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for i, b in enumerate(getattr(item, "_pybrokers", [])):
            report.sections.append(
                (
                    f"broker {i} ({b.backend}, {b.bootstrap}) stderr: {b.stderr_path}",
                    b.output(),
                )
            )
