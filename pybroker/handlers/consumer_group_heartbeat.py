"""ConsumerGroupHeartbeat (key 68), versions 0-1: the KIP-848 consumer group protocol.

The request is checked as Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid does
(INVALID_REQUEST with Kafka's messages; an unknown server assignor UNSUPPORTED_ASSIGNOR; a
regular expression that does not compile INVALID_REGULAR_EXPRESSION), the principal needs READ
on the group, and the group's coordinator runs the state machine (coord/group/consumer.py):
member epochs, the server-side assignment and its reconciliation.  Owned and assigned
partitions travel as topic ids; an owned topic id the broker no longer knows is dropped.  With
group.coordinator.rebalance.protocols not naming "consumer", the API is not advertised and
answers UNSUPPORTED_VERSION, as Kafka does.
"""

from __future__ import annotations

import re

from pybroker.coord.group.consumer_member import (
    LEAVE_EPOCH,
    LEAVE_STATIC_EPOCH,
    HeartbeatRequest,
    owned_from_wire,
)
from pybroker.coord.group.responses import heartbeat_error
from pybroker.errors import ErrorCode
from pybroker.handlers._groups import coordinator_error
from pybroker.handlers._topic_ids import Resolver
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler


def _error(code: int, message: str | None = None) -> dict:
    return {"throttle_time_ms": 0, **heartbeat_error(code, message)}


def _invalid(req: dict, version: int) -> str | None:
    """Kafka's checks of a heartbeat request: the INVALID_REQUEST message, or None."""
    if not req["group_id"]:
        return "GroupId can't be empty."
    if req.get("instance_id") == "":
        return "InstanceId can't be empty."
    if req.get("rack_id") == "":
        return "RackId can't be empty."
    epoch, member_id = req["member_epoch"], req["member_id"]
    if version >= 1 and not member_id:
        return "MemberId can't be empty."
    if epoch > 0 or epoch == LEAVE_EPOCH:
        if not member_id:
            return "MemberId can't be empty."
    elif epoch == 0:
        if req["rebalance_timeout_ms"] == -1:
            return "RebalanceTimeoutMs must be provided in first request."
        if req.get("topic_partitions") is None or req["topic_partitions"]:
            return "TopicPartitions must be empty when (re-)joining."
        if req.get("subscribed_topic_names") is None and req.get("subscribed_topic_regex") is None:
            return (
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
                "(re-)joining."
            )
    elif epoch == LEAVE_STATIC_EPOCH:
        if not member_id:
            return "MemberId can't be empty."
        if req.get("instance_id") is None:
            return "InstanceId can't be null."
    else:
        return "MemberEpoch is invalid."
    return None


def consumer_protocol_enabled(ctx: RequestContext) -> bool:
    return "consumer" in ctx.services.config.group_coordinator_rebalance_protocols


@handler(68, 0, 1)
async def consumer_group_heartbeat(ctx: RequestContext, req: dict) -> dict:
    if not consumer_protocol_enabled(ctx):
        return _error(ErrorCode.UNSUPPORTED_VERSION)
    gid = req["group_id"]
    code = coordinator_error(ctx, gid)
    if code is not None and code != ErrorCode.INVALID_GROUP_ID:
        return _error(code)
    message = _invalid(req, ctx.version)
    if message is not None:
        return _error(ErrorCode.INVALID_REQUEST, message)
    regex = req.get("subscribed_topic_regex")
    if regex:
        try:
            re.compile(regex)
        except re.error as e:
            return _error(
                ErrorCode.INVALID_REGULAR_EXPRESSION,
                f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {e}.",
            )
    hb = HeartbeatRequest(
        member_id=req["member_id"],
        member_epoch=req["member_epoch"],
        instance_id=req.get("instance_id"),
        rack_id=req.get("rack_id"),
        rebalance_timeout_ms=req["rebalance_timeout_ms"],
        subscribed_names=req.get("subscribed_topic_names"),
        subscribed_regex=regex,
        server_assignor=req.get("server_assignor"),
        owned=owned_from_wire(req.get("topic_partitions"), Resolver(ctx.services.cluster).name),
        client_id=ctx.client_id or "",
        client_host=f"/{ctx.peer[0]}" if isinstance(ctx.peer, tuple) else str(ctx.peer or ""),
    )
    resp = await ctx.services.groups.consumer_heartbeat(gid, hb)
    resp["throttle_time_ms"] = 0
    return resp
