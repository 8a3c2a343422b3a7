"""CreateAcls (key 30), versions 0-3.

With an authorizer (authorizer.class.name): needs ALTER on the cluster
(CLUSTER_AUTHORIZATION_FAILED); each creation is validated as Kafka does (INVALID_REQUEST with
the reason: unknown or ANY/MATCH types, a CLUSTER resource not named kafka-cluster, an
operation the resource type does not have, a principal that is not Type:name) and the valid
ones are stored (security/authorizer.py) and take effect on every broker.  Without one, as
Kafka without an authorizer: SECURITY_DISABLED for each.
"""

from __future__ import annotations

from pybroker.coord.metadata.store import StoreError
from pybroker.errors import ErrorCode
from pybroker.handlers._acls import InvalidAcl, binding_from
from pybroker.handlers._authz import on_cluster
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


def _result(code: int, message: str | None) -> dict:
    return {"error_code": code, "error_message": message}


@handler(30, 0, 3)
async def create_acls(ctx: RequestContext, req: dict) -> dict:
    a = ctx.services.authorizer
    n = len(req["creations"])
    if a is None:
        disabled = _result(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
        return {"throttle_time_ms": 0, "results": [disabled] * n}
    if not on_cluster(ctx, Operation.ALTER):
        denied = _result(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
        return {"throttle_time_ms": 0, "results": [denied] * n}
    results: list[dict | None] = []
    valid = []
    for c in req["creations"]:
        try:
            valid.append(binding_from(c))
            results.append(None)
        except InvalidAcl as e:
            results.append(_result(ErrorCode.INVALID_REQUEST, str(e)))
    try:
        if valid:
            await a.create(valid)
        ok = _result(ErrorCode.NONE, None)
    except StoreError as e:
        ok = _result(ErrorCode.UNKNOWN, f"storing the ACLs failed: {e}")
    return {"throttle_time_ms": 0, "results": [r if r is not None else ok for r in results]}
