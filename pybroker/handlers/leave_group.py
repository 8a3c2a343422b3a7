"""LeaveGroup (key 13), versions 0-5.

v0-2: one member id; v3+: a batch of members identified by member id and/or
group_instance_id, each with its own error (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID); v5 reason.
Leaving starts a rebalance for the members that stay; the last leave empties the group.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode
from pybroker.handlers._groups import coordinator_error
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler


@handler(13, 0, 5)
async def leave_group(ctx: RequestContext, req: dict) -> dict:
    if ctx.version >= 3:
        leaving = [(m["member_id"], m.get("group_instance_id")) for m in req["members"]]
    else:
        leaving = [(req["member_id"], None)]
    code = coordinator_error(ctx, req["group_id"])
    if code is not None:
        return {"throttle_time_ms": 0, "error_code": code, "members": []}
    errors = await ctx.services.groups.leave(req["group_id"], leaving)
    if ctx.version >= 3:
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "members": [
                {"member_id": mid, "group_instance_id": iid, "error_code": err}
                for (mid, iid), err in zip(leaving, errors, strict=True)
            ],
        }
    return {"throttle_time_ms": 0, "error_code": errors[0]}
