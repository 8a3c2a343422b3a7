"""Headless Chromium (Debian's ``chromium`` package, scripts/install-test-deps) as a test
driver: ``dump_dom(url)`` is the DOM after the page loaded (``--dump-dom``), ``screenshot(url,
path)`` a PNG at 1280x900.  Each call is a fresh browser with a fresh profile in a temp dir,
launched as the tests run it (root): ``--headless --no-sandbox --disable-gpu ...``.

``require()`` gives the binary or skips the test saying why; under ``CI=true`` a missing
browser fails instead (the suite must not silently lose its browser tests there).
``artifacts_dir()`` is where screenshots go: ``$PYBROKER_ARTIFACTS/console`` or
``test-artifacts/console`` in the checkout (gitignored).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
TIMEOUT_S = 90


def find() -> str | None:
    env = os.environ.get("PYBROKER_CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for c in CANDIDATES:
        path = shutil.which(c)
        if path:
            return path
    return None


def require() -> str:
    path = find()
    if path is None:
        import pytest  # only under pytest: this module needs no test dependency

        why = "chromium not installed (Debian package chromium: run scripts/install-test-deps)"
        if os.environ.get("CI") == "true":
            pytest.fail(why + "; CI=true requires it", pytrace=False)
        pytest.skip(why)
    return path


def artifacts_dir() -> Path:
    root = os.environ.get("PYBROKER_ARTIFACTS")
    base = Path(root) if root else Path(__file__).resolve().parents[2] / "test-artifacts"
    out = base / "console"
    out.mkdir(parents=True, exist_ok=True)
    return out


def _run(args: list[str]) -> tuple[str, float]:
    """(stdout, seconds) of one browser run with a fresh profile."""
    with tempfile.TemporaryDirectory(prefix="pybroker-chromium-") as profile:
        cmd = [require(), *FLAGS, f"--user-data-dir={profile}", *args]
        started = time.monotonic()
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL
        )
        took = time.monotonic() - started
    if done.returncode != 0:
        raise AssertionError(f"chromium exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout, took


def dump_dom(url: str) -> str:
    return _run(["--dump-dom", url])[0]


def timed_dump_dom(url: str) -> tuple[str, float]:
    return _run(["--dump-dom", url])


def screenshot(url: str, name: str) -> Path:
    path = artifacts_dir() / name
    _run([f"--screenshot={path}", "--window-size=1280,900", url])
    assert path.is_file() and path.stat().st_size > 0, f"no screenshot at {path}"
    return path
