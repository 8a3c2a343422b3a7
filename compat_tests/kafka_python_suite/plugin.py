"""pytest plugin that runs kafka-python's integration suite against a pybroker process.

Loaded with `-p compat_tests.kafka_python_suite.plugin` by scripts/run-kafka-python-suite.

- Unless KAFKA_URI is already set, starts `python -m pybroker serve` on a free loopback port
  (backend from PYBROKER_SUITE_BACKEND: "embedded" (default) or "zookeeper", which starts a
  throwaway ZooKeeper too) and sets KAFKA_URI=tcp://127.0.0.1:<port>.
- Unless KAFKA_VERSION is set, sets it to KAFKA_LEVEL, the Apache Kafka release whose
  protocol pybroker serves (their fixtures pass api_version=KAFKA_VERSION to every client and
  gate tests on it, and their test_kafka_version_infer checks that kafka-python infers that
  version from pybroker's ApiVersions answer).
- KAFKA_ROOT must name an existing directory for their Fixture class: a temp dir is used.
- Deselects the tests listed in deselected.txt (`nodeid  # reason`), printing each reason.
- Gives the tests in upstream-flaky.txt (races in the client, read in its source) one rerun,
  only for the symptom listed there (pytest-rerunfailures).
- Stops the broker (SIGTERM, exit 0 expected) at the end; its stderr is kept in the work dir
  and its tail printed when the session failed.
- Their fixtures spawn a Java Kafka for SSL tests (KafkaFixture.instance(transport="SSL")):
  that call gets a pybroker process with an SSL listener instead (PEM certificates from
  pybroker/testing/tls_certs.py, the CA as <ssl_dir>/ca-cert where their tests look for it).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
DESELECT_FILE = HERE / "deselected.txt"
FLAKY_FILE = HERE / "upstream-flaky.txt"

_state: dict = {}
KAFKA_LEVEL = "3.9.0"  # tests/test_kafka39_versions.py holds pybroker's ApiVersions to it


def read_deselected(path: Path = DESELECT_FILE) -> dict[str, str]:
    entries: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        nodeid, _, reason = line.partition("#")
        nodeid, reason = nodeid.strip(), reason.strip()
        if not reason:
            raise pytest.UsageError(f"{path}: no reason given for {nodeid!r}")
        entries[nodeid] = reason
    return entries


def read_flaky(path: Path = FLAKY_FILE) -> dict[str, tuple[str, str]]:
    """`nodeid  # symptom regex  # reason` -> {nodeid: (symptom, reason)}."""
    entries: dict[str, tuple[str, str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split("  # ")]
        if len(parts) != 3 or not all(parts):
            raise pytest.UsageError(f"{path}: want `nodeid  # symptom  # reason`: {line!r}")
        entries[parts[0]] = (parts[1], parts[2])
    return entries


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    """Runs before their conftest.py is imported: it reads KAFKA_VERSION/KAFKA_ROOT at import."""
    workdir = Path(tempfile.mkdtemp(prefix="kafka-python-suite-"))
    _state["workdir"] = workdir
    os.environ.setdefault("KAFKA_ROOT", str(workdir))
    if "KAFKA_URI" not in os.environ:
        from pybroker.testing.debug_process import BrokerProcess
        from pybroker.testing.process import BrokerStartError

        backend = os.environ.get("PYBROKER_SUITE_BACKEND", "embedded")
        zk_connect = None
        if backend == "zookeeper":
            from pybroker.testing.zookeeper import ZooKeeperServer

            zk = ZooKeeperServer(workdir / "zookeeper")
            zk.start()
            _state["zk"] = zk
            zk_connect = zk.connect
        elif backend != "embedded":
            raise pytest.UsageError(f"PYBROKER_SUITE_BACKEND={backend!r}")
        # the settings of their servers/resources/default/kafka.properties that pybroker knows
        broker = BrokerProcess(
            workdir / "broker",
            zookeeper_connect=zk_connect,
            overrides={
                "num.partitions": 4,
                "group.min.session.timeout.ms": 1000,  # "Allow shorter session timeouts for tests"
                "group.initial.rebalance.delay.ms": 0,
                # their fixture's authorizer settings for Kafka 2.4-3.x
                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                "allow.everyone.if.no.acl.found": "true",
            },
        )
        _state["broker"] = broker
        try:
            broker.start()
        except BrokerStartError as e:
            raise pytest.UsageError(f"could not start pybroker for the suite: {e}") from None
        os.environ["KAFKA_URI"] = f"tcp://{broker.bootstrap}"
    os.environ.setdefault("KAFKA_VERSION", KAFKA_LEVEL)
    # PYBROKER_SUITE_NO_DESELECT=1 runs the listed tests too (to see which now pass)
    _state["deselected"] = {} if os.environ.get("PYBROKER_SUITE_NO_DESELECT") else read_deselected()


class _SslBroker:
    """What their SSL tests use of a KafkaFixture: host, port (the SSL listener), ssl_dir,
    transport, start(), close()."""

    def __init__(self, workdir: Path) -> None:
        from pybroker.testing.debug_process import BrokerProcess
        from pybroker.testing.procutil import free_port
        from pybroker.testing.tls_certs import make_certs

        self.ssl_dir = str(workdir / "ssl")
        certs = make_certs(Path(self.ssl_dir))
        shutil.copy(certs.ca, Path(self.ssl_dir) / "ca-cert")
        self.host, self.port, self.transport = "localhost", free_port(), "SSL"
        self.broker = BrokerProcess(workdir / "broker")
        self.broker.overrides.update(
            {
                "listeners": f"PLAINTEXT://127.0.0.1:{self.broker.port},"
                f"SSL://127.0.0.1:{self.port}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.broker.port},"
                f"SSL://localhost:{self.port}",
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(certs.server),
            }
        )
        _state.setdefault("extra_brokers", []).append(self.broker)
        self.broker.start()

    def start(self) -> None:
        pass

    def close(self) -> None:
        try:
            if self.broker.is_running():
                self.broker.stop()
        finally:
            self.broker.cleanup()


class _SaslBroker:
    """What their SASL tests use of a KafkaFixture (KafkaFixture.instance(transport=
    "SASL_PLAINTEXT", sasl_mechanism=...)): a pybroker with a SASL_PLAINTEXT listener that
    enables PLAIN and both SCRAMs; their user (alice / alice-secret) is a PLAIN user of the
    listener's JAAS entry and gets SCRAM credentials through AlterUserScramCredentials, as
    their fixture adds them with kafka-configs."""

    broker_user, broker_password = "alice", "alice-secret"

    def __init__(self, workdir: Path, mechanism: str, partitions: int = 4) -> None:
        from pybroker.testing.debug_process import BrokerProcess
        from pybroker.testing.procutil import free_port

        self.host, self.port, self.transport = "127.0.0.1", free_port(), "SASL_PLAINTEXT"
        self.sasl_mechanism = mechanism.upper()
        self.sasl_enabled, self.ssl_enabled = True, False
        self.partitions, self.replicas = partitions, 1
        self.broker = BrokerProcess(workdir / "broker")
        jaas = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_{self.broker_user}="{self.broker_password}";'
        )
        self.broker.overrides.update(
            {
                "listeners": f"PLAINTEXT://127.0.0.1:{self.broker.port},"
                f"SASL_PLAINTEXT://127.0.0.1:{self.port}",
                "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
                "num.partitions": str(partitions),
            }
        )
        _state.setdefault("extra_brokers", []).append(self.broker)
        self.broker.start()
        if self.sasl_mechanism.startswith("SCRAM"):
            self._add_scram()
        self.child = self  # their teardown calls sasl_kafka.child.dump_logs()
        self.zookeeper = None  # their factory's teardown closes the brokers' ZooKeepers

    def _add_scram(self) -> None:
        from kafka import KafkaAdminClient
        from kafka.admin._users import UserScramCredentialUpsertion

        admin = KafkaAdminClient(
            bootstrap_servers=self.bootstrap_server(),
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username=self.broker_user,
            sasl_plain_password=self.broker_password,
        )
        try:
            got = admin.alter_user_scram_credentials(
                [
                    UserScramCredentialUpsertion(self.broker_user, m, self.broker_password)
                    for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")
                ]
            )
            assert got == {self.broker_user: None}, got
        finally:
            admin.close()

    def bootstrap_server(self) -> str:
        return f"{self.host}:{self.port}"

    def _enrich_client_params(self, params: dict, **defaults: object) -> dict:
        from test.integration.fixtures import KafkaFixture

        return KafkaFixture._enrich_client_params(self, params, **defaults)

    def get_topic_names(self) -> list[str]:
        from kafka import KafkaAdminClient

        with KafkaAdminClient(**self._enrich_client_params({}, client_id="topic_lister")) as a:
            return list(a.list_topics())

    def dump_logs(self) -> None:
        pass

    def start(self) -> None:
        pass

    def close(self) -> None:
        try:
            if self.broker.is_running():
                self.broker.stop()
        finally:
            self.broker.cleanup()


def pytest_sessionstart(session):
    """Their KafkaFixture.instance(transport="SSL" / "SASL_PLAINTEXT") -> a pybroker with
    that listener."""
    try:
        from test.integration.fixtures import KafkaFixture
    except ImportError:
        return
    original = KafkaFixture.instance.__func__
    counter = iter(range(10**6))

    def instance(cls, broker_id, *args, transport="PLAINTEXT", **kw):  # noqa: ANN001, ANN202
        if str(transport).upper() == "SSL":
            workdir = _state["workdir"] / f"ssl-broker-{next(counter)}"
            return _SslBroker(workdir)
        if str(transport).upper() == "SASL_PLAINTEXT":
            workdir = _state["workdir"] / f"sasl-broker-{next(counter)}"
            return _SaslBroker(workdir, kw["sasl_mechanism"], kw.get("partitions", 4))
        return original(cls, broker_id, *args, transport=transport, **kw)

    KafkaFixture.instance = classmethod(instance)


def pytest_report_header(config):
    b = _state.get("broker")
    where = f"pybroker {b.backend} pid {b.pid}" if b else "external broker"
    return [
        f"kafka-python suite against {os.environ.get('KAFKA_URI')} ({where}), "
        f"KAFKA_VERSION={os.environ.get('KAFKA_VERSION')}",
        f"deselect list: {DESELECT_FILE} ({len(_state.get('deselected', {}))} entries)",
    ]


_SASL_MODULE = "test_sasl_integration.py"


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    uri = _state.pop("kafka_uri", None)
    if uri is not None:
        os.environ["KAFKA_URI"] = uri


def pytest_runtest_setup(item):
    """Stop at once if our broker died: every later test would only wait out its timeouts.
    Their SASL tests ask their broker factory for a SASL broker, which it only makes without
    KAFKA_URI (with it, it hands out the external broker whatever was asked): it is unset
    for them (until their teardown)."""
    if item.nodeid.split("::")[0].endswith(_SASL_MODULE):
        _state["kafka_uri"] = os.environ.pop("KAFKA_URI", None)
    b = _state.get("broker")
    if b is not None and not b.is_running():
        code = b.proc.returncode if b.proc else None
        pytest.exit(
            f"pybroker (pid {b.pid}) is gone (exit {code}) before {item.nodeid}\n"
            f"--- {b.stderr_path} ---\n{b.output(100)}",
            returncode=1,
        )


def _matches(nodeid: str, entry: str) -> bool:
    # an entry without [params] covers every parametrization; a trailing '::' covers a class
    return nodeid == entry or nodeid.startswith(entry + "[") or nodeid.startswith(entry + "::")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    entries = _state.get("deselected", {})
    used: set[str] = set()
    keep, drop = [], []
    for item in items:
        hit = next((e for e in entries if _matches(item.nodeid, e)), None)
        if hit is None:
            keep.append(item)
        else:
            used.add(hit)
            drop.append(item)
    for item in items:
        if item.nodeid.split("::")[0].endswith(_SASL_MODULE):
            module = item.getparent(pytest.Module)
            module.own_markers = [
                m
                for m in module.own_markers
                if not (m.name == "skipif" and "external Kafka" in str(m.kwargs.get("reason")))
            ]
    flaky = read_flaky()
    for item in keep:
        hit = next((e for e in flaky if _matches(item.nodeid, e)), None)
        if hit is not None:
            item.add_marker(pytest.mark.flaky(reruns=1, only_rerun=[re.escape(flaky[hit][0])]))
            _state.setdefault("flaky_items", []).append((item.nodeid, flaky[hit][1]))
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    _state["deselected_items"] = [
        (i.nodeid, entries[next(e for e in entries if _matches(i.nodeid, e))]) for i in drop
    ]
    _state["stale"] = sorted(set(entries) - used)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    tr = terminalreporter
    dropped = _state.get("deselected_items", [])
    if dropped:
        tr.section(f"deselected ({len(dropped)}, from {DESELECT_FILE.name})")
        for nodeid, reason in dropped:
            tr.line(f"{nodeid}  # {reason}")
    reruns = tr.stats.get("rerun", [])
    for nodeid, reason in _state.get("flaky_items", []):
        if any(r.nodeid == nodeid for r in reruns):
            tr.section(f"rerun once ({FLAKY_FILE.name})")
            tr.line(f"{nodeid}  # {reason}")
    if _state.get("stale"):
        tr.section("deselect entries matching no test (stale?)")
        for e in _state["stale"]:
            tr.line(e)
    b = _state.get("broker")
    if b is not None and exitstatus not in (0, 5):
        tr.section(f"pybroker stderr ({b.stderr_path})")
        tr.line(b.output(300))


def pytest_unconfigure(config):
    """Safety net: nothing we started survives the session (their SSL/SASL brokers included,
    should their fixture's teardown not have closed them)."""
    for extra in _state.pop("extra_brokers", []):
        extra.cleanup()
    b = _state.pop("broker", None)
    zk = _state.pop("zk", None)
    if b is not None:
        b.cleanup()
    if zk is not None:
        zk.stop()
    workdir = _state.pop("workdir", None)
    if workdir is not None and _state.get("exitstatus") == 0:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    _state["exitstatus"] = exitstatus
    b = _state.get("broker")
    if b is None:
        return
    try:
        if b.is_running():
            b.stop()
    except AssertionError as e:
        print(f"\npybroker did not shut down cleanly: {e}")
        if session.exitstatus == 0:
            session.exitstatus = 1
