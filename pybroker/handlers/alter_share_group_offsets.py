"""AlterShareGroupOffsets (key 91), version 0: new share-partition start offsets for an empty
share group (kafka-share-groups --reset-offsets --execute).  READ on the group
(GROUP_AUTHORIZATION_FAILED) and on each topic (TOPIC_AUTHORIZATION_FAILED per partition);
NON_EMPTY_GROUP while the group has members; a partition that does not exist gets
UNKNOWN_TOPIC_OR_PARTITION, and a negative offset INVALID_REQUEST.  The new state replaces the
old one (a fresh state epoch, no in-flight records); a leader holding the old one fails its
next write and loads the new one.
"""

from __future__ import annotations

import uuid

from pybroker.coord.metadata.store import StoreError
from pybroker.errors import ErrorCode
from pybroker.handlers._authz import on_group, on_topic
from pybroker.handlers._groups import coordinator_error
from pybroker.handlers._share import share_enabled
from pybroker.handlers._topic_ids import ZERO
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


def _error(req: dict, code: int, message: str | None = None) -> dict:
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "error_message": message,
        "responses": [
            {
                "topic_name": t["topic_name"],
                "topic_id": ZERO,
                "partitions": [
                    {"partition_index": p["partition_index"], "error_code": code,
                     "error_message": message}
                    for p in t["partitions"]
                ],
            }
            for t in req["topics"]
        ],
    }  # fmt: skip


@handler(91, 0, 0)
async def alter_share_group_offsets(ctx: RequestContext, req: dict) -> dict:
    if not share_enabled(ctx):
        return _error(req, ErrorCode.UNSUPPORTED_VERSION)
    gid = req["group_id"]
    if not on_group(ctx, Operation.READ, gid):
        return _error(req, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    code = coordinator_error(ctx, gid) or ctx.services.share_groups.coordinator_error(gid)
    if code is not None:
        return _error(req, code)
    topics = ctx.services.cluster.topics
    wanted: dict[tuple[uuid.UUID, int], int] = {}
    responses = []
    for t in req["topics"]:
        name = t["topic_name"]
        info = topics.get(name)
        parts = []
        for p in t["partitions"]:
            index = p["partition_index"]
            if not on_topic(ctx, Operation.READ, name):
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif info is None or index not in info.partitions:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif p["start_offset"] < 0:
                code = ErrorCode.INVALID_REQUEST
            else:
                code = ErrorCode.NONE
                wanted[(info.topic_id, index)] = p["start_offset"]
            parts.append({"partition_index": index, "error_code": code, "error_message": None})
        responses.append(
            {
                "topic_name": name,
                "topic_id": info.topic_id if info is not None else ZERO,
                "partitions": parts,
            }
        )
    try:
        code = await ctx.services.share_groups.alter_offsets(gid, wanted) if wanted else None
    except StoreError:
        code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code is not None:
        message = "The group is not empty." if code == ErrorCode.NON_EMPTY_GROUP else None
        return _error(req, code, message)
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "responses": responses,
    }
