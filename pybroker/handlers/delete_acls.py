"""DeleteAcls (key 31), versions 0-3.

With an authorizer: needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED for every
filter); deletes the bindings each filter matches and answers them per filter (an invalid
filter: INVALID_REQUEST).  Without one, as Kafka without an authorizer: SECURITY_DISABLED
per filter.
"""

from __future__ import annotations

from pybroker.coord.metadata.store import StoreError
from pybroker.errors import ErrorCode
from pybroker.handlers._acls import InvalidAcl, filter_from, wire
from pybroker.handlers._authz import on_cluster
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


def _result(code: int, message: str | None, matching=()) -> dict:
    return {"error_code": code, "error_message": message, "matching_acls": list(matching)}


@handler(31, 0, 3)
async def delete_acls(ctx: RequestContext, req: dict) -> dict:
    a = ctx.services.authorizer
    n = len(req["filters"])
    if a is None:
        disabled = _result(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
        return {"throttle_time_ms": 0, "filter_results": [disabled] * n}
    if not on_cluster(ctx, Operation.ALTER):
        denied = _result(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
        return {"throttle_time_ms": 0, "filter_results": [denied] * n}
    filters, out = [], []
    for f in req["filters"]:
        try:
            filters.append(filter_from(f))
            out.append(None)
        except InvalidAcl as e:
            out.append(_result(ErrorCode.INVALID_REQUEST, str(e)))
    try:
        deleted = iter(await a.delete(filters)) if filters else iter(())
    except StoreError as e:
        failed = _result(ErrorCode.UNKNOWN, f"deleting the ACLs failed: {e}")
        return {"throttle_time_ms": 0, "filter_results": [r or failed for r in out]}
    results = []
    for r in out:
        if r is not None:
            results.append(r)
            continue
        matching = [
            {"error_code": ErrorCode.NONE, "error_message": None, **wire(res, e)}
            for res, e in next(deleted)
        ]
        results.append(_result(ErrorCode.NONE, None, matching))
    return {"throttle_time_ms": 0, "filter_results": results}
