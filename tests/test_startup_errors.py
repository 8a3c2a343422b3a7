"""Errors that name their cause, as an operator sees them (issue 25, point 8): a real
``python -m pybroker serve`` process with the bad setting, its stderr and exit code; the admin
CLI as a subprocess against listeners it is not set up for.

- a port in use names ``listeners`` and stops the start before the broker claims the controller
  role or opens its metadata store; the metrics listener's names ``metrics.listener``;
- a log dir that cannot be created or written names ``log.dirs`` (and the file in the way);
- an SSL listener without a key store names the missing key (tests/test_config_security.py);
- a client that connects and closes, or fails its TLS handshake, leaves no warning with an empty
  reason;
- the CLI without security settings on a TLS or SASL listener says so, and with TLS or SASL
  settings on a listener without them says that.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pybroker.testing.process import BrokerProcess
from pybroker.testing.procutil import free_port
from pybroker.testing.tls_certs import make_certs

ROOT = Path(__file__).resolve().parent.parent

PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="s";'


def serve(tmp_path: Path, *overrides: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`pybroker serve` that is expected to stop by itself (a start-up failure)."""
    args = [sys.executable, "-m", "pybroker", "serve"]
    for o in overrides:
        args += ["--override", o]
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdin=subprocess.DEVNULL,
    )


def fatal_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode != 0, r.stderr
    assert "pybroker started" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "fatal: " in ln]
    assert len(lines) == 1, r.stderr
    return lines[0].split("fatal: ", 1)[1]


def cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pybroker", "-b", bootstrap, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in dict(os.environ, PYTHONPATH=str(ROOT)).items()
             if k != "PYBROKER_BOOTSTRAP"},
    )  # fmt: skip


@contextlib.contextmanager
def port_in_use():
    """A loopback port another socket listens on meanwhile."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


# -- start-up ---------------------------------------------------------------------------------


def test_a_port_in_use_names_listeners_before_the_broker_joins_the_cluster(tmp_path):
    with port_in_use() as port:
        r = serve(
            tmp_path,
            f"listeners=PLAINTEXT://127.0.0.1:{free_port()},SECOND://127.0.0.1:{port}",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SECOND:PLAINTEXT",
            f"log.dirs={tmp_path / 'data'}",
        )
    line = fatal_line(r)
    assert line == (
        f"listeners: the SECOND listener cannot bind to 127.0.0.1:{port}: Address already in "
        "use (another process listens there: stop it, or give another port in listeners)"
    ), r.stderr
    # before the metadata store is opened, the broker registered or claimed the controller role
    assert "controller" not in r.stderr, r.stderr
    assert not (tmp_path / "data" / "__cluster_metadata").exists()


def test_zookeeper_out_of_reach_ends_the_start_after_zookeeper_connection_timeout_ms(tmp_path):
    """Kafka's KafkaServer waits zookeeper.connection.timeout.ms for its first connection
    ("Waiting until connected"), then fails its start ("Timed out waiting for connection")
    and exits 1; so does pybroker, saying how long it waits and naming the setting."""
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    r = serve(
        tmp_path,
        f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
        f"log.dirs={tmp_path / 'data'}",
        f"zookeeper.connect=127.0.0.1:{port}/k",
        "zookeeper.connection.timeout.ms=1500",
    )
    assert r.returncode == 1, r.stderr
    assert "waiting up to 1.5 s (zookeeper.connection.timeout.ms)" in r.stderr, r.stderr
    line = fatal_line(r)
    assert line.startswith(f"could not connect to ZooKeeper at 127.0.0.1:{port} within 1.5s"), line
    assert "zookeeper.connection.timeout.ms" in line, line
    assert "Traceback" not in r.stderr


def test_a_metrics_port_in_use_names_metrics_listener(tmp_path):
    with port_in_use() as port:
        r = serve(
            tmp_path,
            f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
            f"metrics.listener=http://127.0.0.1:{port}",
            f"log.dirs={tmp_path / 'data'}",
        )
    line = fatal_line(r)
    assert line == f"metrics.listener: cannot bind to 127.0.0.1:{port}: Address already in use"
    assert "controller" not in r.stderr, r.stderr


def test_a_log_dir_that_cannot_be_created_names_log_dirs_and_the_file_in_the_way(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where a directory should be")
    for log_dirs in (blocker / "data", blocker):
        r = serve(
            tmp_path, f"listeners=PLAINTEXT://127.0.0.1:{free_port()}", f"log.dirs={log_dirs}"
        )
        line = fatal_line(r)
        assert line.startswith("log.dirs: "), r.stderr
        assert f"{blocker} is a file, not a directory" in line, r.stderr
        assert "Traceback" not in r.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_a_read_only_log_dir_names_log_dirs(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o500)
    try:
        r = serve(tmp_path, f"listeners=PLAINTEXT://127.0.0.1:{free_port()}", f"log.dirs={data}")
    finally:
        data.chmod(0o700)
    line = fatal_line(r)
    assert line.startswith("log.dirs: ") and "not readable and writable" in line, r.stderr


def test_a_second_log_dir_that_fails_leaves_the_broker_serving_from_the_first(tmp_path):
    """JBOD, as Kafka: one unusable dir of several is offline (logged naming log.dirs); the first
    one holds the embedded metadata store, so that one is required."""
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    b = BrokerProcess(
        tmp_path / "b", overrides={"log.dirs": f"{tmp_path / 'good'},{blocker / 'bad'}"}
    )
    b.start()
    try:
        out = b.output()
        assert f"log dir {blocker / 'bad'} (log.dirs) is offline at start" in out, out
    finally:
        b.stop()
    r = serve(
        tmp_path,
        f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
        f"log.dirs={blocker / 'bad'},{tmp_path / 'good'}",
    )
    line = fatal_line(r)
    assert line.startswith(f"log.dirs: the first log dir, {blocker / 'bad'}, holds the embedded")


# -- connections the broker could not serve ---------------------------------------------------


@pytest.fixture(scope="module")
def three_listeners(tmp_path_factory):
    """A broker with PLAINTEXT, SSL and SASL_PLAINTEXT listeners (the admin CLI's targets)."""
    tmp = tmp_path_factory.mktemp("listeners")
    certs = make_certs(tmp / "certs")
    plain, tls, sasl = free_port(), free_port(), free_port()
    b = BrokerProcess(
        tmp / "broker",
        port=plain,
        overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls},"
            f"SASL_PLAINTEXT://127.0.0.1:{sasl}",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certs.server),
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        },
    )
    b.start()
    try:
        yield {"broker": b, "plain": plain, "tls": tls, "sasl": sasl, "certs": certs}
    finally:
        b.cleanup()


def test_connections_closed_before_a_request_leave_no_empty_warning(three_listeners):
    s = three_listeners
    for port in (s["plain"], s["tls"], s["sasl"]):
        socket.create_connection(("127.0.0.1", port)).close()  # connect, then close
        with socket.create_connection(("127.0.0.1", port)) as c:  # reset
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
    with socket.create_connection(("127.0.0.1", s["tls"])) as c:  # not TLS at all
        c.sendall(b"GET / HTTP/1.0\r\n\r\n")
        c.recv(100)
    with socket.create_connection(("127.0.0.1", s["plain"])) as c:  # TLS on a plaintext port
        c.sendall(bytes.fromhex("160301020001") + b"\0" * 200)
        c.recv(100)
    b = s["broker"]
    deadline = time.monotonic() + 10
    while "HTTP_REQUEST" not in b.output() and time.monotonic() < deadline:
        time.sleep(0.1)
    out = b.output()
    warnings = [ln for ln in out.splitlines() if " WARNING " in ln and "loop_monitor" not in ln]
    assert all(not ln.rstrip().endswith(":") for ln in out.splitlines()), out
    assert "could not set up" not in out, out
    # the TLS listener's failed handshake: INFO with the reason, as Kafka logs it
    assert "INFO pybroker.server: TLS handshake with 127.0.0.1 on the SSL listener failed: " \
           "HTTP_REQUEST" in out, out  # fmt: skip
    # the plaintext listener's one warning says what the bytes were
    assert [ln.split(": ", 2)[-1] for ln in warnings] == [
        "frame of 369295618 bytes exceeds socket.request.max.bytes=104857600 (the client "
        "speaks TLS: this listener is not an SSL one)"
    ], warnings


def test_the_cli_without_security_settings_on_a_tls_or_sasl_listener_says_so(three_listeners):
    s = three_listeners
    for port, need in ((s["tls"], "TLS or SASL"), (s["sasl"], "SASL")):
        r = cli(f"127.0.0.1:{port}", "topics", "list")
        assert r.returncode == 1 and r.stdout == "", r
        assert r.stderr.strip() == (
            f"error: the broker closed the connection: the listener at 127.0.0.1:{port} may "
            f"require {need}; pass --command-config FILE or -X security.protocol="
            "SSL|SASL_PLAINTEXT|SASL_SSL (with ssl.ca.location, sasl.mechanism, "
            "sasl.username, sasl.password; see docs/cli.md)"
        ), r.stderr


def test_the_cli_with_tls_or_sasl_on_a_listener_without_them_says_so(three_listeners):
    s = three_listeners
    plain = f"127.0.0.1:{s['plain']}"
    r = cli(plain, "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={s['certs'].ca}",
            "topics", "list")  # fmt: skip
    assert r.returncode == 1, r
    assert r.stderr.startswith(f"error: TLS handshake with {plain} failed: "), r.stderr
    assert f"the listener at {plain} may not use TLS" in r.stderr, r.stderr
    r = cli(plain, "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=PLAIN",
            "-X", "sasl.username=alice", "-X", "sasl.password=s", "topics", "list")  # fmt: skip
    assert r.returncode == 1, r
    assert r.stderr.strip() == (
        f"error: ILLEGAL_SASL_STATE: the listener at {plain} does not use SASL: check its port "
        "and security.protocol (PLAINTEXT or SSL for a listener without SASL)"
    ), r.stderr
    # and with the right settings each listener answers
    sasl = f"127.0.0.1:{s['sasl']}"
    r = cli(sasl, "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=PLAIN",
            "-X", "sasl.username=alice", "-X", "sasl.password=s", "topics", "list")  # fmt: skip
    assert r.returncode == 0, r.stderr
