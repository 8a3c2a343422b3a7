"""Partition reassignment (coord/controller/reassignment.py): the pure ReplicaAssignment rules,
and the controller's state machine with several Cluster objects in one process playing brokers 1-4 on
both store backends (test_controller.py's Env).  Followers catching up are played by the
leader's ISR writes (Cluster.update_isr), as the replica manager makes them."""

from __future__ import annotations

import asyncio
import json

import pytest

from pybroker.coord.controller.reassignment import (
    ReplicaAssignment,
    build,
    completion_leader,
    is_complete,
    validate_replicas,
)
from pybroker.coord.metadata import paths
from pybroker.errors import ErrorCode, KafkaError
from tests.test_controller import Env, env_kind, make_env, run, wait_until  # noqa: F401

__all__ = ["make_env", "env_kind"]  # fixtures

NONE = (ErrorCode.NONE, None)

# --------------------------------------------------------------------------- pure rules


def test_reassign_to_and_cancel_pure():
    a = ReplicaAssignment((1, 2))
    moved = a.reassign_to([3, 4])
    assert moved == ReplicaAssignment((3, 4, 1, 2), (3, 4), (1, 2))
    assert moved.origin == [1, 2] and moved.target == [3, 4] and moved.being_reassigned
    # a new reassignment replacing one in progress keeps the original replicas as its origin
    again = moved.reassign_to([2, 3])
    assert again == ReplicaAssignment((2, 3, 1), (3,), (1,))
    # growing and shrinking the replication factor
    assert a.reassign_to([1, 2, 3]) == ReplicaAssignment((1, 2, 3), (3,), ())
    assert ReplicaAssignment((1, 2, 3)).reassign_to([2]) == ReplicaAssignment((2, 1, 3), (), (1, 3))
    # cancellation goes back to the original replicas; nothing to cancel otherwise
    assert build(moved, None) == ReplicaAssignment((1, 2))
    assert build(a, None) is None
    assert build(a, [2, 1]) == ReplicaAssignment((2, 1))


def test_validation_and_completion_pure():
    a = ReplicaAssignment((1, 2))
    live = {1, 2, 3}
    assert validate_replicas(a, [2, 3], live) is None
    assert validate_replicas(a, [], live)[0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    dup = validate_replicas(a, [3, 3], live)
    assert dup == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "Duplicate replica ids in partition reassignment replica list: List(3, 3)",
    )
    assert validate_replicas(a, [1, -1], live)[0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    dead = validate_replicas(a, [1, 9], live)
    assert dead[0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT and "not alive" in dead[1]
    # existing replicas need not be live (only new ones)
    assert validate_replicas(a, [1, 3], {3}) is None

    moved = a.reassign_to([3, 1])
    assert not is_complete(moved, [1, 2])
    assert is_complete(moved, [1, 2, 3])
    assert completion_leader(moved, 1, [1, 2, 3], live) == 1  # a live target replica keeps it
    assert completion_leader(moved, 2, [1, 2, 3], live) == 3  # moved off a removed replica
    assert completion_leader(moved, 2, [1, 2, 3], {1, 2}) == 1  # the first live in-ISR target
    assert completion_leader(moved, 2, [2, 3], {2}) == -1


# --------------------------------------------------------------------------- the state machine


async def four_brokers(env: Env) -> None:
    await env.open()
    for bid in (1, 2, 3, 4):
        await env.start_broker(bid)
    for c in env.clusters.values():
        await wait_until(lambda c=c: set(c.brokers) == {1, 2, 3, 4}, what="brokers seen")
    assert env.clusters[1].is_controller


async def topic_znode(env: Env, name: str) -> dict:
    data, _ = await env.admin.get(paths.topic(name))
    return json.loads(data)


async def catch_up(env: Env, name: str, p: int, isr: list[int]) -> None:
    """The leader adds caught-up followers to the ISR (its own write, at its epoch; tried again
    when the controller bumped the epoch meanwhile, as a leader's next fetch would)."""
    for _ in range(100):
        st, _ = await env.read_state(name, p)
        leader = env.clusters[st["leader"]]
        await wait_until(
            lambda leader=leader: (
                name in leader.topics
                and set(isr) <= set(leader.topics[name].partitions[p].replicas)
            )
        )
        if await leader.update_isr(
            name, p, isr, leader=st["leader"], leader_epoch=st["leader_epoch"]
        ):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name}-{p}: the leader could not write the ISR {isr}")


def test_move_to_new_brokers_and_complete(make_env):
    async def main():
        env = make_env()
        try:
            await four_brokers(env)
            c1 = env.clusters[1]
            await c1.create_topic("t", 2, 2, assignments={0: [1, 2], 1: [2, 1]})
            assert await c1.alter_partition_reassignments({("t", 0): [3, 4]}) == {("t", 0): NONE}
            z = await topic_znode(env, "t")
            assert z["version"] == 3
            assert z["partitions"] == {"0": [3, 4, 1, 2], "1": [2, 1]}
            assert z["adding_replicas"] == {"0": [3, 4]}
            assert z["removing_replicas"] == {"0": [1, 2]}
            st, _ = await env.read_state("t", 0)
            assert (st["leader"], st["leader_epoch"], st["isr"]) == (1, 1, [1, 2])
            want = {("t", 0): ReplicaAssignment((3, 4, 1, 2), (3, 4), (1, 2))}
            await wait_until(lambda: c1.list_partition_reassignments(None) == want)
            assert c1.list_partition_reassignments([("t", 1), ("nope", 0)]) == {}
            # every broker sees the full replica set: the new replicas start fetching
            await env.wait_cached("t", 0, lambda s: s.replicas == [3, 4, 1, 2])
            assert env.clusters[3].topics["t"].partitions[0].adding_replicas == (3, 4)

            await catch_up(env, "t", 0, [1, 2, 3])  # not all targets yet: in progress
            await env.wait_cached("t", 0, lambda s: s.isr == [1, 2, 3])
            assert ("t", 0) in c1.list_partition_reassignments(None)
            await catch_up(env, "t", 0, [1, 2, 3, 4])
            # complete: the leader moved to the first live in-ISR target, removed replicas gone
            await env.wait_cached("t", 0, lambda s: s.replicas == [3, 4] and s.leader == 3)
            st, _ = await env.read_state("t", 0)
            assert (st["leader"], st["leader_epoch"], st["isr"]) == (3, 2, [3, 4])
            z = await topic_znode(env, "t")
            assert z["partitions"]["0"] == [3, 4]
            assert z["adding_replicas"] == {} and z["removing_replicas"] == {}
            assert c1.list_partition_reassignments(None) == {}
            assert env.clusters[2].topics["t"].partitions[0].adding_replicas == ()
            # the other partition was not touched
            assert z["partitions"]["1"] == [2, 1]
        finally:
            await env.close()

    run(main())


def test_replication_factor_change_keeps_leader(make_env):
    async def main():
        env = make_env()
        try:
            await four_brokers(env)
            c1 = env.clusters[1]
            await c1.create_topic("t", 1, 2, assignments={0: [2, 1]})
            assert await c1.alter_partition_reassignments({("t", 0): [2, 1, 3]}) == {("t", 0): NONE}
            await catch_up(env, "t", 0, [2, 1, 3])
            await env.wait_cached(
                "t", 0, lambda s: s.replicas == [2, 1, 3] and not s.adding_replicas
            )
            st, _ = await env.read_state("t", 0)
            assert (st["leader"], st["isr"]) == (2, [2, 1, 3])
            # and down to one replica: the target is in the ISR already, so done at once
            assert await c1.alter_partition_reassignments({("t", 0): [3]}) == {("t", 0): NONE}
            await env.wait_cached("t", 0, lambda s: s.replicas == [3] and s.leader == 3)
            st, _ = await env.read_state("t", 0)
            assert st["isr"] == [3]
            assert c1.list_partition_reassignments(None) == {}
        finally:
            await env.close()

    run(main())


def test_cancel_and_errors(make_env):
    async def main():
        env = make_env()
        try:
            await four_brokers(env)
            c1 = env.clusters[1]
            await c1.create_topic("t", 1, 2, assignments={0: [1, 2]})
            res = await c1.alter_partition_reassignments(
                {
                    ("t", 0): [1, 3],
                    ("t", 7): [1, 2],
                    ("nope", 0): [1, 2],
                    ("t", 9): None,
                }
            )
            assert res[("t", 0)] == NONE
            assert res[("t", 7)] == (
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                "The partition does not exist.",
            )
            assert res[("nope", 0)][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert res[("t", 9)] == (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)
            bad = await c1.alter_partition_reassignments(
                {("t", 0): [1, 1]}
            ) | await c1.alter_partition_reassignments({("t", 0): [1, 8]})
            assert bad[("t", 0)][0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
            assert ("t", 0) in c1.list_partition_reassignments(None)  # left in progress

            # cancel: back to the original replicas, the adding replica dropped
            assert await c1.alter_partition_reassignments({("t", 0): None}) == {("t", 0): NONE}
            await env.wait_cached("t", 0, lambda s: s.replicas == [1, 2] and not s.being_reassigned)
            z = await topic_znode(env, "t")
            assert z["partitions"]["0"] == [1, 2] and z["adding_replicas"] == {}
            assert await c1.alter_partition_reassignments({("t", 0): None}) == {
                ("t", 0): (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)
            }
            # a partition being reassigned blocks CreatePartitions, as in Kafka
            assert await c1.alter_partition_reassignments({("t", 0): [2, 4]}) == {("t", 0): NONE}
            with pytest.raises(KafkaError) as ei:
                await c1.create_partitions("t", 2)
            assert ei.value.code == ErrorCode.REASSIGNMENT_IN_PROGRESS
            # only the controller serves it
            with pytest.raises(KafkaError) as ei:
                await env.clusters[2].alter_partition_reassignments({("t", 0): None})
            assert ei.value.code == ErrorCode.NOT_CONTROLLER
            with pytest.raises(KafkaError) as ei:
                env.clusters[2].list_partition_reassignments(None)
            assert ei.value.code == ErrorCode.NOT_CONTROLLER
        finally:
            await env.close()

    run(main())


def test_admin_znode_and_controller_failover(make_env):
    async def main():
        env = make_env()
        try:
            await four_brokers(env)
            c1 = env.clusters[1]
            await c1.create_topic("t", 2, 2, assignments={0: [2, 3], 1: [3, 2]})
            # Kafka's ZooKeeper path: the controller reads it on creation
            await env.admin.create(
                paths.REASSIGN_PARTITIONS,
                json.dumps(
                    {
                        "version": 1,
                        "partitions": [
                            {"topic": "t", "partition": 0, "replicas": [4, 3]},
                            {"topic": "t", "partition": 5, "replicas": [4, 3]},
                        ],
                    }
                ).encode(),
            )
            await env.wait_cached("t", 0, lambda s: s.adding_replicas == (4,))
            # the unknown partition left the znode; the started one stays until done
            await wait_until(lambda: ("t", 0) in c1.list_partition_reassignments(None))
            data, _ = await env.admin.get(paths.REASSIGN_PARTITIONS)
            assert paths.decode_reassignment(data) == {("t", 0): [4, 3]}

            # the controller goes; its successor resumes from the topic znode
            await env.crash(1)
            await wait_until(lambda: env.controller() is not None, what="a new controller")
            new = env.controller()
            await wait_until(lambda: ("t", 0) in new.list_partition_reassignments(None))
            assert new.list_partition_reassignments(None)[("t", 0)] == ReplicaAssignment(
                (4, 3, 2), (4,), (2,)
            )
            await catch_up(env, "t", 0, [2, 3, 4])
            await env.wait_cached("t", 0, lambda s: s.replicas == [4, 3] and s.leader == 4)
            await wait_until(lambda: new.list_partition_reassignments(None) == {})

            async def gone() -> bool:
                return await env.admin.exists(paths.REASSIGN_PARTITIONS) is None

            for _ in range(500):
                if await gone():
                    break
                await asyncio.sleep(0.01)
            assert await gone(), "the znode is deleted once its reassignments are done"
        finally:
            await env.close()

    run(main())
