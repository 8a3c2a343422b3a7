"""Group configs (ConfigResource type GROUP, 32) for DescribeConfigs and
IncrementalAlterConfigs: a share group's share.* overrides (coord/group/group_configs.py),
validated as Kafka's GroupConfig.validate does against the group.share.min/max.* broker
configs.  DESCRIBE_CONFIGS / ALTER_CONFIGS on the group (GROUP_AUTHORIZATION_FAILED)."""

from __future__ import annotations

from pybroker.coord.group.group_configs import SHARE_KEYS, validate
from pybroker.coord.metadata.store import StoreError
from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers.context import RequestContext

GROUP = 32
GROUP_CONFIG, DEFAULT_CONFIG = 8, 5
_TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3}


def _defaults(ctx: RequestContext) -> dict[str, str]:
    cfg = ctx.services.config
    return {
        "share.session.timeout.ms": str(cfg.group_share_session_timeout_ms),
        "share.heartbeat.interval.ms": str(cfg.group_share_heartbeat_interval_ms),
        "share.record.lock.duration.ms": str(cfg.group_share_record_lock_duration_ms),
        "share.delivery.count.limit": str(cfg.group_share_delivery_count_limit),
        "share.partition.max.record.locks": str(cfg.group_share_partition_max_record_locks),
        "share.auto.offset.reset": "latest",
        "share.isolation.level": "read_uncommitted",
        "share.renew.acknowledge.enable": "true",
    }


def describe_group(ctx: RequestContext, name: str) -> list[dict]:
    """The group's share.* configs (cached by the caller's ``group_configs.get``)."""
    own = ctx.services.group_configs.cached(name) or {}
    defaults = _defaults(ctx)
    out = []
    for key, (ktype, _) in SHARE_KEYS.items():
        source = GROUP_CONFIG if key in own else DEFAULT_CONFIG
        value = own.get(key, defaults[key])
        out.append(
            {
                "name": key,
                "value": value,
                "read_only": False,
                "config_source": source,
                "is_default": source == DEFAULT_CONFIG,
                "is_sensitive": False,
                "synonyms": [],
                "config_type": _TYPES[ktype],
                "documentation": None,
            }
        )
    return out


async def alter_group(ctx: RequestContext, name: str, ops: list[dict], validate_only: bool) -> None:
    """IncrementalAlterConfigs SET/DELETE on a group's configs; raises KafkaError."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Group name must not be empty.")
    cache = ctx.services.group_configs
    current = dict(await cache.get(name))
    for op in ops:
        key, value, kind = op["name"], op["value"], op["config_operation"]
        if kind == 0:
            current[key] = value
        elif kind == 1:
            current.pop(key, None)
        else:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                f"Config value append/subtract is not allowed for config key: {key}",
            )
    try:
        validate(current, ctx.services.share_config_bounds())
    except ValueError as e:
        raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
    if validate_only:
        return
    try:
        await cache.alter(name, current)
    except StoreError as e:
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e)) from e
