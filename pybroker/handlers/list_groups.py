"""ListGroups (key 16), versions 0-5: the groups this broker coordinates, with their protocol
type, (v4+) state and (v5+) group type, optionally filtered by state (v4+) and by type (v5+,
KIP-848: "classic", "consumer", "share"; case-insensitive, as Kafka compares them).  Groups
that only hold committed offsets are listed as Empty, as in Kafka.  Groups are "classic"
(JoinGroup/SyncGroup), "consumer" (KIP-848, coord/group/consumer.py) or "share" (KIP-932,
coord/group/share_coordinator.py, protocol type "share")."""

from __future__ import annotations

from pybroker.errors import ErrorCode
from pybroker.handlers._authz import enabled, on_cluster, on_group
from pybroker.handlers._share import share_enabled
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


@handler(16, 0, 5)
async def list_groups(ctx: RequestContext, req: dict) -> dict:
    wanted = {s.lower() for s in req.get("states_filter") or []}
    types = {t.lower() for t in req.get("types_filter") or []}
    groups = []
    all_ok = not enabled(ctx) or on_cluster(ctx, Operation.DESCRIBE)
    found = list(ctx.services.groups.list_groups())
    if share_enabled(ctx):
        found += await ctx.services.share_groups.list_groups()
    for g in found:
        if not all_ok and not on_group(ctx, Operation.DESCRIBE, g.group_id):
            continue
        state = g.state.value
        if wanted and state.lower() not in wanted:
            continue
        group_type = getattr(g, "group_type", "share")
        if types and group_type not in types:
            continue
        groups.append(
            {
                "group_id": g.group_id,
                "protocol_type": getattr(g, "protocol_type", "share") or "",
                "group_state": state,
                "group_type": group_type,
            }
        )
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "groups": groups}
