"""BROKER (4) and BROKER_LOGGER (8) resources of AlterConfigs, IncrementalAlterConfigs and
DescribeConfigs, as Kafka 3.9 in ZooKeeper mode answers them (ConfigAdminManager,
ZkAdminManager, ConfigHelper).

- Resource name: "" is the cluster-wide default (``/config/brokers/<default>``), else it must
  be this broker's id (INVALID_REQUEST "Unexpected broker id, expected 1, but received 2";
  clients send a broker's resource to that broker).
- Alter: the entity's stored set after the operations goes through
  ``DynamicBrokerConfig.validate`` (INVALID_REQUEST with Kafka's messages), then is written
  with compare-and-set and a change notification (``Cluster.alter_broker_configs``); every
  broker applies it when the notification reaches it (this one at once).  validate_only
  writes nothing.
- BROKER_LOGGER: IncrementalAlterConfigs only (AlterConfigs answers "Unknown resource type
  8"), applied to this process at once, not stored (handlers/_broker_loggers.py).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

from pybroker.configdef import Type, incremental
from pybroker.coord.metadata import paths
from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers import _broker_loggers
from pybroker.handlers.context import RequestContext
from pybroker.kafka_broker_configs import DEFINITIONS

log = logging.getLogger(__name__)

DYNAMIC_BROKER_LOGGER_CONFIG = 6  # DescribeConfigsResponse.ConfigSource


def _java_int(name: str) -> int:
    """Integer.parseInt: an optional sign and digits only (Python's int() also takes spaces
    and underscores, which would name another store path than the broker's)."""
    if not re.fullmatch(r"[+-]?\d+", name):
        raise ValueError(name)
    return int(name)


def _node_id(ctx: RequestContext, name: str, mismatch: str | None = None) -> int:
    """ConfigAdminManager.validateResourceNameIsCurrentNodeId; ``mismatch``: the message for
    another node's id (Kafka's loggers word it differently)."""
    me = ctx.services.config.broker_id
    try:
        requested = _java_int(name)
    except ValueError:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {name}"
        ) from None
    if requested != me:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            mismatch or f"Unexpected broker id, expected {me}, but received {name}",
        )
    return requested


def _kafka_key(name: str) -> tuple[Type, str | None] | None:
    """KafkaConfig.configKeys: (type, default) of every key Kafka 3.9 defines."""
    definition = DEFINITIONS.get(name)
    return (Type[definition[0]], definition[1]) if definition is not None else None


def apply_ops(ops: list[dict], current: dict[str, str]) -> dict[str, str]:
    """ConfigAdminManager.prepareIncrementalConfigs over KafkaConfig's keys
    (configdef.incremental: APPEND and SUBTRACT start from Kafka's default)."""
    return incremental(ops, current, _kafka_key)


async def alter_broker(
    ctx: RequestContext,
    name: str,
    update: Callable[[dict[str, str]], dict[str, str]],
    validate_only: bool,
) -> None:
    """Alter the dynamic configs of broker ``name`` ("" = the cluster-wide default);
    raises KafkaError."""
    node = _node_id(ctx, name) if name else None
    per_broker = node is not None
    dynamic = ctx.services.dynamic

    def checked(current: dict[str, str]) -> dict[str, str]:
        new = update(current)
        dynamic.validate(new, per_broker)
        return new

    entity = str(node) if node is not None else paths.DEFAULT_ENTITY  # "+1", "01": /1
    new = await ctx.services.cluster.alter_broker_configs(
        entity, checked, validate_only=validate_only
    )
    if per_broker and not validate_only and any(k.startswith("listener.name.") for k in new):
        # Kafka's reloadUpdatedFilesWithoutConfigChange: the same paths, files read again
        ctx.services.reload_tls()


def alter_loggers(ctx: RequestContext, name: str, ops: list[dict], validate_only: bool) -> None:
    """RuntimeLoggerManager.applyChangesForResource (authorization checked by the caller)."""
    me = ctx.services.config.broker_id
    # sic: Kafka 3.9 prints its own id twice
    _node_id(ctx, name, f"Unexpected node id. Expected {me}, but received {me}")
    _broker_loggers.validate(ops)
    if not validate_only:
        _broker_loggers.apply(ops, log)


def describe_broker(ctx: RequestContext, name: str, documentation: bool) -> list[dict]:
    dynamic = ctx.services.dynamic
    if not name:
        return dynamic.describe_default(documentation)
    me = ctx.services.config.broker_id
    try:
        requested = _java_int(name)
    except ValueError:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}"
        ) from None
    if requested != me:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"Unexpected broker id, expected {me} or empty string, but received {name}",
        )
    return dynamic.describe_broker(documentation)


def describe_loggers(ctx: RequestContext, name: str) -> list[dict]:
    me = ctx.services.config.broker_id
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Broker id must not be empty")
    try:
        requested = _java_int(name)
    except ValueError:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}"
        ) from None
    if requested != me:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"Unexpected broker id, expected {me} but received {name}",
        )
    return [
        {
            "name": logger,
            "value": level,
            "read_only": False,
            "config_source": DYNAMIC_BROKER_LOGGER_CONFIG,
            "is_default": False,
            "is_sensitive": False,
            "synonyms": [],
            "config_type": 0,
            "documentation": None,
        }
        for logger, level in _broker_loggers.loggers().items()
    ]
