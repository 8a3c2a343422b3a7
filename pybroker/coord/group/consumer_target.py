"""A KIP-848 group's target assignment kept across epochs in the uniform assignor's
homogeneous one-topic case (every member subscribed to the same one existing topic: W24's
shape; Kafka's UniformHomogeneousAssignmentBuilder), so that an epoch bump costs the members
that changed and the partitions that move, not the group.

assignors.py computes the target from scratch: every member's subscription resolved, the
whole previous target read, a heap of every member's load.  Each join bumps the group epoch
(Kafka 3.9 too), so a join wave of M members was M computations of O(M + P): quadratic.  This
keeps what that computation derives from the members (the sorted member ids, each member's
partitions and load, the members by load, the free partitions, the subscriptions and server
assignors by member) and updates it for the members ConsumerGroup ``touch``-es between two
computations; ``compute`` then applies assignors.py's one-topic rule (``_kept_one_topic`` and
``_give_free``) to those changes only and gives the same target: a member keeps its
partitions up to its cap (``per + 1`` for the first ``extra`` members in id order, ``per``
for the rest, at least 1; the smallest ones), the partitions left go in ascending order to
the least loaded member (ties: member id).  Any other case (range, several topics,
subscriptions that differ, a partition count that shrank, a previous target not disjoint)
answers None and the group computes from scratch, then ``build``-s this again when the case
holds.  Invariant (tests/test_consumer_group_target_golden.py,
tests/test_consumer_group_target_incremental.py): the target equals the from-scratch one.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Mapping

from pybroker.coord.group.assignors import RANGE, Assignment
from pybroker.coord.group.consumer_member import ConsumerMember, TopicMeta, resolve_subscription

SubscriptionKey = tuple[frozenset[str], str | None]


def subscription_key(m: ConsumerMember) -> SubscriptionKey:
    """What a member's resolved subscription depends on (besides the topics)."""
    return frozenset(m.subscribed_names), m.subscribed_regex


def most_requested(counts: Mapping[str, int]) -> str | None:
    """Kafka: the server assignor most members ask for (ties: the first by name)."""
    return max(sorted(counts), key=counts.__getitem__) if counts else None


class HomogeneousTarget:
    """One group's incremental target; ConsumerGroup is its one writer."""

    def __init__(self) -> None:
        self.valid = False
        self._touched: set[str] = set()

    # -- kept in step by the group ---------------------------------------------------------
    def touch(self, member_id: str) -> None:
        """Member ``member_id`` changed, joined, left or was renamed (its target moved)."""
        if self.valid:
            self._touched.add(member_id)

    def clear(self) -> None:
        self.valid = False
        self._touched = set()

    def build(
        self, members: Mapping[str, ConsumerMember], target: Assignment, topic: str, count: int
    ) -> None:
        """From a target the group just computed from scratch in the homogeneous one-topic
        case (uniform, every member's subscription resolving to ``topic`` alone)."""
        self.clear()
        self._topic, self._count = topic, count
        self._keys = {mid: subscription_key(m) for mid, m in members.items()}
        self._key_counts = Counter(self._keys.values())
        self._assignors = {mid: m.server_assignor for mid, m in members.items()}
        self._assignor_counts = Counter(a for a in self._assignors.values() if a)
        self._ids = sorted(members)
        self._sets: dict[str, set[int]] = {}
        self._load: dict[str, int] = {}
        self._by_load: dict[int, list[str]] = {}
        free = set(range(count))
        for mid in self._ids:
            mine = target.get(mid)
            ps = mine.get(topic) if mine else None
            if mine is None or len(mine) != (1 if ps else 0) or (ps and not ps <= free):
                return  # not a target of this case: stays invalid
            if ps:
                self._sets[mid] = ps
                free -= ps
            self._load[mid] = n = len(ps) if ps else 0
            self._by_load.setdefault(n, []).append(mid)  # in id order
        self._free = free
        self.valid = True

    # -- the computation -------------------------------------------------------------------
    def compute(
        self,
        members: Mapping[str, ConsumerMember],
        target: Assignment,
        topics: TopicMeta,
        default_assignor: str,
    ) -> tuple[str | None, set[str]] | None:
        """The new target written into ``target`` in place; (the most requested assignor,
        the members whose target changed or was dropped); None when this case does not hold
        (``target`` untouched, this invalid)."""
        if not self.valid:
            return None
        touched, self._touched = self._touched, set()
        for mid in touched:
            self._inputs(mid, members.get(mid))
        chosen = most_requested(self._assignor_counts)
        resolved = {key: _resolve(key, topics) for key in self._key_counts}
        first = next(iter(resolved.values()), None)
        if (
            not members
            or (chosen or default_assignor) == RANGE
            or first is None
            or len(first) != 1
            or any(r != first for r in resolved.values())
            or self._topic not in first
            or topics[self._topic][1] < self._count
            or not self._rejoin(touched, members, target)
        ):
            self.clear()
            return None
        t = self._topic
        count = topics[t][1]
        if count > self._count:
            self._free.update(range(self._count, count))
            self._count = count
        rewrite = {mid for mid in touched if mid in members}
        per, extra = divmod(count, len(self._ids))
        for mid, cap in self._over_cap(per, extra):
            ps = sorted(self._sets[mid])
            self._free.update(ps[cap:])
            self._sets[mid] = set(ps[:cap])
            self._move(mid, cap)
            rewrite.add(mid)
        given: dict[str, list[int]] = {}
        for p in sorted(self._free):
            low = min(self._by_load)
            mid = self._by_load[low][0]
            given.setdefault(mid, []).append(p)
            self._move(mid, low + 1)
        self._free = set()
        for mid, ps in given.items():
            kept = self._sets.get(mid)
            self._sets[mid] = kept.union(ps) if kept else set(ps)
            rewrite.add(mid)
        changed = set()
        for mid in touched:
            if mid not in members and target.pop(mid, None) is not None:
                changed.add(mid)
        for mid in rewrite:
            ps = self._sets.get(mid)
            new = {t: ps} if ps else {}
            if target.get(mid) != new:
                changed.add(mid)
            target[mid] = new
        return chosen, changed

    def _inputs(self, mid: str, m: ConsumerMember | None) -> None:
        """A touched member's subscription and server assignor in the counts."""
        for counts, by_member, value in (
            (self._key_counts, self._keys, None if m is None else subscription_key(m)),
            (self._assignor_counts, self._assignors, None if m is None else m.server_assignor),
        ):
            old = by_member.pop(mid, None)
            if old is not None:
                counts[old] -= 1
                if not counts[old]:
                    del counts[old]
            if value is not None:
                by_member[mid] = value
                counts[value] += 1

    def _rejoin(self, touched: set[str], members: Mapping[str, ConsumerMember], target) -> bool:
        """The touched members taken out and put back as the group and the previous target
        have them now; False when a previous target's partitions are not free (overlap, or
        beyond the partition count: the from-scratch rule then differs)."""
        t = self._topic
        back = []
        for mid in touched:
            had = self._sets.get(mid)
            cur = target.get(mid)
            if mid in members and mid in self._load and cur is not None:
                ps = cur.get(t)
                if ps is had and len(cur) == (1 if had else 0):
                    continue  # as this knows it
            if mid in self._load:
                self._take_out(mid)
            if mid in members:
                back.append(mid)
        for mid in back:
            cur = target.get(mid)
            ps = cur.get(t) if cur else None
            if ps:
                if not ps <= self._free:
                    return False
                self._free -= ps
                self._sets[mid] = ps
            insort(self._ids, mid)
            self._load[mid] = 0
            insort(self._by_load.setdefault(0, []), mid)
            self._move(mid, len(ps) if ps else 0)
        return True

    def _take_out(self, mid: str) -> None:
        ps = self._sets.pop(mid, None)
        if ps:
            self._free |= ps
        del self._ids[bisect_left(self._ids, mid)]
        load = self._load.pop(mid)
        bucket = self._by_load[load]
        del bucket[bisect_left(bucket, mid)]
        if not bucket:
            del self._by_load[load]

    def _move(self, mid: str, load: int) -> None:
        old = self._load[mid]
        if old == load:
            return
        bucket = self._by_load[old]
        del bucket[bisect_left(bucket, mid)]
        if not bucket:
            del self._by_load[old]
        insort(self._by_load.setdefault(load, []), mid)
        self._load[mid] = load

    def _over_cap(self, per: int, extra: int) -> list[tuple[str, int]]:
        """The members above their cap, with it (assignors._kept_one_topic's rule)."""
        out = []
        top = per + 1 if per else 1  # above it, over any member's cap
        for load in [n for n in self._by_load if n > top]:
            for mid in self._by_load[load]:
                i = bisect_left(self._ids, mid)
                out.append((mid, max(per + 1 if i < extra else per, 1)))
        if per and extra < len(self._ids) and top in self._by_load:
            # at per + 1: over the cap from the extra-th member in id order on
            bucket = self._by_load[top]
            out.extend((mid, per) for mid in bucket[bisect_left(bucket, self._ids[extra]) :])
        return out


def _resolve(key: SubscriptionKey, topics: TopicMeta) -> set[str]:
    names, regex = key
    return resolve_subscription(names, regex, topics)
