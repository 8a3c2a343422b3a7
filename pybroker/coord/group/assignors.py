"""Server-side partition assignors of KIP-848 consumer groups: "uniform" and "range".

An assignor maps the group's members (their subscribed topics) and the subscribed topics'
partition counts to a target assignment {member id: {topic: set of partitions}}.  It is given
the current target assignment so that it can be sticky: a partition stays with its member
while that keeps the assignment balanced.

uniform (Kafka's UniformAssignor, the default): every partition of a topic is given to one of
the members subscribed to it so that member loads differ by at most one where the
subscriptions allow; a member keeps the partitions it had up to its share, and the rest go to the least
loaded eligible member (ties: member id), the partitions of topics with fewer subscribers
first.

range (Kafka's RangeAssignor): per topic, the members subscribed to it in member id order
each get a contiguous range of partitions, the first ``partitions % members`` one more; kept
members keep their ranges when the membership does not change (the computation is
deterministic).

consumer_target.py keeps the uniform assignor's one-topic case (every member subscribed to
the same one topic) across a group's epochs and applies the same rule to the members that
changed; a change here must be made there too (tests/test_consumer_group_target_*.py compare
both with a from-scratch reference).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

Assignment = dict[str, dict[str, set[int]]]  # member id -> topic -> partitions

UNIFORM, RANGE = "uniform", "range"
ASSIGNORS = (UNIFORM, RANGE)


def assign(
    assignor: str,
    subscriptions: Mapping[str, set[str]],
    partitions: Mapping[str, int],
    current: Assignment,
) -> Assignment:
    """The target assignment; ``subscriptions``: member id -> subscribed topics (topics
    absent from ``partitions`` do not exist and are ignored); ``partitions``: topic ->
    partition count; ``current``: the previous target assignment."""
    if assignor == RANGE:
        return _range(subscriptions, partitions)
    return _uniform(subscriptions, partitions, current)


def _range(subscriptions: Mapping[str, set[str]], partitions: Mapping[str, int]) -> Assignment:
    out: Assignment = {m: {} for m in subscriptions}
    for topic in sorted({t for s in subscriptions.values() for t in s if t in partitions}):
        members = sorted(m for m, s in subscriptions.items() if topic in s)
        n = partitions[topic]
        per, extra = divmod(n, len(members))
        start = 0
        for i, m in enumerate(members):
            count = per + (1 if i < extra else 0)
            if count:
                out[m][topic] = set(range(start, start + count))
            start += count
    return out


def _uniform(
    subscriptions: Mapping[str, set[str]], partitions: Mapping[str, int], current: Assignment
) -> Assignment:
    members = sorted(subscriptions)
    eligible: dict[str, list[str]] = {}  # topic -> its subscribers in member id order
    for m in members:
        for t in subscriptions[m]:
            if t in partitions:
                eligible.setdefault(t, []).append(m)
    # each member's fair share of what it can take (an upper bound when subscriptions are
    # identical: total / members, rounded up for the first total % members members)
    total = sum(partitions[t] for t in eligible)
    per, extra = divmod(total, len(members)) if members else (0, 0)
    share = dict(zip(members, [per + 1] * extra + [per] * (len(members) - extra), strict=True))
    step1 = _kept_one_topic(members, subscriptions, partitions, current, per, extra)
    if step1 is None:
        step1 = _kept(members, subscriptions, partitions, current, share)
    out, load, taken = step1
    _give_free(eligible, partitions, out, load, taken)
    return out


def _kept_one_topic(
    members: list[str],
    subscriptions: Mapping[str, set[str]],
    partitions: Mapping[str, int],
    current: Assignment,
    per: int,
    extra: int,
) -> tuple[Assignment, dict[str, int], dict[str, set[int]]] | None:
    """Step 1 at once when every member is subscribed to the same one existing topic and
    the current target's partitions of it are disjoint and exist (a target the assignor
    computed): a member keeps its partitions, the smallest ``cap`` of them when it has more
    than its share (``cap``: ``per`` + 1 for the first ``extra`` members, at least 1), as
    _kept's member-by-member pass gives then; None when that does not hold."""
    if not members:
        return None
    first = subscriptions[members[0]]
    if not all(s is first for s in subscriptions.values()) and not all(
        s == first for s in subscriptions.values()
    ):
        return None
    names = [t for t in first if t in partitions]
    if len(names) != 1:
        return None
    t = names[0]
    empty: dict = {}
    had = [(current.get(m) or empty).get(t) or empty for m in members]
    sizes = list(map(len, had))
    union: set[int] = set().union(*had)
    if len(union) != sum(sizes) or (union and max(union) >= partitions[t]):
        return None
    lo = max(per, 1)
    for i in [i for i, n in enumerate(sizes) if n > lo]:
        cap = max(per + 1 if i < extra else per, 1)
        if sizes[i] > cap:
            ps = sorted(had[i])
            had[i] = set(ps[:cap])
            union.difference_update(ps[cap:])
            sizes[i] = cap
    by_member = dict(zip(members, had, strict=True))
    out: Assignment = {m: {t: ps} if (ps := by_member[m]) else {} for m in subscriptions}
    return out, dict(zip(members, sizes, strict=True)), {t: union}


def _kept(
    members: list[str],
    subscriptions: Mapping[str, set[str]],
    partitions: Mapping[str, int],
    current: Assignment,
    share: dict[str, int],
) -> tuple[Assignment, dict[str, int], dict[str, set[int]]]:
    """Step 1 member by member."""
    out: Assignment = {m: {} for m in subscriptions}
    load = dict.fromkeys(subscriptions, 0)
    taken: dict[str, set[int]] = {
        t: set() for m in members for t in subscriptions[m] if t in partitions
    }
    # 1. stickiness: a member keeps its current partitions (still subscribed) up to its share.
    # A topic's partitions kept whole are the current target's set itself, not a copy (the
    # current target is not used after; step 2 copies before it adds): at 1,000 members a
    # join wave's copies and sorts of every member's partitions were most of the target's
    # cost, while few members' targets change per epoch.
    for m in members:
        had = current.get(m)
        if not had:
            continue
        cap, n, mine, subscribed = max(share[m], 1), 0, out[m], subscriptions[m]
        for t in sorted(had) if len(had) > 1 else had:
            if n >= cap:
                break
            if t not in partitions or t not in subscribed:
                continue
            count, tk, ps = partitions[t], taken[t], had[t]
            if ps and n + len(ps) <= cap and max(ps) < count and tk.isdisjoint(ps):
                mine[t] = ps  # all of them (what the loop below would keep), shared
                n += len(ps)
                tk.update(ps)
                continue
            for p in sorted(ps):
                if n >= cap:
                    break
                if p < count and p not in tk:
                    mine.setdefault(t, set()).add(p)
                    n += 1
                    tk.add(p)
        load[m] = n
    return out, load, taken


def _give_free(
    eligible: dict[str, list[str]],
    partitions: Mapping[str, int],
    out: Assignment,
    load: dict[str, int],
    taken: dict[str, set[int]],
) -> None:
    # 2. the rest to the least loaded eligible member (ties: member id), topics with fewer
    # subscribers first (they have fewer places to go), a topic's partitions in order.  One
    # heap of (load, member) per topic: an entry is stale when the member took partitions of
    # another topic since (loads only grow), and is refreshed when it reaches the top;
    # O(P log M), where a scan of the eligible members per partition was O(P * M) (W24:
    # 1,000 members, 2,000 partitions); the free partitions of a topic are one set
    # difference (a join to a balanced group leaves a few).
    for t in sorted(eligible, key=lambda t: (len(eligible[t]), t)):
        free = sorted(set(range(partitions[t])).difference(taken[t]))
        if not free:
            continue
        heap = [(load[m], m) for m in eligible[t]]
        heapq.heapify(heap)
        given: dict[str, list[int]] = {}
        for p in free:
            while heap[0][0] != load[heap[0][1]]:
                heapq.heapreplace(heap, (load[heap[0][1]], heap[0][1]))
            m = heap[0][1]
            given.setdefault(m, []).append(p)
            load[m] += 1
            heapq.heapreplace(heap, (load[m], m))
        for m, ps in given.items():
            kept = out[m].get(t)  # maybe the current target's own set: a new one
            out[m][t] = kept.union(ps) if kept else set(ps)
