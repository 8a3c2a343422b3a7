"""SyncGroup (key 14), versions 0-5.

The leader's request carries every member's assignment; followers wait for it.  v3+ static
members (group_instance_id, FENCED_INSTANCE_ID); v5 protocol type and name are checked
(INCONSISTENT_GROUP_PROTOCOL) and echoed.
"""

from __future__ import annotations

from pybroker.handlers._groups import coordinator_error
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler


@handler(14, 0, 5)
async def sync_group(ctx: RequestContext, req: dict) -> dict:
    code = coordinator_error(ctx, req["group_id"])
    if code is not None:
        return {"throttle_time_ms": 0, "error_code": code, "assignment": b""}
    resp = await ctx.services.groups.sync(
        req["group_id"],
        req["member_id"],
        req.get("group_instance_id"),
        req["generation_id"],
        req.get("protocol_type"),
        req.get("protocol_name"),
        {a["member_id"]: bytes(a["assignment"]) for a in req["assignments"]},
    )
    return dict(resp, throttle_time_ms=0)
