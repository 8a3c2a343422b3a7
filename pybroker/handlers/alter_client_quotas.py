"""AlterClientQuotas (key 49), versions 0-1 (KIP-546; kafka-configs --alter --entity-type
clients|users|ips).

As Kafka's ZkAdminManager.alterClientQuotas: ALTER_CONFIGS on the cluster or every entry
gets CLUSTER_AUTHORIZATION_FAILED; each entry is applied on its own (one compare-and-set
write of its node, quotas/store.py) and answered with its own error.  INVALID_REQUEST for
an empty entity, an unknown entity type, an empty name, ip combined with user or client-id,
an ip that is no IP address, a key the entity type does not have (user and client-id:
producer_byte_rate, consumer_byte_rate, request_percentage, controller_mutation_rate; ip:
connection_creation_rate), or a non-integral value of a LONG/INT key.  Values are stored as
Kafka's Java renders them (LONG "1048576", DOUBLE "50.0").  validate_only checks and
writes nothing.
"""

from __future__ import annotations

import ipaddress
import logging
from decimal import Decimal

from pybroker.coord.metadata.store import StoreError
from pybroker.errors import ErrorCode
from pybroker.handlers._authz import on_cluster
from pybroker.handlers.context import RequestContext
from pybroker.quotas.entities import CLIENT_ID, CLIENT_KEYS, IP, IP_KEYS, USER, Entity
from pybroker.registry import handler
from pybroker.security.acl import Operation

log = logging.getLogger("pybroker.quotas")


class InvalidRequest(Exception):
    pass


def java_double(v: float) -> str:
    """Double.toString: plain between 1e-3 and 1e7 ("50.0"), else "d.dddE<n>"."""
    if v == 0 or 1e-3 <= abs(v) < 1e7:
        return repr(float(v))
    sign, digits, exp = Decimal(repr(float(v))).normalize().as_tuple()
    ds = "".join(map(str, digits))
    mantissa = ds[0] + "." + (ds[1:] or "0")
    return ("-" if sign else "") + f"{mantissa}E{int(exp) + len(ds) - 1}"


def parse_entity(items: list[dict]) -> Entity:
    if not items:
        raise InvalidRequest("Invalid empty client quota entity")
    parts: dict[str, str | None] = {}
    for it in items:
        etype, name = it["entity_type"], it["entity_name"]
        if etype not in (USER, CLIENT_ID, IP):
            raise InvalidRequest(f"Unhandled client quota entity type: {etype}")
        if name is not None and name == "":
            raise InvalidRequest(f"Empty {etype} not supported")
        parts[etype] = name
    if IP in parts:
        if len(parts) > 1:
            raise InvalidRequest(
                "Invalid quota entity combination, IP entity should not be combined with "
                "User or ClientId entity."
            )
        if parts[IP] is not None:
            try:
                ipaddress.ip_address(parts[IP])
            except ValueError:
                raise InvalidRequest(f"{parts[IP]} is not a valid IP or resolvable host.") from None
    return tuple(sorted(parts.items()))


def changes_of(e: Entity, ops: list[dict]) -> dict[str, str | None]:
    keys = IP_KEYS if IP in dict(e) else CLIENT_KEYS
    out: dict[str, str | None] = {}
    for op in ops:
        key = op["key"]
        if op["remove"]:
            out[key] = None
            continue
        kind = keys.get(key)
        if kind is None:
            raise InvalidRequest(f"Invalid configuration key {key}")
        value = op["value"]
        if kind == "DOUBLE":
            out[key] = java_double(value)
            continue
        n = int(value + 1e-6)
        if abs(n - value) > 1e-6:
            raise InvalidRequest(f"Configuration {key} must be a {kind} value")
        out[key] = str(n)
    return out


def _entity_out(items: list[dict]) -> list[dict]:
    return [{"entity_type": i["entity_type"], "entity_name": i["entity_name"]} for i in items]


@handler(49, 0, 1)
async def alter_client_quotas(ctx: RequestContext, req: dict) -> dict:
    if not on_cluster(ctx, Operation.ALTER_CONFIGS):
        return {
            "throttle_time_ms": 0,
            "entries": [
                {
                    "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                    "error_message": None,
                    "entity": _entity_out(e["entity"]),
                }
                for e in req["entries"]
            ],
        }
    store = ctx.services.quota_store
    results = []
    written = False
    for entry in req["entries"]:
        code, message = ErrorCode.NONE, None
        try:
            e = parse_entity(entry["entity"])
            changes = changes_of(e, entry["ops"])
            if not req["validate_only"]:
                await store.alter(e, changes)
                written = True
        except InvalidRequest as err:
            code, message = ErrorCode.INVALID_REQUEST, str(err)
        except StoreError as err:
            code, message = ErrorCode.UNKNOWN, f"metadata store: {err}"
        results.append(
            {"error_code": code, "error_message": message, "entity": _entity_out(entry["entity"])}
        )
    if written:
        # the next request on any connection here sees the new quotas (the store's watch
        # alone would apply them a few loop steps after this answer)
        try:
            await store.refresh()
        except StoreError as err:
            log.warning("reading client quotas after a write failed: %s", err)
    return {"throttle_time_ms": 0, "entries": results}
