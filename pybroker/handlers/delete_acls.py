"""DeleteAcls (key 31), versions 0-3.

pybroker has no authorizer, so it answers as Kafka does without one (AclApis /
DeleteAclsRequest.getErrorResponse): one result per filter, each SECURITY_DISABLED ("No
Authorizer is configured.") with no matching ACLs.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler


@handler(31, 0, 3)
async def delete_acls(ctx: RequestContext, req: dict) -> dict:
    return {
        "throttle_time_ms": 0,
        "filter_results": [
            {
                "error_code": ErrorCode.SECURITY_DISABLED,
                "error_message": "No Authorizer is configured.",
                "matching_acls": [],
            }
            for _ in req["filters"]
        ],
    }
