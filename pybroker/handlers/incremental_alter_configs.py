"""IncrementalAlterConfigs (key 44), versions 0-1.  Topics: SET, DELETE, APPEND and SUBTRACT
applied to the topic's stored overrides with Kafka's semantics (ConfigAdminManager.
prepareIncrementalConfigs), checked over the broker defaults and written with compare-and-set;
validate_only writes nothing.  Brokers and broker loggers: handlers/_broker_configs.py
(KIP-226, KIP-412).  Groups (with group.share.enable): a share group's share.* configs
(handlers/_group_configs.py).  AlterConfigs shares the preprocessing below.  Errors:
docs/internals.md ("pybroker/handlers/incremental_alter_configs.py").
"""

from __future__ import annotations

from collections.abc import Callable

from pybroker import topic_config
from pybroker.configdef import DELETE, ConfigException, Type, incremental
from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers import _broker_configs, _group_configs
from pybroker.handlers._authz import on_cluster, on_group, on_topic
from pybroker.handlers._share import share_enabled
from pybroker.handlers._topics import check_configs
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8


def result(resource: dict, code: int = ErrorCode.NONE, message: str | None = None) -> dict:
    return {
        "error_code": code,
        "error_message": message,
        "resource_type": resource["resource_type"],
        "resource_name": resource["resource_name"],
    }


def message(e: KafkaError) -> str | None:
    """The error message answered: none when it would only repeat the code's name (as Kafka's
    ApiError leaves out a generic message)."""
    text = str(e)
    return None if text == e.code.name else text


def authorize_alter(ctx: RequestContext, resources: list[dict], results: dict[int, dict]) -> None:
    """ALTER_CONFIGS on each topic (TOPIC_AUTHORIZATION_FAILED) or on the cluster for broker
    resources (CLUSTER_AUTHORIZATION_FAILED), as Kafka checks before anything else."""
    for i, r in enumerate(resources):
        if r["resource_type"] == TOPIC:
            if not on_topic(ctx, Operation.ALTER_CONFIGS, r["resource_name"]):
                results[i] = result(
                    r, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."
                )
        elif r["resource_type"] == _group_configs.GROUP:
            if not on_group(ctx, Operation.ALTER_CONFIGS, r["resource_name"]):
                results[i] = result(r, ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
        elif r["resource_type"] in (BROKER, BROKER_LOGGER):
            if not on_cluster(ctx, Operation.ALTER_CONFIGS):
                results[i] = result(
                    r, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed."
                )


def preprocess(
    resources: list[dict],
    null_allowed: Callable[[dict], bool],
    *,
    loggers: bool = True,
    groups: bool = False,
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
        elif rtype not in ((TOPIC, BROKER, BROKER_LOGGER) if loggers else (TOPIC, BROKER)) + (
            (_group_configs.GROUP,) if groups else ()
        ):
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
    """Replace the topic's overrides by ``update(stored)`` once it passes Kafka's checks."""
    name = r["resource_name"]

    def checked(current: dict[str, str]) -> dict[str, str]:
        try:
            return check_configs(ctx.services.config, update(current))
        except (ConfigException, KafkaError) as e:
            raise topic_config.alter_error(e, name) from None

    try:
        await ctx.services.cluster.alter_topic_configs(name, checked, validate_only=validate_only)
    except KafkaError as e:
        return result(r, e.code, message(e))
    return result(r)


def _topic_key(name: str) -> tuple[Type, str | None] | None:
    """LogConfig.configKeys: (type, default) of every topic config."""
    key = topic_config.KEYS.get(name)
    return (key.type, key.default_string) if key is not None else None


def apply_ops(ops: list[dict], current: dict[str, str]) -> dict[str, str]:
    """The stored overrides after ``ops`` (configdef.incremental over the topic configs)."""
    return incremental(ops, current, _topic_key)


@handler(44, 0, 1)
async def incremental_alter_configs(ctx: RequestContext, req: dict) -> dict:
    resources = req["resources"]
    results = preprocess(
        resources, lambda c: c["config_operation"] == DELETE, groups=share_enabled(ctx)
    )
    authorize_alter(ctx, resources, results)
    for i, r in enumerate(resources):
        if i in results:
            continue
        if r["resource_type"] == TOPIC:
            results[i] = await alter_topic(
                ctx,
                r,
                lambda current, ops=r["configs"]: apply_ops(ops, current),
                req["validate_only"],
            )
            continue
        try:
            if r["resource_type"] == _group_configs.GROUP:
                await _group_configs.alter_group(
                    ctx, r["resource_name"], r["configs"], req["validate_only"]
                )
            elif r["resource_type"] == BROKER:
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
            results[i] = result(r, e.code, message(e))
    return {"throttle_time_ms": 0, "responses": [results[i] for i in range(len(resources))]}
