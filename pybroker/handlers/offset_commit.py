"""OffsetCommit (key 8), versions 2-9.

Commits from members of the current generation, and from simple consumers (generation -1, no
member id) while the group has no members, as Kafka allows.  One request is one atomic store
write.  Errors: per partition, UNKNOWN_TOPIC_OR_PARTITION and OFFSET_METADATA_TOO_LARGE (above
offset.metadata.max.bytes).  For the whole group: ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID, NOT_COORDINATOR, INVALID_GROUP_ID.  v2-4
retention_time_ms: an explicit retention (not -1) sets that commit's expiry time.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode
from pybroker.handlers._authz import on_topic
from pybroker.handlers._groups import coordinator_error
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


@handler(8, 2, 9)
async def offset_commit(ctx: RequestContext, req: dict) -> dict:
    topics = ctx.services.cluster.topics
    code = coordinator_error(ctx, req["group_id"])
    results: dict[tuple[str, int], int] = {}
    wanted: dict[tuple[str, int], tuple[int, int, str | None]] = {}
    for t in req["topics"]:
        info = topics.get(t["name"])
        for p in t["partitions"]:
            tp = (t["name"], p["partition_index"])
            if code is not None:
                results[tp] = code
            elif not on_topic(ctx, Operation.READ, t["name"]):
                results[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif info is None or p["partition_index"] not in info.partitions:
                results[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                wanted[tp] = (
                    p["committed_offset"],
                    p.get("committed_leader_epoch", -1),
                    p["committed_metadata"],
                )
    if wanted:
        retention = req.get("retention_time_ms", -1)
        results.update(
            await ctx.services.groups.commit(
                req["group_id"],
                req["member_id"],
                req.get("group_instance_id"),
                req["generation_id_or_member_epoch"],
                wanted,
                retention_ms=retention if retention is not None and retention >= 0 else None,
            )
        )
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": t["name"],
                "partitions": [
                    {
                        "partition_index": p["partition_index"],
                        "error_code": results[(t["name"], p["partition_index"])],
                    }
                    for p in t["partitions"]
                ],
            }
            for t in req["topics"]
        ],
    }
