"""A KIP-848 heartbeat writes only the records of its own member (a leave deletes it) and of
the members ``take_target_changed`` names (those whose target moved, and a replaced static
member's old id, whose record is deleted), so that a heartbeat costs no comparison or scan of
every stored member (W24 at 1,000 members, docs/scale.md).  After any sequence of joins,
static joins and replacements, heartbeats, subscription changes, rejoins, leaves, static
leaves and session expiries, each written as the coordinator writes it, a full comparison of
the group with what is stored finds nothing left to write or delete."""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.coord.group.consumer import ConsumerGroup
from pybroker.coord.group.consumer_member import ConsumerGroupError
from pybroker.coord.group.consumer_store import ConsumerGroupStore
from tests.test_consumer_group_index import CONFIG, IDS, NAMES, hb, owned_now
from tests.test_consumer_group_store import open_store

OPS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "join",
                "join",
                "join_static",
                "heartbeat",
                "heartbeat",
                "full_heartbeat",
                "subscribe",
                "rejoin",
                "leave",
                "leave_static",
                "tick",
            ]
        ),  # fmt: skip
        st.integers(0, 10**6),
        st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True),
        st.integers(0, 12_000),
    ),
    max_size=50,
)


async def stores(tmp_path) -> tuple:
    store = await open_store(tmp_path)
    cgs = ConsumerGroupStore(store)
    assert await cgs.load("g") is None
    return store, cgs


def write(cgs: ConsumerGroupStore, g: ConsumerGroup, member_ids: list[str] | None) -> None:
    """What coordinator_core._persist plans (the write itself is not needed: ``plan`` keeps
    what is stored)."""
    if member_ids is None:
        g.take_target_changed()
    cgs.plan(g, member_ids)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(OPS)
def test_a_heartbeats_limited_write_leaves_nothing_for_a_full_comparison(tmp_path_factory, ops):
    asyncio.run(run(tmp_path_factory.mktemp("s"), ops))


async def run(tmp_path, ops) -> None:
    store, cgs = await stores(tmp_path)
    topics = {t: (IDS[t], 4) for t in NAMES}
    g = ConsumerGroup("g", CONFIG)
    now = 0
    try:
        for op, pick, names, dt in ops:
            now += dt // 10
            ids = list(g.members)
            mid = ids[pick % len(ids)] if ids else None
            m = g.members.get(mid) if mid else None
            if op == "tick":
                g.tick(now, topics)
                write(cgs, g, None)  # the coordinator's timer writes the whole group
                assert cgs.plan(g) is None
                continue
            if op in ("join", "join_static"):
                instance = f"i{pick % 3}" if op == "join_static" else None
                req = hb("", 0, topics=names, owned={}, instance=instance, timeout=5000)
            elif m is None:
                continue
            elif op == "heartbeat":
                req = hb(mid, m.epoch, owned=owned_now(g, mid, pick % 2 == 0))
            elif op == "full_heartbeat":
                req = hb(mid, m.epoch, topics=m.subscribed_names, owned=owned_now(g, mid, False))
            elif op == "subscribe":
                req = hb(mid, m.epoch, topics=names)
            elif op == "rejoin":
                req = hb(mid, 0, topics=names, owned={}, timeout=4000)
            elif op == "leave":
                req = hb(mid, -1)
            else:  # leave_static
                req = hb(mid, -2, instance=m.instance_id)
            try:
                resp = g.heartbeat(now, req, topics)
            except ConsumerGroupError:
                resp = {}
            # as coordinator_consumer.consumer_heartbeat writes it
            write(
                cgs, g, [resp.get("member_id") or req.member_id, *sorted(g.take_target_changed())]
            )
            assert cgs.plan(g) is None  # nothing a full comparison would write or delete
    finally:
        await store.close()
