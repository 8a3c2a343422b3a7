"""What changed on the leader side since a follower's fetch session last looked: so that a
round of an in-sync follower's incremental fetch reads the partitions whose state moved, not
every partition of the session (the stamp comparison per session partition per round that
W22's creation spent 40-46% of its loops in at 100,000 replicas, docs/scale.md).

``ChangeFeed`` is noted (topic, partition) wherever the state an idle follower's fetch
depends on can change (LeaderSide.follower_fetch_stamp: the replica, its role, leader epoch,
ISR, topic metadata, offline log dir, log end, high watermark, log start).  Each key is kept
once, at the sequence number of its latest change, in change order, so ``since(position)``
costs the keys changed after ``position``.  A feed that holds more keys than its bound drops
its oldest half; a session whose position is below what was dropped reads every partition
once (``since`` answers None).

``IdleFetches``: one per follower session.  A partition the session skips because nothing
changed points its FollowerState at it, and each round of the session sets ``last_ms`` once:
the follower's fetch of all its idle partitions recorded for the ISR in one assignment
(FollowerState.caught_up_ms).

``AuditPace``: how many partitions an audit (the leader's of a follower session's rounds,
handlers/_follower_rounds.py; the replica fetcher's, fetcher.py) compares at a round, so
that each of ``n`` is compared at least once per ``audit_period(n)``: AUDIT_S, or for more
than AUDIT_PER_S x AUDIT_S partitions ``n / AUDIT_PER_S`` seconds, so that an audit's work
per second stays bounded (at 100,000 replicas, 16,700 partitions a session, each audit
compared 1,670 a second and took 3-4% of the loops, docs/scale.md)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

# keys kept at most (~100 bytes each): past it the oldest half goes
MAX_KEYS = 1 << 16
# an audit compares each partition at least this often (seconds) ...
AUDIT_S = 10.0
# ... unless it has more than AUDIT_PER_S x AUDIT_S: then AUDIT_PER_S partitions a second
AUDIT_PER_S = 500


class ChangeFeed:
    def __init__(self) -> None:
        self.seq = 0  # the latest change's number (a position: everything up to it seen)
        self._keys: dict[Hashable, int] = {}  # key: seq of its latest change, oldest first
        self._lost = 0  # changes up to this were dropped (a position below it reads all)

    def note(self, key: Hashable) -> None:
        self.seq += 1
        keys = self._keys
        keys.pop(key, None)
        keys[key] = self.seq
        if len(keys) > MAX_KEYS:
            self._trim()

    def _trim(self) -> None:
        keys = self._keys
        drop = len(keys) // 2
        for key in list(keys)[:drop]:
            self._lost = keys.pop(key)

    def since(self, position: int) -> list | None:
        """The keys changed after ``position`` (latest first), or None when changes after it
        were dropped (the caller then looks at every partition)."""
        if position < self._lost:
            return None
        out = []
        for key, seq in reversed(self._keys.items()):
            if seq <= position:
                break
            out.append(key)
        return out


class IdleFetches:
    """A follower session's idle partitions' last fetch (module docstring)."""

    __slots__ = ("last_ms",)

    def __init__(self) -> None:
        self.last_ms = 0


def partition_view(info: Any, partition: int) -> tuple | None:
    """What of a topic's metadata (a TopicInfo, or None) one partition's fetch depends on:
    the topic id, the configs and that partition's state.  A stamp holds this rather than
    the TopicInfo object, which the cache replaces whenever any partition of the topic
    changes: with the object, one ISR change of a topic of P partitions made every session's
    stamps of all P stale and every one of them was read again (W22's restart, restart12)."""
    if info is None:
        return None
    return (info.topic_id, info.configs, info.partitions.get(partition))


def audit_period(n: int) -> float:
    """Seconds within which an audit of ``n`` partitions compares each at least once."""
    return max(AUDIT_S, n / AUDIT_PER_S)


class AuditPace:
    """An audit's budget per round (module docstring): the partitions due since the last
    round, at least one, the fraction carried to the next."""

    __slots__ = ("last", "credit")

    def __init__(self) -> None:
        self.last: float | None = None  # the last round's time (seconds)
        self.credit = 0.0

    def budget(self, n: int, now_s: float) -> int:
        """How many of ``n`` partitions this round compares (0 at the first round)."""
        last, self.last = self.last, now_s
        if last is None or not n:
            self.credit = 0.0
            return 0
        due = self.credit + n * max(now_s - last, 0.0) / audit_period(n)
        take = min(n, max(1, int(due)))
        self.credit = min(max(due - take, 0.0), float(n))
        return take
