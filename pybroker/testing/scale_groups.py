"""W24's group members: ``n`` consumer-group members simulated at the protocol level in one
asyncio loop (one connection each), so that a 1,000-member group costs the client side little
and both brokers see the same requests.

* Classic protocol (``classic_group``): JoinGroup (v9, member id required first), SyncGroup,
  Heartbeat every 3 s (the Java client's heartbeat.interval.ms), a rejoin on
  REBALANCE_IN_PROGRESS, LeaveGroup.  Subscriptions carry the owned partitions (consumer
  protocol v2) and the leader assigns as the cooperative-sticky assignor does: a balanced
  assignment that keeps what members own, where a partition changing owner is left
  unassigned for one round (revoked first), and a member that lost partitions rejoins at once.
* KIP-848 (``consumer_group``): ConsumerGroupHeartbeat (v0) at the interval the coordinator
  gives, and at once after an assignment changed (the acknowledgement), leaving with member
  epoch -1.

``Stats`` keeps the largest request and response of each API (bytes on the wire, size
prefix included).  A group is stable when every partition is owned by exactly one member,
every member owns floor(P/n) or ceil(P/n) of them, and no member is rebalancing.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pybroker.wire.messages  # noqa: F401  (the schemas)
from pybroker.wire import codec
from pybroker.wire.consumer_protocol import encode_assignment, parse_assignment, parse_subscription
from pybroker.wire.primitives import Writer

JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, CONSUMER_GROUP_HEARTBEAT = 11, 12, 13, 14, 68
VERSIONS = {JOIN_GROUP: 9, HEARTBEAT: 4, LEAVE_GROUP: 5, SYNC_GROUP: 5, CONSUMER_GROUP_HEARTBEAT: 0}
NONE, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS = 0, 25, 22, 27
MEMBER_ID_REQUIRED, FENCED_MEMBER_EPOCH = 79, 110
CLASSIC_HEARTBEAT_S = 3.0
SESSION_TIMEOUT_MS = 45000
REBALANCE_TIMEOUT_MS = 300000


@dataclass
class Stats:
    largest_request: dict[int, int] = field(default_factory=dict)
    largest_response: dict[int, int] = field(default_factory=dict)
    requests: int = 0

    def note(self, api: int, request: int, response: int) -> None:
        self.requests += 1
        self.largest_request[api] = max(self.largest_request.get(api, 0), request)
        self.largest_response[api] = max(self.largest_response.get(api, 0), response)


class MemberConn:
    """One connection, one request at a time (a member's leave waits for its heartbeat in
    flight: two readers of one stream raise RuntimeError in readexactly)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, stats: Stats):
        self.reader, self.writer, self.stats = reader, writer, stats
        self._ids = itertools.count(1)
        self._one_at_a_time = asyncio.Lock()

    @classmethod
    async def open(cls, host: str, port: int, stats: Stats) -> MemberConn:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, stats)

    async def request(self, api: int, body: dict) -> dict:
        version = VERSIONS[api]
        async with self._one_at_a_time:
            frame = codec.encode_request(api, version, next(self._ids), "w24", body)
            self.writer.write(frame)
            size = int.from_bytes(await self.reader.readexactly(4), "big")
            data = await self.reader.readexactly(size)
        self.stats.note(api, len(frame), size + 4)
        return codec.decode_response(api, version, data)[1]

    def close(self) -> None:
        self.writer.close()


def subscription(topic: str, owned: Iterable[int], generation: int) -> bytes:
    """ConsumerProtocolSubscription v2: topics, null user data, owned partitions, generation."""
    w = Writer()
    w.int16(2)
    w.int32(1)
    w.string(topic)
    w.int32(-1)
    ps = sorted(owned)
    if ps:
        w.int32(1)
        w.string(topic)
        w.int32(len(ps))
        for p in ps:
            w.int32(p)
    else:
        w.int32(0)
    w.int32(generation)
    return w.getvalue()


def cooperative_sticky(owned: dict[str, set[int]], partitions: int) -> dict[str, set[int]]:
    """The leader's assignment: balanced, keeping owned partitions up to each member's quota;
    a partition taken from its owner is assigned to nobody this round (cooperative)."""
    members = sorted(owned)
    n = len(members)
    base, extra = divmod(partitions, n)
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(members)}
    # the members owning the most keep the larger quotas (fewer moves)
    by_owned = sorted(members, key=lambda m: -len(owned[m]))
    quotas = sorted(quota.values(), reverse=True)
    quota = dict(zip(by_owned, quotas, strict=True))
    owner: dict[int, str] = {}
    target: dict[str, set[int]] = {m: set() for m in members}
    for m in by_owned:
        for p in sorted(owned[m]):
            if p < partitions and p not in owner and len(target[m]) < quota[m]:
                owner[p] = m
                target[m].add(p)
    previous = {p: m for m in members for p in owned[m]}
    free = [p for p in range(partitions) if p not in owner]
    needy = [m for m in by_owned if len(target[m]) < quota[m]]
    for m in needy:
        while len(target[m]) < quota[m] and free:
            p = free.pop()
            owner[p] = m
            target[m].add(p)
    # cooperative: a partition another member still owns is revoked first
    return {m: {p for p in ps if previous.get(p, m) == m} for m, ps in target.items()}


class Group:
    """The shared view of a simulated group: what each member owns and whether it is stable."""

    def __init__(self, n: int, partitions: int) -> None:
        self.n = n
        self.partitions = partitions
        self.owned: dict[int, set[int]] = {}
        self.busy: set[int] = set()  # members in a rebalance (classic) / reconciling
        self.generation: dict[int, int] = {}
        self.changed = asyncio.Event()
        self.joined_at: list[float] = []
        self.leaving: set[int] = set()

    def note(self) -> None:
        self.changed.set()

    def stable(self) -> bool:
        members = [m for m in self.owned if m not in self.leaving]
        if not members or self.busy:
            return False
        if len({self.generation.get(m) for m in members}) != 1:
            return False
        counts = [len(self.owned[m]) for m in members]
        lo, hi = self.partitions // len(members), math.ceil(self.partitions / len(members))
        if any(c < lo or c > hi for c in counts):
            return False
        seen: set[int] = set()
        for m in members:
            if seen & self.owned[m]:
                return False
            seen |= self.owned[m]
        return len(seen) == self.partitions

    async def wait_stable(self, timeout: float, members: int) -> float:
        """Seconds until ``members`` members form a stable group."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            active = len([m for m in self.owned if m not in self.leaving])
            if active == members and self.stable():
                return time.monotonic() - t0
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), 0.5)
        raise TimeoutError(f"no stable group of {members} within {timeout}s")


class ClassicMember:
    def __init__(self, k: int, conn: MemberConn, group: Group, gid: str, topic: str) -> None:
        self.k, self.conn, self.group, self.gid, self.topic = k, conn, group, gid, topic
        self.member_id = ""
        self.generation = -1
        self.owned: set[int] = set()
        self.stopped = False

    async def join(self) -> None:
        g = self.group
        g.busy.add(self.k)
        g.note()
        while True:
            meta = subscription(self.topic, self.owned, self.generation)
            r = await self.conn.request(
                JOIN_GROUP,
                {
                    "group_id": self.gid,
                    "session_timeout_ms": SESSION_TIMEOUT_MS,
                    "rebalance_timeout_ms": REBALANCE_TIMEOUT_MS,
                    "member_id": self.member_id,
                    "protocol_type": "consumer",
                    "protocols": [{"name": "cooperative-sticky", "metadata": meta}],
                    "reason": None,
                },
            )
            if r["error_code"] == MEMBER_ID_REQUIRED:
                self.member_id = r["member_id"]
                continue
            if r["error_code"] == UNKNOWN_MEMBER_ID:
                self.member_id, self.owned = "", set()
                continue
            if r["error_code"] != NONE:
                await asyncio.sleep(0.1)
                continue
            self.member_id = r["member_id"]
            generation = r["generation_id"]
            assignments = []
            if r["leader"] == self.member_id:
                owned = {
                    m["member_id"]: set(
                        parse_subscription(m["metadata"]).owned_partitions.get(self.topic, [])
                    )
                    for m in r["members"]
                }
                target = cooperative_sticky(owned, g.partitions)
                assignments = [
                    {"member_id": m, "assignment": encode_assignment({self.topic: ps}, 1)}
                    for m, ps in target.items()
                ]
            s = await self.conn.request(
                SYNC_GROUP,
                {
                    "group_id": self.gid,
                    "generation_id": generation,
                    "member_id": self.member_id,
                    "protocol_type": "consumer",
                    "protocol_name": "cooperative-sticky",
                    "assignments": assignments,
                },
            )
            if s["error_code"] != NONE:
                continue  # (a rebalance started again)
            new = set(parse_assignment(s["assignment"]).get(self.topic, []))
            revoked = self.owned - new
            self.owned, self.generation = new, generation
            if revoked:  # cooperative: give them up, then rejoin at once
                continue
            break
        g.owned[self.k] = set(self.owned)
        g.generation[self.k] = self.generation
        g.busy.discard(self.k)
        g.note()

    async def run(self) -> None:
        self.group.joined_at.append(time.monotonic())
        await self.join()
        while not self.stopped:
            await asyncio.sleep(CLASSIC_HEARTBEAT_S)
            if self.stopped:
                break
            r = await self.conn.request(
                HEARTBEAT,
                {
                    "group_id": self.gid,
                    "generation_id": self.generation,
                    "member_id": self.member_id,
                },
            )
            if r["error_code"] in (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID):
                if r["error_code"] == UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                await self.join()

    async def leave(self) -> None:
        self.stopped = True
        self.group.leaving.add(self.k)
        await self.conn.request(
            LEAVE_GROUP,
            {"group_id": self.gid, "members": [{"member_id": self.member_id, "reason": None}]},
        )
        self.group.note()


class ConsumerMember:
    def __init__(
        self, k: int, conn: MemberConn, group: Group, gid: str, topic: str, topic_id: uuid.UUID
    ) -> None:
        self.k, self.conn, self.group, self.gid = k, conn, group, gid
        self.topic, self.topic_id = topic, topic_id
        self.member_id = ""
        self.epoch = 0
        self.owned: set[int] = set()
        self.interval = 5.0
        self.stopped = False
        self.wake = asyncio.Event()

    async def heartbeat(self) -> bool:
        """One heartbeat; True when the assignment changed (acknowledge at once)."""
        r = await self.conn.request(
            CONSUMER_GROUP_HEARTBEAT,
            {
                "group_id": self.gid,
                "member_id": self.member_id,
                "member_epoch": self.epoch,
                "instance_id": None,
                "rack_id": None,
                "rebalance_timeout_ms": REBALANCE_TIMEOUT_MS,
                "subscribed_topic_names": [self.topic],
                "server_assignor": None,
                "topic_partitions": (  # (empty when joining: Kafka's rule)
                    [{"topic_id": self.topic_id, "partitions": sorted(self.owned)}]
                    if self.owned
                    else []
                ),
            },
        )
        g = self.group
        if r["error_code"] in (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH):
            self.member_id, self.epoch, self.owned = "", 0, set()
            return True
        if r["error_code"] != NONE:
            await asyncio.sleep(0.5)
            return False
        self.member_id = r["member_id"] or self.member_id
        self.epoch = r["member_epoch"]
        self.interval = r["heartbeat_interval_ms"] / 1000
        changed = False
        if r["assignment"] is not None:
            new = {
                p
                for tp in r["assignment"]["topic_partitions"]
                if tp["topic_id"] == self.topic_id
                for p in tp["partitions"]
            }
            changed = new != self.owned
            self.owned = new
        g.owned[self.k] = set(self.owned)
        g.generation[self.k] = self.epoch
        if changed:
            g.busy.add(self.k)
        else:
            g.busy.discard(self.k)
        g.note()
        return changed

    async def run(self) -> None:
        self.group.joined_at.append(time.monotonic())
        self.group.busy.add(self.k)
        while not self.stopped:
            if await self.heartbeat():
                continue  # acknowledge the new assignment at once
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self.interval)

    async def leave(self) -> None:
        self.stopped = True
        self.wake.set()
        self.group.leaving.add(self.k)
        await self.conn.request(
            CONSUMER_GROUP_HEARTBEAT,
            {
                "group_id": self.gid,
                "member_id": self.member_id,
                "member_epoch": -1,
                "instance_id": None,
                "rack_id": None,
                "rebalance_timeout_ms": -1,
                "subscribed_topic_names": None,
                "server_assignor": None,
                "topic_partitions": None,
            },
        )
        self.group.note()


@dataclass
class GroupRun:
    join_to_stable_s: float  # from the last member's first join
    first_to_stable_s: float  # from the first member's first join
    leave_to_stable_s: float
    stats: Stats
    cpu_join_s: float
    cpu_leave_s: float
    owned: dict[int, set[int]] = field(default_factory=dict)  # after the leave: k -> partitions


async def run_group(
    host: str,
    port: int,
    protocol: str,
    members: int,
    topic: str,
    topic_id: uuid.UUID,
    partitions: int,
    cpu: Any,
    timeout: float = 600.0,
) -> GroupRun:
    """``members`` members of a fresh group (``protocol``: "classic" or "consumer") on
    ``topic``: join, wait stable, one leaves, wait stable again.  ``cpu()`` reads the
    broker's CPU seconds."""
    stats = Stats()
    group = Group(members, partitions)
    gid = f"w24-{protocol}-{uuid.uuid4().hex[:8]}"
    conns = [await MemberConn.open(host, port, stats) for _ in range(members)]
    if protocol == "classic":
        ms: list[Any] = [ClassicMember(k, c, group, gid, topic) for k, c in enumerate(conns)]
    else:
        ms = [ConsumerMember(k, c, group, gid, topic, topic_id) for k, c in enumerate(conns)]
    tasks = []
    c0 = cpu()
    try:
        for m in ms:
            tasks.append(asyncio.create_task(m.run()))
            await asyncio.sleep(0)
        while len(group.joined_at) < members:
            await asyncio.sleep(0.01)
        first, last = min(group.joined_at), max(group.joined_at)
        await group.wait_stable(timeout, members)
        now = time.monotonic()
        c1 = cpu()
        t0 = time.monotonic()
        await ms[0].leave()
        await group.wait_stable(timeout, members - 1)
        leave_s = time.monotonic() - t0
        owned = {k: set(ps) for k, ps in group.owned.items() if k not in group.leaving}
        return GroupRun(now - last, now - first, leave_s, stats, c1 - c0, cpu() - c1, owned)
    finally:
        for m in ms:
            m.stopped = True
            if isinstance(m, ConsumerMember):
                m.wake.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for c in conns:
            c.close()
