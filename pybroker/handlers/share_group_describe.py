"""ShareGroupDescribe (key 77), version 1: share groups as their coordinator holds them (state,
group and assignment epochs, the "simple" assignor, each member's subscription and assignment
with topic ids and names).  DESCRIBE on the group is needed (GROUP_AUTHORIZATION_FAILED); a
group that does not exist, or is not a share group, answers GROUP_ID_NOT_FOUND with Kafka's
message; one longer than MAX_NAME_CHARS INVALID_GROUP_ID; with group.share.enable=false every group answers UNSUPPORTED_VERSION.
"""

from __future__ import annotations

from pybroker.coord.metadata.paths import MAX_NAME_CHARS
from pybroker.errors import ErrorCode
from pybroker.handlers._authz import on_group
from pybroker.handlers._share import share_enabled
from pybroker.handlers.context import RequestContext
from pybroker.handlers.describe_groups import OMITTED, described_group_error, group_operations
from pybroker.registry import handler
from pybroker.security.acl import Operation


def _error(gid: str, code: int, message: str | None = None) -> dict:
    return described_group_error(gid, code, message, epoch=0)


@handler(77, 1, 1)
async def share_group_describe(ctx: RequestContext, req: dict) -> dict:
    out = []
    for gid in req["group_ids"]:
        if not share_enabled(ctx):
            out.append(_error(gid, ErrorCode.UNSUPPORTED_VERSION))
            continue
        if not on_group(ctx, Operation.DESCRIBE, gid):
            out.append(_error(gid, ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        if len(gid) > MAX_NAME_CHARS:
            out.append(_error(gid, ErrorCode.INVALID_GROUP_ID))
            continue
        if not ctx.services.cluster.session_ok:
            out.append(_error(gid, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            continue
        desc = await ctx.services.share_groups.describe(gid)
        desc["authorized_operations"] = (
            group_operations(ctx, gid, req) if desc["error_code"] == ErrorCode.NONE else OMITTED
        )
        out.append(desc)
    return {"throttle_time_ms": 0, "groups": out}
