"""Shared by the group handlers: may the principal do this to the group, and is this broker
the group's coordinator?"""

from __future__ import annotations

from pybroker.coord.metadata.paths import MAX_NAME_CHARS
from pybroker.errors import ErrorCode
from pybroker.handlers._authz import enabled, on_group, on_topic
from pybroker.handlers.context import RequestContext
from pybroker.security.acl import Operation

_READ = Operation.READ  # (read once: an Enum class attribute is a slow lookup on 3.11)


def coordinator_error(
    ctx: RequestContext,
    group_id: str | None,
    op: Operation = Operation.READ,
    *,
    empty_ok: bool = False,
) -> int | None:
    """GROUP_AUTHORIZATION_FAILED (the principal may not ``op`` the group: Kafka checks that
    first), INVALID_GROUP_ID, NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE; None if we serve
    it.  A group id longer than MAX_NAME_CHARS is INVALID_GROUP_ID.  ``empty_ok``: the group "" is valid (Kafka's isValidGroupId: OffsetCommit,
    OffsetFetch, DescribeGroups and DeleteGroups accept it, for old consumers)."""
    if enabled(ctx) and not on_group(ctx, op, group_id or ""):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    if group_id is None or (group_id == "" and not empty_ok) or len(group_id) > MAX_NAME_CHARS:
        return ErrorCode.INVALID_GROUP_ID
    services = ctx.services
    if services.groups is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if not services.cluster.session_ok:
        # our ZooKeeper session is suspended or lost: another broker may be coordinating
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return services.groups.coordinator_error(group_id)


Offsets = dict[tuple[str, int], tuple[int, int, str | None]]


def commit_checks(
    ctx: RequestContext, req: dict, code: int | None
) -> tuple[dict[tuple[str, int], int], Offsets]:
    """OffsetCommit / TxnOffsetCommit: (error per partition decided here, the offsets to
    commit).  ``code``: the whole request's error, if any; else READ on each topic
    (TOPIC_AUTHORIZATION_FAILED) and an existing partition (UNKNOWN_TOPIC_OR_PARTITION)."""
    topics = ctx.services.cluster.topics
    results: dict[tuple[str, int], int] = {}
    wanted: Offsets = {}
    acls = enabled(ctx)
    for t in req["topics"]:
        name = t["name"]
        info = topics.get(name)
        for p in t["partitions"]:
            tp = (name, p["partition_index"])
            if code is not None:
                results[tp] = code
            elif acls and not on_topic(ctx, _READ, name):
                results[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif info is None or tp[1] not in info.partitions:
                results[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                wanted[tp] = (
                    p["committed_offset"],
                    p.get("committed_leader_epoch", -1),
                    p["committed_metadata"],
                )
    return results, wanted


def commit_response(req: dict, results: dict[tuple[str, int], int]) -> dict:
    """The OffsetCommit / TxnOffsetCommit answer: the request's topics and partitions, in order."""
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
