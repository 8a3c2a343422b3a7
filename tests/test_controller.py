"""The controller's partition-leadership duties and the leader's ISR write path
(coord/controller/, coord/metadata/isr.py), with several Cluster objects in one process
playing brokers 1, 2, 3.

Backends: ``zk`` gives every broker its own ZooKeeper session (a crash closes it, so its
ephemerals vanish at once, as after a session timeout); ``local`` shares one LocalStore
between the brokers (one session: a crash is emulated by a clean Cluster.stop(), which deletes
the broker's registration and, for the controller, /controller)."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid

import pytest
from async_wait import wait_until
from zk_expire import expire_session

from pybroker.coord.controller.context import ControllerFencedError
from pybroker.coord.controller.controller import Controller
from pybroker.coord.controller.election import (
    StoredState,
    decide_for_live_set,
    decide_preferred,
    decide_unclean,
    imbalanced_partitions,
)
from pybroker.coord.metadata import isr as isr_mod
from pybroker.coord.metadata import paths
from pybroker.coord.metadata.cluster import Cluster
from pybroker.coord.metadata.local import LocalStore
from pybroker.coord.metadata.model import PartitionState
from pybroker.coord.metadata.store import CONNECTED, LOST, BadVersionError, MetadataStore, SetData
from pybroker.coord.metadata.zk import ZooKeeperStore
from pybroker.errors import ErrorCode, KafkaError
from pybroker.testing.zookeeper import require_zookeeper


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 90), debug=True)


def endpoints(port: int) -> list[tuple[str, str, int]]:
    return [("PLAINTEXT", "127.0.0.1", port)]


# --------------------------------------------------------------------------- environments


class Env:
    """Brokers as Cluster objects on one backend."""

    def __init__(self, kind: str, tmp_path, zk_connect: str | None) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.zk_connect = zk_connect
        self.shared: LocalStore | None = None
        self.clusters: dict[int, Cluster] = {}
        self.stores: dict[int, MetadataStore] = {}
        self.admin: MetadataStore | None = None  # for direct reads

    async def open(self) -> None:
        if self.kind == "local":
            self.shared = LocalStore(self.tmp_path / "meta")
            await self.shared.start()
            self.admin = self.shared
        else:
            self.admin = await self._zk_store()

    async def _zk_store(self) -> ZooKeeperStore:
        store = ZooKeeperStore(self.zk_connect, 6000, connect_timeout_s=10)
        await store.start()
        return store

    async def start_broker(self, bid: int, **kw) -> Cluster:
        store = self.shared if self.kind == "local" else await self._zk_store()
        c = Cluster(store, bid, endpoints(9090 + bid), controller=Controller, **kw)
        await c.start()
        self.clusters[bid] = c
        self.stores[bid] = store
        return c

    async def crash(self, bid: int) -> None:
        """The broker goes away: its registration (and /controller if it held it) vanish."""
        c = self.clusters.pop(bid)
        store = self.stores.pop(bid)
        if self.kind == "local":
            await c.stop()
        else:
            await store.close()  # session closed: ephemerals deleted by the server at once
            await c.stop()  # cancel its tasks (its store calls now fail, harmlessly)

    async def close(self) -> None:
        for bid in list(self.clusters):
            c, store = self.clusters.pop(bid), self.stores.pop(bid)
            await c.stop()
            if store is not self.shared:
                await store.close()
        if self.admin is not None:
            await self.admin.close()

    async def read_state(self, topic: str, p: int) -> tuple[dict, int]:
        data, stat = await self.admin.get(paths.partition_state(topic, p))
        return json.loads(data), stat.version

    async def controller_epoch(self) -> int:
        data, _ = await self.admin.get(paths.CONTROLLER_EPOCH)
        return int(data)

    def controller(self) -> Cluster | None:
        for c in self.clusters.values():
            if c.controller is not None:
                return c
        return None

    async def wait_cached(self, topic: str, p: int, pred, what: str = "") -> None:
        """Every live broker's cache shows the state ``pred`` accepts."""

        def ok() -> bool:
            for c in self.clusters.values():
                info = c.topics.get(topic)
                if info is None or p not in info.partitions or not pred(info.partitions[p]):
                    return False
            return True

        await wait_until(ok, what=what or f"{topic}-{p}")


@pytest.fixture(params=["local", "zk"])
def env_kind(request) -> str:
    if request.param == "zk":
        require_zookeeper()
    return request.param


@pytest.fixture
def make_env(env_kind, tmp_path, request):
    def make() -> Env:
        connect = None
        if env_kind == "zk":
            server = request.getfixturevalue("zk_server")
            connect = f"{server.connect}/t-{uuid.uuid4().hex[:12]}"
        return Env(env_kind, tmp_path, connect)

    return make


async def three_brokers(env: Env, **kw) -> None:
    await env.open()
    for bid in (1, 2, 3):
        await env.start_broker(bid, **kw)
    for c in env.clusters.values():
        await wait_until(lambda c=c: set(c.brokers) == {1, 2, 3}, what="brokers seen")
    assert env.clusters[1].is_controller


ASSIGNMENT = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}


# --------------------------------------------------------------------------- pure decisions


async def _log_dir_lost(cluster, broker: int, partitions: list[list]) -> None:
    """The broker's notification that its replicas of ``partitions`` are offline (a failed
    log dir)."""
    lost = {"version": 1, "broker": broker, "partitions": partitions}
    await cluster.store.create(
        paths.offline_replicas_prefix(broker),
        json.dumps(lost).encode(),
        ephemeral=True,
        sequence=True,
        makepath=True,
    )


def test_decisions_pure():
    st = StoredState(leader=2, leader_epoch=4, isr=[2, 3, 1], controller_epoch=1, zk_version=7)
    # leader dead: first replica in replica order that is live and in the ISR
    d = decide_for_live_set(st, [2, 1, 3], {1, 3}, False)
    assert (d.leader, d.leader_epoch, d.isr) == (1, 5, [3, 1])
    # leader alive, follower dead: ISR shrinks, epoch kept
    d = decide_for_live_set(st, [2, 1, 3], {1, 2}, False)
    assert (d.leader, d.leader_epoch, d.isr) == (2, 4, [2, 1])
    assert decide_for_live_set(st, [2, 1, 3], {1, 2, 3}, False) is None
    # nobody in the ISR live: offline keeps the ISR, unless unclean
    st = StoredState(2, 4, [2], 1, 7)
    d = decide_for_live_set(st, [2, 1, 3], {1, 3}, False)
    assert (d.leader, d.leader_epoch, d.isr) == (-1, 5, [2])
    d = decide_for_live_set(st, [2, 1, 3], {3, 1}, True)
    assert (d.leader, d.leader_epoch, d.isr) == (1, 5, [1])
    assert decide_for_live_set(StoredState(-1, 5, [2], 1, 8), [2, 1, 3], {1}, False) is None
    d = decide_for_live_set(StoredState(-1, 5, [2], 1, 8), [2, 1, 3], {1, 2}, False)
    assert (d.leader, d.leader_epoch, d.isr) == (2, 6, [2])
    # the leader is never removed from its own ISR
    d = decide_for_live_set(StoredState(1, 0, [3, 1], 1, 0), [1, 3], {1}, False)
    assert d.isr == [1]
    # preferred / unclean ElectLeaders
    st = StoredState(3, 2, [3, 1], 1, 3)
    assert decide_preferred(st, [1, 3], {1, 3}).leader == 1
    assert decide_preferred(st, [3, 1], {1, 3})[0] == ErrorCode.ELECTION_NOT_NEEDED
    assert decide_preferred(st, [2, 3], {1, 2, 3})[0] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    assert decide_unclean(st, [1, 3], {1, 3})[0] == ErrorCode.ELECTION_NOT_NEEDED
    assert decide_unclean(StoredState(-1, 2, [3], 1, 3), [1, 3], {1}).leader == 1
    assert (
        decide_unclean(StoredState(-1, 2, [3], 1, 3), [1, 3], {2})[0]
        == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    )


def test_controlled_shutdown_decisions_pure():
    """A live broker in controlled shutdown hands its leaderships to the first other live ISR
    member (epoch bumped, it leaves the ISR), leaves the ISRs it follows in (epoch kept), is
    never elected, and keeps a partition nobody else can lead."""
    shutting = {2}
    st = StoredState(leader=2, leader_epoch=4, isr=[2, 3, 1], controller_epoch=1, zk_version=7)
    d = decide_for_live_set(st, [2, 3, 1], {1, 2, 3}, False, shutting)
    assert (d.leader, d.leader_epoch, d.isr, d.reason) == (3, 5, [3, 1], "controlled shutdown")
    # a follower in controlled shutdown leaves the ISR, the leader and its epoch stay
    st = StoredState(leader=1, leader_epoch=4, isr=[1, 2, 3], controller_epoch=1, zk_version=7)
    d = decide_for_live_set(st, [1, 2, 3], {1, 2, 3}, False, shutting)
    assert (d.leader, d.leader_epoch, d.isr) == (1, 4, [1, 3])
    # the only ISR member: it keeps leading (nobody can take over)
    st = StoredState(leader=2, leader_epoch=4, isr=[2], controller_epoch=1, zk_version=7)
    assert decide_for_live_set(st, [2, 1, 3], {1, 2, 3}, False, shutting) is None
    # a dead leader: the broker in controlled shutdown is not elected, even unclean
    st = StoredState(leader=3, leader_epoch=4, isr=[3, 2], controller_epoch=1, zk_version=7)
    d = decide_for_live_set(st, [3, 2, 1], {1, 2}, False, shutting)
    assert (d.leader, d.isr) == (-1, [3, 2])
    d = decide_for_live_set(st, [3, 2, 1], {1, 2}, True, shutting)
    assert (d.leader, d.isr) == (1, [1])


def test_leader_imbalance_selection_pure():
    """Kafka's checkAndTriggerAutoLeaderRebalance: per preferred broker, the share of its
    partitions led elsewhere against leader.imbalance.per.broker.percentage."""
    assignments = [
        (("t", 0), [1, 2, 3], 2),
        (("t", 1), [1, 2, 3], 1),
        (("t", 2), [2, 3, 1], 2),
        (("t", 3), [3, 1, 2], 1),
        (("u", 0), [3, 1, 2], 3),
        (("u", 1), [3, 1, 2], 3),
        (("u", 2), [3, 1, 2], 3),
    ]
    # broker 1: 1 of 2 elsewhere (50 %); broker 2: 0 of 1; broker 3: 1 of 4 (25 %)
    assert imbalanced_partitions(assignments, 10, {1, 2, 3}) == {
        1: (0.5, [("t", 0)]),
        3: (0.25, [("t", 3)]),
    }
    assert imbalanced_partitions(assignments, 25, {1, 2, 3}) == {1: (0.5, [("t", 0)])}
    assert imbalanced_partitions(assignments, 50, {1, 2, 3}) == {}
    # a broker not eligible (dead, shutting down) gets nothing back
    assert imbalanced_partitions(assignments, 10, {2, 3}) == {3: (0.25, [("t", 3)])}


# --------------------------------------------------------------------------- broker loss


def test_leader_loss_elects_from_isr(make_env, caplog):
    caplog.set_level(logging.INFO, logger="pybroker.coord.controller.controller")

    async def main():
        env = make_env()
        try:
            await three_brokers(env)
            c1 = env.clusters[1]
            await c1.create_topic("t", 3, 3, assignments=ASSIGNMENT)
            await env.crash(2)  # leads t-1, follows t-0 and t-2
            await env.wait_cached("t", 1, lambda s: s.leader == 3, "new leader of t-1")
            st, version = await env.read_state("t", 1)
            assert st["leader"] == 3 and st["leader_epoch"] == 1
            assert st["isr"] == [3, 1] and st["controller_epoch"] == 1
            for c in env.clusters.values():
                s = c.topics["t"].partitions[1]
                assert (s.leader, s.leader_epoch, s.isr) == (3, 1, [3, 1])
                assert s.zk_version == version
            # followed partitions: the dead follower leaves the ISR, leader_epoch unchanged
            for p, isr in ((0, [1, 3]), (2, [3, 1])):
                await env.wait_cached("t", p, lambda s, isr=isr: s.isr == isr, f"t-{p} isr")
                st, _ = await env.read_state("t", p)
                assert st["isr"] == isr and st["leader_epoch"] == 0
                assert st["leader"] == ASSIGNMENT[p][0]
            assert "t-1 clean election: leader 2 -> 3, leader_epoch 1" in caplog.text

            # broker 2 returns: every partition has a live leader, nothing is elected
            passes = c1.controller.passes
            await env.start_broker(2)
            await wait_until(lambda: set(c1.brokers) == {1, 2, 3})
            await wait_until(lambda: c1.controller.passes > passes, what="pass after return")
            st, _ = await env.read_state("t", 1)
            assert (st["leader"], st["leader_epoch"], st["isr"]) == (3, 1, [3, 1])
        finally:
            await env.close()

    run(main())


def test_offline_partition_and_return(make_env):
    async def main():
        env = make_env()
        try:
            await three_brokers(env)
            c1, c2 = env.clusters[1], env.clusters[2]
            await c1.create_topic("o", 1, 3, assignments={0: [2, 3, 1]})
            await env.wait_cached("o", 0, lambda s: s.leader == 2)
            # the leader shrank the ISR to itself, then dies: nobody in sync is live
            assert await c2.update_isr("o", 0, [2], leader=2, leader_epoch=0) is not None
            await env.crash(2)
            await env.wait_cached("o", 0, lambda s: s.leader == -1, "o-0 offline")
            st, _ = await env.read_state("o", 0)
            assert (st["leader"], st["leader_epoch"], st["isr"]) == (-1, 1, [2])

            # another broker comes and goes: still offline (3 and 1 are out of sync)
            passes = c1.controller.passes
            await env.crash(3)
            await wait_until(lambda: c1.controller.passes > passes, what="pass after loss")
            st, _ = await env.read_state("o", 0)
            assert (st["leader"], st["leader_epoch"], st["isr"]) == (-1, 1, [2])

            # the last ISR member returns: it leads again, with the next epoch
            await env.start_broker(2)
            await env.wait_cached("o", 0, lambda s: s.leader == 2, "o-0 back online")
            st, _ = await env.read_state("o", 0)
            assert (st["leader"], st["leader_epoch"], st["isr"]) == (2, 2, [2])
        finally:
            await env.close()

    run(main())


def test_unclean_election_per_topic_config(make_env):
    async def main():
        env = make_env()
        try:
            await three_brokers(env)
            c1, c2 = env.clusters[1], env.clusters[2]
            await c1.create_topic("clean", 1, 3, assignments={0: [2, 3, 1]})
            await c1.create_topic(
                "dirty",
                1,
                3,
                {"unclean.leader.election.enable": "true"},
                assignments={0: [2, 3, 1]},
            )
            for t in ("clean", "dirty"):
                await env.wait_cached(t, 0, lambda s: s.leader == 2)
                assert await c2.update_isr(t, 0, [2], leader=2, leader_epoch=0) is not None
            await env.crash(2)
            await env.wait_cached("dirty", 0, lambda s: s.leader == 3, "unclean election")
            st, _ = await env.read_state("dirty", 0)
            assert (st["leader"], st["leader_epoch"], st["isr"]) == (3, 1, [3])
            await env.wait_cached("clean", 0, lambda s: s.leader == -1, "clean stays offline")
            st, _ = await env.read_state("clean", 0)
            assert (st["leader"], st["leader_epoch"], st["isr"]) == (-1, 1, [2])

            # ElectLeaders UNCLEAN forces it; PREFERRED cannot (2 is not live)
            res = await c1.elect_leaders([("clean", 0)], preferred=True)
            assert res[("clean", 0)][0] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
            res = await c1.elect_leaders([("clean", 0), ("dirty", 0), ("nope", 0)], preferred=False)
            assert res[("clean", 0)] == (ErrorCode.NONE, None)
            assert res[("dirty", 0)][0] == ErrorCode.ELECTION_NOT_NEEDED
            assert res[("nope", 0)][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            st, _ = await env.read_state("clean", 0)
            assert (st["leader"], st["leader_epoch"], st["isr"]) == (3, 2, [3])
        finally:
            await env.close()

    run(main())


def test_unclean_broker_default(make_env):
    async def main():
        env = make_env()
        try:
            await three_brokers(env, unclean_leader_election_enable=True)
            c1, c2 = env.clusters[1], env.clusters[2]
            await c1.create_topic("a", 1, 3, assignments={0: [2, 3, 1]})
            await c1.create_topic(
                "b",
                1,
                3,
                {"unclean.leader.election.enable": "false"},  # the topic override wins
                assignments={0: [2, 3, 1]},
            )
            for t in ("a", "b"):
                await env.wait_cached(t, 0, lambda s: s.leader == 2)
                assert await c2.update_isr(t, 0, [2], leader=2, leader_epoch=0) is not None
            await env.crash(2)
            await env.wait_cached("a", 0, lambda s: s.leader == 3)
            await env.wait_cached("b", 0, lambda s: s.leader == -1)
        finally:
            await env.close()

    run(main())


def test_preferred_election(make_env):
    async def main():
        env = make_env()
        try:
            await three_brokers(env)
            c1 = env.clusters[1]
            await c1.create_topic("t", 3, 3, assignments=ASSIGNMENT)
            await env.crash(2)
            await env.wait_cached("t", 1, lambda s: s.leader == 3)
            await env.start_broker(2)
            await wait_until(lambda: set(c1.brokers) == {1, 2, 3})
            res = await c1.elect_leaders([("t", 1)])
            assert res[("t", 1)][0] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE  # not in ISR
            # the leader lets 2 back into the ISR; now 2 can be the preferred leader again
            c3 = env.clusters[3]
            assert await c3.update_isr("t", 1, [3, 1, 2], leader=3, leader_epoch=1) is not None
            await env.wait_cached("t", 1, lambda s: s.isr == [3, 1, 2])
            res = await c1.elect_leaders([("t", 1), ("t", 0)])
            assert res == {
                ("t", 1): (ErrorCode.NONE, None),
                ("t", 0): (
                    ErrorCode.ELECTION_NOT_NEEDED,
                    "the preferred replica is already the leader",
                ),
            }
            await env.wait_cached("t", 1, lambda s: (s.leader, s.leader_epoch) == (2, 2))
            with pytest.raises(KafkaError) as ei:
                await env.clusters[2].elect_leaders([("t", 1)])
            assert ei.value.code == ErrorCode.NOT_CONTROLLER
        finally:
            await env.close()

    run(main())


def test_controlled_shutdown_and_preferred_rebalance(make_env):
    """A broker announcing its controlled shutdown loses its leaderships to other ISR members
    and leaves every ISR; while it shuts down the rebalance does not elect it; once back in
    the ISR, the leader imbalance check gives its preferred partition back."""

    async def main():
        env = make_env()
        try:
            await three_brokers(env)
            c1, c2, c3 = env.clusters[1], env.clusters[2], env.clusters[3]
            await c1.create_topic("t", 3, 3, assignments=ASSIGNMENT)
            await env.wait_cached("t", 1, lambda s: s.leader == 2 and len(s.isr) == 3)
            await c2.store.create(
                paths.controlled_shutdown(2), b"{}", ephemeral=True, makepath=True
            )
            await env.wait_cached("t", 1, lambda s: (s.leader, s.leader_epoch) == (3, 1))
            for p in (0, 1, 2):
                await env.wait_cached("t", p, lambda s: 2 not in s.isr)
            assert c1.controller.shutting_down == {2}
            assert await c1.controller.rebalance_preferred_leaders() == {}  # 2 not eligible
            # back: no longer shutting down, caught up and in the ISR again
            await c2.store.delete(paths.controlled_shutdown(2))
            await wait_until(lambda: not c1.controller.shutting_down, what="watch")
            isr = c3.topics["t"].partitions[1].isr
            assert await c3.update_isr("t", 1, [*isr, 2], leader=3, leader_epoch=1) is not None
            await env.wait_cached("t", 1, lambda s: 2 in s.isr)
            res = await c1.controller.rebalance_preferred_leaders()
            assert res == {("t", 1): (ErrorCode.NONE, None)}
            await env.wait_cached("t", 1, lambda s: (s.leader, s.leader_epoch) == (2, 2))
        finally:
            await env.close()

    run(main())


def test_offline_replicas_after_a_log_dir_failure(make_env):
    """Broker 2 announces replicas lost to a log dir failure (/pybroker/offline_replicas):
    the partition it led moves to another ISR member (epoch + 1) and it leaves the ISR of the
    lost partitions only; a partition whose replica it lost and nobody else can lead goes
    offline (leader -1), as Kafka's OfflinePartition."""

    async def main():
        env = make_env()
        try:
            await three_brokers(env)
            c1, c2 = env.clusters[1], env.clusters[2]
            await c1.create_topic("t", 3, 3, assignments=ASSIGNMENT)
            await c1.create_topic("solo", 1, 1, assignments={0: [2]})
            for p in (0, 1, 2):
                await env.wait_cached("t", p, lambda s: len(s.isr) == 3)
            await _log_dir_lost(c2, 2, [["t", 0], ["t", 1], ["solo", 0]])
            await env.wait_cached("t", 1, lambda s: (s.leader, s.leader_epoch) == (3, 1))
            await env.wait_cached("t", 1, lambda s: 2 not in s.isr)
            await env.wait_cached("t", 0, lambda s: s.leader == 1 and 2 not in s.isr)
            await env.wait_cached("solo", 0, lambda s: s.leader == -1)
            assert 2 in c1.topics["t"].partitions[2].isr  # its replica there is fine
            assert c1.topics["t"].partitions[0].leader_epoch == 0
        finally:
            await env.close()

    run(main())


def test_preferred_elections_skip_a_replica_on_a_failed_log_dir(make_env):
    """Kafka's isReplicaOnline: a replica lost to a log dir failure is not a preferred
    leader, neither for ElectLeaders nor for the leader imbalance check, even when it is
    still in the ISR (a single replica: the ISR cannot shrink to nothing).  The partition
    stays offline instead of flapping back to the replica that cannot write."""

    async def main():
        env = make_env()
        try:
            await three_brokers(env)
            c1, c2 = env.clusters[1], env.clusters[2]
            await c1.create_topic("solo", 1, 1, assignments={0: [2]})
            await env.wait_cached("solo", 0, lambda s: s.leader == 2)
            await _log_dir_lost(c2, 2, [["solo", 0]])
            await env.wait_cached("solo", 0, lambda s: s.leader == -1)
            epoch = c1.topics["solo"].partitions[0].leader_epoch
            assert c1.topics["solo"].partitions[0].isr == [2]
            res = await c1.elect_leaders([("solo", 0)])
            assert res[("solo", 0)][0] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
            assert await c1.controller.rebalance_preferred_leaders() == {}
            st = c1.topics["solo"].partitions[0]
            assert (st.leader, st.leader_epoch) == (-1, epoch)
        finally:
            await env.close()

    run(main())


def test_many_partitions_batched_in_fenced_multis(make_env, monkeypatch):
    """The controller's writes go in fenced multis of at most MAX_OPS_PER_MULTI operations
    (100 here, to see several), several in flight at once."""
    from pybroker.coord.controller import controller as controller_module

    monkeypatch.setattr(controller_module, "MAX_OPS_PER_MULTI", 100)

    async def main():
        env = make_env()
        try:
            await three_brokers(env)
            c1 = env.clusters[1]
            n = 250
            await c1.create_topic("big", n, 3, assignments={p: [2, 3, 1] for p in range(n)})
            await env.wait_cached("big", n - 1, lambda s: s.leader == 2)
            multis: list[list] = []
            store = c1.store
            real_multi = store.multi

            async def counting_multi(ops):
                if any(isinstance(op, SetData) and "/partitions/" in op.path for op in ops):
                    multis.append(list(ops))
                return await real_multi(ops)

            store.multi = counting_multi  # instance attribute: only this broker's writes
            try:
                await env.crash(2)
                for p in range(n):
                    await env.wait_cached("big", p, lambda s: s.leader == 3, f"big-{p}")
            finally:
                del store.multi
            # (each multi also pushes its states to broker 3: coord/controller/channel.py)
            assert sum(isinstance(op, SetData) for m in multis for op in m) == n
            assert all(len(m) <= 100 for m in multis) and len(multis) >= 3
            assert all(m[0].path == paths.CONTROLLER_EPOCH for m in multis)
            st, _ = await env.read_state("big", 123)
            assert (st["leader"], st["leader_epoch"], st["isr"]) == (3, 1, [3, 1])
        finally:
            await env.close()

    run(main())


def test_controller_retries_after_losing_compare_and_set(make_env):
    """A leader's ISR write lands between the controller's read and its multi: the multi fails
    on the state's version, the controller re-reads and decides again."""

    async def main():
        env = make_env()
        try:
            await three_brokers(env)
            c1, c3 = env.clusters[1], env.clusters[3]
            await c1.create_topic("r", 1, 3, assignments={0: [2, 3, 1]})
            await env.wait_cached("r", 0, lambda s: s.leader == 2)
            store = c1.store
            real_multi = store.multi
            failures: list[Exception] = []

            async def racing_multi(ops):
                if not failures and any("/partitions/" in op.path for op in ops):
                    # someone else (the old leader's last ISR write) gets in first
                    data, stat = await store.get(paths.partition_state("r", 0))
                    st = json.loads(data)
                    await store.set(
                        paths.partition_state("r", 0),
                        paths.encode_partition_state(2, 0, [2, 1], st["controller_epoch"]),
                        stat.version,
                    )
                    try:
                        return await real_multi(ops)
                    except BadVersionError as e:
                        failures.append(e)
                        raise
                return await real_multi(ops)

            store.multi = racing_multi
            try:
                await env.crash(2)
                await env.wait_cached("r", 0, lambda s: s.leader >= 0 and s.leader != 2)
            finally:
                del store.multi
            assert failures and failures[0].op_index == 1
            st, version = await env.read_state("r", 0)
            # decided on the re-read state: ISR [2, 1] -> leader 1 (3 left the ISR meanwhile)
            assert (st["leader"], st["leader_epoch"], st["isr"]) == (1, 1, [1])
            assert version == 2
            assert c3.topics["r"].partitions[0].leader == 1
        finally:
            await env.close()

    run(main())


def test_a_lost_compare_and_set_redoes_only_that_partition(make_env):
    """A broker leading many partitions goes: one partition's state is written by someone else
    between the controller's read and its multi.  That multi fails as a whole; only the
    partition that lost its compare-and-set is read and decided again, the rest are sent again
    at once (before: the whole multi was re-read and retried after a backoff, so each racing
    ISR write of a leader cost a round of every partition of the multi).  Leader changes are
    written first, in multis of their own (ISR-only changes race with the leaders' own ISR
    shrinks)."""

    async def main():
        env = make_env()
        try:
            await three_brokers(env)
            c1 = env.clusters[1]
            n = 40
            # even partitions led by 2 (elections), odd ones by 3 with follower 2 (ISR only)
            assignment = {p: [2, 3, 1] if p % 2 == 0 else [3, 2, 1] for p in range(n)}
            await c1.create_topic("c", n, 3, assignments=assignment)
            await env.wait_cached("c", n - 1, lambda s: s.leader == 3)
            await env.wait_cached("c", n - 2, lambda s: s.leader == 2)
            store, controller = c1.store, c1.controller
            real_multi, real_read_states = store.multi, controller._read_states
            real_multi_many = store.multi_many
            multis: list[list[str]] = []
            each: list[list[str]] = []  # the ISR-only writes: one multi per partition
            reads: list[list[tuple]] = []  # what the controller's passes read
            raced = paths.partition_state("c", 20)
            raced_isr = paths.partition_state("c", 21)

            async def racing_multi_many(batches):
                each.extend([op.path for op in ops if "/partitions/" in op.path] for ops in batches)
                if raced_isr in [p for b in each for p in b] and not getattr(store, "_raced", 0):
                    store._raced = 1  # the leader (3) drops follower 1 from c-21 meanwhile
                    data, stat = await store.get(raced_isr)
                    st = json.loads(data)
                    await store.set(
                        raced_isr,
                        paths.encode_partition_state(3, 0, [3, 2], st["controller_epoch"]),
                        stat.version,
                    )
                return await real_multi_many(batches)

            async def racing_multi(ops):
                state_ops = [op.path for op in ops if "/partitions/" in op.path]
                if len(state_ops) == 1 and int(state_ops[0].split("/")[-2]) % 2:
                    return await real_multi(ops)  # (an ISR-only one, via multi_many's default)
                if state_ops:
                    multis.append(state_ops)
                if len(multis) == 1 and state_ops:
                    data, stat = await store.get(raced)  # the old leader's last ISR write
                    st = json.loads(data)
                    await store.set(
                        raced,
                        paths.encode_partition_state(2, 0, [2, 1], st["controller_epoch"]),
                        stat.version,
                    )
                return await real_multi(ops)

            async def counting_read_states(tps):
                if tps:
                    reads.append(list(tps))
                return await real_read_states(tps)

            store.multi, controller._read_states = racing_multi, counting_read_states
            store.multi_many = racing_multi_many
            try:
                await env.crash(2)
                for p in range(0, n, 2):
                    await env.wait_cached("c", p, lambda s: s.leader in (1, 3), f"c-{p}")
                for p in range(1, n, 2):
                    await env.wait_cached("c", p, lambda s: 2 not in s.isr, f"c-{p} isr")
            finally:
                del store.multi, controller._read_states, store.multi_many
            elections = [paths.partition_state("c", p) for p in range(0, n, 2)]
            isr_only = [paths.partition_state("c", p) for p in range(1, n, 2)]
            # leader changes first, in their own multi; ISR-only changes each in its own,
            # pipelined (a lost compare-and-set fails that partition alone)
            assert multis[0] == elections
            assert [[q] for q in isr_only] == each[: len(isr_only)]
            # the failed multi is sent again at once without the partition that lost
            assert [q for q in elections if q != raced] in multis[1:]
            # the pass decides on its cached states; only the partitions that lost are read
            assert reads and sorted(tp for r in reads for tp in r) == [("c", 20), ("c", 21)]
            assert each[len(isr_only) :] == [[raced_isr]]  # redone alone
            st, _ = await env.read_state("c", 20)
            assert (st["leader"], st["isr"]) == (1, [1])  # decided on the re-read state
            st, _ = await env.read_state("c", 21)
            assert (st["leader"], st["isr"]) == (3, [3])  # decided on the re-read state
        finally:
            await env.close()

    run(main())


def test_metadata_shows_the_lost_leader_until_the_new_one(make_env):
    """Kafka ZooKeeper mode: the other brokers learn of a broker's loss and the new leaders of
    its partitions together (one UpdateMetadata from the controller), so a client asking them
    sees the old leader until it sees the new one.  Here every broker watches /brokers/ids:
    between the loss and the controller's writes reaching it, a broker answered leader -1
    (LEADER_NOT_AVAILABLE), longer the more partitions the lost broker led.  While the
    controller's writes are held back, Metadata at a surviving broker names the lost broker
    as leader (and lists it); once they land, the new leaders, and the lost broker is gone."""
    from types import SimpleNamespace

    from pybroker.handlers.context import RequestContext
    from pybroker.handlers.metadata import metadata

    async def main():
        env = make_env()
        try:
            await three_brokers(env)
            c1, c3 = env.clusters[1], env.clusters[3]
            n = 6
            await c1.create_topic("m", n, 3, assignments={p: [2, 3, 1] for p in range(n)})
            await env.wait_cached("m", n - 1, lambda s: s.leader == 2)
            config = SimpleNamespace(auto_create_topics_enable=False)
            services = SimpleNamespace(cluster=c3, config=config, authorizer=None)
            ctx = RequestContext(services, 3, 7, 1, "c")

            store = c1.store
            real_multi = store.multi
            release = asyncio.Event()

            async def held_multi(ops):
                if any("/partitions/" in op.path for op in ops):
                    await release.wait()
                return await real_multi(ops)

            store.multi = held_multi
            try:
                await env.crash(2)
                await wait_until(lambda: 2 not in c3.brokers, what="broker 2 gone at 3")
                resp = await metadata(ctx, {"topics": [{"name": "m"}]})
                leaders = _leaders(resp)
                assert leaders == {p: 2 for p in range(n)}
                assert 2 in {b["node_id"] for b in resp["brokers"]}
                release.set()
                for p in range(n):
                    await env.wait_cached("m", p, lambda s: s.leader == 3, f"m-{p}")
            finally:
                release.set()
                del store.multi
            resp = await metadata(ctx, {"topics": [{"name": "m"}]})
            assert _leaders(resp) == {p: 3 for p in range(n)}
            assert {b["node_id"] for b in resp["brokers"]} == {1, 3}
        finally:
            await env.close()

    run(main())


def _leaders(resp: dict) -> dict[int, int]:
    """{partition: leader id} of the one topic in a Metadata v7 response (its topic entries
    come encoded: the response is encoded and decoded whole)."""
    from pybroker.wire.codec import decode_message, encode_message
    from pybroker.wire.schema import SCHEMAS

    schema = SCHEMAS.by_key[3].response
    decoded = decode_message(schema, 7, encode_message(schema, 7, resp).getvalue())
    [topic] = decoded["topics"]
    return {p["partition_index"]: p["leader_id"] for p in topic["partitions"]}


# --------------------------------------------------------------------------- controller failover


def test_controller_failover_and_fencing(make_env):
    async def main():
        env = make_env()
        try:
            await three_brokers(env)
            c1 = env.clusters[1]
            await c1.create_topic("t", 3, 3, assignments=ASSIGNMENT)
            await env.wait_cached("t", 2, lambda s: s.leader == 3)
            assert await env.controller_epoch() == 1
            _, epoch_stat = await env.admin.get(paths.CONTROLLER_EPOCH)
            old_epoch_version = epoch_stat.version

            await env.crash(1)  # the controller, and leader of t-0
            await wait_until(lambda: env.controller() is not None, what="a new controller")
            new = env.controller()
            assert new.broker_id in (2, 3) and new.controller_epoch == 2
            assert await env.controller_epoch() == 2
            for c in env.clusters.values():
                await wait_until(lambda c=c: c.controller_id == new.broker_id)
            await env.wait_cached("t", 0, lambda s: s.leader == 2, "t-0 led by 2")
            st, _ = await env.read_state("t", 0)
            assert (st["leader"], st["leader_epoch"], st["isr"]) == (2, 1, [2, 3])
            assert st["controller_epoch"] == 2
            for p in (1, 2):
                await env.wait_cached("t", p, lambda s: 1 not in s.isr, f"t-{p} without 1")

            # a stale controller (epoch 1, it missed its own demise) tries to write: its multi
            # fails on the /controller_epoch check, atomically.  t-1 gets a state from epoch 1
            # in which the preferred replica (2) is live and in the ISR but does not lead.
            await env.admin.set(
                paths.partition_state("t", 1), paths.encode_partition_state(3, 5, [3, 2], 1)
            )
            await env.wait_cached("t", 1, lambda s: s.leader_epoch == 5)
            before = await env.read_state("t", 1)
            other = env.clusters[5 - new.broker_id]  # the broker that is not controller
            stale = Controller(other, 1, old_epoch_version)
            res = await stale.elect_leaders([("t", 1)])
            assert res[("t", 1)][0] == ErrorCode.NOT_CONTROLLER
            assert not stale.active
            assert await env.read_state("t", 1) == before
            with pytest.raises(KafkaError) as ei:
                await stale.elect_leaders([("t", 1)])
            assert ei.value.code == ErrorCode.NOT_CONTROLLER

            # a state stamped by a newer controller fences a stale one before it writes
            stale = Controller(other, 1, old_epoch_version)
            before = await env.read_state("t", 0)
            assert before[0]["controller_epoch"] == 2
            res = await stale.elect_leaders([("t", 0)], preferred=False)
            assert res[("t", 0)][0] == ErrorCode.NOT_CONTROLLER and not stale.active
            with pytest.raises(ControllerFencedError):
                await stale.reconcile(["t"])
            assert await env.read_state("t", 0) == before
            assert new.controller is not None and new.controller.active  # unaffected
        finally:
            await env.close()

    run(main())


def test_new_controller_continues_elections(make_env):
    async def main():
        env = make_env()
        try:
            await three_brokers(env)
            c1 = env.clusters[1]
            await c1.create_topic("t", 3, 3, assignments=ASSIGNMENT)
            await env.wait_cached("t", 2, lambda s: s.leader == 3)
            await env.crash(1)
            await wait_until(lambda: env.controller() is not None)
            new = env.controller()
            survivor = 5 - new.broker_id
            await env.wait_cached("t", 0, lambda s: s.leader == 2)
            await env.crash(survivor)  # the new controller handles this loss too
            for p in range(3):
                await env.wait_cached(
                    "t", p, lambda s: s.leader == new.broker_id and s.isr == [new.broker_id]
                )
            for p in range(3):
                st, _ = await env.read_state("t", p)
                assert st["controller_epoch"] == 2
        finally:
            await env.close()

    run(main())


def test_zk_controller_session_expiry(zk_server, tmp_path):
    """The controller's ZooKeeper session expires: a controller with the next epoch (another
    broker, or the same one re-elected in its new session) takes over and keeps electing;
    session_ok is False from LOST until the broker has re-registered."""
    require_zookeeper()

    async def main():
        env = Env("zk", tmp_path, f"{zk_server.connect}/t-{uuid.uuid4().hex[:12]}")
        try:
            await three_brokers(env)
            c1 = env.clusters[1]
            s1 = env.stores[1]
            await c1.create_topic("t", 3, 3, assignments=ASSIGNMENT)
            await env.wait_cached("t", 2, lambda s: s.leader == 3)
            assert c1.session_ok
            seen: list[tuple[str, bool, bool]] = []
            s1.add_session_listener(lambda st: seen.append((st, c1.session_ok, c1.is_controller)))
            old_controller = c1.controller
            sid, passwd = s1._client.client_id
            old_session = s1.session_id
            await asyncio.get_running_loop().run_in_executor(
                None, expire_session, zk_server.connect, (sid, passwd)
            )
            await wait_until(lambda: s1.session_id not in (0, old_session), timeout=20)
            assert (LOST, False, False) in seen
            assert not old_controller.active
            await wait_until(lambda: c1.session_ok, timeout=20, what="re-registered")
            assert any(st == CONNECTED for st, *_ in seen)
            await wait_until(lambda: env.controller() is not None, timeout=20)
            assert env.controller().controller_epoch == 2
            assert await env.controller_epoch() == 2

            # elections continue under the new controller (which may have seen broker 1 gone
            # for a while, and moved t-0 and the ISRs: so only the outcome's shape is fixed)
            controller = env.controller()
            victim = next(b for b in (3, 2) if b != controller.broker_id)
            await env.crash(victim)
            for p in range(3):
                await env.wait_cached(
                    "t", p, lambda s: s.leader not in (victim, -1) and victim not in s.isr
                )
            assert env.controller() is controller and controller.controller_epoch == 2
            for p in range(3):
                st, _ = await env.read_state("t", p)
                assert st["controller_epoch"] == 2
        finally:
            await env.close()

    run(main())


# --------------------------------------------------------------------------- update_isr


def test_update_isr_compare_and_set(make_env):
    async def main():
        env = make_env()
        try:
            await three_brokers(env)
            c1, c2, c3 = env.clusters[1], env.clusters[2], env.clusters[3]
            await c1.create_topic("t", 3, 3, assignments=ASSIGNMENT)
            await env.wait_cached("t", 1, lambda s: s.leader == 2)
            assert c2.topics["t"].partitions[1].zk_version == 0

            # the leader (2) shrinks; every broker's cache sees it through its watches
            new = await c2.update_isr("t", 1, [2, 3], leader=2, leader_epoch=0)
            assert new == PartitionState(2, 0, [2, 3, 1], [2, 3], 1) and new.zk_version == 1
            assert c2.topics["t"].partitions[1].zk_version == 1  # at once, locally
            await env.wait_cached("t", 1, lambda s: s.isr == [2, 3] and s.zk_version == 1)
            st, version = await env.read_state("t", 1)
            assert (st["leader"], st["leader_epoch"], st["isr"], version) == (2, 0, [2, 3], 1)
            assert st["controller_epoch"] == 1

            # a change on a topic that broker 2 created (not broker 1) reaches broker 1's cache
            await c2.create_topic("mine", 1, 3, assignments={0: [2, 1, 3]})
            await env.wait_cached("mine", 0, lambda s: s.leader == 2)
            await c3.update_isr("mine", 0, [2, 1], leader=2, leader_epoch=0)
            await env.wait_cached("mine", 0, lambda s: s.isr == [2, 1], "mine isr via watch")
            await c1.update_isr("mine", 0, [2, 1, 3], leader=2, leader_epoch=0)
            await env.wait_cached("mine", 0, lambda s: s.isr == [2, 1, 3], "back via watch")

            # racing writers (same leader): each re-reads and retries; both land, in turn
            a, b = await asyncio.gather(
                c2.update_isr("t", 1, [2], leader=2, leader_epoch=0),
                c2.update_isr("t", 1, [2, 3, 1], leader=2, leader_epoch=0),
            )
            assert {a.zk_version, b.zk_version} == {2, 3}
            last = a if a.zk_version == 3 else b
            st, version = await env.read_state("t", 1)
            assert st["isr"] == last.isr and version == 3

            # no change: no write
            same = await c2.update_isr("t", 1, last.isr, leader=2, leader_epoch=0)
            assert same.zk_version == 3
            with pytest.raises(ValueError):
                await c2.update_isr("t", 1, [3], leader=2, leader_epoch=0)
            with pytest.raises(ValueError):
                await c2.update_isr("t", 1, [2, 9], leader=2, leader_epoch=0)
            assert await c2.update_isr("nope", 0, [2], leader=2, leader_epoch=0) is None

            # the leader is deposed: its ISR write gets None and changes nothing
            await c2.update_isr("t", 1, [2, 3, 1], leader=2, leader_epoch=0)
            zombie = c2
            await env.crash(2)
            await env.wait_cached("t", 1, lambda s: s.leader == 3 and s.leader_epoch == 1)
            before = await env.read_state("t", 1)
            if env.kind == "local":  # the shared store still answers the stopped broker
                assert await zombie.update_isr("t", 1, [2], leader=2, leader_epoch=0) is None
            assert await c3.update_isr("t", 1, [2, 3], leader=2, leader_epoch=0) is None
            assert await c3.update_isr("t", 1, [3], leader=3, leader_epoch=0) is None
            assert await env.read_state("t", 1) == before
            ok = await c3.update_isr("t", 1, [3], leader=3, leader_epoch=1)
            assert ok is not None and ok.isr == [3] and ok.zk_version == before[1] + 1
        finally:
            await env.close()

    run(main())


def test_update_isrs_batch_conflict_retries_only_its_partition(make_env):
    """Many ISR changes go out together, each compare-and-set at the version the leader's
    cache holds, without reads; a partition whose cached version is stale (another write
    landed, its watch's re-read not yet in) fails alone, is re-read and retried alone, and
    the others are written once.  A deposed leader's change gets None, a bad one its error,
    in their own slots only."""

    async def main():
        env = make_env()
        try:
            await three_brokers(env)
            c2 = env.clusters[2]
            await c2.create_topic("b", 4, 3, assignments={p: [2, 1, 3] for p in range(4)})
            for p in range(4):
                await env.wait_cached("b", p, lambda s: s.leader == 2)
            stale = c2.topics["b"]
            # another writer changes partition 1 (same leader and epoch, as the controller's
            # or an earlier write of ours whose answer was lost)
            path = paths.partition_state("b", 1)
            data, stat = await env.admin.get(path)
            await env.admin.set(path, paths.encode_partition_state(2, 0, [2, 3], 1), stat.version)
            await env.wait_cached("b", 1, lambda s: s.zk_version == 1)
            c2.topics["b"] = stale  # its watch's re-read still on its way

            calls: list[int] = []
            real = c2.store.set_many

            async def counted(writes):
                calls.append(len(writes))
                return await real(writes)

            c2.store.set_many = counted
            out = await c2.update_isrs(
                [
                    isr_mod.IsrChange("b", 0, [2, 1], 2, 0),
                    isr_mod.IsrChange("b", 1, [2, 1], 2, 0),
                    isr_mod.IsrChange("b", 2, [2, 3], 2, 0),
                    isr_mod.IsrChange("b", 3, [2, 3], 2, 7),  # not our epoch: deposed
                    isr_mod.IsrChange("b", 0, [1], 2, 0),  # without the leader: refused
                ]
            )
            assert calls == [3]  # one pipelined batch, no reads before it
            assert [s.isr for s in out[:3]] == [[2, 1], [2, 1], [2, 3]]
            assert [s.zk_version for s in out[:3]] == [1, 2, 1]  # 1 retried after a conflict
            assert out[3] is None and isinstance(out[4], ValueError)
            for p, isr, version in [(0, [2, 1], 1), (1, [2, 1], 2), (2, [2, 3], 1), (3, None, 0)]:
                st, v = await env.read_state("b", p)
                assert v == version and (isr is None or st["isr"] == isr)
                assert (st["leader"], st["leader_epoch"]) == (2, 0)
            assert c2.topics["b"].partitions[1].zk_version == 2
        finally:
            await env.close()

    run(main())


def test_session_ok_local(tmp_path):
    async def main():
        store = LocalStore(tmp_path / "m")
        await store.start()
        c = Cluster(store, 1, endpoints(9092), controller=Controller)
        assert not c.session_ok
        await c.start()
        assert c.session_ok and c.controller is not None
        await c.stop()
        assert not c.session_ok and c.controller is None
        await store.close()

    run(main())


def test_controlled_shutdown_and_rebalance_configs(tmp_path):
    """Kafka's names and defaults; a bad value stops the start naming the key."""
    from pybroker.config import ConfigError, build_config

    cfg = build_config({"log.dirs": str(tmp_path)})
    assert (
        cfg.controlled_shutdown_enable,
        cfg.controlled_shutdown_max_retries,
        cfg.controlled_shutdown_retry_backoff_ms,
        cfg.auto_leader_rebalance_enable,
        cfg.leader_imbalance_check_interval_seconds,
        cfg.leader_imbalance_per_broker_percentage,
    ) == (True, 3, 5000, True, 300, 10)
    cfg = build_config(
        {
            "log.dirs": str(tmp_path),
            "controlled.shutdown.enable": "false",
            "auto.leader.rebalance.enable": "false",
            "leader.imbalance.check.interval.seconds": "2",
        }
    )
    assert not cfg.controlled_shutdown_enable and not cfg.auto_leader_rebalance_enable
    assert cfg.leader_imbalance_check_interval_seconds == 2
    for key, value in [
        ("leader.imbalance.check.interval.seconds", "0"),
        ("leader.imbalance.per.broker.percentage", "-1"),
        ("controlled.shutdown.max.retries", "-1"),
        ("controlled.shutdown.retry.backoff.ms", "x"),
    ]:
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            build_config({"log.dirs": str(tmp_path), key: value})
