"""CreateAcls (key 30), versions 0-3.

pybroker has no authorizer, so it answers as Kafka does without one (AclApis /
CreateAclsRequest.getErrorResponse): one result per creation, each SECURITY_DISABLED ("No
Authorizer is configured.").  Nothing is stored.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler


@handler(30, 0, 3)
async def create_acls(ctx: RequestContext, req: dict) -> dict:
    return {
        "throttle_time_ms": 0,
        "results": [
            {
                "error_code": ErrorCode.SECURITY_DISABLED,
                "error_message": "No Authorizer is configured.",
            }
            for _ in req["creations"]
        ],
    }
