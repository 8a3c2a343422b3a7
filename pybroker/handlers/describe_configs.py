"""DescribeConfigs (key 32), versions 0-4.

Topics (resource type 2): every topic config pybroker implements, with its effective value
and source (TOPIC_CONFIG for an override; STATIC_BROKER_CONFIG when it comes from a broker
setting given in server.properties or --override; DEFAULT_CONFIG otherwise), v1+ synonyms
(topic override, then the broker setting) when asked, v3+ config types.  Brokers (type 4):
every setting this broker honours, under Kafka's names (resource name = the broker id; ""
asks for cluster-wide dynamic defaults, of which pybroker has none).  Broker loggers (type 8):
the broker's loggers and their levels.  Documentation strings are not provided (null).
"""

from __future__ import annotations

import logging

from pybroker.config import describe_settings
from pybroker.errors import ErrorCode
from pybroker.handlers._authz import on_cluster, on_topic
from pybroker.handlers._topics import BOOLEAN, DOUBLE, INT, STRING, TOPIC_CONFIGS
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
LEVELS = {
    "DEBUG": "DEBUG",
    "INFO": "INFO",
    "WARNING": "WARN",
    "ERROR": "ERROR",
    "CRITICAL": "FATAL",
}


def _entry(
    name: str,
    value: str | None,
    source: int,
    config_type: int,
    synonyms: list[dict],
    read_only: bool = False,
) -> dict:
    return {
        "name": name,
        "value": value,
        "read_only": read_only,
        "config_source": source,
        "is_default": source == DEFAULT_CONFIG,
        "is_sensitive": False,
        "synonyms": synonyms,
        "config_type": config_type,
        "documentation": None,
    }


def _topic_configs(ctx: RequestContext, name: str, with_synonyms: bool) -> list[dict]:
    cfg = ctx.services.config
    overrides = ctx.services.cluster.topics[name].configs
    out = []
    for key, d in TOPIC_CONFIGS.items():
        broker_value = d.default(cfg)
        broker_source = (
            STATIC_BROKER_CONFIG if d.broker_key in cfg.explicit_keys else DEFAULT_CONFIG
        )
        synonyms = []
        if key in overrides:
            value, source = overrides[key], TOPIC_CONFIG
            synonyms.append({"name": key, "value": value, "source": TOPIC_CONFIG})
        else:
            value, source = broker_value, broker_source
        synonyms.append({"name": d.broker_key, "value": broker_value, "source": broker_source})
        out.append(_entry(key, value, source, d.config_type, synonyms if with_synonyms else []))
    return out


def _is_double(value: str | None) -> bool:
    try:
        float(value or "x")
    except ValueError:
        return False
    return "." in (value or "")


def _broker_configs(ctx: RequestContext, with_synonyms: bool) -> list[dict]:
    out = []
    for key, value, explicit in describe_settings(ctx.services.config):
        source = STATIC_BROKER_CONFIG if explicit else DEFAULT_CONFIG
        kind = (
            BOOLEAN
            if value in ("true", "false")
            else INT
            if (value or "").lstrip("-").isdigit()
            else DOUBLE
            if _is_double(value)
            else STRING
        )
        synonyms = [{"name": key, "value": value, "source": source}] if with_synonyms else []
        out.append(_entry(key, value, source, kind, synonyms, read_only=True))
    return out


def _logger_configs() -> list[dict]:
    root = logging.getLogger()
    names = ["root"] + sorted(
        n for n in logging.root.manager.loggerDict if n.startswith("pybroker")
    )
    out = []
    for n in names:
        lg = root if n == "root" else logging.getLogger(n)
        level = LEVELS.get(logging.getLevelName(lg.getEffectiveLevel()), "INFO")
        out.append(_entry(n, level, 2, STRING, []))  # DYNAMIC_BROKER_LOGGER_CONFIG
    return out


def _describe(ctx: RequestContext, r: dict, with_synonyms: bool) -> dict:
    rtype, rname = r["resource_type"], r["resource_name"]
    result = {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "resource_type": rtype,
        "resource_name": rname,
        "configs": [],
    }
    me = str(ctx.services.config.broker_id)
    if rtype == TOPIC and not on_topic(ctx, Operation.DESCRIBE_CONFIGS, rname):
        result.update(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=None)
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
        configs = _topic_configs(ctx, rname, with_synonyms)
    elif rtype == BROKER:
        if rname == "":
            return result  # no dynamic cluster-wide defaults
        if rname != me:
            result.update(
                error_code=ErrorCode.INVALID_REQUEST,
                error_message=f"this is broker {me}, not {rname}",
            )
            return result
        configs = _broker_configs(ctx, with_synonyms)
    elif rtype == BROKER_LOGGER:
        if rname != me:
            result.update(
                error_code=ErrorCode.INVALID_REQUEST,
                error_message=f"this is broker {me}, not {rname}",
            )
            return result
        configs = _logger_configs()
    else:
        result.update(
            error_code=ErrorCode.INVALID_REQUEST, error_message=f"unsupported resource type {rtype}"
        )
        return result
    keys = r["configuration_keys"]
    if keys is not None:
        wanted = set(keys)
        configs = [c for c in configs if c["name"] in wanted]
    result["configs"] = configs
    return result


@handler(32, 0, 4)
async def describe_configs(ctx: RequestContext, req: dict) -> dict:
    with_synonyms = bool(req.get("include_synonyms"))
    return {
        "throttle_time_ms": 0,
        "results": [_describe(ctx, r, with_synonyms) for r in req["resources"]],
    }
