"""DescribeAcls (key 29), versions 0-3.

pybroker has no authorizer, so it answers as Kafka does without one (AclApis): the top-level
error SECURITY_DISABLED ("No Authorizer is configured on the broker") and no resources.
Clients treat that answer as "ACLs are supported but disabled".
"""

from __future__ import annotations

from pybroker.errors import ErrorCode
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler


@handler(29, 0, 3)
async def describe_acls(ctx: RequestContext, req: dict) -> dict:
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.SECURITY_DISABLED,
        "error_message": "No Authorizer is configured on the broker",
        "resources": [],
    }
