"""What a leader's append tells those who wait on it (LeaderSide.after_leader_append): the
followers' fetch sessions see the partition as changed (the change feed) and their long polls
wake, whether or not the high watermark moved; when it moved (no other ISR member behind),
acks=all waiters and consumers wake too, once each."""

from __future__ import annotations

from types import SimpleNamespace

from pybroker.clock import ManualClock
from pybroker.replication.changes import ChangeFeed
from pybroker.replication.leader_side import LeaderSide
from pybroker.replication.replica import (
    LEADER,
    FollowerState,
    Replica,
    consumer_key,
    followers_append_key,
    hw_key,
    leo_key,
)


class Leaders(LeaderSide):
    def __init__(self):
        self.broker_id = 1
        self.clock = ManualClock()
        self.notified: list = []
        self.purgatory = SimpleNamespace(notify=self.notified.append)
        self.changes = ChangeFeed()


def replica(isr: list[int], followers: dict[int, int]) -> Replica:
    log = SimpleNamespace(log_end_offset=5, high_watermark=5)
    r = Replica("t", 0, log, role=LEADER, leader=1, leader_epoch=3, isr=isr)
    r.replicas = [1, 2, 3]
    r.leader_epoch_start_offset = 0
    r.followers = {b: FollowerState(leo, 0) for b, leo in followers.items()}
    return r


def test_an_append_with_followers_behind_wakes_the_followers_not_the_consumers():
    h = Leaders()
    r = replica([1, 2, 3], {2: 5, 3: 5})
    position = h.changes.seq
    r.log.log_end_offset = 7  # (the append)
    h.after_leader_append(r)
    assert r.log.high_watermark == 5  # the followers have not fetched it yet
    assert h.changes.since(position) == [("t", 0)]
    assert sorted(h.notified) == sorted([leo_key("t", 0), followers_append_key()])


def test_an_append_the_isr_has_at_once_moves_the_high_watermark_and_wakes_everyone_once():
    for isr, followers in (([1], {2: 0, 3: 0}), ([1, 2], {2: 7})):
        h = Leaders()
        r = replica(isr, followers)
        position = h.changes.seq
        r.log.log_end_offset = 7
        h.after_leader_append(r)
        assert r.log.high_watermark == 7
        assert h.changes.since(position) == [("t", 0)]
        assert sorted(h.notified) == sorted(
            [leo_key("t", 0), followers_append_key(), hw_key("t", 0), consumer_key("t", 0)]
        )


def test_a_later_follower_fetch_that_moves_the_high_watermark_notes_the_change_again():
    h = Leaders()
    h.cluster = SimpleNamespace(brokers={1: None, 2: None, 3: None})
    r = replica([1, 2], {2: 5})
    r.log.log_end_offset = 7
    h.after_leader_append(r)
    position = h.changes.seq
    h.notified.clear()
    h.record_follower_fetch(r, 2, 7)
    assert r.log.high_watermark == 7
    assert h.changes.since(position) == [("t", 0)]
    assert hw_key("t", 0) in h.notified and consumer_key("t", 0) in h.notified
