"""A classic group's protocol support and parked joins (coord/group/classic_tally.py: how
many members support each protocol name, how many wait in JoinGroup) are kept one member
change at a time; after any sequence of joins (new, known, static, with a required member
id, with protocol lists that share a name or none), syncs, heartbeats, commits, leaves,
expiries, rebalances, a downgrade and an unload they equal what a scan of every member
computes (the scans they replaced cost O(members) on every JoinGroup: W24 at 1,000 members,
docs/scale.md), so JoinGroup accepts exactly the protocols every member supports, and a
rebalance completes exactly when every member has joined."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.coord.group.classic import Group, Member
from tests.test_classic_group_deadlines import CONFIG, NAMES, OPS, join_req, run


def check(g: Group) -> None:
    sets = [{n for n, _ in m.protocols} for m in g.members.values()]
    common = set.intersection(*sets) if sets else set()
    assert g._tally.candidates(len(g.members)) == common
    assert g._tally._supported == Counter(n for names in sets for n in names)
    for names in NAMES if g.members else []:  # (an empty group takes any protocol)
        assert g._tally.supported_by_all(names, len(g.members)) == bool(common & set(names))
    parked = sum(m.awaiting_join is not None for m in g.members.values())
    assert g._tally.awaiting_join == parked
    assert g._all_joined() == (not g.pending_members and parked == len(g.members))


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(OPS)
def test_the_tally_equals_a_scan_of_the_members_after_any_operations(ops):
    g = Group("g", CONFIG)
    run(g, ops, check)
    g.unload(10**7)
    check(g)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(1, 5), OPS)
def test_a_downgraded_group_tallies_its_members(n, ops):
    members = [
        Member(f"m{i}", None, "c", "/h", 6000, 20_000, "consumer", [("range", b"x")], 0)
        for i in range(n)
    ]
    g, _ = Group.downgraded("g", CONFIG, 3, members, 0)
    check(g)
    run(g, ops, check)


def test_a_join_with_no_protocol_in_common_is_refused_and_one_in_common_is_taken():
    g = Group("g", CONFIG)
    g.join("a", 0, join_req("", 6000, names=["range", "cooperative-sticky"]))
    g.join("b", 0, join_req("", 6000, names=["cooperative-sticky"]))
    [(_, refused)] = g.join("c", 0, join_req("", 6000, names=["range"]))
    assert refused["error_code"] == 23  # INCONSISTENT_GROUP_PROTOCOL
    while g.state.value == "PreparingRebalance":  # the initial delay, then its extensions
        g.tick(g.next_deadline())
    assert g.protocol_name == "cooperative-sticky" and len(g.members) == 2


def stable_group_of_two_static_members() -> Group:
    g = Group("g", CONFIG)
    for i in ("i0", "i1"):
        g.join(i, 0, join_req("", 6000, instance=i, names=["range", "cooperative-sticky"]))
    while g.state.value == "PreparingRebalance":
        g.tick(g.next_deadline())
    g.sync("s", 200, g.leader_id, g.members[g.leader_id].group_instance_id, g.generation_id,
           None, None, {})  # fmt: skip
    assert g.state.value == "Stable" and g.protocol_name == "range"
    check(g)
    return g


def test_a_static_member_restarted_with_other_protocols_keeping_the_selection_is_tallied():
    g = stable_group_of_two_static_members()
    other = next(m for m in g.members.values() if m.member_id != g.leader_id)
    g.join("r", 300, join_req("", 6000, instance=other.group_instance_id, names=["range"]))
    assert g.state.value == "Stable"  # the selected protocol is still range: no rebalance
    check(g)
    assert g._tally.candidates(2) == {"range"}


def test_a_static_member_restarted_with_protocols_changing_the_selection_rebalances_tallied():
    g = stable_group_of_two_static_members()
    other = next(m for m in g.members.values() if m.member_id != g.leader_id)
    names = ["cooperative-sticky"]
    g.join("r", 300, join_req("", 6000, instance=other.group_instance_id, names=names))
    assert g.state.value == "PreparingRebalance"
    check(g)
    assert g._tally.candidates(2) == {"cooperative-sticky"}
