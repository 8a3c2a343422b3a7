"""KIP-848 groups' durable state (coord/group/consumer_store.py) on the embedded store: what a
new coordinator loads is the group the old one had (members at their epochs, mid-reconciliation
included), unchanged heartbeats write nothing, and a write that lost a race with another
coordinator fails instead of overwriting it."""

from __future__ import annotations

import asyncio

import pytest

from pybroker.coord.group.consumer import ConsumerGroup
from pybroker.coord.group.consumer_member import ConsumerGroupConfig, MemberState
from pybroker.coord.group.consumer_store import ConsumerGroupStore, StalePlanError, group_path
from pybroker.coord.metadata import paths
from pybroker.coord.metadata.local import LocalStore
from pybroker.coord.metadata.store import BadVersionError
from tests.test_consumer_group import T, hb

CONFIG = ConsumerGroupConfig(session_timeout_ms=10_000)


def run(coro):
    return asyncio.run(coro)


async def open_store(tmp_path):
    store = LocalStore(tmp_path / "meta")
    await store.start()
    await store.ensure_path(paths.CONSUMER_GROUPS)
    return store


async def fresh_group(tmp_path, group_id: str = "g"):
    """The embedded store, a group store that loaded ``group_id`` (nothing stored yet) and the
    empty group."""
    store = await open_store(tmp_path)
    cgs = ConsumerGroupStore(store)
    assert await cgs.load(group_id) is None
    return store, cgs, ConsumerGroup(group_id, CONFIG)


async def reload(store, group_id: str, now: int) -> ConsumerGroup | None:
    stored = await ConsumerGroupStore(store).load(group_id)
    if stored is None:
        return None
    return ConsumerGroup.from_records(group_id, CONFIG, stored.meta, stored.members, now)


def test_a_reloaded_group_is_the_group_mid_reconciliation(tmp_path):
    async def main():
        store, cgs, g = await fresh_group(tmp_path, "g/1")
        a = g.heartbeat(0, hb(instance="i-a"), T)["member_id"]
        await cgs.apply(cgs.plan(g))
        b = g.heartbeat(10, hb(topics=("a", "b")), T)["member_id"]  # a must give up partitions
        await cgs.apply(cgs.plan(g))
        g.heartbeat(20, hb(a, 1, topics=None), T)  # a is told to revoke
        await cgs.apply(cgs.plan(g, [a]))
        assert g.members[a].state is MemberState.UNREVOKED_PARTITIONS

        h = await reload(store, "g/1", now=5_000)
        assert h is not None
        for mid in (a, b):
            assert g.member_record(g.members[mid]) == h.member_record(h.members[mid])
        assert g.meta_record() == h.meta_record() and h.state is g.state
        # timers start again at load time
        assert h.members[a].last_heartbeat_ms == 5_000
        assert h.members[a].revocation_deadline_ms == 5_000 + 60_000
        # member a carries on with the new coordinator at its epoch: it revokes, then b gets
        # what a released
        owned = {t: set(ps) for t, ps in h.members[a].assigned.items()}
        r = h.heartbeat(5_100, hb(a, h.members[a].epoch, topics=None, owned=owned), T)
        assert r["error_code"] == 0 and r["member_epoch"] == h.assignment_epoch
        r = h.heartbeat(5_200, hb(b, h.members[b].epoch, topics=None, owned={}), T)
        assert r["error_code"] == 0 and h.members[b].assigned
        await store.close()

    run(main())


def test_unchanged_heartbeats_write_nothing_and_an_empty_group_leaves_no_znode(tmp_path):
    async def main():
        store, cgs, g = await fresh_group(tmp_path)
        a = g.heartbeat(0, hb(), T)["member_id"]
        await cgs.apply(cgs.plan(g))
        _, stat = await store.get(f"{group_path('g')}/{a}")
        for now in (100, 200, 300):
            g.heartbeat(now, hb(a, 1, topics=None), T)
            assert cgs.plan(g, [a]) is None
        assert (await store.get(f"{group_path('g')}/{a}"))[1].version == stat.version
        g.heartbeat(400, hb(a, -1, topics=None), T)  # leaves
        await cgs.apply(cgs.plan(g))
        assert await store.exists(group_path("g")) is None
        assert await reload(store, "g", 500) is None
        await store.close()

    run(main())


def test_a_write_that_lost_a_race_fails_and_voids_the_plans_behind_it(tmp_path):
    async def main():
        store, mine, g = await fresh_group(tmp_path)
        other = ConsumerGroupStore(store)
        a = g.heartbeat(0, hb(), T)["member_id"]
        await mine.apply(mine.plan(g))
        # another broker briefly coordinated the group and wrote it
        await other.load("g")
        h = await reload(store, "g", 0)
        h.heartbeat(1, hb(topics=("a", "b")), T)
        await other.apply(other.plan(h))
        # our next two writes: the first fails on its version, the second never runs
        g.heartbeat(2, hb(a, -1, topics=None), T)
        first = mine.plan(g)
        g.heartbeat(3, hb(), T)
        second = mine.plan(g)
        with pytest.raises(BadVersionError):
            await mine.apply(first)
        with pytest.raises(StalePlanError):
            await mine.apply(second)
        # what is stored is the other coordinator's group
        stored = await reload(store, "g", 4)
        assert stored is not None and stored.meta_record() == h.meta_record()
        await store.close()

    run(main())


def test_a_classic_member_of_a_consumer_group_survives_the_round_trip(tmp_path):
    """Online migration: a member speaking the classic protocol keeps its session timeout and
    protocols (name and subscription bytes) through its record."""
    from pybroker.coord.group.classic import JoinRequest
    from pybroker.wire.consumer_protocol import subscription_topics

    sub = b"\x00\x00\x00\x00\x00\x01\x00\x01a\xff\xff\xff\xff"  # v0: topics ["a"], null data
    g = ConsumerGroup("g", CONFIG)
    g.heartbeat(0, hb(), T)
    joined = g.classic_join(
        10,
        JoinRequest("", None, "c", "/h", 7000, 20000, "consumer", [("range", sub)], False),
        T,
    )
    assert joined["error_code"] == 0
    member = g.members[joined["member_id"]]

    async def main():
        store = await open_store(tmp_path)
        cgs = ConsumerGroupStore(store)
        await cgs.load("g")
        await cgs.apply(cgs.plan(g))
        h = await reload(store, "g", 100)
        again = h.members[member.member_id]
        assert again.classic == member.classic and again.classic.session_timeout_ms == 7000
        assert subscription_topics(again.classic.protocols[0][1]) == ["a"]
        assert h.member_record(again) == g.member_record(member)
        await store.close()

    run(main())


def test_a_join_writes_the_joiner_and_the_members_whose_target_moved(tmp_path):
    # (a coordinator compares only those records on a heartbeat; comparing every member's
    # record on each join made a 1,000-member group's joins quadratic: W24)
    async def main():
        store, cgs, g = await fresh_group(tmp_path)
        ids = [g.heartbeat(0, hb(topics=("a", "b")), T)["member_id"] for _ in range(3)]
        g.take_target_changed()
        await cgs.apply(cgs.plan(g))
        d = g.heartbeat(10, hb(topics=("a", "b")), T)["member_id"]
        moved = g.take_target_changed()
        assert d in moved and moved & set(ids) and g.take_target_changed() == set()
        await cgs.apply(cgs.plan(g, [d, *moved]))
        assert cgs.plan(g) is None  # nothing left that a full comparison would write
        h = await reload(store, "g", 20)
        assert h is not None and h.meta_record() == g.meta_record()
        for mid in [*ids, d]:
            assert g.member_record(g.members[mid]) == h.member_record(h.members[mid])
        await store.close()

    run(main())
