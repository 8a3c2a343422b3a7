"""DeleteRecords (key 21), versions 0-2.

Per partition, on the leader only (NOT_LEADER_OR_FOLLOWER elsewhere, UNKNOWN_TOPIC_OR_PARTITION
for a partition the metadata does not know): the log start offset moves up to the requested
offset (-1: the high watermark), segments wholly below it go, and the new start is
checkpointed (LogManager.delete_records).  An offset below -1 or above the high watermark is
OFFSET_OUT_OF_RANGE; an offset at or below the current log start changes nothing.  A partition
the metadata lists but whose log is gone here (a deletion under way) is NOT_LEADER_OR_FOLLOWER.  The answer's
low watermark is the leader's new log start offset (-1 on error).

Left out: Kafka's leader waits (up to timeout_ms) until every live follower's log start has
reached the offset before answering, and reports the smallest of them as the low watermark;
pybroker answers at once with the leader's (followers move their log start up when they next
fetch).
"""

from __future__ import annotations

from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers._authz import on_topic
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation

HIGH_WATERMARK = -1


def _delete_one(ctx: RequestContext, topic: str, partition: int, offset: int) -> tuple[int, int]:
    """(error code, low watermark)."""
    info = ctx.services.cluster.topics.get(topic)
    if info is None or partition not in info.partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1
    try:
        replica = ctx.services.replicas.leader_replica(topic, partition)
        log = replica.log
        target = log.high_watermark if offset == HIGH_WATERMARK else offset
        if target < 0:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"the offset {target} for partition {topic}-{partition} is not valid",
            )
        return ErrorCode.NONE, ctx.services.logs.delete_records(topic, partition, target)
    except KafkaError as e:
        return e.code, -1
    except KeyError:  # no log here: the topic is being deleted (the replica goes next)
        return ErrorCode.NOT_LEADER_OR_FOLLOWER, -1


@handler(21, 0, 2)
async def delete_records(ctx: RequestContext, req: dict) -> dict:
    # Kafka answers with a map keyed by topic, then partition: a repeated entry answers once.
    results: dict[str, dict[int, tuple[int, int]]] = {}
    for t in req["topics"]:
        parts = results.setdefault(t["name"], {})
        for p in t["partitions"]:
            parts[p["partition_index"]] = (
                _delete_one(ctx, t["name"], p["partition_index"], p["offset"])
                if on_topic(ctx, Operation.DELETE, t["name"])
                else (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1)
            )
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": name,
                "partitions": [
                    {"partition_index": index, "low_watermark": low, "error_code": code}
                    for index, (code, low) in parts.items()
                ],
            }
            for name, parts in results.items()
        ],
    }
