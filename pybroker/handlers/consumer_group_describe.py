"""ConsumerGroupDescribe (key 69), versions 0-1: KIP-848 groups as their coordinator holds
them: state, group and assignment epochs, the assignor, and each member's subscription,
current and target assignment (topics by id and name), member epoch and (v1) type.  A group
that does not exist, or is a classic group, answers GROUP_ID_NOT_FOUND with Kafka's message;
DESCRIBE on the group is needed (GROUP_AUTHORIZATION_FAILED)."""

from __future__ import annotations

from pybroker.coord.metadata.store import StoreError
from pybroker.errors import ErrorCode
from pybroker.handlers._groups import coordinator_error
from pybroker.handlers.consumer_group_heartbeat import consumer_protocol_enabled
from pybroker.handlers.context import RequestContext
from pybroker.handlers.describe_groups import described_group_error, group_operations
from pybroker.registry import handler
from pybroker.security.acl import Operation


def _error(gid: str, code: int, message: str | None = None) -> dict:
    return described_group_error(gid, code, message, epoch=-1)


@handler(69, 0, 1)
async def consumer_group_describe(ctx: RequestContext, req: dict) -> dict:
    out = []
    for gid in req["group_ids"]:
        if not consumer_protocol_enabled(ctx):
            out.append(_error(gid, ErrorCode.UNSUPPORTED_VERSION))
            continue
        code = coordinator_error(ctx, gid, Operation.DESCRIBE)
        if code is not None:
            out.append(_error(gid, code))
            continue
        try:
            desc = await ctx.services.groups.describe_consumer_group(gid)
        except StoreError:
            out.append(_error(gid, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            continue
        if desc is None:
            known = gid in {g.group_id for g in ctx.services.groups.list_groups()}
            message = (
                f"Group {gid} is not a consumer group." if known else f"Group {gid} not found."
            )
            out.append(_error(gid, ErrorCode.GROUP_ID_NOT_FOUND, message))
            continue
        desc["authorized_operations"] = group_operations(ctx, gid, req)
        out.append(desc)
    return {"throttle_time_ms": 0, "groups": out}
