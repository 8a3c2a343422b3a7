"""DescribeGroups (key 15), versions 0-5.

State, protocol type, the chosen protocol and (when Stable) each member's metadata and
assignment, as Kafka's group summary gives them; v4+ group_instance_id.  A group this broker
does not know is reported as Dead with no error, as Kafka does before v6.  With no ACLs every
group operation is authorized (v3+ bit field when asked).
"""

from __future__ import annotations

from pybroker.handlers._authz import authorized_operations, enabled
from pybroker.handlers._groups import coordinator_error
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation, ResourceType

OMITTED = -(2**31)
GROUP_OPERATIONS = sum(1 << op for op in (3, 6, 8))  # READ, DELETE, DESCRIBE


def group_operations(ctx: RequestContext, gid: str, req: dict) -> int:
    """The group's authorized operations when the request asks for them (KIP-430): the
    ACLs' answer, every group operation without an authorizer; else OMITTED."""
    if not req.get("include_authorized_operations"):
        return OMITTED
    return authorized_operations(ctx, ResourceType.GROUP, gid) if enabled(ctx) else GROUP_OPERATIONS


def described_group_error(gid: str, code: int, message: str | None, *, epoch: int) -> dict:
    """A ConsumerGroupDescribe / ShareGroupDescribe group entry that carries only an error
    (its group and assignment epochs ``epoch``: -1 in the consumer one, 0 in the share one)."""
    return {
        "error_code": code,
        "error_message": message,
        "group_id": gid,
        "group_state": "",
        "group_epoch": epoch,
        "assignment_epoch": epoch,
        "assignor_name": "",
        "members": [],
        "authorized_operations": OMITTED,
    }


@handler(15, 0, 5)
async def describe_groups(ctx: RequestContext, req: dict) -> dict:
    out = []
    for gid in req["groups"]:
        code = coordinator_error(ctx, gid, Operation.DESCRIBE, empty_ok=True)
        desc = None if code is not None else ctx.services.groups.describe(gid)
        if desc is None:
            desc = {
                "error_code": code or 0,
                "group_id": gid,
                "group_state": "Dead",
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
            }
        desc["authorized_operations"] = group_operations(ctx, gid, req)
        out.append(desc)
    return {"throttle_time_ms": 0, "groups": out}
