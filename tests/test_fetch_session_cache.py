"""FetchSessionCache's eviction rules (Kafka's FetchSessionCache.tryEvict), with a given clock."""

from __future__ import annotations

from pybroker.fetch_session import (
    EVICTION_MS,
    INVALID_SESSION_ID,
    FetchPartition,
    FetchSessionCache,
    next_epoch,
)


def parts(n: int, topic: str = "t") -> dict:
    return {(topic, i): FetchPartition((topic, i), topic, None, i, 0, 1 << 20) for i in range(n)}


def create(cache, now, n, privileged=False):
    return cache.maybe_create(now, privileged, False, parts(n))


def test_room_then_full():
    cache = FetchSessionCache(2)
    a = create(cache, 0, 3)
    b = create(cache, 0, 3)
    assert a != INVALID_SESSION_ID and b != INVALID_SESSION_ID and a != b
    assert create(cache, 1, 100) == INVALID_SESSION_ID  # recent sessions are not evictable
    assert len(cache) == 2 and cache.total_partitions == 6


def test_a_stale_session_is_evicted_first():
    cache = FetchSessionCache(2)
    a = create(cache, 0, 5)
    b = create(cache, 10, 5)
    c = create(cache, EVICTION_MS + 1, 1)  # a has been idle longer than the eviction time
    assert c != INVALID_SESSION_ID
    assert set(cache.sessions) == {b, c} and a not in cache.sessions
    assert cache.evictions == 1


def test_a_follower_evicts_the_smallest_consumer_session():
    cache = FetchSessionCache(2)
    small = create(cache, 0, 2)
    create(cache, 0, 9)
    follower = create(cache, 5, 1, privileged=True)
    assert follower != INVALID_SESSION_ID and small not in cache.sessions
    # a consumer cannot evict the follower's recent session, nor the other young one
    assert create(cache, 6, 50) == INVALID_SESSION_ID


def test_an_aged_session_is_evicted_by_a_bigger_one_only():
    cache = FetchSessionCache(1)
    a = create(cache, 0, 10)
    s = cache.sessions[a]
    cache._touch(s, EVICTION_MS + 5)  # used again later than the eviction time after creation
    now = EVICTION_MS + 10  # not stale: last used 5 ms ago
    assert create(cache, now, 9) == INVALID_SESSION_ID  # smaller: less valuable
    b = create(cache, now, 11)
    assert b != INVALID_SESSION_ID and a not in cache.sessions


def test_epochs_wrap_to_one():
    assert next_epoch(0) == 1
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(-1) == -1


def test_zero_slots_never_create():
    assert create(FetchSessionCache(0), 0, 1) == INVALID_SESSION_ID
