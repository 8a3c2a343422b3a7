"""The classic group state machine, driven directly: no sockets, no sleeping."""

from __future__ import annotations

import itertools

import pytest

from pybroker.coord.group.classic import Group, GroupConfig, GroupState, JoinRequest
from pybroker.errors import ErrorCode as E

_tokens = itertools.count()


def req(
    member_id: str = "",
    *,
    protocols=(("range", b"m"),),
    instance=None,
    session=10000,
    rebalance=30000,
    v4=True,
    client="c",
) -> JoinRequest:
    return JoinRequest(
        member_id=member_id,
        group_instance_id=instance,
        client_id=client,
        client_host="/127.0.0.1",
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance,
        protocol_type="consumer",
        protocols=list(protocols),
        require_known_member_id=v4,
    )


class Driver:
    def __init__(self, delay: int = 0) -> None:
        self.g = Group(
            "g", GroupConfig(min_session_timeout_ms=1000, initial_rebalance_delay_ms=delay)
        )
        self.now = 0
        self.ready: dict[int, dict] = {}

    def _collect(self, outputs) -> None:
        for token, resp in outputs:
            assert token not in self.ready, "a reply was answered twice"
            self.ready[token] = resp

    def join(self, r: JoinRequest, *, fire: bool = True) -> int:
        t = next(_tokens)
        self._collect(self.g.join(t, self.now, r))
        if fire:
            self.fire_due()
        return t

    def fire_due(self) -> None:
        """As the shell's timer does on the event loop's next pass: apply the deadlines
        that are due now (a new group's first rebalance completes only on its timer)."""
        for _ in range(10):
            deadline = self.g.next_deadline()
            if deadline is None or deadline > self.now:
                return
            self._collect(self.g.tick(self.now))
        raise AssertionError("a deadline that is due keeps coming back")

    def sync(self, member_id: str, generation: int, assignments=None) -> int:
        t = next(_tokens)
        self._collect(
            self.g.sync(
                t, self.now, member_id, None, generation, "consumer", None, assignments or {}
            )
        )
        return t

    def tick(self, ms: int) -> None:
        self.now += ms
        self._collect(self.g.tick(self.now))

    def new_member(self, **kw) -> str:
        """v4 flow: MEMBER_ID_REQUIRED, then the join with the issued id (parked or answered)."""
        t = self.join(req(**kw))
        resp = self.ready.pop(t)
        assert resp["error_code"] == E.MEMBER_ID_REQUIRED
        self.last_join = self.join(req(resp["member_id"], **kw))
        return resp["member_id"]


def test_single_member_becomes_leader_and_stable() -> None:
    d = Driver()
    a = d.new_member()
    j = d.ready.pop(d.last_join)
    assert j["error_code"] == E.NONE and j["generation_id"] == 1 and j["leader"] == a
    assert j["protocol_name"] == "range" and [m["member_id"] for m in j["members"]] == [a]
    s = d.sync(a, 1, {a: b"assign-a"})
    assert d.ready.pop(s)["assignment"] == b"assign-a"
    assert d.g.state == GroupState.STABLE


def test_second_member_triggers_rebalance_and_both_get_assignments() -> None:
    d = Driver()
    a = d.new_member()
    d.ready.pop(d.last_join)
    d.ready.pop(d.sync(a, 1, {a: b"x"}))
    b = d.new_member()
    assert d.last_join not in d.ready  # parked until a rejoins
    assert d.g.state == GroupState.PREPARING_REBALANCE
    assert d.g.heartbeat(d.now, a, None, 1) == E.REBALANCE_IN_PROGRESS
    ja = d.join(req(a))
    ra, rb = d.ready.pop(ja), d.ready.pop(d.last_join)
    assert ra["generation_id"] == rb["generation_id"] == 2
    assert ra["leader"] == a and len(ra["members"]) == 2 and rb["members"] == []
    sb = d.sync(b, 2)  # follower waits for the leader
    assert sb not in d.ready
    sa = d.sync(a, 2, {a: b"A", b: b"B"})
    assert d.ready.pop(sa)["assignment"] == b"A" and d.ready.pop(sb)["assignment"] == b"B"
    assert d.g.heartbeat(d.now, b, None, 2) == E.NONE


def test_old_clients_get_member_id_with_the_join() -> None:
    d = Driver()
    t = d.join(req(v4=False))
    r = d.ready.pop(t)
    assert r["error_code"] == E.NONE and r["member_id"] and r["leader"] == r["member_id"]


def test_errors() -> None:
    d = Driver()
    a = d.new_member()
    d.ready.pop(d.last_join)
    assert d.ready.pop(d.join(req(session=10)))["error_code"] == E.INVALID_SESSION_TIMEOUT
    bad = req(protocols=(("other", b""),))
    assert d.ready.pop(d.join(bad))["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL
    assert d.ready.pop(d.join(req("nobody")))["error_code"] == E.UNKNOWN_MEMBER_ID
    assert d.ready.pop(d.sync(a, 7))["error_code"] == E.ILLEGAL_GENERATION
    assert d.g.heartbeat(d.now, "nobody", None, 1) == E.UNKNOWN_MEMBER_ID
    assert d.g.heartbeat(d.now, a, None, 0) == E.ILLEGAL_GENERATION


def test_session_timeout_removes_member_and_rebalances() -> None:
    d = Driver()
    a = d.new_member(session=6000)
    d.ready.pop(d.last_join)
    b = d.new_member(session=6000)
    d.join(req(a, session=6000))
    d.ready.clear()
    d.sync(b, 2)
    d.sync(a, 2, {a: b"A", b: b"B"})
    d.ready.clear()
    d.tick(3000)
    assert d.g.heartbeat(d.now, a, None, 2) == E.NONE  # a keeps heartbeating, b is silent
    d.tick(3001)
    assert b not in d.g.members and d.g.state == GroupState.PREPARING_REBALANCE
    t = d.join(req(a, session=6000))
    r = d.ready.pop(t)
    assert r["generation_id"] == 3 and [m["member_id"] for m in r["members"]] == [a]


def test_rebalance_timeout_drops_members_that_do_not_rejoin() -> None:
    d = Driver()
    a = d.new_member(rebalance=5000)
    d.ready.pop(d.last_join)
    d.sync(a, 1, {})
    b = d.new_member(rebalance=5000)
    d.ready.clear()
    d.tick(5000)  # a never rejoins
    r = d.ready.pop(d.last_join)
    assert r["generation_id"] == 2 and r["leader"] == b and a not in d.g.members


def test_leave_moves_to_rebalance_and_last_leave_empties_group() -> None:
    d = Driver()
    a = d.new_member()
    d.ready.pop(d.last_join)
    b = d.new_member()
    d.join(req(a))
    d.ready.clear()
    d.sync(b, 2)
    d.sync(a, 2, {})
    d.ready.clear()
    errors, out = d.g.leave(d.now, [(b, None)])
    assert errors == [E.NONE] and d.g.state == GroupState.PREPARING_REBALANCE
    r = d.ready.get(d.join(req(a)))
    assert r["generation_id"] == 3
    errors, _ = d.g.leave(d.now, [(a, None), ("ghost", None)])
    assert errors == [E.NONE, E.UNKNOWN_MEMBER_ID]
    assert d.g.state == GroupState.EMPTY and d.g.generation_id == 4


def test_a_leave_during_a_rebalance_completes_the_join_of_the_members_that_rejoined() -> None:
    """W7's fast mode: members that already rejoined do not wait for the leaving ones (nor for
    the rebalance timeout); a batch LeaveGroup (v3+) of two members completes it at once."""
    d = Driver()
    a = d.new_member()
    d.ready.pop(d.last_join)
    d.ready.pop(d.sync(a, 1, {a: b"x"}))
    b, c, e = d.new_member(), d.new_member(), d.new_member()
    d.ready.clear()
    d.join(req(a))
    d.ready.clear()
    for m in (a, b, c, e):
        d.sync(m, 2, {a: b"A"} if m == a else None)
    d.ready.clear()
    assert d.g.state == GroupState.STABLE and d.g.generation_id == 2
    ja = d.join(req(a, protocols=(("range", b"changed"),)))  # a rejoins: a rebalance starts
    assert d.g.heartbeat(d.now, b, None, 2) == E.REBALANCE_IN_PROGRESS
    jb = d.join(req(b))
    assert ja not in d.ready and jb not in d.ready
    errors, out = d.g.leave(d.now, [(c, None), (e, None)])  # one request, two members
    assert errors == [E.NONE, E.NONE]
    d._collect(out)
    ra, rb = d.ready.pop(ja), d.ready.pop(jb)
    assert ra["generation_id"] == rb["generation_id"] == 3
    assert {m["member_id"] for m in ra["members"] + rb["members"]} == {a, b}
    assert d.g.state == GroupState.COMPLETING_REBALANCE


def test_initial_rebalance_delay_collects_members() -> None:
    d = Driver(delay=3000)
    a = d.new_member(rebalance=60000)
    assert d.last_join not in d.ready
    ja = d.last_join
    d.tick(2000)
    b = d.new_member(rebalance=60000)  # joins during the delay: extends it
    jb = d.last_join
    d.tick(1000)
    assert ja not in d.ready and jb not in d.ready
    d.tick(3000)
    ra, rb = d.ready.pop(ja), d.ready.pop(jb)
    assert ra["generation_id"] == rb["generation_id"] == 1
    assert {m["member_id"] for m in ra["members"] + rb["members"]} == {a, b}


def test_static_member_restart_keeps_assignment_and_fences_old_id() -> None:
    d = Driver()
    r = d.ready.pop(d.join(req(instance="i-a")))
    assert r["error_code"] == E.NONE  # static members get their id without MEMBER_ID_REQUIRED
    a = r["member_id"]
    d.ready.pop(d.sync(a, 1, {a: b"A"}))
    b_join = d.join(req(instance="i-b"))
    b = d.ready.get(b_join, {}).get("member_id") or d.g.static_members["i-b"]
    d.ready.pop(d.join(req(a, instance="i-a")))
    d.ready.clear()
    d.sync(b, 2)
    d.sync(a, 2, {a: b"A", b: b"B"})
    d.ready.clear()
    # b restarts: joins with no member id but the same instance id, no rebalance
    t = d.join(req(instance="i-b"))
    r = d.ready.pop(t)
    new_b = r["member_id"]
    assert r["error_code"] == E.NONE and new_b != b and d.g.state == GroupState.STABLE
    assert d.ready.pop(d.sync(new_b, 2))["assignment"] == b"B"
    assert d.g.heartbeat(d.now, b, "i-b", 2) == E.FENCED_INSTANCE_ID


def _stable_static_pair(d: Driver) -> tuple[str, str]:
    """Static members i-a (the leader) and i-b in a Stable generation 2; (a, b)."""
    a = d.ready.pop(d.join(req(instance="i-a")))["member_id"]
    d.ready.pop(d.sync(a, 1, {a: b"A"}))
    b_join = d.join(req(instance="i-b"))
    b = d.ready.get(b_join, {}).get("member_id") or d.g.static_members["i-b"]
    d.ready.pop(d.join(req(a, instance="i-a")))
    d.ready.clear()
    d.sync(b, 2)
    d.sync(a, 2, {a: b"A", b: b"B"})
    d.ready.clear()
    assert d.g.state == GroupState.STABLE and d.g.leader_id == a
    return a, b


def test_static_leader_restart_does_not_rebalance() -> None:
    """librdkafka's 0102: the leader restarts within its session timeout; Kafka replaces its
    member id without a rebalance (the selected protocol is unchanged) and answers with the
    old leader id and no member list, so the restarted member does not assign."""
    d = Driver()
    a, b = _stable_static_pair(d)
    r = d.ready.pop(d.join(req(instance="i-a")))
    new_a = r["member_id"]
    assert (r["error_code"], r["generation_id"]) == (E.NONE, 2)
    assert new_a != a and r["leader"] == a and r["members"] == []
    assert d.g.state == GroupState.STABLE and d.g.leader_id == new_a
    assert d.ready.pop(d.sync(new_a, 2))["assignment"] == b"A"
    # the other member's heartbeat sees no rebalance; the old id is fenced
    assert d.g.heartbeat(d.now, b, "i-b", 2) == E.NONE
    assert d.g.heartbeat(d.now, a, "i-a", 2) == E.FENCED_INSTANCE_ID


def test_static_rejoin_changing_the_selected_protocol_rebalances() -> None:
    d = Driver()
    a, b = _stable_static_pair(d)
    # b now prefers rr, which a does not support: range stays selected, no rebalance
    t = d.join(req(instance="i-b", protocols=(("rr", b"m"), ("range", b"m"))))
    assert d.ready[t]["error_code"] == E.NONE and d.g.state == GroupState.STABLE  # answered
    b = d.ready[t]["member_id"]
    d.ready.clear()
    # both prefer a protocol both support: the selection changes, so the group rebalances
    d.join(req(instance="i-a", protocols=(("rr", b"m"), ("range", b"m"))))
    assert d.g.state == GroupState.PREPARING_REBALANCE
    assert d.g.heartbeat(d.now, b, "i-b", 2) == E.REBALANCE_IN_PROGRESS


def test_commit_validation() -> None:
    d = Driver()
    assert d.g.validate_commit("", None, -1) == E.NONE  # simple consumer on an empty group
    a = d.new_member()
    d.ready.pop(d.last_join)
    assert d.g.validate_commit(a, None, 1) == E.REBALANCE_IN_PROGRESS  # CompletingRebalance
    d.ready.pop(d.sync(a, 1, {}))
    assert d.g.validate_commit(a, None, 1) == E.NONE
    assert d.g.validate_commit(a, None, 0) == E.ILLEGAL_GENERATION
    assert d.g.validate_commit("x", None, 1) == E.UNKNOWN_MEMBER_ID
    assert d.g.validate_commit("", None, -1) == E.UNKNOWN_MEMBER_ID


def test_commit_renews_the_session() -> None:
    d = Driver()
    a = d.new_member(session=6000)
    d.ready.pop(d.last_join)
    d.ready.pop(d.sync(a, 1, {}))
    d.tick(5000)
    assert d.g.validate_commit(a, None, 1, d.now) == E.NONE
    d.tick(5000)  # 10 s after the last heartbeat, 5 s after the commit: still a member
    assert a in d.g.members
    d.tick(1001)
    assert a not in d.g.members


def test_illegal_transition_is_refused() -> None:
    d = Driver()
    with pytest.raises(AssertionError):
        d.g._transition(GroupState.STABLE, 0)


def test_protocol_selected_by_vote() -> None:
    d = Driver()
    a = d.new_member(protocols=(("range", b"1"), ("roundrobin", b"2")))
    d.ready.pop(d.last_join)
    d.sync(a, 1, {})
    d.new_member(protocols=(("roundrobin", b"3"), ("range", b"4")))
    t = d.join(req(a, protocols=(("roundrobin", b"1"), ("range", b"2"))))
    r = d.ready.pop(t)
    assert r["protocol_name"] == "roundrobin"
    assert {m["metadata"] for m in r["members"]} == {b"1", b"3"}


def test_unload_answers_parked_members_not_coordinator() -> None:
    """Coordination moved away (Kafka's onGroupUnloaded): the group is Dead here and members
    parked in JoinGroup / SyncGroup are told NOT_COORDINATOR, each exactly once."""
    d = Driver()
    a = d.new_member()
    d.ready.pop(d.last_join)
    d.ready.pop(d.sync(a, 1, {a: b"x"}))
    d.new_member()  # b parks in JoinGroup while a has to rejoin
    parked_join = d.last_join
    assert parked_join not in d.ready
    d._collect(d.g.unload(d.now))
    resp = d.ready.pop(parked_join)
    assert resp["error_code"] == E.NOT_COORDINATOR
    assert d.g.state == GroupState.DEAD
    assert d.g.unload(d.now) == []  # nothing is answered twice


def test_unload_answers_a_parked_sync() -> None:
    d = Driver()
    a = d.new_member()
    d.ready.pop(d.last_join)
    b = d.new_member()
    ja = d.join(req(a))
    d.ready.pop(ja)
    d.ready.pop(d.last_join)
    sb = d.sync(b, 2)  # waits for the leader's assignment
    assert sb not in d.ready
    d._collect(d.g.unload(d.now))
    assert d.ready.pop(sb)["error_code"] == E.NOT_COORDINATOR


def test_joins_before_the_initial_timer_share_generation_one() -> None:
    """Kafka's InitialDelayedJoin, also with group.initial.rebalance.delay.ms=0: a new group's
    first rebalance completes on its timer, not on the first join, so members whose joins
    arrive together all get generation 1, and no SyncGroup is answered REBALANCE_IN_PROGRESS."""
    d = Driver(delay=0)
    ids = [d.ready.pop(d.join(req(client=c)))["member_id"] for c in ("a", "b", "c")]
    joins = [d.join(req(mid), fire=False) for mid in ids]
    assert not any(t in d.ready for t in joins)  # the first join waits for the timer too
    d.fire_due()
    answers = {mid: d.ready.pop(t) for mid, t in zip(ids, joins, strict=True)}
    assert {a["error_code"] for a in answers.values()} == {E.NONE}
    assert {a["generation_id"] for a in answers.values()} == {1}
    leader = answers[ids[0]]["leader"]
    assert sorted(m["member_id"] for m in answers[leader]["members"]) == sorted(ids)
    followers = [mid for mid in ids if mid != leader]
    syncs = {mid: d.sync(mid, 1) for mid in followers}
    syncs[leader] = d.sync(leader, 1, {mid: mid.encode() for mid in ids})
    for mid, t in syncs.items():
        s = d.ready.pop(t)
        assert s["error_code"] == E.NONE and s["assignment"] == mid.encode()
    assert d.g.state == GroupState.STABLE and d.g.generation_id == 1


def test_a_lone_first_member_is_answered_by_the_timer() -> None:
    """With no other joins, the first member still gets generation 1 once the timer fires."""
    d = Driver(delay=0)
    a = d.ready.pop(d.join(req()))["member_id"]
    t = d.join(req(a), fire=False)
    assert t not in d.ready and d.g.next_deadline() == d.now
    d.fire_due()
    r = d.ready.pop(t)
    assert r["generation_id"] == 1 and r["leader"] == a
