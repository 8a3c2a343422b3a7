"""DescribeAcls (key 29), versions 0-3.

With an authorizer: needs DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED); answers the
bindings matching the filter, grouped by resource (pattern type MATCH: every binding that
applies to the named resource, literal, wildcard or prefixed, as Kafka does); an invalid
filter gets INVALID_REQUEST.  Without one, as Kafka without an authorizer: SECURITY_DISABLED
("No Authorizer is configured on the broker") and no resources.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode
from pybroker.handlers._acls import InvalidAcl, filter_from, wire
from pybroker.handlers._authz import on_cluster
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


def _error(code: int, message: str) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "resources": []}


@handler(29, 0, 3)
async def describe_acls(ctx: RequestContext, req: dict) -> dict:
    a = ctx.services.authorizer
    if a is None:
        return _error(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured on the broker")
    if not on_cluster(ctx, Operation.DESCRIBE):
        return _error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    try:
        f = filter_from(req)
    except InvalidAcl as e:
        return _error(ErrorCode.INVALID_REQUEST, str(e))
    grouped: dict = {}
    for r, e in a.describe(f):
        grouped.setdefault(r, []).append(e)
    resources = []
    for r, entries in sorted(
        grouped.items(), key=lambda kv: (kv[0].type, kv[0].name, kv[0].pattern)
    ):
        acls = []
        for e in sorted(entries, key=lambda e: (e.principal, e.host, e.operation, e.permission)):
            w = wire(r, e)
            acls.append({k: w[k] for k in ("principal", "host", "operation", "permission_type")})
        resources.append(
            {
                "resource_type": int(r.type),
                "resource_name": r.name,
                "pattern_type": int(r.pattern),
                "acls": acls,
            }
        )
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "resources": resources,
    }
