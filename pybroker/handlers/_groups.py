"""Shared by the group handlers: is this broker the group's coordinator?"""

from __future__ import annotations

from pybroker.errors import ErrorCode
from pybroker.handlers.context import RequestContext


def coordinator_error(ctx: RequestContext, group_id: str | None) -> int | None:
    """INVALID_GROUP_ID, NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE, or None if we serve it."""
    if not group_id:
        return ErrorCode.INVALID_GROUP_ID
    services = ctx.services
    if services.groups is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if not services.cluster.session_ok:
        # our ZooKeeper session is suspended or lost: another broker may be coordinating
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return services.groups.coordinator_error(group_id)
