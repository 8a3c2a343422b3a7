"""InitProducerId (key 22), versions 0-4.

Idempotent producers (transactional_id null) get a fresh producer id with epoch 0 every time,
as Kafka's transaction coordinator does for them (v3+ requests that carry the current id and
epoch are answered the same way: a new id supersedes the old one).  Producer ids come in
blocks claimed from the metadata store, so they stay unique across restarts and brokers.

Left out: transactions.  A non-null transactional_id is answered with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, since pybroker has no transaction coordinator.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler


@handler(22, 0, 4)
async def init_producer_id(ctx: RequestContext, req: dict) -> dict:
    if req.get("transactional_id") is not None:
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    try:
        pid = await ctx.services.cluster.allocate_producer_id()
    except KafkaError as e:
        return {
            "throttle_time_ms": 0,
            "error_code": e.code,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "producer_id": pid,
        "producer_epoch": 0,
    }
