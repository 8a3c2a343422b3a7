"""DeleteShareGroupOffsets (key 92), version 0: drop the share-partition state of whole topics
from an empty share group (kafka-share-groups --delete-offsets); the group starts those topics
again from share.auto.offset.reset.  DELETE on the group (GROUP_AUTHORIZATION_FAILED), READ on
each topic (TOPIC_AUTHORIZATION_FAILED per topic); GROUP_ID_NOT_FOUND for no such share group,
NON_EMPTY_GROUP while it has members; a topic that does not exist gets
UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from pybroker.coord.metadata.store import StoreError
from pybroker.errors import ErrorCode
from pybroker.handlers._authz import on_group, on_topic
from pybroker.handlers._groups import coordinator_error
from pybroker.handlers._share import share_enabled
from pybroker.handlers._topic_ids import ZERO
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


def _error(code: int, message: str | None = None) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "responses": []}


@handler(92, 0, 0)
async def delete_share_group_offsets(ctx: RequestContext, req: dict) -> dict:
    if not share_enabled(ctx):
        return _error(ErrorCode.UNSUPPORTED_VERSION)
    gid = req["group_id"]
    if not on_group(ctx, Operation.DELETE, gid):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    share_groups = ctx.services.share_groups
    code = coordinator_error(ctx, gid, Operation.DELETE) or share_groups.coordinator_error(gid)
    if code is not None:
        return _error(code)
    try:
        g = await share_groups.group(gid)
        stored = await share_groups.store.partitions(gid)
    except StoreError:
        return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if g is None:
        return _error(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
    if not g.is_empty:
        return _error(ErrorCode.NON_EMPTY_GROUP, "The group is not empty.")
    topics = ctx.services.cluster.topics
    responses = []
    doomed = []
    for t in req["topics"]:
        name = t["topic_name"]
        info = topics.get(name)
        if not on_topic(ctx, Operation.READ, name):
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif info is None:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            code = ErrorCode.NONE
            doomed += [tp for tp in stored if tp[0] == info.topic_id]
        responses.append(
            {
                "topic_name": name,
                "topic_id": info.topic_id if info is not None else ZERO,
                "error_code": code,
                "error_message": None,
            }
        )
    try:
        code = await share_groups.delete_offsets(gid, doomed) if doomed else None
    except StoreError:
        code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code is not None:
        return _error(code)
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "responses": responses,
    }
