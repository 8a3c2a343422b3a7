"""The KIP-848 consumer group state machine (coord/group/consumer.py) and its assignors, with a
given clock: epochs, reconciliation (revocation before assignment), fencing, static members,
timeouts."""

from __future__ import annotations

import uuid

import pytest

from pybroker.coord.group.assignors import assign
from pybroker.coord.group.consumer import ConsumerGroup
from pybroker.coord.group.consumer_member import (
    ConsumerGroupConfig,
    ConsumerGroupError,
    ConsumerGroupState,
    HeartbeatRequest,
)
from pybroker.errors import ErrorCode

T = {"a": (uuid.UUID(int=1), 4), "b": (uuid.UUID(int=2), 2)}


def hb(member="", epoch=0, topics=("a",), owned=None, instance=None, assignor=None, timeout=60000):
    return HeartbeatRequest(
        member_id=member,
        member_epoch=epoch,
        instance_id=instance,
        rack_id=None,
        rebalance_timeout_ms=timeout if epoch == 0 else -1,
        subscribed_names=list(topics) if topics is not None else None,
        subscribed_regex=None,
        server_assignor=assignor,
        owned=owned,
    )


def got(resp):
    """{topic: partitions} of a heartbeat answer's assignment (None: not sent)."""
    a = resp["assignment"]
    if a is None:
        return None
    names = {tid: n for n, (tid, _) in T.items()}
    return {names[tp["topic_id"]]: set(tp["partitions"]) for tp in a["topic_partitions"]}


def group():
    return ConsumerGroup("g", ConsumerGroupConfig(session_timeout_ms=10_000))


def test_a_first_member_gets_every_partition_at_epoch_one():
    g = group()
    r = g.heartbeat(0, hb(), T)
    assert r["member_epoch"] == 1 and got(r) == {"a": {0, 1, 2, 3}}
    assert g.state is ConsumerGroupState.STABLE
    # an unchanged heartbeat sends no assignment
    r = g.heartbeat(10, hb(r["member_id"], 1, topics=None), T)
    assert r["member_epoch"] == 1 and r["assignment"] is None


def test_revocation_comes_before_assignment():
    g = group()
    m1 = g.heartbeat(0, hb(), T)["member_id"]
    r2 = g.heartbeat(1, hb(), T)
    m2 = r2["member_id"]
    # m2 is at epoch 2 but gets nothing m1 still owns
    assert r2["member_epoch"] == 2 and got(r2) == {}
    assert g.state is ConsumerGroupState.RECONCILING
    # m1 is asked to give up half, keeping its epoch until it has
    r1 = g.heartbeat(2, hb(m1, 1, topics=None), T)
    kept = got(r1)["a"]
    assert r1["member_epoch"] == 1 and len(kept) == 2
    # m2 still waits while m1 owns them
    assert got(g.heartbeat(3, hb(m2, 2, topics=None), T)) is None
    # m1 reports it revoked: it moves to epoch 2; its partitions did not change, so (as
    # Kafka's hasAssignedPartitionsChanged) the answer carries the epoch and no assignment
    r1 = g.heartbeat(4, hb(m1, 1, topics=None, owned={"a": kept}), T)
    assert r1["member_epoch"] == 2 and r1["assignment"] is None
    # now m2 gets the released partitions
    r2 = g.heartbeat(5, hb(m2, 2, topics=None), T)
    assert got(r2) == {"a": {0, 1, 2, 3} - kept}
    assert g.state is ConsumerGroupState.STABLE


def test_epochs_fence_zombies():
    g = group()
    m1 = g.heartbeat(0, hb(), T)["member_id"]
    with pytest.raises(ConsumerGroupError) as e:
        g.heartbeat(1, hb(m1, 5, topics=None), T)
    assert e.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    with pytest.raises(ConsumerGroupError) as e:
        g.heartbeat(1, hb("nobody", 1, topics=None), T)
    assert e.value.code == ErrorCode.UNKNOWN_MEMBER_ID
    assert g.validate_offset_commit(m1, 0, 9) == ErrorCode.STALE_MEMBER_EPOCH
    assert g.validate_offset_commit(m1, 2, 9) == ErrorCode.FENCED_MEMBER_EPOCH
    assert g.validate_offset_commit(m1, 1, 9) == ErrorCode.NONE
    assert g.validate_offset_commit(m1, 1, 8) == ErrorCode.UNSUPPORTED_VERSION
    assert g.validate_offset_fetch(m1, 0) == ErrorCode.STALE_MEMBER_EPOCH


def test_session_timeout_removes_a_member_and_the_other_takes_over():
    g = group()
    m1 = g.heartbeat(0, hb(), T)["member_id"]
    m2 = g.heartbeat(1, hb(), T)["member_id"]
    g.heartbeat(2, hb(m1, 1, topics=None), T)  # m1 revokes two (not yet acknowledged)
    # m1 goes silent; m2 keeps heartbeating
    for t in range(2_000, 12_001, 2_000):
        g.heartbeat(t, hb(m2, g.members[m2].epoch, topics=None), T)
    g.tick(12_010, T)
    assert m1 not in g.members
    r = g.heartbeat(12_020, hb(m2, g.members[m2].epoch, topics=None), T)
    assert g.members[m2].assigned == {"a": {0, 1, 2, 3}} and r["member_epoch"] == g.group_epoch


def test_a_static_member_comes_back_with_its_assignment():
    g = group()
    r = g.heartbeat(0, hb(instance="i-1"), T)
    first = got(r)
    epoch = g.group_epoch
    g.heartbeat(1, hb(r["member_id"], -2, instance="i-1", topics=None), T)
    r2 = g.heartbeat(4, hb("new-process", 0, instance="i-1"), T)
    assert r2["member_id"] == "new-process" and got(r2) == first
    assert g.group_epoch == epoch  # no rebalance: same member, same subscription


def test_an_unreleased_instance_id_is_refused():
    g = group()
    g.heartbeat(0, hb(instance="i-1"), T)
    with pytest.raises(ConsumerGroupError) as e:
        g.heartbeat(1, hb("other", 0, instance="i-1"), T)
    assert e.value.code == ErrorCode.UNRELEASED_INSTANCE_ID


def test_unknown_assignor_and_leave():
    g = group()
    with pytest.raises(ConsumerGroupError) as e:
        g.heartbeat(0, hb(assignor="sticky"), T)
    assert e.value.code == ErrorCode.UNSUPPORTED_ASSIGNOR
    m = g.heartbeat(0, hb(assignor="range"), T)["member_id"]
    assert g.assignor_name == "range"
    r = g.heartbeat(1, hb(m, -1, topics=None), T)
    assert r["member_epoch"] == -1 and g.is_empty and g.state is ConsumerGroupState.EMPTY


def test_assignors_balance_and_range_is_contiguous():
    subs = {"m1": {"a", "b"}, "m2": {"a", "b"}, "m3": {"a"}}
    counts = {"a": 4, "b": 2}
    for name in ("uniform", "range"):
        out = assign(name, subs, counts, {})
        owners = [(t, p) for m in out for t, ps in out[m].items() for p in ps]
        assert sorted(owners) == sorted([("a", p) for p in range(4)] + [("b", 0), ("b", 1)])
        assert "b" not in out["m3"]
    loads = [
        sum(len(ps) for ps in a.values()) for a in assign("uniform", subs, counts, {}).values()
    ]
    assert max(loads) - min(loads) <= 1
    r = assign("range", {"x": {"a"}, "y": {"a"}}, {"a": 5}, {})
    assert r == {"x": {"a": {0, 1, 2}}, "y": {"a": {3, 4}}}
    # sticky: a third member joining takes partitions without moving the others needlessly
    before = assign("uniform", {"x": {"a"}, "y": {"a"}}, {"a": 6}, {})
    after = assign("uniform", {"x": {"a"}, "y": {"a"}, "z": {"a"}}, {"a": 6}, before)
    moved = sum(len(before[m]["a"] - after[m]["a"]) for m in ("x", "y"))
    assert moved == 2 and len(after["z"]["a"]) == 2


def _uniform_by_scan(subs, counts, current):
    """The uniform assignor's rule spelled out naively (a scan of the eligible members for
    every partition): what the heap-based one must give, member for member."""
    topics = sorted({t for s in subs.values() for t in s if t in counts})
    parts = [(t, p) for t in topics for p in range(counts[t])]
    eligible = {t: sorted(m for m, s in subs.items() if t in s) for t in topics}
    members = sorted(subs)
    per, extra = divmod(len(parts), len(members))
    share = {m: per + (i < extra) for i, m in enumerate(members)}
    out = {m: {} for m in subs}
    load = dict.fromkeys(subs, 0)
    taken = set()
    for m in members:
        for t, ps in sorted((current.get(m) or {}).items()):
            if t in counts and t in subs[m]:
                for p in sorted(ps):
                    if p < counts[t] and load[m] < max(share[m], 1) and (t, p) not in taken:
                        out[m].setdefault(t, set()).add(p)
                        load[m] += 1
                        taken.add((t, p))
    for t, p in sorted(parts, key=lambda tp: (len(eligible[tp[0]]), tp)):
        if (t, p) not in taken:
            m = min(eligible[t], key=lambda x: (load[x], x))
            out[m].setdefault(t, set()).add(p)
            load[m] += 1
    return out


def test_uniform_assignor_matches_the_rule_on_mixed_subscriptions():
    # (the assignor keeps a heap per topic so that 1,000 members x 2,000 partitions cost
    # O(P log M) per target assignment, not O(P * M): it must still pick the least loaded
    # eligible member, ties by member id, with members taking partitions of several topics)
    import random

    rng = random.Random(27)
    topics = {f"t{i}": rng.randint(1, 30) for i in range(6)}
    names = [*topics, "deleted"]
    for _ in range(40):
        subs = {
            f"m{k:02d}": set(rng.sample(sorted(topics), rng.randint(1, 4)))
            for k in range(rng.randint(1, 25))
        }
        current = _uniform_by_scan(
            {m: s for m, s in subs.items() if rng.random() < 0.7} or subs, topics, {}
        )
        assert assign("uniform", subs, topics, current) == _uniform_by_scan(subs, topics, current)
        # a current assignment the group no longer matches: partitions beyond a shrunk topic's
        # count, topics gone or unsubscribed, a partition two members claim, members gone
        stale = {
            m: {t: set(rng.sample(range(35), rng.randint(0, 8))) for t in rng.sample(names, 3)}
            for m in [*subs, "gone"]
            if rng.random() < 0.8
        }
        assert assign("uniform", subs, topics, stale) == _uniform_by_scan(subs, topics, stale)
    big = {f"m{k:04d}": {"a"} for k in range(1000)}
    out = assign("uniform", big, {"a": 2000}, {})
    assert sorted(len(a["a"]) for a in out.values()) == [2] * 1000
