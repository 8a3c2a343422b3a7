"""Smoke of the benchmark harness (bench/run.py): both brokers start, one tiny workload runs on
each, the table prints with both columns filled. No timing is asserted (benchmarks are not
tests); `python -m bench.run` itself is run by hand, see docs/bench.md."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pybroker.testing import java

ROOT = Path(__file__).resolve().parent.parent
NUMBER = r"[\d,]+(?:\.\d+)?"


@pytest.mark.skipif(not java.java_available(), reason="java is not installed")
def test_bench_smoke(tmp_path):
    java.classpath()  # fetch the jars (cached) outside the harness's time
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--smoke", "--keep-logs", str(tmp_path / "work")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "| workload | metric | Kafka | pybroker |" in proc.stdout, out[-6000:]
    row = re.search(
        rf"^\| W1 \| MB/s \(higher is better\) \| ({NUMBER}) \| ({NUMBER}) \| ({NUMBER}) \|$",
        proc.stdout,
        re.M,
    )
    assert row, f"W1 row with both figures missing:\n{out[-6000:]}"
    rss = re.search(
        rf"^\| W1 \| broker peak RSS MiB \| ({NUMBER}) \| ({NUMBER}) \|", proc.stdout, re.M
    )
    assert rss, f"W1 RSS row missing:\n{out[-6000:]}"
    assert not list(tmp_path.glob("*.md")), "smoke must not write a results file"
