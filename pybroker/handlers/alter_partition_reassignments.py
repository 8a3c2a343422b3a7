"""AlterPartitionReassignments (key 45), version 0.

Served by the controller (coord/controller/reassignment.py, Kafka's ZooKeeper controller's
handleAlterPartitionReassignments): a list of replicas starts (or replaces) the partition's
reassignment, a null list cancels it.  Per partition: NONE, NO_REASSIGNMENT_IN_PROGRESS (a
cancellation of a partition not being reassigned), INVALID_REPLICA_ASSIGNMENT (empty list,
duplicates, negative ids, new replicas on brokers that are not live),
UNKNOWN_TOPIC_OR_PARTITION.  A broker that is not the controller answers the top-level error
NOT_CONTROLLER, and the admin client retries on the controller.  Without ALTER on the cluster:
CLUSTER_AUTHORIZATION_FAILED at the top level.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers._authz import on_cluster
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


def _top(code: int, message: str | None) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "responses": []}


@handler(45, 0, 0)
async def alter_partition_reassignments(ctx: RequestContext, req: dict) -> dict:
    if not on_cluster(ctx, Operation.ALTER):
        return _top(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    cluster = ctx.services.cluster
    if cluster.controller_id != ctx.services.config.broker_id:
        return _top(ErrorCode.NOT_CONTROLLER, "this broker is not the controller")
    requests: dict[tuple[str, int], list[int] | None] = {}
    for t in req["topics"]:
        for p in t["partitions"]:
            replicas = p.get("replicas")
            requests[(t["name"], p["partition_index"])] = (
                None if replicas is None else list(replicas)
            )
    try:
        results = await cluster.alter_partition_reassignments(requests)
    except KafkaError as e:
        return _top(e.code, str(e) or None)
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), (code, message) in results.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "error_code": int(code), "error_message": message}
        )
    resp = _top(ErrorCode.NONE, None)
    resp["responses"] = [{"name": t, "partitions": ps} for t, ps in by_topic.items()]
    return resp
