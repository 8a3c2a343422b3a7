"""Requests that create a group race each other across the await that reads the share groups
(KIP-932: one group-id namespace): whichever creates the group first, the others join it
instead of replacing it (a replaced group fences its members and two members could each be
handed every partition)."""

from __future__ import annotations

import asyncio
import uuid

from group_fixture import started_coordinator

from pybroker.clock import ManualClock
from pybroker.coord.group.classic import JoinRequest
from pybroker.coord.group.consumer import ConsumerGroup
from pybroker.coord.group.consumer_member import HeartbeatRequest
from pybroker.coord.group.coordinator import GroupCoordinator
from pybroker.coord.metadata import paths
from pybroker.coord.metadata.local import LocalStore
from pybroker.errors import ErrorCode

TOPICS = {"t": (uuid.uuid4(), 2)}


async def _coordinator(tmp_path) -> tuple[GroupCoordinator, asyncio.Event, list[str]]:
    store = LocalStore(tmp_path / "meta")
    await store.start()
    for path in (paths.CLASSIC_GROUPS, paths.CONSUMER_GROUPS):
        await store.ensure_path(path)
    gc = await started_coordinator(store, ManualClock(1_000_000), topics=lambda: TOPICS)
    release = asyncio.Event()
    reads: list[str] = []

    async def share_group_exists(group_id: str) -> bool:
        reads.append(group_id)
        await release.wait()  # every creating request waits here until released
        return False

    gc.share_group_exists = share_group_exists
    return gc, release, reads


def _first_heartbeat() -> HeartbeatRequest:
    return HeartbeatRequest(
        member_id=str(uuid.uuid4()),
        member_epoch=0,
        instance_id=None,
        rack_id=None,
        rebalance_timeout_ms=60_000,
        subscribed_names=["t"],
        subscribed_regex=None,
        server_assignor=None,
        owned={},
    )


async def _until(reads: list[str], n: int) -> None:
    for _ in range(1000):
        if len(reads) >= n:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{n} share-group reads expected, saw {len(reads)}")


def test_two_first_heartbeats_of_a_new_group_make_one_group(tmp_path):
    async def main() -> None:
        gc, release, reads = await _coordinator(tmp_path)
        a, b = _first_heartbeat(), _first_heartbeat()
        ta = asyncio.create_task(gc.consumer_heartbeat("g", a))
        tb = asyncio.create_task(gc.consumer_heartbeat("g", b))
        await _until(reads, 2)  # both wait on the share-group read, no group exists yet
        release.set()
        ra, rb = await asyncio.gather(ta, tb)
        assert ra["error_code"] == ErrorCode.NONE and rb["error_code"] == ErrorCode.NONE
        g = gc.groups["g"]
        assert isinstance(g, ConsumerGroup) and set(g.members) == {a.member_id, b.member_id}
        handed = [ra["assignment"], rb["assignment"]]
        given = [p for r in handed if r for tp in r["topic_partitions"] for p in tp["partitions"]]
        assert len(given) == len(set(given)), handed  # no partition handed to both
        await gc.stop()

    asyncio.run(main())


def test_a_classic_join_racing_a_first_heartbeat_gets_an_answer(tmp_path):
    async def main() -> None:
        gc, release, reads = await _coordinator(tmp_path)
        join = JoinRequest(
            member_id="",
            group_instance_id=None,
            client_id="c",
            client_host="/127.0.0.1",
            session_timeout_ms=30_000,
            rebalance_timeout_ms=30_000,
            protocol_type="consumer",
            protocols=[("range", b"")],
            require_known_member_id=True,
        )
        th = asyncio.create_task(gc.consumer_heartbeat("g", _first_heartbeat()))
        tj = asyncio.create_task(gc.join("g", join))
        await _until(reads, 2)
        release.set()
        rj, rh = await asyncio.wait_for(asyncio.gather(tj, th), 10)
        # the heartbeat, resumed first, made a consumer group; the classic join that lost
        # the race joins it as a classic member (online migration): asked for a member id
        assert rh["error_code"] == ErrorCode.NONE
        assert rj["error_code"] == ErrorCode.MEMBER_ID_REQUIRED and rj["member_id"]
        await gc.stop()

    asyncio.run(main())
