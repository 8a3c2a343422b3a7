"""DeleteGroups (key 42), versions 0-2: deletes empty groups and their committed offsets;
NON_EMPTY_GROUP while members remain, GROUP_ID_NOT_FOUND for an unknown group.  A share group
(KIP-932) goes with its share-partition state (coord/group/share_coordinator.py)."""

from __future__ import annotations

from pybroker.coord.metadata.store import StoreError
from pybroker.errors import ErrorCode
from pybroker.handlers._groups import coordinator_error
from pybroker.handlers._share import share_enabled
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


@handler(42, 0, 2)
async def delete_groups(ctx: RequestContext, req: dict) -> dict:
    results = []
    for gid in req["groups_names"]:
        code = coordinator_error(ctx, gid, Operation.DELETE, empty_ok=True)
        if (
            code is None
            and gid
            and share_enabled(ctx)
            and ctx.services.groups.describe(gid) is None
        ):
            try:
                share = await ctx.services.share_groups.group(gid)
            except StoreError:
                share, code = None, ErrorCode.COORDINATOR_NOT_AVAILABLE
            if share is not None:
                code = await ctx.services.share_groups.delete_group(gid)
        if code is None:
            code = await ctx.services.groups.delete(gid)
        results.append({"group_id": gid, "error_code": code})
    return {"throttle_time_ms": 0, "results": results}
