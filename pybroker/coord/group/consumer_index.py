"""What a KIP-848 group derives from all its members, kept in step one member change at a time
(Kafka's ConsumerGroup: ``currentPartitionEpoch``, ``subscribedTopicNames``; its timers): the
members owning each partition (assigned or pending revocation), the members subscribed to each
topic name and regex, the members STABLE at each epoch, the classic members, and each member's
next deadline in a heap with lazy deletion.  ConsumerGroup is its one owner: it calls
``update`` after it changed a member and ``remove`` when a member left, so that a heartbeat
costs the size of its member, not of the group.  Invariant: equal to what a scan of the
members computes (tests/test_consumer_group_index.py checks it after random operations).
"""

from __future__ import annotations

import heapq
import re
from collections import Counter
from dataclasses import dataclass

from pybroker.coord.group.consumer_member import (
    ConsumerMember,
    MemberState,
    Partitions,
    TopicMeta,
)

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class _Entry:
    """What one member contributed to the index when it was last updated."""

    owned: frozenset[TopicPartition]
    names: frozenset[str]
    regex: str | None
    stable_epoch: int | None  # its epoch when STABLE, else None
    classic: bool
    deadline: int


class ConsumerGroupIndex:
    """One group's index; ``owners``, ``names``, ``regexes``, ``stable_at`` and
    ``classic_members`` are read-only outside it."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self.owners: dict[TopicPartition, set[str]] = {}
        self.names: Counter[str] = Counter()
        self.regexes: Counter[str] = Counter()
        self.stable_at: Counter[int] = Counter()
        self.classic_members = 0
        self._heap: list[tuple[int, str]] = []

    # -- keeping it in step ----------------------------------------------------------------
    def update(self, m: ConsumerMember, session_timeout_ms: int) -> None:
        """``m`` as it is now (added if new)."""
        owned = frozenset(
            (t, p)
            for src in (m.assigned, m.pending_revocation)
            for t, ps in src.items()
            for p in ps
        )
        deadline = m.last_heartbeat_ms + session_timeout_ms
        for d in (m.revocation_deadline_ms, m.classic_deadline_ms):
            if d is not None and d < deadline:
                deadline = d
        new = _Entry(
            owned,
            frozenset(m.subscribed_names),
            m.subscribed_regex,
            m.epoch if m.state is MemberState.STABLE else None,
            m.classic is not None,
            deadline,
        )
        old = self._entries.get(m.member_id)
        if old == new:
            return
        self._entries[m.member_id] = new
        self._apply(m.member_id, old, new)

    def remove(self, member_id: str) -> None:
        old = self._entries.pop(member_id, None)
        if old is not None:
            self._apply(member_id, old, None)

    def clear(self) -> None:
        self.__init__()  # type: ignore[misc]

    def _apply(self, mid: str, old: _Entry | None, new: _Entry | None) -> None:
        was_owned = old.owned if old else frozenset()
        now_owned = new.owned if new else frozenset()
        for tp in was_owned - now_owned:
            owners = self.owners[tp]
            owners.discard(mid)
            if not owners:
                del self.owners[tp]
        for tp in now_owned - was_owned:
            self.owners.setdefault(tp, set()).add(mid)
        if old is None or new is None or old.names != new.names or old.regex != new.regex:
            if old is not None:
                _count(self.names, old.names, -1)
                _count(self.regexes, () if old.regex is None else (old.regex,), -1)
            if new is not None:
                _count(self.names, new.names, 1)
                _count(self.regexes, () if new.regex is None else (new.regex,), 1)
        for e, sign in ((old, -1), (new, 1)):
            if e is None:
                continue
            if e.stable_epoch is not None:
                _count(self.stable_at, (e.stable_epoch,), sign)
            self.classic_members += sign * e.classic
        if new is not None and (old is None or old.deadline != new.deadline):
            heapq.heappush(self._heap, (new.deadline, mid))
            if len(self._heap) > 2 * len(self._entries) + 64:
                # the stale entries outnumber the live ones: drop them (bounded memory)
                self._heap = [(e.deadline, k) for k, e in self._entries.items()]
                heapq.heapify(self._heap)

    # -- what the group reads ----------------------------------------------------------------
    def owned_by_others(self, member_id: str, among: Partitions) -> Partitions:
        """The partitions of ``among`` that another member owns (assigned or revoking)."""
        out: Partitions = {}
        for t, ps in among.items():
            for p in ps:
                owners = self.owners.get((t, p))
                if owners and (len(owners) > 1 or member_id not in owners):
                    out.setdefault(t, set()).add(p)
        return out

    def subscribed(self, topics: TopicMeta) -> set[str]:
        """The existing topics some member subscribes to, by name or regex."""
        names = {t for t in self.names if t in topics}
        for regex in self.regexes:
            pattern = re.compile(regex)
            names |= {t for t in topics if pattern.fullmatch(t)}
        return names

    def next_deadline(self) -> int | None:
        """The earliest of the members' session, revocation and classic deadlines."""
        heap = self._heap
        while heap:
            deadline, mid = heap[0]
            e = self._entries.get(mid)
            if e is not None and e.deadline == deadline:
                return deadline
            heapq.heappop(heap)
        return None


def _count(counter: Counter, keys, sign: int) -> None:
    for k in keys:
        counter[k] += sign
        if not counter[k]:
            del counter[k]
