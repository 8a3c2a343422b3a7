"""ShareAcknowledge (key 79), versions 1-2: acknowledgements outside a fetch (KIP-932).

As Kafka's handleShareAcknowledgeRequest: the group id must be present (INVALID_REQUEST),
READ on the group (GROUP_AUTHORIZATION_FAILED), the member id valid (INVALID_REQUEST); the
share session's epoch is checked and moved (epoch 0: INVALID_SHARE_SESSION_EPOCH, -1 closes
the session after the acknowledgements and releases the member's records).  Each partition's
batches are validated (INVALID_REQUEST), need READ on the topic, and are applied atomically by
the partition's leader, answered once stored (INVALID_RECORD_STATE for records the member does
not hold, NOT_LEADER_OR_FOLLOWER with the current leader).  v2: Renew (type 4) in an
is_renew_ack request extends the acquisition locks; the answer carries the lock duration.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers._share import (
    acknowledge_all,
    current_leader,
    node_endpoints,
    partition_entry,
    session_request_error,
    settled,
    top_level_error,
)
from pybroker.handlers._topic_ids import Resolver
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler


@handler(79, 1, 2)
async def share_acknowledge(ctx: RequestContext, req: dict) -> dict:
    bad = session_request_error(ctx, req)
    if bad is not None:
        return top_level_error(*bad)
    gid, member = req.get("group_id"), req.get("member_id")
    shares = ctx.services.shares
    epoch = req["share_session_epoch"]
    try:
        session = shares.sessions.acknowledge_update(gid, member, epoch)
    except KafkaError as e:
        return top_level_error(e.code, e.message)
    results = await settled(
        await acknowledge_all(
            ctx,
            gid,
            member,
            req["topics"],
            supports_renew=ctx.version >= 2,
            is_renew_ack=bool(req.get("is_renew_ack")),
        )
    )
    if epoch == -1:
        shares.sessions.remove(gid, member)
        await shares.release(gid, member, session.partitions.values())
    resolver = Resolver(ctx.services.cluster)
    responses = []
    leaders: set[int] = set()
    for t in req["topics"]:
        tid = t["topic_id"]
        name = resolver.name(tid)
        parts = []
        for p in t["partitions"]:
            key = (tid, p["partition_index"])
            if key not in results:
                continue
            code, message = results[key]
            leader = current_leader(ctx, name, p["partition_index"])
            if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH):
                leaders.add(leader[0])
            parts.append(partition_entry(p["partition_index"], code, message, leader))
        if parts:
            responses.append({"topic_id": tid, "partitions": parts})
    settings = await shares.settings(gid)
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "acquisition_lock_timeout_ms": settings.limits.lock_duration_ms,
        "responses": responses,
        "node_endpoints": node_endpoints(ctx, leaders),
    }
