"""DescribeCluster (key 60), versions 0-1: cluster id, controller and live brokers.  v1 asks
for broker or controller endpoints; pybroker's controller is a broker, so both answer the
brokers (as Kafka brokers in ZooKeeper mode do for endpoint type 1; type 2 is
UNSUPPORTED_ENDPOINT_TYPE there too)."""

from __future__ import annotations

from pybroker.errors import ErrorCode
from pybroker.handlers._authz import authorized_operations, enabled
from pybroker.handlers.context import RequestContext
from pybroker.handlers.metadata import AUTHORIZED_OPERATIONS_OMITTED, CLUSTER_OPERATIONS
from pybroker.registry import handler
from pybroker.security.acl import CLUSTER_NAME, ResourceType

BROKERS = 1


@handler(60, 0, 1)
async def describe_cluster(ctx: RequestContext, req: dict) -> dict:
    cluster = ctx.services.cluster
    endpoint_type = req.get("endpoint_type", BROKERS)
    if endpoint_type != BROKERS:
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            "error_message": "only broker endpoints are served",
            "endpoint_type": endpoint_type,
            "cluster_id": cluster.cluster_id,
            "controller_id": -1,
            "brokers": [],
        }
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "endpoint_type": BROKERS,
        "cluster_id": cluster.cluster_id,
        "controller_id": cluster.controller_id if cluster.controller_id in cluster.brokers else -1,
        "brokers": [
            {"broker_id": b.id, "host": ep[0], "port": ep[1], "rack": b.rack}
            for b in sorted(cluster.brokers.values(), key=lambda b: b.id)
            if (ep := b.endpoint(ctx.listener)) is not None
        ],
        "cluster_authorized_operations": (
            authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
            if req["include_cluster_authorized_operations"] and enabled(ctx)
            else CLUSTER_OPERATIONS
        )
        if req["include_cluster_authorized_operations"]
        else AUTHORIZED_OPERATIONS_OMITTED,
    }
