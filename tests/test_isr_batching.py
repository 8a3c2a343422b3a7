"""The leaders' ISR changes of one loop pass go to the store in one batch (LeaderSide's
_change_isr / _write_isrs over Cluster.update_isrs), each with its own outcome: a write that
landed changes that replica's ISR, a deposed or failed one changes nothing and may be retried.
A stub cluster stands for the store (metadata/isr.py's batching has its own tests in
tests/test_controller.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from pybroker.clock import ManualClock
from pybroker.coord.metadata.model import PartitionState
from pybroker.replication.changes import ChangeFeed
from pybroker.replication.leader_side import LeaderSide
from pybroker.replication.replica import LEADER, FollowerState, Replica


class StubCluster:
    def __init__(self, outcome):
        self.calls: list[list] = []
        self.outcome = outcome
        self.brokers = {1: None, 2: None, 3: None}

    async def update_isrs(self, changes):
        self.calls.append(list(changes))
        return [self.outcome(c) for c in changes]


class Leaders(LeaderSide):
    def __init__(self, cluster):
        self.broker_id = 1
        self.cluster = cluster
        self.clock = ManualClock()
        self.purgatory = SimpleNamespace(notify=lambda key: None)
        self.replica_lag_time_max_ms = 1000
        self.replicas: dict = {}
        self.isr_queue: dict = {}
        self.isr_shrinks = self.isr_expands = 0
        self.tasks: set = set()
        self.changes = ChangeFeed()  # (what a written ISR notes for followers' sessions)

    def _spawn(self, coro, name):
        t = asyncio.ensure_future(coro)
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)


def leader(p: int) -> Replica:
    log = SimpleNamespace(log_end_offset=5, high_watermark=5)
    r = Replica("t", p, log, role=LEADER, leader=1, leader_epoch=3, isr=[1, 2, 3])
    r.replicas = [1, 2, 3]
    r.leader_epoch_start_offset = 0
    r.followers = {2: FollowerState(5, 0), 3: FollowerState(5, 0)}
    return r


def test_one_pass_of_isr_changes_is_one_batch_each_with_its_own_outcome():
    def outcome(c):
        if c.partition == 1:
            return None  # deposed meanwhile
        if c.partition == 2:
            return ConnectionError("lost")  # this one's write failed
        return PartitionState(1, c.leader_epoch, [1, 2, 3], list(c.isr), 1, 7)

    async def main():
        cluster = StubCluster(outcome)
        h = Leaders(cluster)
        for p in range(4):
            h.replicas[("t", p)] = leader(p)
        h.clock.advance(5_000)  # follower 2 lags past replica.lag.time.max.ms, 3 does not
        for r in h.replicas.values():
            r.followers[3].last_caught_up_ms = h.clock.time_ms()
        h.shrink_isrs()
        assert all(r.isr_change_in_flight for r in h.replicas.values())
        h.shrink_isrs()  # (in flight: not queued twice)
        while h.tasks:
            await asyncio.gather(*h.tasks)
        assert len(cluster.calls) == 1 and len(cluster.calls[0]) == 4
        assert {
            (c.partition, tuple(c.isr), c.leader, c.leader_epoch) for c in cluster.calls[0]
        } == {(p, (1, 3), 1, 3) for p in range(4)}
        isrs = {p: h.replicas[("t", p)].isr for p in range(4)}
        assert isrs == {0: [1, 3], 1: [1, 2, 3], 2: [1, 2, 3], 3: [1, 3]}
        assert h.isr_shrinks == 2
        assert not any(r.isr_change_in_flight for r in h.replicas.values())
        for r in h.replicas.values():
            r.followers[3].last_caught_up_ms = h.clock.time_ms()
        h.shrink_isrs()  # the two left go again, together
        while h.tasks:
            await asyncio.gather(*h.tasks)
        assert sorted(c.partition for c in cluster.calls[1]) == [1, 2]

    asyncio.run(main())


def test_a_follower_being_added_is_stamped_idle_until_the_write_ends():
    """A follower that reached the log end while out of the ISR: its fetch session may skip
    the partition (follower_fetch_stamp gives a stamp) while the ISR write adding it is in
    flight, not read it in full on every round until the write lands; when the write ends,
    landed or failed, the partition is noted changed so the session reads it again (a
    failed one: the follower's next fetch asks for the addition again)."""

    def outcome(c):
        if c.partition == 1:
            return ConnectionError("lost")
        return PartitionState(1, c.leader_epoch, [1, 2, 3], list(c.isr), 1, 7)

    async def main():
        cluster = StubCluster(outcome)
        info = SimpleNamespace(topic_id=None, configs={}, partitions={})  # (a TopicInfo)
        cluster.topics = {"t": info}
        h = Leaders(cluster)
        h.offline = None
        for p in range(2):
            r = leader(p)
            r.isr = [1, 2]
            r.log.log_start_offset = 0
            r.checked_info = info
            h.replicas[("t", p)] = r
        assert h.follower_fetch_stamp("t", 0, 3) is None  # (out of the ISR: the full path)
        for p in range(2):
            h.record_follower_fetch(h.replicas[("t", p)], 3, 5)  # at the log end
        assert all(r.isr_change_in_flight for r in h.replicas.values())
        position = h.changes.seq
        stamps = [h.follower_fetch_stamp("t", p, 3) for p in range(2)]
        assert all(s is not None for s in stamps)
        assert h.follower_fetch_stamp("t", 0, 2) is not None  # (in the ISR all along)
        while h.tasks:
            await asyncio.gather(*h.tasks)
        assert h.replicas[("t", 0)].isr == [1, 2, 3]
        assert h.replicas[("t", 1)].isr == [1, 2]  # (its write failed)
        assert set(h.changes.since(position)) == {("t", 0), ("t", 1)}
        assert h.follower_fetch_stamp("t", 0, 3) == stamps[0]
        assert h.follower_fetch_stamp("t", 1, 3) is None
        h.record_follower_fetch(h.replicas[("t", 1)], 3, 5)  # asked again
        assert h.replicas[("t", 1)].isr_change_in_flight
        assert h.follower_fetch_stamp("t", 1, 3) is not None

    asyncio.run(main())
