"""ListOffsets (key 2), versions 1-7.

timestamp -2: the log start offset; -1: the high watermark (read_uncommitted) or the last
stable offset (read_committed; equal without transactions); -3 (v7, KIP-734): the offset and
timestamp of the record with the largest timestamp; any other timestamp: the first offset
whose timestamp is at or after it, found through the time index, or offset -1 / timestamp -1
when there is none (offsets at or above the high watermark count as none).  A new leader
whose high watermark is still below the start offset of its leader epoch answers -1 and
lookups beyond its high watermark with OFFSET_NOT_AVAILABLE (78, retriable), as Kafka does
(KIP-207): its high watermark may be below what the previous leader showed, and what
clients are shown must not go back.  current_leader_epoch (v4+) is checked (FENCED_LEADER_EPOCH /
UNKNOWN_LEADER_EPOCH) and leader_epoch answered.  Left out: v0 (old_style_offsets) and
follower requests (replica_id >= 0), which no client pybroker targets sends.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler

EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3


def _not_available(replica) -> KafkaError:
    return KafkaError(
        ErrorCode.OFFSET_NOT_AVAILABLE,
        f"the high watermark ({replica.log.high_watermark}) is below the start offset of "
        f"leader epoch {replica.leader_epoch} ({replica.leader_epoch_start_offset})",
    )


def _lookup(ctx: RequestContext, topic: str, p: dict) -> dict:
    index = p["partition_index"]
    try:
        replica = ctx.services.replicas.leader_replica(
            topic, index, p.get("current_leader_epoch", -1)
        )
        log = replica.log
        epoch = replica.leader_epoch
        ts = p["timestamp"]
        if ts == EARLIEST:
            found = (log.log_start_offset, -1)
        elif ts < 0 and not (ts == LATEST or ts == MAX_TIMESTAMP and ctx.version >= 7):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"invalid timestamp {ts}")
        elif ts == LATEST:
            if replica.high_watermark_lagging():
                raise _not_available(replica)
            found = (log.high_watermark, -1)
        else:
            if ts == MAX_TIMESTAMP:
                found = log.offset_of_max_timestamp() or (-1, -1)
            else:
                found = log.offset_for_timestamp(ts) or (-1, -1)
            if found[0] >= log.high_watermark:
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
    except KafkaError as e:
        return {
            "partition_index": index,
            "error_code": e.code,
            "timestamp": -1,
            "offset": -1,
            "leader_epoch": -1,
        }


@handler(2, 1, 7)
async def list_offsets(ctx: RequestContext, req: dict) -> dict:
    topics = []
    for t in req["topics"]:
        indexes = [p["partition_index"] for p in t["partitions"]]
        parts = []
        for p in t["partitions"]:
            if indexes.count(p["partition_index"]) > 1:  # Kafka refuses every occurrence
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
                parts.append(_lookup(ctx, t["name"], p))
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
