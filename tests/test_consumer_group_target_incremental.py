"""A KIP-848 group's target kept across epochs (coord/group/consumer_target.py: the uniform
assignor's one-topic case updated for the members that changed, not recomputed over the
group on each join) gives what the from-scratch computation gives: two groups, one of them
with the incremental target switched off, receive the same random joins (dynamic and
static, consumer and classic protocol), heartbeats, subscription changes (to another topic,
a missing one, a regex, back), server assignor choices, leaves, static leaves and
replacements, expiries, partition count changes (growth and shrink) and reloads; after each,
their answers, targets, assignors, epochs and the records to write (target_changed) are the
same.  And a join wave of 300 members ends in a stable, complete, non-overlapping, balanced
assignment with every member told its partitions."""

from __future__ import annotations

import random
import uuid
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.coord.group.classic import JoinRequest
from pybroker.coord.group.consumer import ConsumerGroup
from pybroker.coord.group.consumer_member import (
    ConsumerGroupConfig,
    ConsumerGroupError,
    ConsumerGroupState,
    HeartbeatRequest,
)
from pybroker.coord.group.consumer_target import HomogeneousTarget
from tests.test_consumer_group_index import owned_now, subscription

CONFIG = ConsumerGroupConfig(session_timeout_ms=10_000)
IDS = {t: uuid.UUID(int=i + 1) for i, t in enumerate("abc")}


class FromScratch(HomogeneousTarget):
    """Never valid: the group computes every target from scratch, as before."""

    def build(self, members, target, topic, count) -> None:
        self.clear()


def reference_group() -> ConsumerGroup:
    return from_scratch(ConsumerGroup("g", CONFIG))


def from_scratch(g: ConsumerGroup) -> ConsumerGroup:
    g._targets = FromScratch()
    return g


def plain(g: ConsumerGroup) -> dict:
    return {m: {t: sorted(ps) for t, ps in a.items()} for m, a in sorted(g.target.items())}


def hb(mid, epoch, *, topics=None, regex=None, owned=None, instance=None, assignor=None):
    return HeartbeatRequest(mid, epoch, instance, None, 5000, topics, regex, assignor, owned)


SUBSCRIPTIONS = st.sampled_from(
    [["a"], ["a"], ["a"], ["a", "d"], ["d", "a"], ["b"], ["a", "b"], None]
)
OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["join"] * 6
            + ["join_static", "ack", "ack", "ack", "subscribe", "assignor", "leave"]
            + ["leave_static", "classic_join", "tick", "partitions", "reload"]
        ),
        st.integers(0, 10**6),
        SUBSCRIPTIONS,
        st.sampled_from([None, None, None, None, "a", "b|c"]),
        st.sampled_from([None, None, None, "uniform", "range"]),
        st.integers(0, 12_000),
    ),
    max_size=80,
)


def apply(g: ConsumerGroup, topics, now, op, pick, names, regex, assignor, dt):
    """One operation on ``g``: the answer (or the error code)."""
    ids = sorted(g.members)
    mid = ids[pick % len(ids)] if ids else None
    m = g.members.get(mid) if mid else None
    n = f"m{pick % 997:03d}"
    try:
        if op in ("join", "join_static"):
            instance = f"i{pick % 3}" if op == "join_static" else None
            return g.heartbeat(
                now,
                hb(n, 0, topics=names or ["a"], regex=regex, owned={}, instance=instance),
                topics,
            )
        if m is None:
            return None
        if op == "ack":
            return g.heartbeat(now, hb(mid, m.epoch, owned=owned_now(g, mid, False)), topics)
        if op == "subscribe":
            return g.heartbeat(now, hb(mid, m.epoch, topics=names, regex=regex or ""), topics)
        if op == "assignor":
            return g.heartbeat(now, hb(mid, m.epoch, assignor=assignor or "uniform"), topics)
        if op == "leave":
            return g.heartbeat(now, hb(mid, -1), topics)
        if op == "leave_static":
            return g.heartbeat(now, hb(mid, -2, instance=m.instance_id), topics)
        if op == "classic_join":
            sub = subscription(names or ["a"], {})
            return g.classic_join(
                now,
                JoinRequest("", f"i{pick % 3}", "c", "/h", 3000 + dt, 6000, "consumer",
                            [("range", sub)], False),
                topics,
            )  # fmt: skip
        if op == "tick":
            return g.tick(now, topics)
        if op == "partitions":
            return g.heartbeat(now, hb(mid, m.epoch), topics)
    except ConsumerGroupError as e:
        return e.code
    return None


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(OPS, st.integers(1, 40))
def test_the_incremental_target_is_the_from_scratch_one(ops, size):
    run(ops, size)


@pytest.mark.parametrize("seed", range(60))
def test_long_random_sequences_give_the_from_scratch_target(seed):
    # hypothesis favours short sequences; these reach larger groups and later epochs
    rnd = random.Random(seed)
    kinds = ["join"] * 6 + ["join_static", "ack", "ack", "ack", "subscribe", "assignor"]
    kinds += ["leave", "leave_static", "classic_join", "tick", "partitions", "reload"]
    subs = [["a"], ["a"], ["a"], ["a", "d"], ["d", "a"], ["b"], ["a", "b"], None]
    ops = [
        (
            rnd.choice(kinds),
            rnd.randint(0, 10**6),
            rnd.choice(subs),
            rnd.choice([None, None, None, None, "a", "b|c"]),
            rnd.choice([None, None, None, "uniform", "range"]),
            rnd.randint(0, 12_000),
        )
        for _ in range(150)
    ]
    run(ops, rnd.randint(1, 60))


def run(ops, size):
    topics = {"a": (IDS["a"], size), "b": (IDS["b"], 3), "c": (IDS["c"], 2)}
    g, ref = ConsumerGroup("g", CONFIG), reference_group()
    now = 0
    for op, pick, names, regex, assignor, dt in ops:
        now += dt // 10
        if op == "partitions":
            topics = {**topics, "a": (IDS["a"], max(1, topics["a"][1] + pick % 7 - 2))}
        if op == "reload":
            g, ref = (
                ConsumerGroup.from_records(
                    "g", CONFIG, x.meta_record(), [x.member_record(m) for m in x.members.values()],
                    now,
                )
                for x in (g, ref)
            )  # fmt: skip
            ref = from_scratch(ref)
            continue
        # the same new member ids in both (a classic join without one gets a UUID)
        new_id = uuid.UUID(int=pick)
        with mock.patch.object(uuid, "uuid4", return_value=new_id):
            got = apply(g, topics, now, op, pick, names, regex, assignor, dt)
        with mock.patch.object(uuid, "uuid4", return_value=new_id):
            want = apply(ref, topics, now, op, pick, names, regex, assignor, dt)
        assert got == want, (op, pick)
        assert plain(g) == plain(ref), (op, pick)
        assert (g.group_epoch, g.assignment_epoch, g.assignor_name, g.state) == (
            ref.group_epoch,
            ref.assignment_epoch,
            ref.assignor_name,
            ref.state,
        )
        assert g.take_target_changed() == ref.take_target_changed(), (op, pick)


def test_a_wave_of_300_joins_ends_stable_complete_and_balanced():
    # W24's shape: members join one by one (each join an epoch and a target), heartbeating
    # what they were told in between, until every member owns its target
    n, count = 300, 600
    topics = {"a": (IDS["a"], count)}
    g, ref = ConsumerGroup("g", CONFIG), reference_group()
    told: dict[str, set[int]] = {}
    for k in range(n):
        mid = f"m{(k * 7919) % n:04d}"  # not in id order
        for x in (g, ref):
            resp = x.heartbeat(k, hb(mid, 0, topics=["a"], owned={}), topics)
        told[mid] = {p for tp in resp["assignment"]["topic_partitions"] for p in tp["partitions"]}
        for other in sorted(g.members)[k % 7 :: 7]:  # some of the others heartbeat
            for x in (g, ref):
                owned = {"a": told[other]} if told[other] else {}
                resp = x.heartbeat(k, hb(other, x.members[other].epoch, owned=owned), topics)
            if resp["assignment"] is not None:
                told[other] = {
                    p for tp in resp["assignment"]["topic_partitions"] for p in tp["partitions"]
                }
        assert plain(g) == plain(ref)
        assert g.take_target_changed() == ref.take_target_changed()
    for _ in range(4):  # everyone heartbeats until stable: revoke first, then assigned
        for mid in sorted(g.members):
            owned = {"a": told[mid]} if told[mid] else {}
            resp = g.heartbeat(n, hb(mid, g.members[mid].epoch, owned=owned), topics)
            if resp["assignment"] is not None:
                told[mid] = {
                    p for tp in resp["assignment"]["topic_partitions"] for p in tp["partitions"]
                }
    assert g.state is ConsumerGroupState.STABLE
    owned = [told[mid] for mid in sorted(g.members)]
    assert sum(map(len, owned)) == count and set().union(*owned) == set(range(count))
    assert {len(ps) for ps in owned} == {count // n}
    assert all(g.members[mid].assigned == {"a": told[mid]} for mid in g.members)


def test_a_previous_target_it_did_not_compute_is_left_to_the_from_scratch_rule():
    # a target written by another path (overlapping, beyond the partition count, other
    # topics): not built on, and a touched member's such target ends the incremental case
    topics = {"a": (IDS["a"], 4), "b": (IDS["b"], 2)}
    g = ConsumerGroup("g", CONFIG)
    for k in range(2):
        g.heartbeat(0, hb(f"m{k}", 0, topics=["a"], owned={}), topics)
    members, target = g.members, {"m0": {"a": {0, 1}}, "m1": {"a": {2, 3}}}
    for bad in ({"a": {1, 2}}, {"a": {2, 3, 4}}, {"a": {2}, "b": {0}}):
        t = HomogeneousTarget()
        t.build(members, {**target, "m1": bad}, "a", 4)
        assert not t.valid
        t.build(members, target, "a", 4)
        assert t.valid
        moved = {**target, "m1": bad}
        t.touch("m1")
        if "b" in bad:
            assert t.compute(members, moved, topics, "uniform") == (None, {"m1"})
            assert moved["m1"] == {"a": {2, 3}}
        else:
            assert t.compute(members, moved, topics, "uniform") is None
            assert not t.valid and moved["m1"] == bad
