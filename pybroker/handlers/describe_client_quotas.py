"""DescribeClientQuotas (key 48), versions 0-1 (KIP-546; kafka-configs --describe
--entity-type clients|users|ips).

DESCRIBE_CONFIGS on the cluster or CLUSTER_AUTHORIZATION_FAILED.  The filter's components,
as Kafka's ZkAdminManager.describeClientQuotas reads them: match type 0 (EXACT) names an
entity, 1 (DEFAULT) the default entity of the type, 2 (ANY) any entity having the type; a
type without a component matches entities without that type, or any if not ``strict``.
user/client-id components never match ip entities and the other way round (combining them
is INVALID_REQUEST); a type given twice or empty is INVALID_REQUEST, an unknown type
UNSUPPORTED_VERSION ("Custom entity type '<t>' not supported").  Entities with no quota
are not listed; only quota keys are (a user node's SCRAM credentials are not).  The store
is read at each request, so any broker answers what any broker altered.
"""

from __future__ import annotations

from pybroker.coord.metadata.store import StoreError
from pybroker.errors import ErrorCode
from pybroker.handlers._authz import on_cluster
from pybroker.handlers.context import RequestContext
from pybroker.quotas.entities import CLIENT_ID, IP, USER, Entity
from pybroker.registry import handler
from pybroker.security.acl import Operation

EXACT, DEFAULT, ANY = 0, 1, 2
_ANY = object()


class _Error(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def parse_filter(components: list[dict]) -> dict[str, object]:
    """entity type -> wanted name (a str, None for the default, _ANY)."""
    out: dict[str, object] = {}
    for c in components:
        etype = c["entity_type"]
        if etype == "":
            raise _Error(ErrorCode.INVALID_REQUEST, "Unexpected empty filter component entity type")
        if etype not in (USER, CLIENT_ID, IP):
            raise _Error(
                ErrorCode.UNSUPPORTED_VERSION, f"Custom entity type '{etype}' not supported"
            )
        if etype in out:
            kind = {USER: "user", CLIENT_ID: "client", IP: "ip"}[etype]
            raise _Error(
                ErrorCode.INVALID_REQUEST, f"Duplicate {kind} filter component entity type"
            )
        mt = c["match_type"]
        if mt == EXACT:
            if c["match"] is None:
                raise _Error(ErrorCode.INVALID_REQUEST, "Exact match requires a match value")
            out[etype] = c["match"]
        elif mt == DEFAULT:
            out[etype] = None
        elif mt == ANY:
            out[etype] = _ANY
        else:
            raise _Error(ErrorCode.INVALID_REQUEST, f"Unexpected match type: {mt}")
    if IP in out and (USER in out or CLIENT_ID in out):
        raise _Error(
            ErrorCode.INVALID_REQUEST,
            "Invalid entity filter component combination, IP filter component should not be "
            "used with user or clientId filter component.",
        )
    return out


def matches(wanted: dict[str, object], e: Entity, strict: bool) -> bool:
    names = dict(e)
    if IP in names and (USER in wanted or CLIENT_ID in wanted):
        return False
    if IP not in names and IP in wanted:
        return False
    for etype in (USER, CLIENT_ID, IP):
        if etype in wanted:
            if etype not in names:
                return False
            w = wanted[etype]
            if w is not _ANY and names[etype] != w:
                return False
        elif etype in names and strict:
            return False
    return True


@handler(48, 0, 1)
async def describe_client_quotas(ctx: RequestContext, req: dict) -> dict:
    def failed(code: int, message: str | None) -> dict:
        return {
            "throttle_time_ms": 0,
            "error_code": code,
            "error_message": message,
            "entries": None,
        }

    if not on_cluster(ctx, Operation.DESCRIBE_CONFIGS):
        return failed(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    try:
        wanted = parse_filter(req["components"])
        quotas = await ctx.services.quota_store.load()
    except _Error as e:
        return failed(e.code, str(e))
    except StoreError as e:
        return failed(ErrorCode.UNKNOWN, f"metadata store: {e}")
    entries = [
        {
            "entity": [{"entity_type": t, "entity_name": n} for t, n in e],
            "values": [{"key": k, "value": v} for k, v in sorted(values.items())],
        }
        for e, values in sorted(quotas.items(), key=lambda kv: repr(kv[0]))
        if matches(wanted, e, req["strict"])
    ]
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "entries": entries,
    }
