"""ListGroups (key 16), versions 0-4: the groups this broker coordinates, with their protocol
type and (v4+) state, optionally filtered by state.  Groups that only hold committed offsets
are listed as Empty, as in Kafka."""

from __future__ import annotations

from pybroker.errors import ErrorCode
from pybroker.handlers._authz import enabled, on_cluster, on_group
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


@handler(16, 0, 4)
async def list_groups(ctx: RequestContext, req: dict) -> dict:
    wanted = {s.lower() for s in req.get("states_filter") or []}
    groups = []
    all_ok = not enabled(ctx) or on_cluster(ctx, Operation.DESCRIBE)
    for g in ctx.services.groups.list_groups():
        if not all_ok and not on_group(ctx, Operation.DESCRIBE, g.group_id):
            continue
        state = g.state.value
        if wanted and state.lower() not in wanted:
            continue
        groups.append(
            {"group_id": g.group_id, "protocol_type": g.protocol_type or "", "group_state": state}
        )
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "groups": groups}
