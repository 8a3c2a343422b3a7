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
  In a module or test marked `shared_broker` it is one broker per module, backend, storage and
  overrides, started for the first test that asks and shared by the next ones (each uses
  topics and groups of its own, and none stops, restarts or reconfigures it): a test still
  fails on a traceback in its part of the broker's output or if the broker exited, and after
  a failed test the broker is stopped (exit 0 required) and the next test gets a fresh one.
  `shared_broker(False)` gives a test its own again; so does `allow_broker_tracebacks`.
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

from compat_tests.shared_broker import SharedBroker
from pybroker.testing.client_helpers import ALL_STORAGES, storage_overrides
from pybroker.testing.debug_process import BrokerProcess
from pybroker.testing.procutil import ctrl_c_as_at_a_terminal
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
    ctrl_c_as_at_a_terminal()  # (pybroker/testing/procutil.py: a run started with `cmd &`)
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
    config.addinivalue_line(
        "markers",
        "shared_broker(True|False): the `broker` fixture is one broker per module, backend, "
        "storage and overrides, shared by the marked tests (False: the test's own)",
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
def broker(request, backend):
    marker = request.node.get_closest_marker("broker_overrides")
    overrides = dict(marker.args[0]) if marker else {}
    if not shares_broker(request.node):
        yield request.getfixturevalue("start_broker")(**overrides)
        return
    settings = dict(MULTICORE_OVERRIDES) if backend == MULTICORE else {}
    if "storage" in request.fixturenames:
        settings.update(storage_overrides(request.getfixturevalue("storage")))
    settings.update({k: str(v) for k, v in overrides.items()})
    pool = request.getfixturevalue("shared_brokers")
    key = (backend, tuple(sorted(settings.items())))
    shared = pool.get(key)
    if shared is None:
        zk = request.getfixturevalue("zookeeper").connect if backend == "zookeeper" else None
        shared = pool[key] = SharedBroker(pool.workdir / f"broker{len(pool.started)}", zk, settings)
        pool.started.append(shared)
    request.node._shared_pybrokers = [shared.process]
    yield shared.begin(request.node.nodeid)
    problem = shared.end(request.node.nodeid)
    if problem or getattr(request.node, "_pybroker_call_failed", False):
        # a fresh broker for the next test: no test sees what a failed one left behind
        del pool[key]
        problem = problem or shared.retire()
    if problem:
        pytest.fail(problem, pytrace=False)


def shares_broker(item) -> bool:
    """Whether the test's `broker` is its module's shared one: the module or test is marked
    shared_broker (and not shared_broker(False)), and tracebacks are not allowed in it."""
    marker = item.get_closest_marker("shared_broker")
    if marker is None or (marker.args and not marker.args[0]):
        return False
    return item.get_closest_marker("allow_broker_tracebacks") is None


class SharedBrokers(dict):
    """The module's shared brokers by (backend, settings), and every one started."""

    def __init__(self, workdir):
        super().__init__()
        self.workdir = workdir
        self.started: list[SharedBroker] = []


@pytest.fixture(scope="module")
def shared_brokers(tmp_path_factory):
    pool = SharedBrokers(tmp_path_factory.mktemp("shared-brokers"))
    yield pool
    problems = [p for p in (shared.retire() for shared in pool.values()) if p]
    for shared in pool.started:  # (retired ones included: nothing is left running)
        shared.process.cleanup()
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        item._pybroker_call_failed = True
    if report.failed:
        brokers = getattr(item, "_pybrokers", []) + getattr(item, "_shared_pybrokers", [])
        for i, b in enumerate(brokers):
            report.sections.append(
                (
                    f"broker {i} ({b.backend}, {b.bootstrap}) stderr: {b.stderr_path}",
                    b.output(),
                )
            )
