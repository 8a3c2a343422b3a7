"""IncrementalAlterConfigs (key 44), versions 0-1.

Topics (resource type 2): each operation applies to the topic's stored overrides in
/config/topics/<t> (Kafka's ConfigAdminManager.prepareIncrementalConfigs): SET (0) sets a
value, DELETE (1) removes the override (back to the broker default), APPEND (2) and SUBTRACT
(3) add or remove comma-separated items of a list config (starting from the default when
there is no override; INVALID_CONFIG for a config that is not a list).  Set values must be
ones pybroker implements (handlers/_topics.check_supported_configs, as CreateTopics) and pass
Kafka's own checks; then the new set is written with compare-and-set (Cluster.
alter_topic_configs).  validate_only checks and writes nothing.  Open logs pick the change up
through the topic's change event.

Brokers (4) and broker loggers (8): handlers/_broker_configs.py (dynamic broker configs,
KIP-226, at /config/brokers/<id> and /config/brokers/<default>; log levels, KIP-412).

Per resource errors: INVALID_REQUEST for a resource named twice ("Each resource must appear at
most once."), a config named twice, a null value for anything but DELETE, an unknown
operation, the default topic resource (empty name), other resource types;
UNKNOWN_TOPIC_OR_PARTITION; INVALID_CONFIG.

AlterConfigs (alter_configs.py) shares the preprocessing below.
"""

from __future__ import annotations

from collections.abc import Callable

from pybroker.coord.metadata.topic_rules import TOPIC_CONFIGS as KAFKA_TOPIC_CONFIGS
from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers import _broker_configs
from pybroker.handlers._authz import on_cluster, on_topic
from pybroker.handlers._topics import TOPIC_CONFIGS, check_supported_configs
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def result(resource: dict, code: int = ErrorCode.NONE, message: str | None = None) -> dict:
    return {
        "error_code": code,
        "error_message": message,
        "resource_type": resource["resource_type"],
        "resource_name": resource["resource_name"],
    }


def authorize_alter(ctx: RequestContext, resources: list[dict], results: dict[int, dict]) -> None:
    """ALTER_CONFIGS on each topic (TOPIC_AUTHORIZATION_FAILED) or on the cluster for broker
    resources (CLUSTER_AUTHORIZATION_FAILED), as Kafka checks before anything else."""
    for i, r in enumerate(resources):
        if r["resource_type"] == TOPIC:
            if not on_topic(ctx, Operation.ALTER_CONFIGS, r["resource_name"]):
                results[i] = result(
                    r, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."
                )
        elif r["resource_type"] in (BROKER, BROKER_LOGGER):
            if not on_cluster(ctx, Operation.ALTER_CONFIGS):
                results[i] = result(
                    r, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed."
                )


def preprocess(
    resources: list[dict], null_allowed: Callable[[dict], bool], *, loggers: bool = True
) -> dict[int, dict]:
    """Kafka's ConfigAdminManager.preprocess, pybroker's way: the results decided before any
    topic is looked at, by position in ``resources``.  What is left are topic resources with
    distinct config names and no forbidden nulls."""
    done: dict[int, dict] = {}
    seen: dict[tuple[int, str], int] = {}
    for i, r in enumerate(resources):
        key = (r["resource_type"], r["resource_name"])
        if key in seen:
            for j in (seen[key], i):
                done[j] = result(
                    resources[j],
                    ErrorCode.INVALID_REQUEST,
                    "Each resource must appear at most once.",
                )
        seen.setdefault(key, i)
    for i, r in enumerate(resources):
        if i in done:
            continue
        names = [c["name"] for c in r["configs"]]
        nulls = [c["name"] for c in r["configs"] if c["value"] is None and not null_allowed(c)]
        rtype = r["resource_type"]
        if len(set(names)) != len(names):
            done[i] = result(r, ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
        elif nulls:
            done[i] = result(
                r, ErrorCode.INVALID_REQUEST, f"Null value not supported for : {', '.join(nulls)}"
            )
        elif rtype not in ((TOPIC, BROKER, BROKER_LOGGER) if loggers else (TOPIC, BROKER)):
            done[i] = result(r, ErrorCode.INVALID_REQUEST, f"Unknown resource type {rtype}")
        elif rtype == TOPIC and r["resource_name"] == "":
            done[i] = result(
                r, ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed."
            )
    return done


async def alter_topic(
    ctx: RequestContext,
    r: dict,
    update: Callable[[dict[str, str]], dict[str, str]],
    validate_only: bool,
) -> dict:
    try:
        await ctx.services.cluster.alter_topic_configs(
            r["resource_name"], update, validate_only=validate_only
        )
    except KafkaError as e:
        return result(r, e.code, str(e) or None)
    return result(r)


def _list_items(value: str | None) -> list[str]:
    return value.split(",") if value else []


def apply_ops(ctx: RequestContext, ops: list[dict], current: dict[str, str]) -> dict[str, str]:
    """The stored overrides after ``ops``; raises KafkaError (INVALID_CONFIG, INVALID_REQUEST)."""
    new = dict(current)
    changed = {}
    for op in ops:
        name, value, kind = op["name"], op["value"], op["config_operation"]
        if kind == SET:
            new[name] = value
        elif kind == DELETE:
            new.pop(name, None)
            continue
        elif kind in (APPEND, SUBTRACT):
            spec = KAFKA_TOPIC_CONFIGS.get(name)
            if spec is None:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
            if spec[0] != "list":
                verb = "append" if kind == APPEND else "subtract"
                raise KafkaError(
                    ErrorCode.INVALID_CONFIG,
                    f"Config value {verb} is not allowed for config key: {name}",
                )
            d = TOPIC_CONFIGS.get(name)
            old = _list_items(new.get(name, d.default(ctx.services.config) if d else ""))
            if kind == APPEND:
                new[name] = ",".join(old + [v for v in value.split(",") if v not in old])
            else:
                for v in value.split(","):
                    if v in old:
                        old.remove(v)
                new[name] = ",".join(old)
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown operations type {kind}")
        changed[name] = new[name]
    check_supported_configs(changed)
    return new


@handler(44, 0, 1)
async def incremental_alter_configs(ctx: RequestContext, req: dict) -> dict:
    resources = req["resources"]
    results = preprocess(resources, lambda c: c["config_operation"] == DELETE)
    authorize_alter(ctx, resources, results)
    for i, r in enumerate(resources):
        if i in results:
            continue
        if r["resource_type"] == TOPIC:
            results[i] = await alter_topic(
                ctx,
                r,
                lambda current, ops=r["configs"]: apply_ops(ctx, ops, current),
                req["validate_only"],
            )
            continue
        try:
            if r["resource_type"] == BROKER:
                await _broker_configs.alter_broker(
                    ctx,
                    r["resource_name"],
                    lambda current, ops=r["configs"]: _broker_configs.apply_ops(ops, current),
                    req["validate_only"],
                )
            else:
                _broker_configs.alter_loggers(
                    ctx, r["resource_name"], r["configs"], req["validate_only"]
                )
            results[i] = result(r)
        except KafkaError as e:
            results[i] = result(r, e.code, str(e) or None)
    return {"throttle_time_ms": 0, "responses": [results[i] for i in range(len(resources))]}
