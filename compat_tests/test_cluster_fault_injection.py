"""compat_tests/fault_injection.py as tests: bounded random fault runs under acks=all
idempotent kafka-python load, a transactional producer (a third of its transactions aborted)
and a committing group, then the checker (exactly-once, order, no offset acknowledged twice,
no aborted record shown to read_committed, clean stops, replicas identical below the high
watermark).

- ``test_random_faults_under_idempotent_load``: the process faults (kill -9, SIGTERM,
  SIGSTOP/SIGCONT below and above the ZooKeeper session timeout, restarts, ZooKeeper restart;
  at most one broker down at a time) on loopback.  PYBROKER_FAULT_SECONDS (default 0: each
  kind once, in the seeded order, as the network test; CI's budget) sets the time spent
  injecting faults (the run goes on until every kind was injected once).
- ``test_network_partitions_and_full_disks``: every process in a network namespace of its
  own (root only: skipped, saying why, elsewhere; CI runs as root), one fault of each of
  CI_KINDS, kept short for CI: a leader cut from its followers, the controller cut from
  ZooKeeper, a log dir filling up, a ZooKeeper node's disk filling up.
  PYBROKER_FAULT_NET_KINDS=all adds a broker cut from ZooKeeper, one ZooKeeper node cut
  from the other two, a one-way cut and both log dirs of a broker filling up (or names
  kinds, comma-separated); PYBROKER_FAULT_NET_SECONDS (default 0: each kind once)
  lengthens it.  The long campaign (every kind, scripts/fault-campaign --network) is not
  run by CI.

PYBROKER_FAULT_SEED is the random seed (default 20261122: CI's runs are seeded and
reproducible; `random` draws one, printed).  Longer runs: scripts/fault-campaign
(docs/cluster-testing.md).
"""

from __future__ import annotations

import os
import random
from collections import Counter

import pytest

from compat_tests.fault_injection import ACTIONS, campaign_actions, run, schedule
from compat_tests.net_faults import DISK_ACTIONS, NETWORK_ACTIONS
from compat_tests.netns import require
from tests.small_disk import can_mount

SECONDS = float(os.environ.get("PYBROKER_FAULT_SECONDS", "0"))
NET_SECONDS = float(os.environ.get("PYBROKER_FAULT_NET_SECONDS", "0"))
SEED = os.environ.get("PYBROKER_FAULT_SEED", "20261122")
CI_KINDS = ["part_leader_followers", "part_controller_zk", "disk_full_dir", "zk_disk_full"]
ALL_KINDS = [
    *CI_KINDS,
    "part_broker_zk",
    "part_zk_node",
    "asym_leader_followers",
    "disk_full_broker",
]
_NET_KINDS = os.environ.get("PYBROKER_FAULT_NET_KINDS", "")
NET_KINDS = {"all": ALL_KINDS, "": CI_KINDS}.get(_NET_KINDS) or _NET_KINDS.split(",")

pytestmark = pytest.mark.timeout(max(SECONDS, NET_SECONDS) + 600)


def _seed() -> int | None:
    return None if SEED == "random" else int(SEED)


def test_random_faults_under_idempotent_load(tmp_path):
    report = run(tmp_path, SECONDS, _seed())
    print("\n" + report.summary())
    assert not report.problems, report.summary()
    assert set(report.faults) == set(ACTIONS), report.summary()


def test_network_partitions_and_full_disks(tmp_path):
    require(can_mount())
    report = run(tmp_path, NET_SECONDS, _seed(), network=True, kinds=NET_KINDS)
    print("\n" + report.summary())
    assert not report.problems, report.summary()
    assert set(report.faults) == set(NET_KINDS), report.summary()


def test_weights_raise_the_share_of_partitions_and_full_disks():
    """--network-weight / --disk-weight: the long campaign's mix (every kind still drawn,
    each once first)."""

    def shares(**weights) -> tuple[float, float, Counter]:
        draws = schedule(random.Random(1), campaign_actions(True, **weights))
        kinds = Counter(next(draws) for _ in range(4000))
        net = sum(n for k, n in kinds.items() if k in NETWORK_ACTIONS) / 4000
        disk = sum(n for k, n in kinds.items() if k in DISK_ACTIONS) / 4000
        return net, disk, kinds

    net, disk, kinds = shares()
    assert set(kinds) == set(ACTIONS) | set(NETWORK_ACTIONS) | set(DISK_ACTIONS)
    net2, disk2, kinds2 = shares(network_weight=1.2, disk_weight=2.0)
    assert set(kinds2) == set(kinds)
    process, process2 = 1 - net - disk, 1 - net2 - disk2
    assert disk2 > 1.5 * disk and net2 / process2 > net / process
    assert campaign_actions(False, network_weight=9, disk_weight=9) == ACTIONS
