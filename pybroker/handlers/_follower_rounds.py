"""The Fetch handler's state for a follower's incremental fetch session: which of its
partitions a round looks at.  Instead of comparing every session partition's
follower_fetch_stamp on every round (O(partitions x rounds): 40-46% of the brokers' loops
creating 100,000 replicas, docs/scale.md), a round looks at the partitions without an idle
stamp (``FetchSession.unstamped``), at those the leader side noted as changed since the
session's last answer (ReplicaManager.changes, replication/changes.py) and at a slice of
the others (the audit, below); the rest are skipped as unchanged, and their fetch is recorded
for the ISR by one assignment (``IdleFetches.last_ms``).  The answer is what comparing every
stamp would answer.

The audit: each round also compares the stamps of the next few session partitions in turn,
so many that each is compared at least once per ``audit_period`` (replication/changes.py:
10 s, longer for sessions of more than 5,000 partitions); a stamp that moved without being
noted is a missed change notification (a defect): it is read at once and logged.

Sessions keyed by topic ids (Kafka's followers, Fetch v13+) the same way: the feed's keys are
topic names, so such a session keeps an index from (topic name, partition) to its own key
(``FollowerRounds.named``), filled from the partitions each answer looked at (their names as
resolved then: a stamp exists only for a partition whose topic id resolved to that name).

A consumer's session the same way (``FollowerRound(..., consumer=True)``; issue 27): its
stamp (LeaderSide.fetch_stamp) adds the last stable offset for read_committed, which moves only
with an append or the high watermark, both noted, and the topic's metadata object, noted when
the broker handles its change; the audit compares fetch_stamp.  A consumer's skipped
partitions need no recording (no ISR), and a session whose isolation level changes looks at
every partition once (its stamps hold the last stable offset or not)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pybroker.replication.changes import AuditPace, IdleFetches

if TYPE_CHECKING:
    from pybroker.fetch_session import FetchPartition, FetchSession

log = logging.getLogger("pybroker.handlers.fetch")


class FollowerRounds:
    """Kept on the session (``FetchSession.follower``)."""

    __slots__ = ("position", "idle", "audit", "audit_at", "pace", "named", "read_committed")

    def __init__(self) -> None:
        # the change feed's position the last answer reflects (None: look at every partition)
        self.position: int | None = None
        self.idle = IdleFetches()
        self.audit: list = []  # the session's keys, in turn
        self.audit_at = 0
        self.pace = AuditPace()
        # topic-id sessions: (topic name, partition) -> the session's (topic id, partition)
        self.named: dict = {}
        self.read_committed: bool | None = None  # a consumer's, as of the last answer


class FollowerRound:
    """One request of a follower's session: which partitions each pass looks at."""

    missed = 0  # missed change notifications found by audits (all sessions)

    def __init__(
        self,
        session: FetchSession,
        fast: bool,
        uses_ids: bool = False,
        consumer: bool = False,
        read_committed: bool = False,
    ) -> None:
        rounds = session.follower
        if not isinstance(rounds, FollowerRounds):
            rounds = session.follower = FollowerRounds()
        self.session = session
        self.rounds = rounds
        self.idle = rounds.idle
        self.fast = fast  # False: every partition each pass (stamps compared as before)
        self.uses_ids = uses_ids
        self.consumer = consumer  # a consumer's session: fetch_stamp, no ISR recording
        self.read_committed = read_committed
        self.seq = 0
        self.looked: list[FetchPartition] | None = None  # the last pass's (None: all)

    def pick(self, replicas: Any, replica_id: int, now_ms: int) -> list[FetchPartition] | None:
        """The partitions this pass looks at, in the session's order (None: all of them)."""
        feed = replicas.changes
        self.seq = feed.seq
        self.looked = None
        start = self.rounds.position
        if not self.fast or start is None:
            return None
        if self.consumer and self.rounds.read_committed is not self.read_committed:
            return None  # (its stamps were taken at the other isolation level)
        changed = feed.since(start)
        if changed is None:
            return None
        parts = self.session.partitions
        picked: dict = {}
        if self.uses_ids:
            named = self.rounds.named
            for name_key in changed:
                key = named.get(name_key)
                if key is not None and (p := parts.get(key)) is not None:
                    picked[key] = p
        else:
            for key in changed:
                p = parts.get(key)
                if p is not None:
                    picked[key] = p
        for key in self.session.unstamped:
            p = parts.get(key)
            if p is not None:
                picked[key] = p
        self._audit(replicas, replica_id, picked, now_ms)
        out = list(picked.values())
        out.sort(key=_order)
        self.looked = out
        return out

    def _audit(self, replicas: Any, replica_id: int, picked: dict, now_ms: int) -> None:
        rounds = self.rounds
        parts = self.session.partitions
        budget = rounds.pace.budget(len(parts), now_ms / 1000.0)
        if not budget:
            return
        audit, i = rounds.audit, rounds.audit_at
        for _ in range(budget):
            if i >= len(audit):
                audit, i = list(parts), 0
                rounds.audit = audit
            key = audit[i]
            i += 1
            p = parts.get(key)
            if p is None or p.idle_stamp is None or key in picked or p.topic is None:
                continue
            name = p.topic  # (key[0], or the name its topic id resolved to when stamped)
            if self.consumer:
                stamp = replicas.fetch_stamp(name, key[1], self.read_committed)
            else:
                stamp = replicas.follower_fetch_stamp(name, key[1], replica_id)
            if stamp == p.idle_stamp:
                continue
            picked[key] = p
            r = replicas.replicas.get((name, key[1]))
            if r is not None and r.checked_info is not replicas.cluster.topics.get(name):
                continue  # its topic's change event is still queued (noted when handled)
            FollowerRound.missed += 1
            n = FollowerRound.missed
            if n & (n - 1) == 0:
                log.warning(
                    "a %s fetch session missed a change of %s-%d (%d so far): "
                    "(leader epoch, ...) %r, last read at %r",
                    "consumer" if self.consumer else "follower",
                    name,
                    key[1],
                    n,
                    _shown(stamp),
                    _shown(p.idle_stamp),
                )
        rounds.audit_at = i

    def answered(self) -> None:
        """The answer went out: the session reflects the changes up to the last pass (and a
        topic-id session's index holds the names of the partitions it looked at)."""
        self.rounds.position = self.seq
        self.rounds.read_committed = self.read_committed
        if self.uses_ids:
            named = self.rounds.named
            looked = self.session.partitions.values() if self.looked is None else self.looked
            for p in looked:
                if p.topic is not None:
                    named[(p.topic, p.partition)] = p.key


def _order(p: FetchPartition) -> int:
    return p.order


def _shown(stamp: tuple | None) -> tuple | None:
    """A stamp without its objects (the replica, topic metadata, log)."""
    return None if stamp is None else tuple(x for x in stamp if type(x) is int)
