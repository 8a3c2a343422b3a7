"""A classic group's session timer (GroupCoordinator._schedule): an offset commit counts as a
heartbeat (Kafka's doCommitOffsets) and pushes the member's deadline out without a new timer
each time; the timer due earlier wakes, finds the member alive and waits again, and the member
that stops committing is still removed once its session timeout has passed."""

from __future__ import annotations

import asyncio

import pytest
from broker_fixture import LOOPS
from group_fixture import started_coordinator

from pybroker import event_loop
from pybroker.clock import Clock, ManualClock
from pybroker.coord.group.classic import GroupState, JoinRequest
from pybroker.coord.metadata.local import LocalStore
from pybroker.errors import ErrorCode

SESSION_MS = 400


def test_commits_keep_a_member_alive_and_its_session_still_expires(tmp_path):
    async def main() -> None:
        clock = Clock()
        store = LocalStore(tmp_path / "meta")
        await store.start()
        gc = await started_coordinator(store, clock)
        req = JoinRequest(
            "", None, "c", "/127.0.0.1", SESSION_MS, SESSION_MS, "consumer", [("range", b"")], True
        )
        r = await gc.join("g", req)
        req.member_id = r["member_id"]
        r = await gc.join("g", req)
        assert r["error_code"] == ErrorCode.NONE, r
        gen = r["generation_id"]
        s = await gc.sync("g", req.member_id, None, gen, "consumer", "range", {})
        assert s["error_code"] == ErrorCode.NONE, s
        # committing for three session timeouts: the member stays
        loop = asyncio.get_running_loop()
        end = loop.time() + 3 * SESSION_MS / 1000
        n = 0
        while loop.time() < end:
            n += 1
            res = await gc.commit("g", req.member_id, None, gen, {("t", 0): (n, -1, "")})
            assert res == {("t", 0): ErrorCode.NONE}
            await asyncio.sleep(SESSION_MS / 8000)
        assert list(gc.groups["g"].members) == [req.member_id]
        assert len(gc._timers) == 1
        # silent from now on: removed after its session timeout
        for _ in range(200):
            if gc.groups["g"].state == GroupState.EMPTY:
                break
            await asyncio.sleep(0.05)
        assert gc.groups["g"].state == GroupState.EMPTY
        assert not gc.groups["g"].members
        await gc.stop()
        await store.close()

    asyncio.run(main())


@pytest.mark.parametrize("loop_name", LOOPS)
def test_a_group_whose_deadline_has_passed_can_be_rescheduled_before_it_fires(tmp_path, loop_name):
    """Found by the protocol fuzzer on uvloop: a request for a group whose member's session
    had already expired scheduled a timer at a past time, which uvloop's call_at makes a plain
    Handle (no ``when()``, asyncio's loop still gives a TimerHandle); the next request for the
    group before the loop ran it failed with AttributeError.  Now the timer is replaced, and
    the expired member still goes."""

    async def main() -> None:
        clock = ManualClock()
        store = LocalStore(tmp_path / "meta")
        await store.start()
        gc = await started_coordinator(store, clock)
        req = JoinRequest(
            "", None, "c", "/127.0.0.1", SESSION_MS, SESSION_MS, "consumer", [("range", b"")], True
        )
        r = await gc.join("g", req)
        req.member_id = r["member_id"]
        r = await gc.join("g", req)
        gen = r["generation_id"]
        s = await gc.sync("g", req.member_id, None, gen, "consumer", "range", {})
        assert s["error_code"] == ErrorCode.NONE, s
        clock.advance(SESSION_MS + 1)  # the member's session has expired: its timer is due
        for _ in range(2):  # two requests in one go: the second finds the first's timer
            assert gc.heartbeat("g", "someone-else", None, gen) == ErrorCode.UNKNOWN_MEMBER_ID
        for _ in range(200):
            if gc.groups["g"].state == GroupState.EMPTY:
                break
            await asyncio.sleep(0.01)
        assert gc.groups["g"].state == GroupState.EMPTY
        await gc.stop()
        await store.close()

    event_loop.run(main(), loop_name)
