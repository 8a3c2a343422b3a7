"""Fixtures for the Spark integration tests: one SparkSession, real pybroker processes.

- `spark` (session): SparkSession in local[2] with Spark's Kafka connector on spark.jars
  (.cache/spark-jars, fetched by scripts/fetch-spark-deps, run here once if missing), small
  memory, no UI, spark.sql.shuffle.partitions=2. Reused by every test.
- `spark_broker` (session): one `python -m pybroker serve --log-level DEBUG` on the embedded
  backend; tests use unique topic names on it.
- `backend`: "embedded" unless a test parametrizes it (`@pytest.mark.parametrize("backend",
  ["zookeeper"])`); `zookeeper` is compat_tests' session ZooKeeper fixture.
- `start_broker(**overrides)` (function): a broker of its own for a test that needs special
  settings (retention, ZooKeeper), started exactly as compat_tests does (BrokerProcess), plus
  `--log-level DEBUG`; stopped at teardown (a clean SIGTERM exit is asserted).

Every broker's log is scanned after each test: WARNING/ERROR lines the test caused (e.g.
"closing ...: api 60 v0 not served") are printed, attached to a failure report, and listed
once more in the terminal summary as "pybroker problems seen by Spark".
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from compat_tests.conftest import zookeeper  # noqa: F401  (session ZooKeeper fixture)
from pybroker.testing.debug_process import BrokerProcess
from pybroker.testing.procutil import ctrl_c_as_at_a_terminal
from spark_it import census
from spark_it.session import SparkDepsError, build_session, connector_jars

# SPARK_IT_PYBROKER_SRC=<dir>: brokers run the pybroker package found in <dir> (e.g. a
# `git archive <commit>` snapshot) instead of this working tree, for reproducible runs while
# others edit pybroker/.
PYBROKER_SRC = os.environ.get("SPARK_IT_PYBROKER_SRC")

PROBLEM_RE = re.compile(r" (WARNING|ERROR|CRITICAL) |Traceback|not served|not supported")

# every broker any Spark test started, for the end-of-run summary
_ALL_BROKERS: list[SparkBrokerProcess] = []
_SHARED: list[SparkBrokerProcess] = []  # the session broker, once started
_CLIENT_LOG: list[Path] = []  # Spark's Kafka client log (requests/responses), once started


class SparkBrokerProcess(BrokerProcess):
    """compat_tests' BrokerProcess with `--log-level DEBUG` (problems are logged as WARNING)."""

    def __init__(self, *args, log_level: str = "DEBUG", **kwargs):
        super().__init__(*args, **kwargs)
        self.log_level = log_level
        if PYBROKER_SRC:
            self.cwd = self.workdir
        self._scan_pos = 0
        self.problems: list[str] = []  # (label, line) of every problem line, in order

    def command(self) -> list[str]:
        return super().command() + ["--log-level", self.log_level]

    def environment(self) -> dict[str, str]:
        env = super().environment()
        if PYBROKER_SRC:
            # run pybroker from another checkout: first on PYTHONPATH, and a working directory
            # that is no checkout (`python -m` puts the cwd before PYTHONPATH)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [PYBROKER_SRC, env.get("PYTHONPATH")]))
        return env

    def output(self, max_lines: int = 200) -> str:
        """The log's tail without asyncio's debug chatter (PYTHONASYNCIODEBUG + DEBUG level)."""
        try:
            lines = self.stderr_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        lines = [ln for ln in lines if " DEBUG asyncio: " not in ln]
        return "\n".join(lines[-max_lines:])

    def new_problem_lines(self) -> list[str]:
        """WARNING/ERROR lines written to the log since the last call."""
        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(self._scan_pos)
                data = f.read()
        except FileNotFoundError:
            return []
        # only whole lines; the rest is read next time
        end = data.rfind(b"\n") + 1
        self._scan_pos += end
        lines = data[:end].decode(errors="replace").splitlines()
        found = [ln for ln in lines if PROBLEM_RE.search(ln)]
        self.problems.extend(found)
        return found


def pytest_configure(config):
    ctrl_c_as_at_a_terminal()  # (pybroker/testing/procutil.py: a run started with `cmd &`)
    # py4j reads its resources through importlib's legacy API (one warning per call)
    config.addinivalue_line("filterwarnings", "ignore:open_text is deprecated:DeprecationWarning")


# -- the SparkSession -----------------------------------------------------------------------
@pytest.fixture(scope="session")
def spark(spark_broker, tmp_path_factory):
    """(Depends on spark_broker only so the session stops before the broker does: Spark's
    cached producers would otherwise log reconnect warnings at the very end.)"""
    try:
        import pyspark
    except ImportError:
        pytest.fail("pyspark missing: run scripts/fetch-spark-deps", pytrace=False)
    try:
        jars = connector_jars()
    except SparkDepsError as e:
        pytest.fail(str(e), pytrace=False)
    client_log = Path(
        os.environ.get("SPARK_IT_CLIENT_LOG")
        or tmp_path_factory.mktemp("spark-clients") / "kafka-clients.log"
    )
    _CLIENT_LOG.append(client_log)
    session = build_session(client_log=client_log)
    print(f"\n[spark] pyspark {pyspark.__version__}, jars: {[Path(j).name for j in jars]}")
    print(f"[spark] Kafka client log: {client_log}")
    if PYBROKER_SRC:
        print(f"[spark] brokers run pybroker from {PYBROKER_SRC}")
    try:
        yield session
    finally:
        session.stop()


# -- brokers ---------------------------------------------------------------------------------
def _stop_all(started: list[SparkBrokerProcess]) -> list[str]:
    errors = []
    for b in started:
        try:
            if b.is_running():
                b.stop()
        except AssertionError as e:
            errors.append(f"{b.bootstrap}: {e}")
        finally:
            b.cleanup()
    return errors


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory):
    """One embedded-backend broker shared by most tests (unique topics per test)."""
    b = SparkBrokerProcess(tmp_path_factory.mktemp("spark-broker"))
    _ALL_BROKERS.append(b)
    _SHARED.append(b)
    b.start()
    yield b
    errors = _stop_all([b])
    if errors:
        pytest.fail("shared broker did not shut down cleanly:\n" + "\n".join(errors))


@pytest.fixture
def backend() -> str:
    return "embedded"


@pytest.fixture
def start_broker(request, backend, tmp_path):
    """Factory: start_broker(**overrides) -> SparkBrokerProcess on `backend` (running)."""
    started: list[SparkBrokerProcess] = []
    request.node._spark_brokers = started
    zk_connect = request.getfixturevalue("zookeeper").connect if backend == "zookeeper" else None

    def factory(port: int | None = None, **overrides) -> SparkBrokerProcess:
        """``port``: the PLAINTEXT port the harness checks (when ``listeners`` names it)."""
        b = SparkBrokerProcess(
            tmp_path / f"broker{len(started)}",
            zookeeper_connect=zk_connect,
            overrides={k.replace("__", "."): v for k, v in overrides.items()},
            **({"port": port} if port is not None else {}),
        )
        started.append(b)
        _ALL_BROKERS.append(b)
        b.start()
        return b

    yield factory

    errors = _stop_all(started)
    if errors:
        pytest.fail("broker did not shut down cleanly:\n" + "\n".join(errors), pytrace=False)


@pytest.fixture(autouse=True)
def _broker_problems(request):
    """Print (and remember) the broker log's WARNING/ERROR lines each test caused."""
    for shared in _SHARED:
        shared.new_problem_lines()  # what earlier tests caused was reported already
    yield
    brokers = list(getattr(request.node, "_spark_brokers", []))
    if "spark_broker" in request.fixturenames:
        brokers.insert(0, request.getfixturevalue("spark_broker"))
    lines = []
    for b in brokers:
        lines += [f"{b.backend}@{b.port}: {ln}" for ln in b.new_problem_lines()]
    request.node._spark_broker_problems = lines
    if lines:
        print(f"\n[broker problems during {request.node.name}]")
        for ln in lines:
            print("  " + ln)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and report.when == "call":
        brokers = list(getattr(item, "_spark_brokers", []))
        if "spark_broker" in getattr(item, "fixturenames", ()):
            brokers = _SHARED + brokers
        for i, b in enumerate(brokers):
            report.sections.append(
                (f"broker {i} ({b.backend}, {b.bootstrap}) log: {b.stderr_path}", b.output(80))
            )


def _normalize(line: str) -> str:
    line = re.sub(r"^\S+ \S+ ", "", line)  # timestamp
    line = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", line)
    line = re.sub(r"@\d+:", ":", line)
    return line


def pytest_terminal_summary(terminalreporter):
    if not _ALL_BROKERS:
        return
    counts: dict[str, int] = {}
    for b in _ALL_BROKERS:
        b.new_problem_lines()
        for ln in b.problems:
            key = f"[{b.backend}] {_normalize(ln)}"
            counts[key] = counts.get(key, 0) + 1
    for log in _CLIENT_LOG:
        terminalreporter.section("Spark's Kafka clients (spark_it/census.py)")
        for line in census.report_lines(log):
            terminalreporter.write_line(line)
    terminalreporter.section("pybroker problems seen by Spark (broker logs, --log-level DEBUG)")
    if not counts:
        terminalreporter.write_line("none")
    for key, n in sorted(counts.items()):
        terminalreporter.write_line(f"{n:4d}x {key}")
