"""replication/fetcher.py's rounds look only at the partitions noted changed (``touch``):
appends, truncations, a log start moved by the leader's answer or by this broker's own
DeleteRecords or retention, errors and their delays, partitions added and removed.  Against
a model leader with pybroker's own fetch session cache, every Fetch request must leave the
leader's session holding exactly the partitions the fetcher would fetch if it looked at
every one of them, each at the follower's log end, last epoch and log start (Kafka's
FetchSessionHandler: an incremental request names a partition only when those changed,
and forgets the ones no longer fetched), and the fetcher's audit must find nothing.
Removing any one of the fetcher's ``touch`` calls (or the replica manager's log-start
listener) fails a request's check here."""

from __future__ import annotations

import asyncio
import logging
import random
from types import SimpleNamespace

import pytest

from pybroker.clock import ManualClock
from pybroker.errors import ErrorCode
from pybroker.fetch_session import FetchPartition, FetchSessionCache
from pybroker.replication import fetcher as fetcher_mod
from pybroker.replication.fetcher import ReplicaFetcher
from pybroker.replication.replica import FOLLOWER, Replica
from pybroker.wire.records import build_batch
from tests.replica_manager_fixture import replica_manager

LEADER, ME = 0, 1
KEYS = [("t", p) for p in range(6)] + [("u", 0), ("u", 1)]


class ModelLeader:
    """A leader's logs (batches of 2 records), its fetch sessions (FetchSessionCache) and
    what it answers: records from the fetch offset, OFFSET_OUT_OF_RANGE outside its log,
    NOT_LEADER_OR_FOLLOWER for ``bad`` partitions."""

    def __init__(self, fetcher: ReplicaFetcher) -> None:
        self.fetcher = fetcher
        self.batches = {k: [] for k in KEYS}  # [(base offset, bytes)]
        self.start = dict.fromkeys(KEYS, 0)
        self.bad: set = set()
        self.cache = FetchSessionCache(4)
        self.fetches = 0

    def end(self, key) -> int:
        b = self.batches[key]
        return b[-1][0] + 2 if b else self.start[key]

    def append(self, key) -> None:
        base = self.end(key)
        self.batches[key].append(
            (
                base,
                bytes(
                    build_batch([(None, b"v", [])] * 2, base_offset=base, partition_leader_epoch=0)
                ),
            )
        )

    def truncate(self, key, n) -> None:  # (an unclean leader election's lost tail)
        del self.batches[key][max(len(self.batches[key]) - n, 0) :]

    def delete_records(self, key) -> None:
        b = self.batches[key]
        if len(b) > 1:
            b.pop(0)
            self.start[key] = b[0][0]

    async def request(self, api_key, version, body, timeout_s=None):
        if api_key == 23:  # OffsetForLeaderEpoch: epoch 0, our end
            return {
                "topics": [
                    {
                        "topic": t["topic"],
                        "partitions": [
                            {
                                "partition": p["partition"],
                                "error_code": 0,
                                "leader_epoch": 0,
                                "end_offset": self.end((t["topic"], p["partition"])),
                            }
                            for p in t["partitions"]
                        ],
                    }
                    for t in body["topics"]
                ]
            }
        assert api_key == 1
        self.fetches += 1
        reqs = [
            FetchPartition(
                (t["topic"], p["partition"]),
                t["topic"],
                None,
                p["partition"],
                p["fetch_offset"],
                p["partition_max_bytes"],
                p["current_leader_epoch"],
                p["last_fetched_epoch"],
                p["log_start_offset"],
            )
            for t in body["topics"]
            for p in t["partitions"]
        ]
        forgotten = [
            (t["topic"], p) for t in body["forgotten_topics_data"] for p in t["partitions"]
        ]
        ctx = self.cache.new_context(
            body["session_id"],
            body["session_epoch"],
            reqs,
            forgotten,
            privileged=True,
            uses_topic_ids=False,
            now_ms=0,
        )
        assert ctx.error == 0, ctx.error
        self._check(ctx.partitions)
        entries = {p.key: self._entry(p) for p in ctx.partitions}
        error, sid, answered = ctx.respond(entries, 0)
        responses = [{"topic": p.key[0], "partitions": [entry]} for p, entry in answered]
        return {"error_code": error, "session_id": sid, "responses": responses}

    def _check(self, session: list[FetchPartition]) -> None:
        """What the leader holds for the follower now is what looking at every partition
        gives: each partition the fetcher would fetch, at its log end and log start."""
        now = fetcher_mod.monotonic()
        want = {}
        for key, f in self.fetcher.partitions.items():
            if f.truncated and f.delayed_until <= now:
                plog = f.replica.log
                want[key] = (
                    plog.log_end_offset,
                    plog.leader_epochs.latest_epoch(),
                    plog.log_start_offset,
                )
        have = {p.key: (p.fetch_offset, p.last_fetched_epoch, p.log_start_offset) for p in session}
        assert have == want

    def _entry(self, p: FetchPartition) -> dict:
        key = p.key
        entry = {
            "partition_index": key[1],
            "error_code": 0,
            "high_watermark": self.end(key),
            "last_stable_offset": self.end(key),
            "log_start_offset": self.start[key],
            "records": b"",
        }
        if key in self.bad:
            entry.update(error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER, high_watermark=-1)
        elif not self.start[key] <= p.fetch_offset <= self.end(key):
            entry["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
        else:
            entry["records"] = b"".join(
                b for base, b in self.batches[key] if base >= p.fetch_offset
            )
        return entry


@pytest.fixture
def fetcher_clock(monkeypatch, caplog) -> list[float]:
    """The fetcher's monotonic clock, set by the test (clock[0]); its warnings captured."""
    caplog.set_level(logging.WARNING, logger="pybroker.replication.fetcher")
    clock = [1000.0]
    monkeypatch.setattr(fetcher_mod, "monotonic", lambda: clock[0])
    return clock


def _setup(tmp_path):
    clock = ManualClock()
    cluster = SimpleNamespace(topics={}, brokers={}, lease_ok=True, session_ok=True)
    manager, logs = replica_manager(tmp_path, ME, cluster, clock)
    fetcher = ReplicaFetcher(manager, LEADER)
    manager.fetchers[LEADER] = fetcher
    return manager, logs, fetcher


def _follow(manager, logs, fetcher, key) -> None:
    r = Replica(key[0], key[1], logs.get_or_create(*key), role=FOLLOWER, leader=LEADER)
    r.leader_epoch, r.isr = 0, [LEADER, ME]
    manager.replicas[key] = r
    fetcher.add(r)


def test_each_request_holds_what_a_look_at_every_partition_would(tmp_path, caplog, fetcher_clock):
    """Random rounds: appends, tails lost by the leader, DeleteRecords on either side,
    errors for a while, partitions removed and added again."""
    clock = fetcher_clock
    missed = ReplicaFetcher.missed

    async def main() -> None:
        manager, logs, fetcher = _setup(tmp_path)
        leader = ModelLeader(fetcher)
        rng = random.Random(27)
        for key in KEYS:
            _follow(manager, logs, fetcher, key)
        for _ in range(400):
            key = rng.choice(KEYS)
            op = rng.randrange(9)
            if op <= 2:
                leader.append(key)
            elif op == 3:
                leader.truncate(key, rng.randint(1, 2))
            elif op == 4:
                leader.delete_records(key)
            elif op == 5 and key in manager.replicas:  # this broker's own DeleteRecords
                plog = manager.replicas[key].log
                if plog.high_watermark > plog.log_start_offset:
                    logs.delete_records(*key, plog.high_watermark)
            elif op == 6:
                leader.bad ^= {key}
            elif op == 7:
                if key in fetcher.partitions:
                    fetcher.remove(*key)
                    del manager.replicas[key]
                else:
                    _follow(manager, logs, fetcher, key)
            clock[0] += rng.choice([0.0, 0.03, 0.2, 1.5])
            await fetcher._round(leader)  # (the check runs in every Fetch)
        assert leader.fetches > 200
        # everything the leader has reached the follower
        leader.bad = set()
        for key in KEYS:
            if key not in fetcher.partitions:
                _follow(manager, logs, fetcher, key)
        for _ in range(20):
            clock[0] += 1.5
            await fetcher._round(leader)
        for key in KEYS:
            assert manager.replicas[key].log.log_end_offset == leader.end(key), key

    asyncio.run(main())
    assert ReplicaFetcher.missed == missed
    assert not [r for r in caplog.records if "missed a change" in r.getMessage()]


def test_the_audit_finds_a_change_nobody_noted(tmp_path, caplog, fetcher_clock):
    """A log end moved behind the fetcher's back (no ``touch``): the audit logs it within
    AUDIT_S and the partition is fetched from its new end."""
    clock = fetcher_clock
    missed = ReplicaFetcher.missed

    async def main() -> None:
        manager, logs, fetcher = _setup(tmp_path)
        leader = ModelLeader(fetcher)
        key = KEYS[0]
        for k in KEYS:
            _follow(manager, logs, fetcher, k)
            leader.append(k)
        await fetcher._round(leader)
        await fetcher._round(leader)
        plog = manager.replicas[key].log
        assert plog.log_end_offset == 2
        plog.truncate_to(0)  # (unnoted)
        leader._check = lambda session: None  # (the leader's session is stale until then)
        for _ in range(12):
            clock[0] += 1.0
            await fetcher._round(leader)
        assert plog.log_end_offset == 2
        assert fetcher._wanted[key]["fetch_offset"] == 2

    asyncio.run(main())
    assert ReplicaFetcher.missed == missed + 1
    assert [r for r in caplog.records if "missed a change of t-0" in r.getMessage()]
