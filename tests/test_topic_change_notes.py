"""A change of one partition's state is noted on the leader's change feed for that partition
alone, and the fetch sessions' stamps of the topic's other partitions stay as they were: the
work a follower session does after one ISR change must not depend on how many partitions the
topic has.  (Before restart12 every event of a topic noted all of its partitions and replaced
the TopicInfo object every stamp held, so each ISR write of W22's restart made every follower
session read the whole topic again: the restart's other brokers' CPU grew faster than the
replicas, docs/scale.md.)"""

from __future__ import annotations

import dataclasses
import uuid
from types import SimpleNamespace

import pytest

from pybroker.clock import ManualClock
from pybroker.coord.metadata.model import PartitionState, TopicInfo
from pybroker.replication.manager import ReplicaManager
from tests.replica_manager_fixture import replica_manager

ME = 1


def _leading(tmp_path, n: int) -> ReplicaManager:
    """This broker leads the n partitions of topic t (replicas 1, 2, 3, all in the ISR)."""
    clock = ManualClock()
    states = {p: PartitionState(ME, 0, [1, 2, 3], [1, 2, 3], 1, 0) for p in range(n)}
    info = TopicInfo("t", uuid.uuid4(), states, {})
    cluster = SimpleNamespace(
        topics={"t": info}, brokers={1: None, 2: None, 3: None}, lease_ok=True, session_ok=True
    )
    manager, _ = replica_manager(tmp_path, ME, cluster, clock)
    manager.sync_roles("t")
    return manager


def _change(manager: ReplicaManager, changes: dict[int, PartitionState]) -> None:
    """What the metadata cache does with read-back states (put_partition_states): a new
    TopicInfo sharing the unchanged partitions' states; then the topic's event."""
    info = manager.cluster.topics["t"]
    manager.cluster.topics["t"] = dataclasses.replace(
        info, partitions={**info.partitions, **changes}
    )
    manager.sync_roles("t")


@pytest.mark.parametrize("n", [10, 400])
def test_one_isr_change_notes_one_partition_and_leaves_the_others_stamps(tmp_path, n):
    manager = _leading(tmp_path, n)
    stamps = {p: manager.follower_fetch_stamp("t", p, 2) for p in range(n)}
    consumer = {p: manager.fetch_stamp("t", p, False) for p in range(n)}
    assert all(s is not None for s in stamps.values())
    position = manager.changes.seq
    _change(manager, {0: PartitionState(ME, 0, [1, 2, 3], [1, 2], 1, 1)})  # 3 left the ISR
    assert manager.changes.since(position) == [("t", 0)]  # (not the topic's n)
    assert manager.replicas[("t", 0)].isr == [1, 2]
    moved = [p for p in range(n) if manager.follower_fetch_stamp("t", p, 2) != stamps[p]]
    assert moved == [0]
    moved = [p for p in range(n) if manager.fetch_stamp("t", p, False) != consumer[p]]
    assert moved == [0]


def test_a_config_change_or_a_new_leader_epoch_is_still_noted(tmp_path):
    manager = _leading(tmp_path, 5)
    stamps = {p: manager.follower_fetch_stamp("t", p, 2) for p in range(5)}
    position = manager.changes.seq
    info = manager.cluster.topics["t"]
    manager.cluster.topics["t"] = dataclasses.replace(info, configs={"retention.ms": "1000"})
    manager.sync_roles("t")
    assert set(manager.changes.since(position)) == {("t", p) for p in range(5)}
    assert all(manager.follower_fetch_stamp("t", p, 2) != stamps[p] for p in range(5))
    position = manager.changes.seq
    _change(manager, {3: PartitionState(ME, 1, [1, 2, 3], [1, 2, 3], 1, 1)})
    assert manager.changes.since(position) == [("t", 3)]
    assert manager.replicas[("t", 3)].leader_epoch == 1


def test_a_topic_change_seen_first_by_a_request_is_noted(tmp_path):
    """leader_replica takes up a topic's new metadata before its event is handled: the
    partitions whose view changed are noted then, since the event will find nothing new."""
    manager = _leading(tmp_path, 3)
    position = manager.changes.seq
    info = manager.cluster.topics["t"]
    new_state = dataclasses.replace(info.partitions[1], isr=[1, 2], zk_version=1)
    manager.cluster.topics["t"] = dataclasses.replace(
        info, partitions={**info.partitions, 1: new_state}
    )
    manager.leader_replica("t", 0)
    manager.leader_replica("t", 1)
    assert manager.changes.since(position) == [("t", 1)]
