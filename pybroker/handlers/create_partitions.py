"""CreatePartitions (key 37), versions 0-3.

Served by the controller.  Grows a topic to ``count`` partitions, with explicit replica
assignments for the new ones when given; validate_only checks and creates nothing.  Errors:
UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS (count not above the current one),
INVALID_REPLICA_ASSIGNMENT, INVALID_REQUEST (a topic twice), NOT_CONTROLLER.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers._authz import on_topic
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


@handler(37, 0, 3)
async def create_partitions(ctx: RequestContext, req: dict) -> dict:
    cluster = ctx.services.cluster
    names = [t["name"] for t in req["topics"]]
    results = []
    for t in req["topics"]:
        code, message = ErrorCode.NONE, None
        if names.count(t["name"]) > 1:
            code, message = ErrorCode.INVALID_REQUEST, "topic named more than once"
        elif not on_topic(ctx, Operation.ALTER, t["name"]):
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif cluster.controller_id != ctx.services.config.broker_id:
            code = ErrorCode.NOT_CONTROLLER
        else:
            assignments = t["assignments"]
            try:
                await cluster.create_partitions(
                    t["name"],
                    t["count"],
                    [list(a["broker_ids"]) for a in assignments]
                    if assignments is not None
                    else None,
                    validate_only=req["validate_only"],
                )
            except KafkaError as e:
                code, message = e.code, str(e)
        results.append({"name": t["name"], "error_code": code, "error_message": message})
    return {"throttle_time_ms": 0, "results": results}
