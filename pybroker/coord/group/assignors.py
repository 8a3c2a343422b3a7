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
    out: Assignment = {m: {} for m in subscriptions}
    load = dict.fromkeys(subscriptions, 0)
    members = sorted(subscriptions)
    eligible: dict[str, list[str]] = {}  # topic -> its subscribers in member id order
    for m in members:
        for t in subscriptions[m]:
            if t in partitions:
                eligible.setdefault(t, []).append(m)
    # each member's fair share of what it can take (an upper bound when subscriptions are
    # identical: total / members, rounded up for the first total % members members)
    total = sum(partitions[t] for t in eligible)
    share = {}
    if members:
        per, extra = divmod(total, len(members))
        for i, m in enumerate(members):
            share[m] = per + (1 if i < extra else 0)
    taken: dict[str, set[int]] = {t: set() for t in eligible}
    # 1. stickiness: a member keeps its current partitions (still subscribed) up to its share
    for m in members:
        had = current.get(m)
        if not had:
            continue
        cap, n, mine, subscribed = max(share[m], 1), 0, out[m], subscriptions[m]
        for t in sorted(had):
            if n >= cap:
                break
            if t not in partitions or t not in subscribed:
                continue
            count, tk, ps = partitions[t], taken[t], had[t]
            if ps and n + len(ps) <= cap and max(ps) < count and tk.isdisjoint(ps):
                mine[t] = set(ps)  # all of them (what the loop below would keep)
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
        for p in free:
            while heap[0][0] != load[heap[0][1]]:
                heapq.heapreplace(heap, (load[heap[0][1]], heap[0][1]))
            m = heap[0][1]
            out[m].setdefault(t, set()).add(p)
            load[m] += 1
            heapq.heapreplace(heap, (load[m], m))
    return out
