"""ShareFetch (key 78), versions 1-2: fetching records for a share group (KIP-932).

As Kafka's handleShareFetchRequest: the group id must be present (INVALID_REQUEST), READ on the
group (GROUP_AUTHORIZATION_FAILED), the member id valid (INVALID_REQUEST); v2's is_renew_ack
request must ask for nothing (max/min bytes, max records and max wait 0, else INVALID_REQUEST
naming them) and fetches nothing.  The share session (pybroker/share/session.py) decides which
partitions are read: epoch 0 opens one (no acknowledgements allowed: INVALID_REQUEST), later
epochs add and forget partitions, -1 closes it after the acknowledgements and releases the
member's records; session errors are top-level (SHARE_SESSION_NOT_FOUND,
INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_LIMIT_REACHED).

The acknowledgements it carries are applied first, as ShareAcknowledge's (answered per
partition in acknowledge_error_code), then records are acquired for the member by each
partition's leader (pybroker/share/manager.py): at most max_records (v2 acquire mode 1: exactly,
else whole batches of about batch_size), long-polling up to max_wait_ms when there is nothing
to acquire.  Per partition: UNKNOWN_TOPIC_ID, TOPIC_AUTHORIZATION_FAILED,
UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER (with the current leader and its endpoint),
UNKNOWN_SERVER_ERROR for a partition the group has no state for.  A subsequent fetch answers
only partitions with records, errors or acknowledgement results (and new ones once).  The
answer carries the group's acquisition lock duration.
"""

from __future__ import annotations

import asyncio

from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers._authz import on_topic
from pybroker.handlers._share import (
    acknowledge_all,
    current_leader,
    node_endpoints,
    session_request_error,
    settled,
    top_level_error,
)
from pybroker.handlers._topic_ids import Resolver
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation
from pybroker.share.manager import PartitionFetch, ShareSettings
from pybroker.share.session import ShareContext

RECORD_LIMIT = 1  # ShareAcquireMode: 0 batch-optimized, 1 record-limit


def _renew_request_invalid(req: dict) -> str | None:
    wrong = [
        f"{name} must be set to 0, "
        for name, key in (
            ("maxBytes", "max_bytes"),
            ("minBytes", "min_bytes"),
            ("maxRecords", "max_records"),
            ("maxWaitMs", "max_wait_ms"),
        )
        if req.get(key, 0) != 0
    ]
    return "".join(wrong) + "if isRenewAck is true." if wrong else None


@handler(78, 1, 2)
async def share_fetch(ctx: RequestContext, req: dict) -> dict:
    bad = session_request_error(ctx, req)
    if bad is not None:
        return top_level_error(*bad)
    gid, member = req.get("group_id"), req.get("member_id")
    renew = ctx.version >= 2 and bool(req.get("is_renew_ack"))
    if renew:
        message = _renew_request_invalid(req)
        if message is not None:
            return top_level_error(ErrorCode.INVALID_REQUEST, message)
    shares = ctx.services.shares
    resolver = Resolver(ctx.services.cluster)
    requested = [
        (t["topic_id"], resolver.name(t["topic_id"]), p["partition_index"])
        for t in req["topics"]
        for p in t["partitions"]
    ]
    forgotten = [
        (t["topic_id"], p) for t in req.get("forgotten_topics_data") or () for p in t["partitions"]
    ]
    has_acks = any(p.get("acknowledgement_batches") for t in req["topics"] for p in t["partitions"])
    epoch = req["share_session_epoch"]
    try:
        context = shares.sessions.new_context(
            gid, member, epoch, requested, forgotten, has_acks, id(ctx.session)
        )
    except KafkaError as e:
        if e.code == ErrorCode.SHARE_SESSION_LIMIT_REACHED:
            await asyncio.sleep(max(req["max_wait_ms"], 0) / 1000.0)
        return top_level_error(e.code, e.message)
    # acknowledgements first (the fetch sees what they released), stored while it fetches
    pending = await acknowledge_all(
        ctx, gid, member, req["topics"], supports_renew=ctx.version >= 2, is_renew_ack=renew
    )
    fetched: dict[tuple, PartitionFetch] = {}
    errors: dict[tuple, tuple[int, str | None]] = {}
    if not renew and not context.final:
        wanted = []
        for key in context.partitions:
            tid, _, index = key
            name = resolver.name(tid)  # (a session's partition may have gone meanwhile)
            if name is None:
                errors[(tid, index)] = (ErrorCode.UNKNOWN_TOPIC_ID, None)
            elif not on_topic(ctx, Operation.READ, name):
                errors[(tid, index)] = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
            elif index not in ctx.services.cluster.topics[name].partitions:
                errors[(tid, index)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
            else:
                wanted.append((tid, name, index))
        if wanted:
            acquire_mode = req.get("share_acquire_mode", 0) if ctx.version >= 2 else 0
            fetched = await shares.fetch(
                gid,
                member,
                wanted,
                max_wait_ms=req["max_wait_ms"],
                min_bytes=req["min_bytes"],
                max_bytes=req["max_bytes"],
                max_records=req.get("max_records", 500),
                batch_size=req.get("batch_size", 500),
                record_limit=acquire_mode == RECORD_LIMIT,
                rotate=max(epoch, 0),
                live=lambda: shares.sessions.get(gid, member) is context.session,
            )
    acks = await settled(pending)
    if context.final:
        shares.sessions.remove(gid, member)
        await shares.release(gid, member, context.session.partitions.values())
    settings = await shares.settings(gid)
    return _response(ctx, context, resolver, fetched, errors, acks, settings, requested)


def _response(
    ctx: RequestContext,
    context: ShareContext,
    resolver: Resolver,
    fetched: dict[tuple, PartitionFetch],
    errors: dict[tuple, tuple[int, str | None]],
    acks: dict[tuple, tuple[int, str | None]],
    settings: ShareSettings,
    requested: list[tuple],
) -> dict:
    # the partitions answered, in the order fetched, then those named only by errors or acks
    order: list[tuple] = []
    seen: set[tuple] = set()
    for key in [*(k for k in context.partitions), *requested]:
        tp = (key[0], key[2])
        if tp not in seen:
            seen.add(tp)
            order.append(tp)
    for tp in [*errors, *acks]:
        if tp not in seen:
            seen.add(tp)
            order.append(tp)
    by_tp = {(k[0], k[2]): v for k, v in fetched.items()}
    leaders: set[int] = set()
    topics: list[dict] = []
    for tid, index in order:
        pf = by_tp.get((tid, index))
        code, message = errors.get((tid, index), (ErrorCode.NONE, None))
        if pf is not None and pf.error:
            code, message = pf.error, pf.message
        ack = acks.get((tid, index))
        has_news = bool(pf is not None and pf.acquired) or code != 0 or ack is not None
        if (tid, index) not in by_tp and (tid, index) not in errors and ack is None:
            continue  # (not fetched: a renew request, or the final fetch)
        if not context.must_answer((tid, None, index), has_news):
            continue
        name = resolver.name(tid)
        leader = current_leader(ctx, name, index)
        if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH):
            leaders.add(leader[0])
        entry = {
            "partition_index": index,
            "error_code": code,
            "error_message": message,
            "acknowledge_error_code": ack[0] if ack else ErrorCode.NONE,
            "acknowledge_error_message": ack[1] if ack else None,
            "current_leader": {"leader_id": leader[0], "leader_epoch": leader[1]},
            "records": pf.records if pf is not None else b"",
            "acquired_records": [
                {
                    "first_offset": a.first_offset,
                    "last_offset": a.last_offset,
                    "delivery_count": a.delivery_count,
                }
                for a in (pf.acquired if pf is not None else ())
            ],
        }
        if topics and topics[-1]["topic_id"] == tid:
            topics[-1]["partitions"].append(entry)
        else:
            topics.append({"topic_id": tid, "partitions": [entry]})
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "acquisition_lock_timeout_ms": settings.limits.lock_duration_ms,
        "responses": topics,
        "node_endpoints": node_endpoints(ctx, leaders),
    }
