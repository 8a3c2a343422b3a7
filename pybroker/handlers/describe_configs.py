"""DescribeConfigs (key 32), versions 0-4.

Topics (resource type 2): every Kafka 3.9 topic config (pybroker/topic_config.py), with its
effective value and source as Kafka's ConfigHelper gives them (TOPIC_CONFIG for an override,
else the source of the broker setting it falls back to: DYNAMIC_BROKER_CONFIG,
DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG), v1+ synonyms (the topic
override, then the broker setting's synonyms with their sources) when asked, v3+ config types
and Kafka's documentation when asked (handlers/_topics.topic_config_entries).
Brokers (type 4): every setting this broker honours, under Kafka's names, with Kafka's sources
(DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG),
synonyms, read_only, types and (v3+, when asked) Kafka's documentation (resource name = the
broker id; "" = the cluster-wide dynamic defaults stored): pybroker/dynamic_config.py.  Broker
loggers (type 8): the broker's loggers and their levels (handlers/_broker_loggers.py).
Groups (type 32, with group.share.enable): a share group's share.* configs, GROUP_CONFIG for
the ones set, DEFAULT_CONFIG otherwise (handlers/_group_configs.py).
"""

from __future__ import annotations

from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers import _group_configs
from pybroker.handlers._authz import on_cluster, on_group, on_topic
from pybroker.handlers._broker_configs import describe_broker, describe_loggers
from pybroker.handlers._share import share_enabled
from pybroker.handlers._topics import topic_config_entries
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8


def _describe(ctx: RequestContext, r: dict, with_synonyms: bool, documentation: bool) -> dict:
    rtype, rname = r["resource_type"], r["resource_name"]
    result = {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "resource_type": rtype,
        "resource_name": rname,
        "configs": [],
    }
    if rtype == TOPIC and not on_topic(ctx, Operation.DESCRIBE_CONFIGS, rname):
        result.update(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=None)
        return result
    if rtype == _group_configs.GROUP and share_enabled(ctx):
        if not on_group(ctx, Operation.DESCRIBE_CONFIGS, rname):
            result.update(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message=None)
        else:
            result["configs"] = [
                c
                for c in _group_configs.describe_group(ctx, rname)
                if not r["configuration_keys"] or c["name"] in r["configuration_keys"]
            ]
        return result
    if rtype in (BROKER, BROKER_LOGGER) and not on_cluster(ctx, Operation.DESCRIBE_CONFIGS):
        result.update(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None)
        return result
    if rtype == TOPIC:
        if rname not in ctx.services.cluster.topics:
            result.update(
                error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                error_message=f"unknown topic {rname}",
            )
            return result
        configs = topic_config_entries(
            ctx,
            ctx.services.cluster.topics[rname].configs,
            with_synonyms=with_synonyms,
            documentation=documentation,
        )
    elif rtype in (BROKER, BROKER_LOGGER):
        try:
            if rtype == BROKER:
                configs = describe_broker(ctx, rname, documentation)
                if not with_synonyms:
                    configs = [{**c, "synonyms": []} for c in configs]
            else:
                configs = describe_loggers(ctx, rname)
        except KafkaError as e:
            result.update(error_code=e.code, error_message=str(e) or None)
            return result
    else:
        result.update(
            error_code=ErrorCode.INVALID_REQUEST, error_message=f"unsupported resource type {rtype}"
        )
        return result
    keys = r["configuration_keys"]
    if keys:  # null or empty: all (ConfigHelper)
        wanted = set(keys)
        configs = [c for c in configs if c["name"] in wanted]
    result["configs"] = configs
    return result


@handler(32, 0, 4)
async def describe_configs(ctx: RequestContext, req: dict) -> dict:
    with_synonyms = bool(req.get("include_synonyms"))
    if share_enabled(ctx):
        for r in req["resources"]:
            if r["resource_type"] == _group_configs.GROUP:
                await ctx.services.group_configs.get(r["resource_name"])
    return {
        "throttle_time_ms": 0,
        "results": [
            _describe(ctx, r, with_synonyms, bool(req.get("include_documentation")))
            for r in req["resources"]
        ],
    }
