"""Share groups' pure parts: the group state machine and SimpleAssignor
(coord/group/share.py), share sessions (share/session.py), group configs
(coord/group/group_configs.py)."""

from __future__ import annotations

import pytest

from pybroker.coord.group.group_configs import AutoOffsetReset, Bounds, parse_duration_ms, validate
from pybroker.coord.group.share import (
    HeartbeatRequest,
    ShareGroup,
    ShareGroupConfig,
    ShareGroupError,
    ShareGroupState,
    simple_assign,
)
from pybroker.errors import ErrorCode, KafkaError
from pybroker.share.session import ShareSessionCache, next_epoch

CFG = ShareGroupConfig(session_timeout_ms=10_000, heartbeat_interval_ms=1000, max_size=3)


def hb(member: str, epoch: int, topics: list[str] | None = None) -> HeartbeatRequest:
    return HeartbeatRequest(member, epoch, None, topics, "client", "/127.0.0.1")


def test_join_assigns_at_once_and_members_share_the_partition():
    g = ShareGroup("g")
    r1 = g.heartbeat(0, hb("a", 0, ["t"]), {"t": {0}}, CFG)
    assert (r1.member_epoch, r1.assignment) == (1, {"t": {0}})
    r2 = g.heartbeat(0, hb("b", 0, ["t"]), {"t": {0}}, CFG)
    assert (r2.member_epoch, r2.assignment) == (2, {"t": {0}})
    # a: one partition, two members: both get it; its next heartbeat moves it to epoch 2
    r1 = g.heartbeat(1, hb("a", 1), {"t": {0}}, CFG)
    assert r1.member_epoch == 2 and r1.assignment is None  # unchanged: not sent
    assert g.state == ShareGroupState.STABLE and g.group_epoch == g.assignment_epoch == 2


def test_new_partitions_bump_the_epoch_and_reach_the_members():
    g = ShareGroup("g")
    g.heartbeat(0, hb("a", 0, ["t"]), {"t": {0}}, CFG)
    r = g.heartbeat(1, hb("a", 1), {"t": {0, 1}}, CFG)
    assert r.member_epoch == 2 and r.assignment == {"t": {0, 1}}


def test_errors_as_kafka():
    g = ShareGroup("g")
    with pytest.raises(ShareGroupError) as e:
        g.heartbeat(0, hb("x", 3), {}, CFG)
    assert e.value.code == ErrorCode.UNKNOWN_MEMBER_ID
    g.heartbeat(0, hb("a", 0, ["t"]), {"t": {0}}, CFG)
    g.heartbeat(0, hb("b", 0, ["t"]), {"t": {0}}, CFG)
    with pytest.raises(ShareGroupError) as e:
        g.heartbeat(0, hb("a", 7), {"t": {0}}, CFG)
    assert e.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    g.heartbeat(0, hb("c", 0, ["t"]), {"t": {0}}, CFG)
    with pytest.raises(ShareGroupError) as e:
        g.heartbeat(0, hb("d", 0, ["t"]), {"t": {0}}, CFG)
    assert e.value.code == ErrorCode.GROUP_MAX_SIZE_REACHED
    with pytest.raises(ShareGroupError) as e:
        g.leave("nobody")
    assert e.value.code == ErrorCode.UNKNOWN_MEMBER_ID


def test_the_previous_epoch_is_still_accepted():
    g = ShareGroup("g")
    g.heartbeat(0, hb("a", 0, ["t"]), {"t": {0}}, CFG)
    g.heartbeat(0, hb("b", 0, ["t"]), {"t": {0}}, CFG)
    g.heartbeat(0, hb("a", 1), {"t": {0}}, CFG)  # a: 1 -> 2
    assert g.heartbeat(0, hb("a", 1), {"t": {0}}, CFG).member_epoch == 2


def test_leave_and_session_timeout_remove_members():
    g = ShareGroup("g")
    g.heartbeat(0, hb("a", 0, ["t"]), {"t": {0}}, CFG)
    g.heartbeat(5_000, hb("b", 0, ["t"]), {"t": {0}}, CFG)
    assert g.next_deadline() == 10_000
    assert g.tick(10_000) == ["a"]
    g.leave("b")
    assert g.state == ShareGroupState.EMPTY and g.is_empty


def test_records_round_trip():
    g = ShareGroup("g")
    g.heartbeat(0, hb("a", 0, ["t", "u"]), {"t": {0, 1}, "u": {0}}, CFG)
    g.heartbeat(0, hb("b", 0, ["t"]), {"t": {0, 1}, "u": {0}}, CFG)
    back = ShareGroup.from_records(
        "g", g.meta_record(), [g.member_record(m) for m in g.members.values()], 100, CFG
    )
    assert back.meta_record() == g.meta_record()
    for mid, m in g.members.items():
        assert back.member_record(back.members[mid]) == g.member_record(m)
    assert back.next_deadline() == 100 + CFG.session_timeout_ms
    with pytest.raises(ValueError):
        ShareGroup.from_records("g", {"version": 99}, [], 0, CFG)


@pytest.mark.parametrize(
    "members, partitions, shares",
    [
        (4, 1, {0: 4}),  # more members than partitions: every member gets it
        (2, 4, {0: 1, 1: 1, 2: 1, 3: 1}),
        (3, 2, {0: 2, 1: 2}),
        (1, 3, {0: 1, 1: 1, 2: 1}),
    ],
)
def test_simple_assignor_sharing(members, partitions, shares):
    subs = {f"m{i}": {"t"} for i in range(members)}
    out = simple_assign(subs, {"t": range(partitions)}, {})
    holders = {p: sum(p in a.get("t", ()) for a in out.values()) for p in range(partitions)}
    assert holders == shares
    loads = [len(a.get("t", ())) for a in out.values()]
    assert max(loads) - min(loads) <= 1 and min(loads) >= 1


def test_simple_assignor_is_sticky_and_follows_subscriptions():
    subs = {"a": {"t"}, "b": {"t"}}
    first = simple_assign(subs, {"t": range(4)}, {})
    again = simple_assign({**subs, "c": {"t"}}, {"t": range(4)}, first)
    # the two old members keep what they still may hold
    for m in ("a", "b"):
        assert again[m]["t"] <= first[m]["t"]
    mixed = simple_assign({"a": {"t", "u"}, "b": {"t"}}, {"t": range(2), "u": range(1)}, {})
    assert mixed["a"]["u"] == {0} and "u" not in mixed["b"]


def test_share_sessions():
    cache = ShareSessionCache(max_sessions=1)
    k0, k1 = ("tid", "t", 0), ("tid", "t", 1)
    with pytest.raises(KafkaError) as e:
        cache.new_context("g", "m", 0, [k0], [], True, "conn")
    assert e.value.code == ErrorCode.INVALID_REQUEST  # acknowledgements in a new session
    ctx = cache.new_context("g", "m", 0, [k0], [], False, "conn")
    assert ctx.full and ctx.partitions == [k0]
    with pytest.raises(KafkaError) as e:
        cache.new_context("g", "other", 0, [k0], [], False, "conn2")
    assert e.value.code == ErrorCode.SHARE_SESSION_LIMIT_REACHED
    with pytest.raises(KafkaError) as e:
        cache.new_context("g", "m", 5, [], [], False, "conn")
    assert e.value.code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    ctx = cache.new_context("g", "m", 1, [k1], [], False, "conn")
    assert not ctx.full and ctx.partitions == [k0, k1]
    ctx = cache.new_context("g", "m", 2, [], [("tid", 0)], False, "conn")
    assert ctx.partitions == [k1]
    assert cache.acknowledge_update("g", "m", 3).epoch == 4
    with pytest.raises(KafkaError) as e:
        cache.acknowledge_update("g", "m", 0)
    assert e.value.code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert [s.member_id for s in cache.disconnected("conn")] == ["m"]
    with pytest.raises(KafkaError) as e:
        cache.new_context("g", "m", -1, [], [], True, "conn")
    assert e.value.code == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert next_epoch(2**31 - 1) == 1


def test_group_config_validation():
    b = Bounds()
    validate({"share.auto.offset.reset": "earliest", "share.delivery.count.limit": "7"}, b)
    for bad in (
        {"share.delivery.count.limit": "1"},
        {"share.record.lock.duration.ms": "61000"},
        {"share.auto.offset.reset": "sometimes"},
        {"share.isolation.level": "yes"},
        {"consumer.session.timeout.ms": "45000"},
        {"no.such.config": "1"},
    ):
        with pytest.raises(ValueError):
            validate(bad, b)
    assert AutoOffsetReset.parse("by_duration:PT1H30M") == AutoOffsetReset("by_duration", 5_400_000)
    assert parse_duration_ms("P1DT0.5S") == 86_400_500
    assert parse_duration_ms("PT") is None and parse_duration_ms("1H") is None
