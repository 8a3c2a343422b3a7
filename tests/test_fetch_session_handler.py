"""The follower's FetchSessionHandler against the broker's FetchSessionCache, round by round:
both sides agree on what is in the session, and the follower only sends what changed."""

from __future__ import annotations

from pybroker.fetch_session import FetchPartition, FetchSessionCache
from pybroker.replication.session_handler import FetchSessionHandler


def params(offset, epoch=0):
    return {
        "partition": 0,
        "current_leader_epoch": epoch,
        "fetch_offset": offset,
        "last_fetched_epoch": epoch,
        "log_start_offset": 0,
        "partition_max_bytes": 1 << 20,
    }


class Leader:
    """The broker side: a cache and a log end per partition; answers like the Fetch handler."""

    def __init__(self):
        self.cache = FetchSessionCache(10)
        self.hw = {}

    def fetch(self, data):
        reqs = [
            FetchPartition(k, k[0], None, k[1], p["fetch_offset"], p["partition_max_bytes"])
            for k, p in data.partitions.items()
        ]
        ctx = self.cache.new_context(
            data.session_id,
            data.epoch,
            reqs,
            data.forgotten,
            privileged=True,
            uses_topic_ids=False,
            now_ms=0,
        )
        entries = {
            p.key: {
                "partition_index": p.partition,
                "error_code": 0,
                "high_watermark": self.hw[p.key],
                "log_start_offset": 0,
                "records": b"x" if p.fetch_offset < self.hw[p.key] else b"",
            }
            for p in ctx.partitions
        }
        error, sid, answered = ctx.respond(entries, 0)
        return error, sid, [p.key for p, _ in answered]


def round_trip(handler, leader, wanted):
    data = handler.build(wanted)
    error, sid, answered = leader.fetch(data)
    handler.handle_response(data, error, sid)
    return data, answered


def test_only_changed_partitions_are_sent_and_only_news_answered():
    leader, h = Leader(), FetchSessionHandler()
    a, b = ("t", 0), ("t", 1)
    leader.hw = {a: 5, b: 5}
    data, answered = round_trip(h, leader, {a: params(5), b: params(5)})
    assert data.full and set(answered) == {a, b} and h.session_id != 0
    data, answered = round_trip(h, leader, {a: params(5), b: params(5)})
    assert not data.full and data.partitions == {} and answered == []
    leader.hw[b] = 7  # new records on b
    data, answered = round_trip(h, leader, {a: params(5), b: params(5)})
    assert answered == [b]
    data, answered = round_trip(h, leader, {a: params(5), b: params(7)})
    assert list(data.partitions) == [b] and answered == []


def test_forgetting_and_truncation():
    leader, h = Leader(), FetchSessionHandler()
    a, b = ("t", 0), ("t", 1)
    leader.hw = {a: 5, b: 5}
    round_trip(h, leader, {a: params(5), b: params(5)})
    data, _ = round_trip(h, leader, {a: params(5)})
    assert data.forgotten == [b]
    assert list(leader.cache.sessions[h.session_id].partitions) == [a]
    # truncation (offset back) or a new leader epoch: a full request, in a new session
    old = h.session_id
    data, answered = round_trip(h, leader, {a: params(3, epoch=1)})
    assert data.full and answered == [a] and h.session_id not in (0, old)
    assert old not in leader.cache.sessions


def test_a_lost_session_falls_back_to_a_full_fetch():
    leader, h = Leader(), FetchSessionHandler()
    a = ("t", 0)
    leader.hw = {a: 1}
    round_trip(h, leader, {a: params(1)})
    leader.cache.remove(h.session_id)  # evicted, or the leader restarted
    data, answered = round_trip(h, leader, {a: params(1)})
    assert not data.full and answered == [] and h.session_id == 0
    data, answered = round_trip(h, leader, {a: params(1)})
    assert data.full and answered == [a] and h.session_id != 0
