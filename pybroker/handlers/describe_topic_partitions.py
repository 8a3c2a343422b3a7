"""DescribeTopicPartitions (key 75), version 0 (KIP-966): topics and their partitions, paged.

The topics asked for (all topics the principal may DESCRIBE when the list is empty), in name
order, each with its id, its partitions as Metadata describes them (leader, leader epoch,
replicas, ISR, offline replicas; eligible leader replicas and last known ELR are empty, since
pybroker elects from the ISR only) and the principal's authorized operations.  At most
min(response_partition_limit, max.request.partition.size.limit) partitions are answered; the
cursor (a topic and a partition index) says where to start, and next_cursor where the
next request should, as Kafka's KRaftMetadataCache.describeTopicResponse: null when nothing is
left.  Errors per topic: UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED; a cursor
naming a topic outside an explicit topic list is INVALID_REQUEST for the whole request.
"""

from __future__ import annotations

import uuid

from pybroker.errors import ErrorCode
from pybroker.handlers._authz import authorized_operations, enabled, on_topic
from pybroker.handlers.context import RequestContext
from pybroker.handlers.metadata import TOPIC_OPERATIONS, topic_metadata
from pybroker.registry import handler
from pybroker.security.acl import Operation, ResourceType

ZERO = uuid.UUID(int=0)


def _error_topic(name: str, code: int) -> dict:
    return {
        "error_code": code,
        "name": name,
        "topic_id": ZERO,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": -(2**31),
    }


@handler(75, 0, 0)
async def describe_topic_partitions(ctx: RequestContext, req: dict) -> dict:
    cluster = ctx.services.cluster
    checked = enabled(ctx)
    requested = [t["name"] for t in req["topics"]]
    cursor = req.get("cursor")
    if cursor is not None and requested and cursor["topic_name"] not in requested:
        # Kafka's InvalidRequestException: every requested topic answers the error
        return {
            "throttle_time_ms": 0,
            "topics": [_error_topic(n, ErrorCode.INVALID_REQUEST) for n in requested],
            "next_cursor": None,
        }
    if requested:
        names = sorted(set(requested))
    else:  # every topic the principal may see
        names = sorted(
            n for n in cluster.topics if not checked or on_topic(ctx, Operation.DESCRIBE, n)
        )
    if cursor is not None:
        names = [n for n in names if n >= cursor["topic_name"]]
    remaining = min(
        req["response_partition_limit"], ctx.services.config.max_request_partition_size_limit
    )
    remaining = max(remaining, 1)
    topics: list[dict] = []
    next_cursor = None
    i = 0
    while i < len(names) and remaining > 0:
        name = names[i]
        i += 1
        if checked and not on_topic(ctx, Operation.DESCRIBE, name):
            topics.append(_error_topic(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        info = cluster.topics.get(name)
        if info is None:
            topics.append(_error_topic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        start = (
            cursor["partition_index"] if cursor is not None and name == cursor["topic_name"] else 0
        )
        body = topic_metadata(ctx, info, False)
        parts = [p for p in body["partitions"] if p["partition_index"] >= start]
        page = parts[:remaining]
        for p in page:
            p["eligible_leader_replicas"] = []
            p["last_known_elr"] = []
        body["partitions"] = page
        body["topic_authorized_operations"] = (
            authorized_operations(ctx, ResourceType.TOPIC, name) if checked else TOPIC_OPERATIONS
        )
        topics.append(body)
        if len(page) < len(parts):
            next_cursor = {
                "topic_name": name,
                "partition_index": parts[len(page)]["partition_index"],
            }
            break
        remaining -= len(page)
    if next_cursor is None and i < len(names):
        next_cursor = {"topic_name": names[i], "partition_index": 0}
    return {"throttle_time_ms": 0, "topics": topics, "next_cursor": next_cursor}
