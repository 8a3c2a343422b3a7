"""Offsets of partitions, asked of their leaders with ListOffsets (one request per leader).

``list_offsets(client, topic, spec)`` returns ``{partition: (offset, timestamp)}`` where spec is
``EARLIEST`` (-2), ``LATEST`` (-1, the high watermark with isolation level read_uncommitted, as
Kafka's admin tools ask; the last stable offset with ``isolation=1``, read_committed) or a
timestamp in ms (the first offset whose timestamp is at or after
it; offset -1 when there is none).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from pybroker.cli.client import Client, check

LIST_OFFSETS = 2
EARLIEST = -2
LATEST = -1


def list_offsets(
    client: Client,
    topic: dict,
    spec: int,
    partitions: Iterable[int] | None = None,
    *,
    isolation: int = 0,
) -> dict[int, tuple[int, int]]:
    """``topic`` is a Metadata topic entry (Client.topic); ``partitions``: some of its
    partitions (default: all).  A wanted partition without a leader: LEADER_NOT_AVAILABLE."""
    wanted = sorted(
        {p["partition_index"] for p in topic["partitions"]}
        if partitions is None
        else set(partitions)
    )
    chosen = [p for p in topic["partitions"] if p["partition_index"] in wanted]
    leaders = client.leaders(dict(topic, partitions=chosen))
    by_leader: dict[int, list[int]] = defaultdict(list)
    for p in sorted(leaders):
        by_leader[leaders[p]].append(p)
    out: dict[int, tuple[int, int]] = {}
    for leader, parts in by_leader.items():
        body = {
            "replica_id": -1,
            "isolation_level": isolation,
            "topics": [
                {
                    "name": topic["name"],
                    "partitions": [{"partition_index": p, "timestamp": spec} for p in parts],
                }
            ],
        }
        _, r = client.request_to(leader, LIST_OFFSETS, body)
        for t in r["topics"]:
            for p in t["partitions"]:
                check(p["error_code"], f"ListOffsets {t['name']}-{p['partition_index']}")
                out[p["partition_index"]] = (p["offset"], p["timestamp"])
    return out
