"""Shared by the group handlers: may the principal do this to the group, and is this broker
the group's coordinator?"""

from __future__ import annotations

from pybroker.errors import ErrorCode
from pybroker.handlers._authz import enabled, on_group
from pybroker.handlers.context import RequestContext
from pybroker.security.acl import Operation


def coordinator_error(
    ctx: RequestContext, group_id: str | None, op: Operation = Operation.READ
) -> int | None:
    """GROUP_AUTHORIZATION_FAILED (the principal may not ``op`` the group: Kafka checks that
    first), INVALID_GROUP_ID, NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE; None if we serve
    it."""
    if enabled(ctx) and not on_group(ctx, op, group_id or ""):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    if not group_id:
        return ErrorCode.INVALID_GROUP_ID
    services = ctx.services
    if services.groups is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if not services.cluster.session_ok:
        # our ZooKeeper session is suspended or lost: another broker may be coordinating
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return services.groups.coordinator_error(group_id)
