"""DeleteTopics (key 20), versions 0-6.

Served by the controller (NOT_CONTROLLER elsewhere).  Topics by name, or by id from v6
(UNKNOWN_TOPIC_ID for an unknown id).  The topic's znodes go in one store write; every broker
then drops its partition logs (renamed, then deleted after file.delete.delay.ms).
UNKNOWN_TOPIC_OR_PARTITION for an unknown name.
"""

from __future__ import annotations

import uuid

from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers._authz import on_topic
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation

ZERO = uuid.UUID(int=0)


@handler(20, 0, 6)
async def delete_topics(ctx: RequestContext, req: dict) -> dict:
    cluster = ctx.services.cluster
    if ctx.version >= 6:
        wanted = [(t.get("name"), t.get("topic_id") or ZERO) for t in req["topics"]]
    else:
        wanted = [(name, ZERO) for name in req["topic_names"]]
    results = []
    for name, topic_id in wanted:
        code, message = ErrorCode.NONE, None
        if name is None:
            info = next((t for t in cluster.topics.values() if t.topic_id == topic_id), None)
            if info is None:
                results.append(
                    {
                        "name": None,
                        "topic_id": topic_id,
                        "error_code": ErrorCode.UNKNOWN_TOPIC_ID,
                        "error_message": None,
                    }
                )
                continue
            name = info.name
        info = cluster.topics.get(name)
        if not on_topic(ctx, Operation.DELETE, name):
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif cluster.controller_id != ctx.services.config.broker_id:
            code = ErrorCode.NOT_CONTROLLER
        else:
            try:
                await cluster.delete_topic(name)
            except KafkaError as e:
                code, message = e.code, str(e)
        results.append(
            {
                "name": name,
                "topic_id": info.topic_id if info is not None else topic_id,
                "error_code": code,
                "error_message": message,
            }
        )
    return {"throttle_time_ms": 0, "responses": results}
