"""ElectLeaders (key 43), versions 0-2.

Served by the controller (Controller.elect_leaders): election type 0 (v0 always) elects each
partition's preferred replica (the first one) when it is live and in the ISR; type 1 (unclean,
v1+) elects a live replica for partitions without a live leader.  Per partition: NONE (elected),
ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE,
UNKNOWN_TOPIC_OR_PARTITION.  A null topic list means every partition, and then (as in Kafka)
partitions whose election was not needed are left out of the answer.

On a broker that is not the controller, every partition named answers NOT_CONTROLLER (nothing
for a null list), as a ZooKeeper-mode Kafka broker does; the top-level error (v1+) stays NONE.
An election type other than 0 and 1 is INVALID_REQUEST (top level and per partition).
"""

from __future__ import annotations

from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers._authz import on_cluster
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation

PREFERRED, UNCLEAN = 0, 1


def _response(code: int, results: dict[tuple[str, int], tuple[int, str | None]]) -> dict:
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), (c, message) in results.items():
        by_topic.setdefault(topic, []).append(
            {"partition_id": partition, "error_code": c, "error_message": message}
        )
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "replica_election_results": [
            {"topic": topic, "partition_result": parts} for topic, parts in by_topic.items()
        ],
    }


@handler(43, 0, 2)
async def elect_leaders(ctx: RequestContext, req: dict) -> dict:
    cluster = ctx.services.cluster
    requested = req["topic_partitions"]
    if requested is None:
        partitions = [
            (name, p)
            for name, info in sorted(cluster.topics.items())
            for p in sorted(info.partitions)
        ]
    else:
        partitions = list(
            dict.fromkeys((t["topic"], p) for t in requested for p in t["partitions"])
        )
    election_type = req.get("election_type", PREFERRED)
    if not on_cluster(ctx, Operation.ALTER):  # Kafka: ALTER on the cluster
        return _response(
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            dict.fromkeys(
                partitions if requested is not None else [],
                (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None),
            ),
        )
    if election_type not in (PREFERRED, UNCLEAN):
        message = f"unknown election type {election_type}"
        return _response(
            ErrorCode.INVALID_REQUEST,
            dict.fromkeys(
                partitions if requested is not None else [], (ErrorCode.INVALID_REQUEST, message)
            ),
        )
    if requested is None and cluster.controller_id != ctx.services.config.broker_id:
        return _response(ErrorCode.NONE, {})
    if cluster.controller_id != ctx.services.config.broker_id:
        return _response(
            ErrorCode.NONE, dict.fromkeys(partitions, (ErrorCode.NOT_CONTROLLER, None))
        )
    try:
        outcome = await cluster.elect_leaders(partitions, preferred=election_type == PREFERRED)
    except KafkaError as e:
        if requested is None:
            return _response(ErrorCode.NONE, {})
        return _response(ErrorCode.NONE, dict.fromkeys(partitions, (e.code, str(e) or None)))
    results: dict[tuple[str, int], tuple[int, str | None]] = {}
    for tp in partitions:
        code, message = outcome[tp]
        if requested is None and code == ErrorCode.ELECTION_NOT_NEEDED:
            continue
        if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and message is None:
            message = "The partition does not exist."
        results[tp] = (int(code), message)
    return _response(ErrorCode.NONE, results)
