"""A KIP-848 group's index (coord/group/consumer_index.py: the owners of each partition, the
subscribed topic names and regexes, the members STABLE per epoch, the classic members, the
next deadline) is kept in step one member change at a time; after any sequence of joins,
heartbeats, subscription changes, fenced and stale heartbeats, leaves, static leaves and
rejoins, classic joins, syncs, heartbeats and leaves, timeouts, partition count changes and
reloads from the records it equals what a scan of every member computes (the scans it
replaced, which made a group's join wave quadratic: W24, docs/scale.md)."""

from __future__ import annotations

import struct
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.coord.group.classic import JoinRequest
from pybroker.coord.group.consumer import ConsumerGroup
from pybroker.coord.group.consumer_member import (
    ConsumerGroupConfig,
    ConsumerGroupError,
    ConsumerGroupState,
    HeartbeatRequest,
    MemberState,
)

CONFIG = ConsumerGroupConfig(session_timeout_ms=10_000)
NAMES = ["a", "b", "c"]
IDS = {t: uuid.UUID(int=i + 1) for i, t in enumerate(NAMES)}


def _str(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def subscription(topics: list[str], owned: dict[str, set[int]]) -> bytes:
    """A consumer protocol subscription, v1 (with the owned partitions)."""
    out = struct.pack(">hi", 1, len(topics)) + b"".join(_str(t) for t in topics)
    out += struct.pack(">i", -1) + struct.pack(">i", len(owned))
    for t, ps in owned.items():
        out += _str(t) + struct.pack(">i", len(ps)) + b"".join(struct.pack(">i", p) for p in ps)
    return out


# -- the from-scratch computations (what the index replaced) --------------------------------
def scanned_state(g: ConsumerGroup) -> ConsumerGroupState:
    if not g.members:
        return ConsumerGroupState.EMPTY
    if g.assignment_epoch < g.group_epoch:
        return ConsumerGroupState.ASSIGNING
    if any(
        m.epoch != g.assignment_epoch or m.state is not MemberState.STABLE
        for m in g.members.values()
    ):
        return ConsumerGroupState.RECONCILING
    return ConsumerGroupState.STABLE


def scanned_deadline(g: ConsumerGroup) -> int | None:
    deadlines = []
    for m in g.members.values():
        timeout = m.classic.session_timeout_ms if m.classic else CONFIG.session_timeout_ms
        deadlines.append(m.last_heartbeat_ms + timeout)
        deadlines += [d for d in (m.revocation_deadline_ms, m.classic_deadline_ms) if d is not None]
    return min(deadlines, default=None)


def scanned_owners(g: ConsumerGroup) -> dict[tuple[str, int], set[str]]:
    out: dict[tuple[str, int], set[str]] = {}
    for mid, m in g.members.items():
        for src in (m.assigned, m.pending_revocation):
            for t, ps in src.items():
                for p in ps:
                    out.setdefault((t, p), set()).add(mid)
    return out


def check(g: ConsumerGroup, topics: dict) -> None:
    subscribed: set[str] = set()
    for m in g.members.values():
        subscribed |= m.subscribed(topics)
    assert g.subscribed_topics(topics) == subscribed
    assert g._subscribed_partition_counts(topics) == {t: topics[t][1] for t in sorted(subscribed)}
    assert g.next_deadline() == scanned_deadline(g)
    if not g.dead:
        assert g.state is scanned_state(g)
    assert g.all_classic == (bool(g.members) and all(m.classic for m in g.members.values()))
    owners = scanned_owners(g)
    assert g._index.owners == owners
    everything = {t: set(range(n)) for t, (_, n) in topics.items()}
    for mid in g.members:
        others = {(t, p) for (t, p), who in owners.items() if who - {mid} and p in everything[t]}
        got = g._owned_by_others(mid, everything)
        assert {(t, p) for t, ps in got.items() for p in ps} == others
    # the heap's stale entries stay bounded by the members
    assert len(g._index._heap) <= 2 * len(g.members) + 65


# -- the operations ---------------------------------------------------------------------------
OPS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "join",
                "join_static",
                "heartbeat",
                "heartbeat",
                "heartbeat",
                "full_heartbeat",
                "subscribe",
                "fenced",
                "rejoin",
                "leave",
                "leave_static",
                "classic_join",
                "classic_sync",
                "classic_heartbeat",
                "classic_leave",
                "tick",
                "partitions",
                "reload",
            ]
        ),
        st.integers(0, 10**6),
        st.lists(st.sampled_from(NAMES), max_size=3, unique=True),
        st.sampled_from([None, None, None, "b|c", "a.*"]),
        st.integers(0, 12_000),
    ),
    max_size=60,
)


def owned_now(g: ConsumerGroup, mid: str, keep_pending: bool) -> dict[str, set[int]]:
    m = g.members[mid]
    out = {t: set(ps) for t, ps in m.assigned.items()}
    if keep_pending:
        for t, ps in m.pending_revocation.items():
            out.setdefault(t, set()).update(ps)
    return out


def hb(mid, epoch, *, topics=None, regex=None, owned=None, instance=None, timeout=-1):
    return HeartbeatRequest(
        member_id=mid,
        member_epoch=epoch,
        instance_id=instance,
        rack_id=None,
        rebalance_timeout_ms=timeout,
        subscribed_names=topics,
        subscribed_regex=regex,
        server_assignor=None,
        owned=owned,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(OPS)
def test_the_index_equals_a_scan_of_the_members_after_any_operations(ops):
    topics = {t: (IDS[t], 4) for t in NAMES}
    g = ConsumerGroup("g", CONFIG)
    now = 0
    for op, pick, names, regex, dt in ops:
        now += dt // 10
        ids = list(g.members)
        mid = ids[pick % len(ids)] if ids else None
        m = g.members.get(mid) if mid else None
        try:
            if op in ("join", "join_static"):
                instance = f"i{pick % 3}" if op == "join_static" else None
                g.heartbeat(
                    now,
                    hb("", 0, topics=names, regex=regex, owned={}, instance=instance, timeout=5000),
                    topics,
                )
            elif m is None:
                pass
            elif op == "heartbeat":
                g.heartbeat(now, hb(mid, m.epoch, owned=owned_now(g, mid, pick % 2 == 0)), topics)
            elif op == "full_heartbeat":
                g.heartbeat(
                    now,
                    hb(mid, m.epoch, topics=m.subscribed_names, owned=owned_now(g, mid, False)),
                    topics,
                )
            elif op == "subscribe":
                g.heartbeat(now, hb(mid, m.epoch, topics=names, regex=regex or ""), topics)
            elif op == "fenced":
                g.heartbeat(now, hb(mid, m.epoch + 1 + pick % 2, owned={}), topics)
            elif op == "rejoin":
                g.heartbeat(now, hb(mid, 0, topics=names, owned={}, timeout=4000), topics)
            elif op == "leave":
                g.heartbeat(now, hb(mid, -1), topics)
            elif op == "leave_static":
                g.heartbeat(now, hb(mid, -2, instance=m.instance_id), topics)
            elif op == "classic_join":
                join_id = mid if (m.classic is not None and pick % 2) else ""
                sub = subscription(names, owned_now(g, mid, False) if join_id else {})
                g.classic_join(
                    now,
                    JoinRequest(join_id, None, "c", "/h", 3000 + dt, 6000, "consumer",
                                [("range", sub)], False),
                    topics,
                )  # fmt: skip
            elif op == "classic_sync":
                g.classic_sync(now, mid, None, m.epoch, None, None)
            elif op == "classic_heartbeat":
                g.classic_heartbeat(now, mid, None, m.epoch)
            elif op == "classic_leave":
                g.classic_leave(now, [(mid, None)], topics)
            elif op == "tick":
                g.tick(now, topics)
            elif op == "partitions":
                t = NAMES[pick % len(NAMES)]
                topics = {**topics, t: (IDS[t], 1 + dt % 6)}
                g.heartbeat(now, hb(mid, m.epoch), topics)
            elif op == "reload":
                g = ConsumerGroup.from_records(
                    "g", CONFIG, g.meta_record(), [g.member_record(x) for x in g.members.values()],
                    now,
                )  # fmt: skip
        except ConsumerGroupError:
            pass
        check(g, topics)


def test_a_partition_two_members_claim_stays_owned_until_both_let_it_go():
    """Owners are counted per member: a partition two members' records both hold (a group
    loaded as it was stored) is free for neither while the other holds it."""
    topics = {"a": (IDS["a"], 2)}
    g = ConsumerGroup("g", CONFIG)
    r1 = g.heartbeat(0, hb("", 0, topics=["a"], owned={}, timeout=5000), topics)
    r2 = g.heartbeat(0, hb("", 0, topics=["a"], owned={}, timeout=5000), topics)
    one, two = r1["member_id"], r2["member_id"]
    records = [g.member_record(m) for m in g.members.values()]
    for r in records:
        r["assigned"] = {"a": [0, 1]}
    h = ConsumerGroup.from_records("g", CONFIG, g.meta_record(), records, 0)
    everything = {"a": {0, 1}}
    assert h._owned_by_others(one, everything) == everything
    h.heartbeat(1, hb(two, -1), topics)
    assert h._owned_by_others(one, everything) == {}
    check(h, topics)
