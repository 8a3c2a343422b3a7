"""JoinGroup (key 11), versions 0-9.

The classic protocol (pybroker.coord.group.classic): v0 uses the session timeout as the rebalance
timeout; from v4 an unknown member first gets MEMBER_ID_REQUIRED with its new id; v5+ static
membership (group_instance_id); v7+ protocol type in the answer; v8 reason (logged); v9
skip_assignment is always false (the leader always computes assignments).
"""

from __future__ import annotations

import logging

from pybroker.coord.group.classic import JoinRequest
from pybroker.handlers._groups import coordinator_error
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler

log = logging.getLogger("pybroker.handlers.join_group")


@handler(11, 0, 9)
async def join_group(ctx: RequestContext, req: dict) -> dict:
    code = coordinator_error(ctx, req["group_id"])
    if code is not None:
        return {
            "throttle_time_ms": 0,
            "error_code": code,
            "generation_id": -1,
            "protocol_name": None if ctx.version >= 7 else "",
            "leader": "",
            "member_id": req["member_id"],
            "members": [],
        }
    if req.get("reason"):
        log.info("member %s joins group %s: %s", req["member_id"], req["group_id"], req["reason"])
    host = ctx.peer[0] if ctx.peer else ""
    jr = JoinRequest(
        member_id=req["member_id"],
        group_instance_id=req.get("group_instance_id"),
        client_id=ctx.client_id or "",
        client_host=f"/{host}",
        session_timeout_ms=req["session_timeout_ms"],
        rebalance_timeout_ms=req.get("rebalance_timeout_ms", req["session_timeout_ms"])
        if ctx.version >= 1
        else req["session_timeout_ms"],
        protocol_type=req["protocol_type"],
        protocols=[(p["name"], bytes(p["metadata"])) for p in req["protocols"]],
        require_known_member_id=ctx.version >= 4,
    )
    resp = await ctx.services.groups.join(req["group_id"], jr)
    resp = dict(resp, throttle_time_ms=0)
    if ctx.version < 7 and resp.get("protocol_name") is None:
        resp["protocol_name"] = ""  # not nullable before v7
    return resp
