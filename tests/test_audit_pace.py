"""The audits' pace (replication/changes.py AuditPace, used by the leader's audit of a
follower session's rounds, handlers/_follower_rounds.py, and the replica fetcher's): each
partition is compared at least once per ``audit_period(n)`` (10 s, or n / AUDIT_PER_S
seconds for many partitions), and a round compares no more than is due, so an audit's work
per second stays bounded however many partitions it covers.  A change nobody noted is still
found and logged."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from pybroker.handlers._follower_rounds import FollowerRound
from pybroker.replication import changes
from pybroker.replication.changes import AuditPace, ChangeFeed, audit_period


def test_the_period_grows_with_the_partitions_past_a_bound():
    assert audit_period(1) == changes.AUDIT_S
    assert audit_period(int(changes.AUDIT_S * changes.AUDIT_PER_S)) == changes.AUDIT_S
    assert audit_period(100_000) == 100_000 / changes.AUDIT_PER_S


@pytest.mark.parametrize("n", [1, 7, 3_000, 5_001, 16_700, 60_000])
@pytest.mark.parametrize("step", [0.001, 0.13, 0.5, 2.0])
def test_each_partition_is_compared_within_the_period_and_no_more_than_due(n, step):
    """Rounds every ``step`` seconds walking the partitions in turn (as both audits do):
    every partition's turn comes within one period (plus a round), and over a period no
    more than all of them plus a round's one were compared."""
    pace = AuditPace()
    assert pace.budget(n, 0.0) == 0  # (the first round only starts the clock)
    period = audit_period(n)
    now, done, seen_at = 0.0, 0, {}
    while now < 2.5 * period:
        now += step
        take = pace.budget(n, now)
        assert 1 <= take <= n
        for i in range(done, done + take):
            seen_at.setdefault(i % n, now)
        done += take
        if now <= period:
            # no more than is due (a round compares one at least)
            assert done <= n * now / period + now / step + 1
    # each partition is compared at least once per period
    assert len(seen_at) == n
    assert max(seen_at.values()) <= period + step + 1e-9
    assert done >= n * (2.5 * period - step) / period - 1


def test_the_pace_restarts_with_no_partitions():
    pace = AuditPace()
    pace.budget(10, 0.0)
    assert pace.budget(0, 5.0) == 0
    assert pace.budget(10, 6.0) == 1  # (the gap with nothing to audit is not owed)


class _Leader:
    """What FollowerRound's audit reads of the leader side: the change feed, each
    partition's stamp, the replicas and the topics' metadata."""

    def __init__(self, keys: list[tuple[str, int]]) -> None:
        self.changes = ChangeFeed()
        self.stamps = {k: ("r", 0, "info", "log", 5, 5, 0) for k in keys}
        self.replicas: dict = {}
        self.cluster = SimpleNamespace(topics={})

    def follower_fetch_stamp(self, topic: str, partition: int, replica_id: int):
        return self.stamps[(topic, partition)]


def _session(leader: _Leader) -> SimpleNamespace:
    parts = {
        k: SimpleNamespace(key=k, topic=k[0], partition=k[1], idle_stamp=stamp, order=i)
        for i, (k, stamp) in enumerate(leader.stamps.items())
    }
    return SimpleNamespace(partitions=parts, unstamped=set(), follower=None)


def test_the_leaders_audit_finds_an_unnoted_change_in_a_large_session(caplog):
    """A session of 12,000 partitions (a 24 s period): idle rounds every 0.5 s compare 250
    partitions each, not 600; a stamp moved without a note is found within the period,
    read by that round and logged."""
    n = 12_000
    keys = [("t", i) for i in range(n)]
    leader = _Leader(keys)
    session = _session(leader)
    missed = FollowerRound.missed
    now_ms = 0
    rnd = FollowerRound(session, fast=True)
    assert rnd.pick(leader, 1, now_ms) is None  # (the first round reads every partition)
    rnd.answered()
    moved = keys[n - 7]
    leader.stamps[moved] = ("r", 0, "info", "log", 9, 9, 0)  # (unnoted)
    found_at = None
    caplog.set_level(logging.WARNING, logger="pybroker.handlers.fetch")
    while now_ms <= 1000 * audit_period(n) + 500:
        now_ms += 500
        rnd = FollowerRound(session, fast=True)
        picked = rnd.pick(leader, 1, now_ms)
        assert picked is not None
        rnd.answered()
        if picked:
            assert [p.key for p in picked] == [moved]
            found_at = now_ms
            break
    assert found_at is not None
    assert session.follower.audit_at <= changes.AUDIT_PER_S * found_at / 1000 + 1
    assert FollowerRound.missed == missed + 1
    assert [r for r in caplog.records if "missed a change of t-11993" in r.getMessage()]
