"""ListOffsets (key 2), versions 0-9.  timestamp -2: the log start offset; -1: the high
watermark (read_uncommitted) or the last stable offset (read_committed); -3 (KIP-734): the
record with the largest timestamp; -4 / -5 (KIP-405, KIP-1005) as Kafka answers without
remote storage; any other: the first offset at or after that timestamp, through the time
index.  Nothing at or above the high watermark counts (Kafka's lastFetchableOffset), and a
new leader behind its epoch's start answers OFFSET_NOT_AVAILABLE (KIP-207) after waiting up to
HW_WAIT_S for its followers' next fetch.  A batch walked by
timestamp is walked off the loop when large or compressed.  v0 and the details:
docs/internals.md ("pybroker/handlers/list_offsets.py").
"""

from __future__ import annotations

import asyncio
import logging

from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers._authz import on_topic
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.replication.manager import hw_key
from pybroker.security.acl import Operation
from pybroker.wire.records import InvalidRecordError

EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3
EARLIEST_LOCAL, LATEST_TIERED = -4, -5
READ_COMMITTED = 1
# how long one request waits for a new leader's high watermark to reach its epoch start
# before answering OFFSET_NOT_AVAILABLE (Kafka's replica.fetch.wait.max.ms: a follower's next
# fetch comes within it)
HW_WAIT_S = 0.5

logger = logging.getLogger(__name__)


def _not_available(replica) -> KafkaError:
    return KafkaError(
        ErrorCode.OFFSET_NOT_AVAILABLE,
        f"the high watermark ({replica.log.high_watermark}) is below the start offset of "
        f"leader epoch {replica.leader_epoch} ({replica.leader_epoch_start_offset})",
    )


async def _caught_up(ctx: RequestContext, topic: str, p: dict, replica, deadline: float):  # noqa: ANN001
    """The leader's replica once its high watermark reached the start of its leader epoch,
    waiting for that until ``deadline`` (its followers' next fetch takes milliseconds); then
    OFFSET_NOT_AVAILABLE, as Kafka answers at once (KIP-207)."""
    clock, replicas = ctx.services.clock, ctx.services.replicas
    while replica.high_watermark_lagging():
        left = deadline - clock.monotonic()
        if left <= 0:
            raise _not_available(replica)
        await ctx.services.purgatory.wait_any([hw_key(topic, p["partition_index"])], left)
        replica = replicas.leader_replica(
            topic, p["partition_index"], p.get("current_leader_epoch", -1)
        )
    return replica


async def _lookup(
    ctx: RequestContext, topic: str, p: dict, read_committed: bool = False, deadline: float = 0.0
) -> dict:
    index = p["partition_index"]
    try:
        replica = ctx.services.replicas.leader_replica(
            topic, index, p.get("current_leader_epoch", -1)
        )
        ts = p["timestamp"]
        if ts not in (EARLIEST, EARLIEST_LOCAL, LATEST_TIERED) and replica.high_watermark_lagging():
            replica = await _caught_up(ctx, topic, p, replica, deadline)
        log = replica.log
        epoch = replica.leader_epoch
        if ts == EARLIEST or (ts == EARLIEST_LOCAL and ctx.version >= 8):
            found = (log.log_start_offset, -1)
        elif ts == LATEST_TIERED and ctx.version >= 9:
            found = (-1, -1)  # nothing is tiered
        elif ts < 0 and not (ts == LATEST or ts == MAX_TIMESTAMP and ctx.version >= 7):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"invalid timestamp {ts}")
        elif ts == LATEST:
            if replica.high_watermark_lagging():
                raise _not_available(replica)
            found = (log.last_stable_offset if read_committed else log.high_watermark, -1)
        else:
            if ts == MAX_TIMESTAMP:
                found = await ctx.services.replicas.offset_of_max_timestamp(log)
            else:
                found = await ctx.services.replicas.offset_for_timestamp(log, ts)
            fetchable = log.last_stable_offset if read_committed else log.high_watermark
            if found[0] >= fetchable:
                # beyond what consumers may read: none, or not yet known while a new
                # leader's high watermark catches up (Kafka's fetchOffsetForTimestamp)
                if replica.high_watermark_lagging():
                    raise _not_available(replica)
                found = (-1, -1)
        offset, timestamp = found
        return {
            "partition_index": index,
            "error_code": ErrorCode.NONE,
            "timestamp": timestamp,
            "offset": offset,
            "leader_epoch": epoch if offset >= 0 else -1,
        }
    except (KafkaError, InvalidRecordError) as e:
        if isinstance(e, InvalidRecordError):
            logger.warning("ListOffsets %s-%d: cannot read a stored batch: %s", topic, index, e)
        return {
            "partition_index": index,
            "error_code": e.code if isinstance(e, KafkaError) else ErrorCode.CORRUPT_MESSAGE,
            "timestamp": -1,
            "offset": -1,
            "leader_epoch": -1,
        }


YIELD_EVERY = 256  # partitions looked up per loop step (~30 us each)
CONSUMER_REPLICA_ID, DEBUGGING_REPLICA_ID = -1, -2


def _legacy_lookup(ctx: RequestContext, topic: str, p: dict, replica_id: int) -> dict:
    index = p["partition_index"]
    out = {"partition_index": index, "error_code": ErrorCode.NONE, "old_style_offsets": []}
    ts = p["timestamp"]
    if ts < EARLIEST:
        out["error_code"] = ErrorCode.UNSUPPORTED_VERSION
        return out
    replicas = ctx.services.replicas
    try:
        try:
            log = replicas.leader_replica(topic, index).log
        except KafkaError as e:
            local = replicas.replicas.get((topic, index))
            if replica_id != DEBUGGING_REPLICA_ID or e.code != ErrorCode.NOT_LEADER_OR_FOLLOWER:
                raise
            if local is None:
                raise
            log = local.log  # a debugging request may read a follower's log
        offsets = log.legacy_offsets_before(ts, p["max_num_offsets"])
    except KafkaError as e:
        out["error_code"] = e.code
        return out
    except ValueError:  # a negative max_num_offsets: Kafka fails allocating the answer
        out["error_code"] = ErrorCode.UNKNOWN
        return out
    if replica_id == CONSUMER_REPLICA_ID:
        hw = log.high_watermark
        if any(o > hw for o in offsets):
            offsets = [hw] + [o for o in offsets if o <= hw]
    out["old_style_offsets"] = offsets
    return out


def _list_offsets_v0(ctx: RequestContext, req: dict) -> dict:
    allowed, denied = [], []
    for t in req["topics"]:
        (allowed if on_topic(ctx, Operation.DESCRIBE, t["name"]) else denied).append(t)
    topics = [
        {
            "name": t["name"],
            "partitions": [
                _legacy_lookup(ctx, t["name"], p, req["replica_id"]) for p in t["partitions"]
            ],
        }
        for t in allowed
    ]
    topics += [
        {
            "name": t["name"],
            "partitions": [
                {
                    "partition_index": p["partition_index"],
                    "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    "old_style_offsets": [],
                }
                for p in t["partitions"]
            ],
        }
        for t in denied
    ]
    return {"topics": topics}


@handler(2, 0, 9)
async def list_offsets(ctx: RequestContext, req: dict) -> dict:
    if ctx.version == 0:
        return _list_offsets_v0(ctx, req)
    topics = []
    read_committed = req.get("isolation_level", 0) == READ_COMMITTED
    done = 0
    # a new leader's high watermark below its epoch start is waited for this long in all
    deadline = ctx.services.clock.monotonic() + HW_WAIT_S
    for t in req["topics"]:
        indexes = [p["partition_index"] for p in t["partitions"]]
        parts = []
        for p in t["partitions"]:
            done += 1
            if done % YIELD_EVERY == 0:
                await asyncio.sleep(0)  # thousands of partitions: let other work run between
            if not on_topic(ctx, Operation.DESCRIBE, t["name"]):
                parts.append(
                    {
                        "partition_index": p["partition_index"],
                        "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                        "timestamp": -1,
                        "offset": -1,
                        "leader_epoch": -1,
                    }
                )
            elif indexes.count(p["partition_index"]) > 1:  # Kafka refuses every occurrence
                parts.append(
                    {
                        "partition_index": p["partition_index"],
                        "error_code": ErrorCode.INVALID_REQUEST,
                        "timestamp": -1,
                        "offset": -1,
                        "leader_epoch": -1,
                    }
                )
            else:
                parts.append(await _lookup(ctx, t["name"], p, read_committed, deadline))
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
