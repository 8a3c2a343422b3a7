"""pybroker/testing/procutil.py's free ports under pytest-xdist: two workers are two processes,
each with its own record of the ports it handed out, so only a split of the port space keeps
one worker from handing out a port the other took for a broker that has not bound it yet (or
that stopped and keeps it for its restart)."""

from __future__ import annotations

import os
import signal
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


# a child started with SIGINT ignored, as under `nohup ... &`; it starts a grandchild and
# prints the grandchild's SIGINT disposition, before and after ctrl_c_as_at_a_terminal
DEAF_PARENT = (
    "import signal, subprocess, sys\n"
    "from pybroker.testing.procutil import ctrl_c_as_at_a_terminal\n"
    "probe = [sys.executable, '-c', 'import signal; print(signal.getsignal(signal.SIGINT))']\n"
    "before = subprocess.run(probe, capture_output=True, text=True).stdout.strip()\n"
    "ctrl_c_as_at_a_terminal()\n"
    "after = subprocess.run(probe, capture_output=True, text=True).stdout.strip()\n"
    "print(before, '|', after)\n"
)


def test_a_run_started_in_the_background_still_gives_its_children_ctrl_c():
    """What the follower tests of compat_tests/test_admin_cli.py met in a CI run started with
    `nohup .ci/run &`: `pybroker consume` inherited an ignored SIGINT and was killed after 30 s
    instead of stopping on Ctrl-C.  The conftests call ctrl_c_as_at_a_terminal at start-up."""
    out = subprocess.run(
        [sys.executable, "-c", DEAF_PARENT],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, PYTHONPATH=os.getcwd()),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    ).stdout.strip()
    before, after = (s.strip() for s in out.split("|"))
    assert before == str(
        int(signal.SIG_IGN)
    )  # what the tests' children got before (raw: Python left it)
    assert after == "<built-in function default_int_handler>"
