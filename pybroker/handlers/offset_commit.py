"""OffsetCommit (key 8), versions 0-9.

Commits from members of the current generation, and from simple consumers (generation -1, no
member id) while the group has no members, as Kafka allows.  One request is one atomic store
write.  Errors: per partition, UNKNOWN_TOPIC_OR_PARTITION and OFFSET_METADATA_TOO_LARGE (above
offset.metadata.max.bytes).  For the whole group: ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID, NOT_COORDINATOR, INVALID_GROUP_ID.  v2-4
retention_time_ms: an explicit retention (not -1) sets that commit's expiry time.  In a KIP-848
group generation_id_or_member_epoch is the member epoch: a newer one than the member's is
FENCED_MEMBER_EPOCH, an older STALE_MEMBER_EPOCH, and members must commit with v9+
(UNSUPPORTED_VERSION below).

v1: a partition's commit_timestamp (not -1) is its commit time, from which
offsets.retention.minutes counts, as Kafka's coordinator does.  v0 (no generation, no member):
Kafka 3.9 on ZooKeeper writes it to /consumers/<group>/offsets/<topic>/<partition> at any
broker without group checks; pybroker keeps every group's offsets at that path already, so v0
commits go through the coordinator like a simple consumer's (generation -1: accepted while the
group has no members, else UNKNOWN_MEMBER_ID; NOT_COORDINATOR at other brokers).
"""

from __future__ import annotations

from collections.abc import Awaitable

from pybroker.handlers._groups import commit_checks, commit_response, coordinator_error
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler


@handler(8, 0, 9)
def offset_commit(ctx: RequestContext, req: dict) -> dict | Awaitable[dict]:
    """Answered without a coroutine when nothing waits (the coordinator's commit_now): the
    connection then writes the answer from the callback that read the request (issue 28)."""
    code = coordinator_error(ctx, req["group_id"], empty_ok=True)
    results, wanted = commit_checks(ctx, req, code)
    if not wanted:
        return commit_response(req, results)
    retention = req.get("retention_time_ms", -1)
    stamps = (
        {  # v1's explicit commit times (-1: now); no other version has the field
            (t["name"], p["partition_index"]): p["commit_timestamp"]
            for t in req["topics"]
            for p in t["partitions"]
            if p.get("commit_timestamp", -1) != -1
        }
        if ctx.version == 1
        else None
    )
    got = ctx.services.groups.commit_now(
        req["group_id"],
        req.get("member_id", ""),
        req.get("group_instance_id"),
        req.get("generation_id_or_member_epoch", -1),
        wanted,
        retention_ms=retention if retention is not None and retention >= 0 else None,
        commit_timestamps=stamps or None,
        api_version=ctx.version,
    )
    if type(got) is dict:
        results.update(got)
        return commit_response(req, results)
    return _answer_later(req, results, got)


async def _answer_later(
    req: dict, results: dict, waiting: Awaitable[dict[tuple[str, int], int]]
) -> dict:
    results.update(await waiting)
    return commit_response(req, results)
