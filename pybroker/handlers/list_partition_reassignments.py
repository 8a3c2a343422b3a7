"""ListPartitionReassignments (key 46), version 0.

Served by the controller (coord/controller/reassignment.py): the partitions being reassigned,
all of them or those asked about, each with its full replica set (original plus target replicas), the
replicas being added and those being removed.  As in Kafka, partitions that do not exist or
are not being reassigned are simply not listed (the response has no per-partition error).  A
broker that is not the controller answers the top-level error NOT_CONTROLLER, and the admin
client retries on the controller.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers._authz import on_cluster
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


def _top(code: int, message: str | None) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "topics": []}


@handler(46, 0, 0)
async def list_partition_reassignments(ctx: RequestContext, req: dict) -> dict:
    if not on_cluster(ctx, Operation.DESCRIBE):
        return _top(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    cluster = ctx.services.cluster
    if cluster.controller_id != ctx.services.config.broker_id:
        return _top(ErrorCode.NOT_CONTROLLER, "this broker is not the controller")
    asked = req.get("topics")
    partitions = (
        None
        if asked is None
        else list(dict.fromkeys((t["name"], p) for t in asked for p in t["partition_indexes"]))
    )
    try:
        found = cluster.list_partition_reassignments(partitions)
    except KafkaError as e:
        return _top(e.code, str(e) or None)
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), a in found.items():
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "replicas": list(a.replicas),
                "adding_replicas": list(a.adding),
                "removing_replicas": list(a.removing),
            }
        )
    resp = _top(ErrorCode.NONE, None)
    resp["topics"] = [{"name": t, "partitions": ps} for t, ps in by_topic.items()]
    return resp
