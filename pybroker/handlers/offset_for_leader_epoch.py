"""OffsetForLeaderEpoch (key 23), versions 0-4.

For each partition: the largest epoch not above the requested one that the leader's log knows,
and the end offset of that epoch (the start of the next epoch, or the log end for the latest),
from the partition's leader-epoch cache.  Followers use it to find a divergent tail after a
leader change; Java consumers use it to validate their positions.  Served by the leader;
current_leader_epoch (v2+) is checked (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH).
replica_id (v3+) -2 marks a debugging client, which may also ask followers (Kafka allows it).
"""

from __future__ import annotations

from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers._authz import on_cluster, on_topic
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


@handler(23, 0, 4)
async def offset_for_leader_epoch(ctx: RequestContext, req: dict) -> dict:
    replicas = ctx.services.replicas
    topics = []
    follower = req.get("replica_id", -1) >= 0
    cluster_action = not follower or on_cluster(ctx, Operation.CLUSTER_ACTION)
    for t in req["topics"]:
        parts = []
        ok = cluster_action and (follower or on_topic(ctx, Operation.DESCRIBE, t["topic"]))
        for p in t["partitions"]:
            try:
                if not ok:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                log = replicas.leader_replica(
                    t["topic"], p["partition"], p.get("current_leader_epoch", -1)
                ).log
                epoch, end = log.leader_epochs.end_offset_for(p["leader_epoch"], log.log_end_offset)
                parts.append(
                    {
                        "error_code": 0,
                        "partition": p["partition"],
                        "leader_epoch": epoch,
                        "end_offset": end,
                    }
                )
            except KafkaError as e:
                parts.append(
                    {
                        "error_code": e.code,
                        "partition": p["partition"],
                        "leader_epoch": -1,
                        "end_offset": -1,
                    }
                )
        topics.append({"topic": t["topic"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
