"""OffsetFetch (key 9), versions 0-9.

Committed offsets with their leader epoch (v5+) and metadata; -1 and "" for a partition with
no commit.  v2+: a null topic list means every partition the group has committed, and errors
are also reported at the top level; v8+: several groups in one request.  Offsets committed in
a transaction show only once it commits; with require_stable (v7+) a partition with an offset
pending in an open transaction answers UNSTABLE_OFFSET_COMMIT (the client retries).  v9's member id and epoch
are checked in KIP-848 groups (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH), not in classic groups.
v0 is answered as v1 but with empty metadata, as Kafka 3.9 answers it from the offsets
ZooKeeper holds (OffsetCommit v0 stores no metadata there); its offsets are the group's own
(pybroker keeps them at that ZooKeeper path), served by the coordinator.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers._authz import enabled, on_topic
from pybroker.handlers._groups import coordinator_error
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


def _failed(code: int, topics: list[dict] | None) -> tuple[int, list[dict]]:
    """The group's answer when it fails as a whole: ``code`` at the top and for each
    partition asked for."""
    if topics is None:
        return code, []
    return code, [
        {
            "name": t["name"],
            "partitions": [
                {
                    "partition_index": p,
                    "committed_offset": -1,
                    "committed_leader_epoch": -1,
                    "metadata": "",
                    "error_code": code,
                }
                for p in t["partition_indexes"]
            ],
        }
        for t in topics
    ]


async def _fetch_group(
    ctx: RequestContext,
    group_id: str,
    topics: list[dict] | None,
    require_stable: bool,
    member: tuple[str | None, int] = (None, -1),
) -> tuple[int, list[dict]]:
    code = coordinator_error(ctx, group_id, Operation.DESCRIBE, empty_ok=True)
    if code is None:  # v9+: a KIP-848 member's id and epoch (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH)
        code = await ctx.services.groups.validate_offset_fetch(group_id, *member) or None
    if code is not None:
        return _failed(code, topics)
    wanted = (
        None if topics is None else [(t["name"], p) for t in topics for p in t["partition_indexes"]]
    )
    try:  # (the store unreachable: COORDINATOR_NOT_AVAILABLE, the client retries)
        found = await ctx.services.groups.fetch(group_id, wanted)
        unstable = await ctx.services.groups.unstable_partitions(group_id) if require_stable else ()
    except KafkaError as e:
        return _failed(e.code, topics)
    if enabled(ctx):  # Kafka: DESCRIBE on each topic; the others are left out or refused
        denied = {tp[0] for tp in found if not on_topic(ctx, Operation.DESCRIBE, tp[0])}
        if topics is None:
            found = {tp: c for tp, c in found.items() if tp[0] not in denied}
    else:
        denied = set()
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), c in found.items():
        if topic in denied:
            c, code = None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif (topic, partition) in unstable:
            c, code = None, ErrorCode.UNSTABLE_OFFSET_COMMIT
        else:
            code = ErrorCode.NONE
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "committed_offset": c.offset if c else -1,
                "committed_leader_epoch": c.leader_epoch if c else -1,
                "metadata": c.metadata if c else "",
                "error_code": code,
            }
        )
    return ErrorCode.NONE, [{"name": name, "partitions": parts} for name, parts in by_topic.items()]


@handler(9, 0, 9)
async def offset_fetch(ctx: RequestContext, req: dict) -> dict:
    if ctx.version >= 8:
        groups = []
        for g in req["groups"]:
            member = (g.get("member_id"), g.get("member_epoch", -1))
            code, topics = await _fetch_group(
                ctx, g["group_id"], g["topics"], req.get("require_stable", False), member
            )
            groups.append({"group_id": g["group_id"], "topics": topics, "error_code": code})
        return {"throttle_time_ms": 0, "groups": groups}
    code, topics = await _fetch_group(
        ctx, req["group_id"], req["topics"], req.get("require_stable", False)
    )
    if ctx.version < 2 and code != ErrorCode.NONE and not topics:
        code = ErrorCode.NONE  # v0-1 carry errors per partition only
    if ctx.version == 0:
        for t in topics:
            for p in t["partitions"]:
                p["metadata"] = ""
    return {"throttle_time_ms": 0, "topics": topics, "error_code": code}
