"""compat_tests/fault_injection.py as a test: a bounded random fault run (kill -9, SIGTERM,
SIGSTOP/SIGCONT below and above the ZooKeeper session timeout, restarts; at most one broker
down at a time) under acks=all idempotent kafka-python load, then the checker (exactly-once,
order, clean stops, replicas identical below the high watermark).

PYBROKER_FAULT_SECONDS (default 120) sets the time spent injecting faults (the run goes on
until every kind of fault was injected once) and PYBROKER_FAULT_SEED the random seed (default
20261122: CI's run is seeded and reproducible; `random` draws one, printed).  Longer runs:
`python -m compat_tests.fault_injection --minutes 30` (scripts/fault-campaign).
"""

from __future__ import annotations

import os

import pytest

from compat_tests.fault_injection import ACTIONS, run

SECONDS = float(os.environ.get("PYBROKER_FAULT_SECONDS", "120"))
SEED = os.environ.get("PYBROKER_FAULT_SEED", "20261122")

pytestmark = pytest.mark.timeout(SECONDS + 600)


def test_random_faults_under_idempotent_load(tmp_path):
    report = run(tmp_path, SECONDS, None if SEED == "random" else int(SEED))
    print("\n" + report.summary())
    assert not report.problems, report.summary()
    assert set(report.faults) == set(ACTIONS), report.summary()
