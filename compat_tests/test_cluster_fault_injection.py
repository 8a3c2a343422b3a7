"""compat_tests/fault_injection.py as a test: a bounded random fault run (kill -9, SIGTERM,
SIGSTOP/SIGCONT below and above the ZooKeeper session timeout, restarts; at most one broker
down at a time) under acks=all idempotent kafka-python load, then the checker (exactly-once,
order, clean stops, replicas identical below the high watermark).

PYBROKER_FAULT_SECONDS (default 120) sets the time spent injecting faults and
PYBROKER_FAULT_SEED the random seed (default: random, printed).  Longer runs:
`python -m compat_tests.fault_injection --minutes 10`.
"""

from __future__ import annotations

import os

import pytest

from compat_tests.fault_injection import run

SECONDS = float(os.environ.get("PYBROKER_FAULT_SECONDS", "120"))
SEED = os.environ.get("PYBROKER_FAULT_SEED")

pytestmark = pytest.mark.timeout(SECONDS + 360)


def test_random_faults_under_idempotent_load(tmp_path):
    report = run(tmp_path, SECONDS, int(SEED) if SEED else None)
    print("\n" + report.summary())
    assert not report.unexplained_problems(), report.summary()
    if report.problems:
        # only bugs already reported (cluster.KNOWN_BUGS / KNOWN_PROBLEMS); others fail above
        pytest.xfail("; ".join(report.known_bugs.values()))
    assert sum(report.faults.values()) > 0
