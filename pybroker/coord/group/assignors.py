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
    topics = sorted({t for s in subscriptions.values() for t in s if t in partitions})
    all_parts = [(t, p) for t in topics for p in range(partitions[t])]
    eligible = {t: sorted(m for m, s in subscriptions.items() if t in s) for t in topics}
    # each member's fair share of what it can take (an upper bound when subscriptions are
    # identical: total / members, rounded up for the first total % members members)
    total = len(all_parts)
    members = sorted(subscriptions)
    share = {}
    if members:
        per, extra = divmod(total, len(members))
        for i, m in enumerate(members):
            share[m] = per + (1 if i < extra else 0)
    taken: set[tuple[str, int]] = set()
    # 1. stickiness: a member keeps its current partitions (still subscribed) up to its share
    for m in members:
        for t, ps in sorted((current.get(m) or {}).items()):
            if t not in partitions or t not in subscriptions[m]:
                continue
            for p in sorted(ps):
                if p < partitions[t] and load[m] < max(share[m], 1) and (t, p) not in taken:
                    out[m].setdefault(t, set()).add(p)
                    load[m] += 1
                    taken.add((t, p))
    # 2. the rest to the least loaded eligible member (ties: member id), topics with fewer
    # subscribers first (they have fewer places to go).  One heap of (load, member) per
    # topic: an entry is stale when the member took partitions of another topic since (loads
    # only grow), and is refreshed when it reaches the top; O(P log M), where a scan of the
    # eligible members per partition was O(P * M) (W24: 1,000 members, 2,000 partitions).
    heaps: dict[str, list[tuple[int, str]]] = {}
    for t, p in sorted(all_parts, key=lambda tp: (len(eligible[tp[0]]), tp)):
        if (t, p) in taken:
            continue
        heap = heaps.get(t)
        if heap is None:
            heap = heaps[t] = [(load[m], m) for m in eligible[t]]
            heapq.heapify(heap)
        while heap[0][0] != load[heap[0][1]]:
            heapq.heapreplace(heap, (load[heap[0][1]], heap[0][1]))
        m = heap[0][1]
        out[m].setdefault(t, set()).add(p)
        load[m] += 1
        heapq.heapreplace(heap, (load[m], m))
    return out
