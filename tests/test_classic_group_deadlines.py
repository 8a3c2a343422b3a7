"""A classic group's next deadline (coord/group/classic.py: members' sessions, pending
members, the rebalance timer) is kept in a heap one member change at a time; after any
sequence of joins (new, known, static, with a required member id), syncs, heartbeats,
commits, leaves, expiries, rebalances and a downgrade from a KIP-848 group it equals what a
scan of every member computes (the scan it replaced cost O(members) after every request of
a group: W24, docs/scale.md), and the heap's stale entries stay bounded by the members."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.coord.group.classic import Group, GroupConfig, JoinRequest, Member

CONFIG = GroupConfig(initial_rebalance_delay_ms=100)


def scanned_deadline(g: Group) -> int | None:
    """The scan next_deadline replaced (the oracle)."""
    deadlines = [
        m.last_heartbeat_ms + m.session_timeout_ms
        for m in g.members.values()
        if m.awaiting_join is None
    ]
    deadlines += list(g.pending_members.values())
    if g.rebalance_deadline_ms is not None:
        deadlines.append(g.rebalance_deadline_ms)
    return min(deadlines, default=None)


def check(g: Group) -> None:
    assert g.next_deadline() == scanned_deadline(g)
    assert len(g._deadlines) <= 2 * (len(g.members) + len(g.pending_members)) + 65


OPS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "join",
                "join",
                "join_required",
                "join_static",
                "rejoin",
                "rejoin_protocols",
                "join_names",
                "rejoin_names",
                "sync",
                "heartbeat",
                "heartbeat",
                "heartbeat",
                "commit",
                "leave",
                "leave_static",
                "tick",
                "tick_due",
                "tick_due",
                "sync",
            ]
        ),
        st.integers(0, 10**6),
        st.integers(0, 12_000),
        st.sampled_from([6000, 7000, 10_000]),
    ),
    max_size=80,
)


# protocol name lists a member may join with (some share no name with others)
NAMES = [["range"], ["range", "cooperative-sticky"], ["cooperative-sticky", "range"],
         ["cooperative-sticky"], ["roundrobin"]]  # fmt: skip


def join_req(
    mid, timeout, *, instance=None, required=False, proto=b"x", names=("range",)
) -> JoinRequest:
    return JoinRequest(mid, instance, "c", "/h", timeout, 5000, "consumer",
                       [(n, proto) for n in names], required)  # fmt: skip


def run(g: Group, ops, check=check) -> None:
    now = 0
    replies = itertools.count()
    check(g)
    for op, pick, dt, timeout in ops:
        now += dt // 10
        ids = list(g.members)
        mid = ids[pick % len(ids)] if ids else None
        m = g.members.get(mid) if mid else None
        if op in ("join", "join_static"):
            instance = f"i{pick % 3}" if op == "join_static" else None
            names = NAMES[pick // 3 % len(NAMES)] if op == "join_static" else ("range",)
            g.join(next(replies), now, join_req("", timeout, instance=instance, names=names))
        elif op == "join_required":
            pending = list(g.pending_members)
            if pending and pick % 2:
                g.join(next(replies), now, join_req(pending[pick % len(pending)], timeout))
            else:
                g.join(next(replies), now, join_req("", timeout, required=True))
        elif op == "join_names":
            g.join(next(replies), now, join_req("", timeout, names=NAMES[pick % len(NAMES)]))
        elif op == "tick":
            g.tick(now)
        elif op == "tick_due":  # the coordinator's timer: at the next deadline
            now = max(now, g.next_deadline() or now)
            g.tick(now)
        elif m is None:
            pass
        elif op in ("rejoin", "rejoin_protocols"):
            proto = bytes([pick % 3]) if op == "rejoin_protocols" else m.protocols[0][1]
            g.join(next(replies), now,
                   join_req(mid, timeout, instance=m.group_instance_id, proto=proto))  # fmt: skip
        elif op == "rejoin_names":
            names = NAMES[pick % len(NAMES)]
            g.join(next(replies), now,
                   join_req(mid, timeout, instance=m.group_instance_id, names=names))  # fmt: skip
        elif op == "sync":
            assignments = {o: b"a" for o in g.members} if mid == g.leader_id else {}
            g.sync(next(replies), now, mid, m.group_instance_id, g.generation_id, None, None,
                   assignments)  # fmt: skip
        elif op == "heartbeat":
            g.heartbeat(now, mid, m.group_instance_id, g.generation_id)
        elif op == "commit":
            g.validate_commit(mid, m.group_instance_id, g.generation_id, now)
        elif op == "leave":
            g.leave(now, [(mid, None)])
        elif op == "leave_static":
            g.leave(now, [("", m.group_instance_id or "none")])
        check(g)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(OPS)
def test_next_deadline_equals_a_scan_of_the_members_after_any_operations(ops):
    g = Group("g", CONFIG)
    run(g, ops)
    g.unload(10**7)  # parked joins are answered: their sessions count again
    check(g)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(1, 5), OPS)
def test_a_downgraded_group_tracks_its_members_deadlines(n, ops):
    members = [
        Member(f"m{i}", None, "c", "/h", 6000 + 1000 * i, 20_000, "consumer", [("range", b"x")], 0)
        for i in range(n)
    ]
    g, _ = Group.downgraded("g", CONFIG, 3, members, 0)
    run(g, ops)


def test_many_heartbeats_keep_the_heap_bounded():
    g = Group("g", CONFIG)
    for i in range(50):
        g.join(i, 0, join_req("", 6000))
    g.tick(100)
    leader = g.leader_id
    g.sync("s", 100, leader, None, g.generation_id, None, None, {})
    for now in range(200, 20_000):
        mid = list(g.members)[now % 50]
        g.heartbeat(now, mid, None, g.generation_id)
        check(g)


def test_a_static_member_replaced_in_a_stable_group_keeps_its_session():
    g = Group("g", CONFIG)
    g.join("j", 0, join_req("", 6000, instance="i"))
    g.tick(g.next_deadline())
    g.sync("s", 200, g.leader_id, "i", g.generation_id, None, None, {})
    check(g)
    g.join("j2", 1000, join_req("", 7000, instance="i"))  # a restart: same protocols
    assert g.state.value == "Stable"
    check(g)
    assert g.next_deadline() == 8000


def test_an_unloaded_group_counts_the_sessions_of_members_that_were_parked_in_a_join():
    def req(mid):
        return JoinRequest(mid, None, "c", "/h", 6000, 20_000, "consumer", [("r", b"x")], False)

    g = Group("g", CONFIG)
    g.join("a", 0, req(""))
    g.tick(g.next_deadline())
    a = g.leader_id
    g.sync("s", 100, a, None, g.generation_id, None, None, {})
    g.join("b", 1000, req(""))  # parked until the rebalance completes
    g.heartbeat(3000, a, None, g.generation_id)
    g.unload(3000)
    check(g)
    assert g.next_deadline() == 7000  # b's session, from its join
