"""ListPartitionReassignments (key 46), version 0.

pybroker never reassigns partitions, so no reassignment is ever in progress: the controller
answers an empty list, whether every partition or only some are asked about.  As in Kafka
(ZooKeeper and KRaft controllers alike), partitions that do not exist are simply not listed
(the response has no per-partition error).  A broker that is not the controller answers the
top-level error NOT_CONTROLLER, and the admin client retries on the controller.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode
from pybroker.handlers._authz import on_cluster
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


@handler(46, 0, 0)
async def list_partition_reassignments(ctx: RequestContext, req: dict) -> dict:
    if not on_cluster(ctx, Operation.DESCRIBE):
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": None,
            "topics": [],
        }
    if ctx.services.cluster.controller_id != ctx.services.config.broker_id:
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NOT_CONTROLLER,
            "error_message": "this broker is not the controller",
            "topics": [],
        }
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "topics": [],
    }
