"""Heartbeat (key 12), versions 0-4: keeps a member's session alive and tells it when to
rejoin (REBALANCE_IN_PROGRESS); UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID
(v3+ static members) as Kafka answers them."""

from __future__ import annotations

from pybroker.handlers._groups import coordinator_error
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler


@handler(12, 0, 4)
def heartbeat(ctx: RequestContext, req: dict) -> dict:
    # a plain function: answered in the callback that read it (connection.py, issue 28)
    code = coordinator_error(ctx, req["group_id"])
    if code is None:
        code = ctx.services.groups.heartbeat(
            req["group_id"], req["member_id"], req.get("group_instance_id"), req["generation_id"]
        )
    return {"throttle_time_ms": 0, "error_code": code}
