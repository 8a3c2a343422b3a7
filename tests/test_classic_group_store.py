"""Classic groups' metadata records (coord/classic_group_store.py) on the embedded store: a
coordinator started again over the same store lists an Empty group with the protocol type,
generation and empty-since time it had, whatever its id; deleting the group deletes them."""

from __future__ import annotations

import asyncio

from group_fixture import started_coordinator

from pybroker.clock import ManualClock
from pybroker.coord.group.classic import GroupState, JoinRequest
from pybroker.coord.group.classic_store import ClassicGroupStore, group_path
from pybroker.coord.group.coordinator import GroupCoordinator
from pybroker.coord.metadata import paths
from pybroker.coord.metadata.local import LocalStore
from pybroker.errors import ErrorCode

NAMES = ["g", "", ".", "..", "a/b", "%", "%2F", "grüße", "x" * 300]


async def _coordinator(store: LocalStore, clock: ManualClock) -> GroupCoordinator:
    return await started_coordinator(store, clock)


async def _join_and_leave(gc: GroupCoordinator, group: str) -> None:
    req = JoinRequest(
        "", None, "c", "/127.0.0.1", 10_000, 10_000, "consumer", [("range", b"")], True
    )
    r = await gc.join(group, req)
    assert r["error_code"] == ErrorCode.MEMBER_ID_REQUIRED, r
    req.member_id = r["member_id"]
    r = await gc.join(group, req)
    assert r["error_code"] == ErrorCode.NONE, r
    s = await gc.sync(group, req.member_id, None, r["generation_id"], "consumer", "range", {})
    assert s["error_code"] == ErrorCode.NONE, s
    assert await gc.leave(group, [(req.member_id, None)]) == [ErrorCode.NONE]


def test_an_empty_groups_metadata_outlives_its_coordinator(tmp_path):
    async def main() -> None:
        clock = ManualClock(1_000_000)
        store = LocalStore(tmp_path / "meta")
        await store.start()
        await store.ensure_path(paths.CLASSIC_GROUPS)
        gc = await _coordinator(store, clock)
        for name in NAMES:
            await _join_and_leave(gc, name)
        before = {g.group_id: (g.protocol_type, g.state, g.generation_id) for g in gc.list_groups()}
        assert before == {n: ("consumer", GroupState.EMPTY, 2) for n in NAMES}
        emptied_at = clock.time_ms()
        await gc.stop()  # a clean stop writes what is pending

        clock.advance(60_000)
        gc = await _coordinator(store, clock)
        after = {
            g.group_id: (g.protocol_type, g.state, g.generation_id, g.state_timestamp_ms)
            for g in gc.list_groups()
        }
        assert after == {n: ("consumer", GroupState.EMPTY, 2, emptied_at) for n in NAMES}
        assert gc.describe(".")["protocol_type"] == "consumer"
        # a member joins the loaded group: the generation carries on
        await _join_and_leave(gc, "a/b")
        assert gc.groups["a/b"].generation_id == 4
        # DeleteGroups removes the record with the group
        assert await gc.delete("a/b") == ErrorCode.NONE
        assert await store.exists(group_path("a/b")) is None
        await gc.stop()

        gc = await _coordinator(store, clock)
        assert sorted(g.group_id for g in gc.list_groups()) == sorted(set(NAMES) - {"a/b"})
        await gc.stop()
        await store.close()

    asyncio.run(main())


def test_records_of_one_group_land_in_the_order_saved(tmp_path):
    async def main() -> None:
        store = LocalStore(tmp_path / "meta")
        await store.start()
        cs = ClassicGroupStore(store)
        for gen in range(1, 20):
            cs.save("g", {"protocol_type": "consumer", "generation": gen})
        await cs.flush("g")
        assert (await ClassicGroupStore(store).load("g"))["generation"] == 19
        cs.save("g", None)
        cs.save("h", None)  # nothing stored: nothing to delete
        await cs.drain()
        assert await ClassicGroupStore(store).load("g") is None
        assert await cs.groups() == []
        await store.close()

    asyncio.run(main())
