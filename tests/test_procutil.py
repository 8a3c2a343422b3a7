"""pybroker/testing/procutil.py's free ports under pytest-xdist: two workers are two processes,
each with its own record of the ports it handed out, so only a split of the port space keeps
one worker from handing out a port the other took for a broker that has not bound it yet (or
that stopped and keeps it for its restart)."""

from __future__ import annotations

import os
import subprocess
import sys

HAND_OUT = (
    "from pybroker.testing.procutil import free_port, free_ports\n"
    "ports = [free_port() for _ in range(500)]\n"
    "first = free_ports(3)\n"
    "ports += [first, first + 1, first + 2]\n"
    "print(' '.join(map(str, ports)))\n"
)


def handed_out(worker: str, count: str) -> list[int]:
    env = dict(os.environ, PYTEST_XDIST_WORKER=worker, PYTEST_XDIST_WORKER_COUNT=count)
    out = subprocess.run(
        [sys.executable, "-c", HAND_OUT], env=env, capture_output=True, text=True, check=True
    ).stdout
    return [int(p) for p in out.split()]


def test_two_xdist_workers_never_hand_out_the_same_port():
    gw0, gw1 = handed_out("gw0", "2"), handed_out("gw1", "2")
    assert len(set(gw0)) == len(gw0) == 503 and len(set(gw1)) == len(gw1) == 503
    assert not set(gw0) & set(gw1)


def test_one_worker_uses_every_port():
    """Under -n 1 (or none) nothing is set aside: its ports come from both halves."""
    ports = handed_out("gw0", "1")
    assert {p // 64 % 2 for p in ports} == {0, 1}
