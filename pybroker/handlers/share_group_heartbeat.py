"""ShareGroupHeartbeat (key 76), version 1: share-group membership (KIP-932).

Checked as Kafka does, in Kafka's order: READ on the group (GROUP_AUTHORIZATION_FAILED), the
member id (INVALID_REQUEST "Invalid member id in the request.": present, at most 36
characters), DESCRIBE on every subscribed topic (TOPIC_AUTHORIZATION_FAILED), then the request
(INVALID_GROUP_ID for a group id over MAX_NAME_CHARS, pybroker's bound on stored names;
INVALID_REQUEST with Kafka's messages: empty group id or rack id, no subscription when
joining, an epoch below -1), then the coordinator (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE).
The group coordinator's share-group machine does the rest (coord/group/share_coordinator.py).
With group.share.enable=false: UNSUPPORTED_VERSION, as Kafka with share.version 0.
"""

from __future__ import annotations

from pybroker.coord.group.responses import heartbeat_error
from pybroker.coord.group.share import HeartbeatRequest
from pybroker.coord.metadata.paths import MAX_NAME_CHARS
from pybroker.errors import ErrorCode
from pybroker.handlers._authz import on_group, on_topic
from pybroker.handlers._share import member_id_valid, share_enabled
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


def _error(code: int, message: str | None = None) -> dict:
    return {"throttle_time_ms": 0, **heartbeat_error(code, message)}


def _invalid(req: dict) -> str | None:
    """Kafka's throwIfShareGroupHeartbeatRequestIsInvalid."""
    if req["member_id"] == "":
        return "MemberId can't be empty."
    if req["group_id"] == "":
        return "GroupId can't be empty."
    if req.get("rack_id") == "":
        return "RackId can't be empty."
    if req["member_epoch"] == 0:
        if not req.get("subscribed_topic_names"):
            return "SubscribedTopicNames must be set in first request."
    elif req["member_epoch"] < -1:
        return "MemberEpoch is invalid."
    return None


@handler(76, 1, 1)
async def share_group_heartbeat(ctx: RequestContext, req: dict) -> dict:
    if not share_enabled(ctx):
        return _error(ErrorCode.UNSUPPORTED_VERSION)
    gid = req["group_id"]
    if not on_group(ctx, Operation.READ, gid):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if len(gid) > MAX_NAME_CHARS:
        return _error(ErrorCode.INVALID_GROUP_ID)
    if not member_id_valid(req["member_id"]):
        return _error(ErrorCode.INVALID_REQUEST, "Invalid member id in the request.")
    topics = req.get("subscribed_topic_names") or []
    if any(not on_topic(ctx, Operation.DESCRIBE, t) for t in set(topics)):
        return _error(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    message = _invalid(req)
    if message is not None:
        return _error(ErrorCode.INVALID_REQUEST, message)
    if not ctx.services.cluster.session_ok:
        return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    await ctx.services.group_configs.get(gid)  # (the group's share.* configs, cached)
    peer = ctx.peer
    hb = HeartbeatRequest(
        member_id=req["member_id"],
        member_epoch=req["member_epoch"],
        rack_id=req.get("rack_id"),
        subscribed=req.get("subscribed_topic_names"),
        client_id=ctx.client_id or "",
        client_host=f"/{peer[0]}" if isinstance(peer, tuple) else str(peer or ""),
    )
    resp = await ctx.services.share_groups.heartbeat(gid, hb)
    resp["throttle_time_ms"] = 0
    return resp
