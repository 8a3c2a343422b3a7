"""README's quick start, secured walk-through and pytest example, run as written.

The shell blocks README marks with ``<!-- readme-test: NAME -->`` are extracted and run with
bash, as a user would paste them into a terminal, on a fresh copy of this checkout (its tracked
and new files, nothing git ignores: what a clone holds) in a fresh ``python3 -m venv`` with
``pip install -e .`` done by README's own install block, with an empty home directory.  What is
not literal, and why:

- ports: the broker listens on a free port P instead of README's fixed 9092 / 9094, so the test
  never collides with a Kafka on this machine.  In the secured blocks, where the port is written
  out, 9094 becomes P in the text.  The quick start's ``pybroker serve`` names no port, so it
  gets ``--override listeners=PLAINTEXT://127.0.0.1:P`` appended, its client block runs with
  ``PYBROKER_BOOTSTRAP=127.0.0.1:P`` (the CLI's documented variable), and 9092 becomes P in its
  text (the kafka-python snippet);
- "the same terminal": a block that README runs where the virtual environment is already
  active gets VIRTUAL_ENV and PATH as ``. .venv/bin/activate`` sets them;
- blocks README runs one after another in one terminal share what they export (the secured
  walk-through's ``export PYBROKER_BOOTSTRAP=...``);
- every block runs with ``bash -e`` (a failing command fails the test at once), and the
  long-running ``pybroker serve`` blocks are started in the background and stopped with SIGINT
  (Ctrl-C) at the end;
- pip's download cache is the test runner's own (PIP_CACHE_DIR), so the packages are not
  fetched again on every run; PyPI is used as README says (network needed).

The virtual environment and its install are made once for the module (they take a minute).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from pybroker.testing.procutil import free_port

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MARK = re.compile(r"<!-- readme-test: (\S+) -->\s*\n```(\w*)\n(.*?)\n```", re.DOTALL)
BLOCK_TIMEOUT_S = 600
START_TIMEOUT_S = 90

pytestmark = pytest.mark.timeout(1800)


def readme_blocks() -> dict[str, str]:
    """NAME -> the text of the block README marks with ``<!-- readme-test: NAME -->``."""
    blocks: dict[str, str] = {}
    for name, _lang, body in MARK.findall(README.read_text()):
        assert name not in blocks, f"two README blocks are marked {name}"
        blocks[name] = body
    return blocks


def checkout_files() -> list[str]:
    """What a fresh clone of this checkout would hold: tracked and new files, none ignored."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    return [f for f in out.decode().split("\0") if f and (ROOT / f).is_file()]


def _terminal_env(home: Path) -> dict[str, str]:
    """A new terminal of a user with an empty home: no virtual environment, no PYTHONPATH."""
    keep = ("PATH", "LANG", "LC_ALL", "TERM", "TMPDIR", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env["PATH"] = os.pathsep.join(
        p
        for p in env.get("PATH", "/usr/bin:/bin").split(os.pathsep)
        if not (os.environ.get("VIRTUAL_ENV") and p.startswith(os.environ["VIRTUAL_ENV"]))
    )
    env["HOME"] = str(home)
    cache = Path(os.environ.get("PIP_CACHE_DIR", Path.home() / ".cache" / "pip"))
    if cache.is_dir():
        env["PIP_CACHE_DIR"] = str(cache)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _activated(env: dict[str, str], venv: Path) -> dict[str, str]:
    """``env`` as ``. .venv/bin/activate`` leaves it."""
    return dict(env, VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}")


def run_block(
    text: str,
    cwd: Path,
    env: dict[str, str],
    terminal: Path | None = None,
    timeout: float = BLOCK_TIMEOUT_S,
):
    """Run a block with ``bash -e``.  ``terminal``: a file holding the variables earlier blocks
    exported, so blocks README runs one after another in the same terminal see them (an
    ``export`` of one block reaches the next)."""
    script = text
    if terminal is not None:
        script = f"if [ -f {terminal} ]; then . {terminal}; fi\n{text}\nexport -p > {terminal}\n"
    return subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ok(r: subprocess.CompletedProcess, what: str) -> subprocess.CompletedProcess:
    assert r.returncode == 0, f"{what} -> {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r


class Background:
    """A long-running block (``pybroker serve``), started as a terminal would run it."""

    def __init__(self, text: str, cwd: Path, env: dict[str, str], log: Path) -> None:
        self.log = log
        self._out = open(log, "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            ["bash", "-e", "-c", text],
            cwd=cwd,
            env=env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_started(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while "pybroker started" not in self.output():
            assert self.proc.poll() is None, f"the broker exited:\n{self.output()}"
            assert time.monotonic() < deadline, f"no 'pybroker started':\n{self.output()}"
            time.sleep(0.2)

    def stop(self) -> int:
        """Ctrl-C, as README says; the exit code (killed after 30 s)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._out.close()
        return self.proc.returncode


@pytest.fixture(scope="module")
def blocks():
    return readme_blocks()


@pytest.fixture(scope="module")
def installed(tmp_path_factory, blocks):
    """A fresh copy of the checkout with README's install block run in it (once per module):
    (checkout, its .venv, a new terminal's environment)."""
    if shutil.which("git") is None:
        pytest.fail("git is needed to list the checkout's files", pytrace=False)
    base = tmp_path_factory.mktemp("readme")
    home = base / "home"
    home.mkdir()
    checkout = base / "pybroker"
    for name in checkout_files():
        dest = checkout / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dest)
    env = _terminal_env(home)
    ok(run_block(blocks["quickstart-install"], checkout, env), "quickstart-install")
    venv = checkout / ".venv"
    assert (venv / "bin" / "pybroker").exists()
    return checkout, venv, env


def test_every_marked_block_is_run_here(blocks):
    """A block marked in README but run by no test would be a claim nobody checks."""
    assert set(blocks) == {
        "quickstart-install", "quickstart-broker", "quickstart-client",
        "secured-certs", "secured-config", "secured-broker", "secured-admin", "secured-alice",
        "secured-denied", "test_orders.py", "pytest-example",
    }  # fmt: skip


def test_quick_start(installed, blocks):
    checkout, venv, env = installed
    port = free_port()
    serve = f"pybroker serve --override listeners=PLAINTEXT://127.0.0.1:{port}"
    broker_text = blocks["quickstart-broker"]
    assert broker_text.strip() == "pybroker serve"
    broker = Background(
        broker_text.replace("pybroker serve", serve),
        checkout,
        _activated(env, venv),
        checkout.parent / "quickstart-broker.log",
    )
    try:
        broker.wait_started()
        client = blocks["quickstart-client"].replace("9092", str(port))
        r = ok(
            run_block(client, checkout, dict(env, PYBROKER_BOOTSTRAP=f"127.0.0.1:{port}")),
            "quickstart-client",
        )
        lines = r.stdout.splitlines()
        assert "hello from the CLI" in lines, r.stdout  # pybroker consume
        assert "0 hello from the CLI" in lines, r.stdout  # kafka-python, offset 0
        assert "1 hello from kafka-python" in lines, r.stdout
        assert (checkout / "pybroker-data").is_dir()  # where README says the data goes
    finally:
        code = broker.stop()
    assert code == 0, broker.output()
    assert "pybroker stopped" in broker.output()
    # README's install pulled uvloop (a dependency) and the default event.loop runs on it
    assert "event loop: uvloop (uvloop.Loop)" in broker.output(), broker.output()


def test_secured_walk_through(installed, blocks, tmp_path):
    _checkout, venv, env = installed
    env = _activated(env, venv)
    port = str(free_port())

    def block(name: str) -> str:
        return blocks[name].replace("9094", port)

    ok(run_block(block("secured-certs"), tmp_path, env), "secured-certs")
    assert (tmp_path / "broker.pem").exists() and (tmp_path / "ca.pem").exists()
    ok(run_block(block("secured-config"), tmp_path, env), "secured-config")
    broker = Background(block("secured-broker"), tmp_path, env, tmp_path / "broker.log")
    second = tmp_path / "second-terminal.env"  # what the second terminal exported
    try:
        broker.wait_started()
        r = ok(run_block(block("secured-admin"), tmp_path, env, second), "secured-admin")
        acls = [line.split() for line in r.stdout.splitlines()]
        for row in (
            ["TOPIC", "orders", "LITERAL", "User:alice", "*", "WRITE", "ALLOW"],
            ["TOPIC", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW"],
            ["GROUP", "orders-readers", "LITERAL", "User:alice", "*", "READ", "ALLOW"],
        ):
            assert row in acls, r.stdout
        assert ["alice", "SCRAM-SHA-512", "8192"] in acls, r.stdout  # users list
        assert ["admin", "SCRAM-SHA-512", "4096"] in acls, r.stdout
        r = ok(run_block(block("secured-alice"), tmp_path, env, second), "secured-alice")
        assert r.stdout.splitlines()[-1] == "hello from alice", r.stdout
        r = run_block(block("secured-denied"), tmp_path, env, second)
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert r.stderr.startswith("error: TOPIC_AUTHORIZATION_FAILED: "), r.stderr
        # the denial is the ACLs' doing: the same command as admin writes the record
        r = ok(
            run_block(block("secured-denied").replace("alice.properties", "admin.properties"),
                      tmp_path, env, second),
            "secured-denied as admin",
        )  # fmt: skip
    finally:
        code = broker.stop()
    assert code == 0, broker.output()


def test_pytest_example(installed, blocks, tmp_path):
    """README's pytest example, saved as it says, run in a project dir of its own."""
    _checkout, venv, env = installed
    (tmp_path / "test_orders.py").write_text(blocks["test_orders.py"] + "\n")
    r = ok(run_block(blocks["pytest-example"], tmp_path, _activated(env, venv)), "pytest-example")
    assert "1 passed" in r.stdout, r.stdout
