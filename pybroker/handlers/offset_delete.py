"""OffsetDelete (key 47), version 0.

Deletes a group's committed offsets for the partitions named (GroupCoordinator.delete_offsets):
all of them while the group is empty; while it has members, only those of topics no member
subscribes to (per the "consumer" protocol subscriptions; the others answer
GROUP_SUBSCRIBED_TO_TOPIC), and nothing for a non-empty group of another protocol type
(NON_EMPTY_GROUP).  Per partition, UNKNOWN_TOPIC_OR_PARTITION for one the metadata does not
know.  Group-level errors (top-level error code, no topics): GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP,
INVALID_GROUP_ID, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE.

Kafka computes a group's subscribed topics when a generation starts; pybroker reads the
current members' subscriptions when the request arrives (the same answer except while a
rebalance is changing the subscriptions).
"""

from __future__ import annotations

from pybroker.errors import ErrorCode
from pybroker.handlers._authz import on_topic
from pybroker.handlers._groups import coordinator_error
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


def _error(code: int) -> dict:
    return {"error_code": code, "throttle_time_ms": 0, "topics": []}


@handler(47, 0, 0)
async def offset_delete(ctx: RequestContext, req: dict) -> dict:
    group_id = req["group_id"]
    code = coordinator_error(ctx, group_id, Operation.DELETE)
    if code is not None:
        return _error(code)
    topics = ctx.services.cluster.topics
    results: dict[str, dict[int, int]] = {}
    wanted: list[tuple[str, int]] = []
    for t in req["topics"]:
        info = topics.get(t["name"])
        parts = results.setdefault(t["name"], {})
        for p in t["partitions"]:
            index = p["partition_index"]
            if not on_topic(ctx, Operation.READ, t["name"]):
                parts[index] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif info is None or index not in info.partitions:
                parts[index] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                parts[index] = ErrorCode.NONE
                wanted.append((t["name"], index))
    group_error, deleted = await ctx.services.groups.delete_offsets(group_id, wanted)
    if group_error != ErrorCode.NONE:
        return _error(group_error)
    for (name, index), c in deleted.items():
        results[name][index] = c
    return {
        "error_code": ErrorCode.NONE,
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": name,
                "partitions": [{"partition_index": i, "error_code": c} for i, c in parts.items()],
            }
            for name, parts in results.items()
        ],
    }
