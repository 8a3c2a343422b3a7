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
(FollowerState.caught_up_ms)."""

from __future__ import annotations

from collections.abc import Hashable

# keys kept at most (~100 bytes each): past it the oldest half goes
MAX_KEYS = 1 << 16


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
