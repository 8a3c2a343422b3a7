"""Group configs (KIP-848/KIP-932's per-group overrides; Kafka 4's ConfigResource type GROUP).

Kafka 4 keeps a group's configs in the KRaft metadata; pybroker keeps them where ZooKeeper-mode
Kafka keeps a topic's, as ``{"version": 1, "config": {key: "value"}}`` at
``/config/groups/<group>`` (the group id escaped as the offsets' znodes are).  The share-group
keys are served (Kafka's GroupConfig names and defaults, each bounded by the broker's
group.share.min/max.* configs as Kafka's GroupConfig.validate does); the consumer.* and
streams.* keys are refused with INVALID_CONFIG naming them (pybroker does not apply them).

``GroupConfigCache`` holds every group's stored configs a broker has looked at, kept fresh by
a watch on the znode, so reading them on a fetch costs a dict lookup.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pybroker.coord.metadata.paths import name_to_component
from pybroker.coord.metadata.store import (
    MetadataStore,
    NoNodeError,
    StoreError,
    WatchedEvent,
    set_or_create,
)

log = logging.getLogger("pybroker.coord.group_configs")

CONFIG_GROUPS = "/config/groups"

SHARE_AUTO_OFFSET_RESET = "share.auto.offset.reset"
SHARE_ISOLATION_LEVEL = "share.isolation.level"
SHARE_SESSION_TIMEOUT_MS = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL_MS = "share.heartbeat.interval.ms"
SHARE_RECORD_LOCK_DURATION_MS = "share.record.lock.duration.ms"
SHARE_DELIVERY_COUNT_LIMIT = "share.delivery.count.limit"
SHARE_PARTITION_MAX_RECORD_LOCKS = "share.partition.max.record.locks"
SHARE_RENEW_ACKNOWLEDGE_ENABLE = "share.renew.acknowledge.enable"

# Kafka 4.4's GroupConfig keys pybroker does not apply (refused, naming them)
UNSERVED = frozenset(
    {
        "consumer.session.timeout.ms",
        "consumer.heartbeat.interval.ms",
        "consumer.assignment.interval.ms",
        "share.assignment.interval.ms",
        "streams.session.timeout.ms",
        "streams.heartbeat.interval.ms",
        "streams.num.standby.replicas",
        "streams.initial.rebalance.delay.ms",
        "streams.assignment.interval.ms",
        "streams.rack.aware.assignment.tags",
        "streams.assignor.name",
        "errors.deadletterqueue.topic.name",
        "errors.deadletterqueue.copy.record.enable",
    }
)

_DURATION = re.compile(
    r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", re.IGNORECASE
)


def parse_duration_ms(text: str) -> int | None:
    """ISO-8601 PnDTnHnMn.nS (java.time.Duration's form) -> milliseconds; None if invalid."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or not any(m.groups()) or text.upper().endswith("T"):
        return None
    d, h, mi, s = m.groups()
    ms = ((int(d or 0) * 24 + int(h or 0)) * 60 + int(mi or 0)) * 60_000
    return ms + round(float(s or 0) * 1000)


@dataclass(frozen=True)
class AutoOffsetReset:
    """share.auto.offset.reset: earliest, latest or by_duration:<ISO-8601 duration>."""

    kind: str  # "earliest" | "latest" | "by_duration"
    duration_ms: int = 0

    @classmethod
    def parse(cls, value: str) -> AutoOffsetReset:
        v = value.strip().lower()
        if v in ("earliest", "latest"):
            return cls(v)
        if v.startswith("by_duration:"):
            ms = parse_duration_ms(value.strip()[len("by_duration:") :])
            if ms is not None and ms >= 0:
                return cls("by_duration", ms)
        raise ValueError(value)


@dataclass(frozen=True)
class Bounds:
    """The broker configs a group config is held to (group.share.min/max.*)."""

    min_session_timeout_ms: int = 45000
    max_session_timeout_ms: int = 60000
    min_heartbeat_interval_ms: int = 5000
    max_heartbeat_interval_ms: int = 15000
    min_record_lock_duration_ms: int = 15000
    max_record_lock_duration_ms: int = 60000
    min_delivery_count_limit: int = 2
    max_delivery_count_limit: int = 10
    min_partition_max_record_locks: int = 100
    max_partition_max_record_locks: int = 4000


def _int_in(lo: int, hi: int, lo_name: str, hi_name: str) -> Callable[[str, str, Bounds], None]:
    def check(key: str, value: str, b: Bounds) -> None:
        try:
            n = int(value)
        except ValueError:
            raise ValueError(
                f"Invalid value {value} for configuration {key}: Not a number of type INT"
            ) from None
        low, high = getattr(b, lo_name) if lo_name else lo, getattr(b, hi_name) if hi_name else hi
        if n < low:
            raise ValueError(f"{key} must be greater than or equal to {low}")
        if n > high:
            raise ValueError(f"{key} must be less than or equal to {high}")

    return check


def _check_reset(key: str, value: str, b: Bounds) -> None:
    try:
        AutoOffsetReset.parse(value)
    except ValueError:
        raise ValueError(
            f"Invalid value {value} for configuration {key}: the value must be either "
            "'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS.>'."
        ) from None


def _check_isolation(key: str, value: str, b: Bounds) -> None:
    if value not in ("read_committed", "read_uncommitted"):
        raise ValueError(
            f"Invalid value {value} for configuration {key}: String must be one of: "
            "read_committed, read_uncommitted"
        )


def _check_bool(key: str, value: str, b: Bounds) -> None:
    if value.lower() not in ("true", "false"):
        raise ValueError(f"Invalid value {value} for configuration {key}: Expected value to be "
                         "either true or false")  # fmt: skip


# key -> (Kafka's type name, validator)
SHARE_KEYS: dict[str, tuple[str, Callable[[str, str, Bounds], None]]] = {
    SHARE_SESSION_TIMEOUT_MS: (
        "INT",
        _int_in(0, 0, "min_session_timeout_ms", "max_session_timeout_ms"),
    ),
    SHARE_HEARTBEAT_INTERVAL_MS: (
        "INT",
        _int_in(0, 0, "min_heartbeat_interval_ms", "max_heartbeat_interval_ms"),
    ),
    SHARE_RECORD_LOCK_DURATION_MS: (
        "INT",
        _int_in(0, 0, "min_record_lock_duration_ms", "max_record_lock_duration_ms"),
    ),
    SHARE_DELIVERY_COUNT_LIMIT: (
        "INT",
        _int_in(0, 0, "min_delivery_count_limit", "max_delivery_count_limit"),
    ),
    SHARE_PARTITION_MAX_RECORD_LOCKS: (
        "INT",
        _int_in(0, 0, "min_partition_max_record_locks", "max_partition_max_record_locks"),
    ),
    SHARE_AUTO_OFFSET_RESET: ("STRING", _check_reset),
    SHARE_ISOLATION_LEVEL: ("STRING", _check_isolation),
    SHARE_RENEW_ACKNOWLEDGE_ENABLE: ("BOOLEAN", _check_bool),
}


def validate(configs: dict[str, str], bounds: Bounds) -> None:
    """ValueError with Kafka's message for the first config it refuses."""
    for key, value in configs.items():
        spec = SHARE_KEYS.get(key)
        if spec is None:
            if key in UNSERVED:
                raise ValueError(f"Group config {key} is not supported by pybroker")
            raise ValueError(f"Unknown group config name: {key}")
        spec[1](key, value, bounds)


def config_path(group_id: str) -> str:
    return f"{CONFIG_GROUPS}/{name_to_component(group_id)}"


def encode(configs: dict[str, str]) -> bytes:
    return json.dumps({"version": 1, "config": configs}, sort_keys=True).encode()


def decode(data: bytes) -> dict[str, str]:
    obj: Any = json.loads(data) if data else {}
    cfg = obj.get("config", {}) if isinstance(obj, dict) else {}
    return {str(k): str(v) for k, v in cfg.items()} if isinstance(cfg, dict) else {}


class GroupConfigCache:
    """Every looked-at group's stored configs, kept fresh by watches (see module doc)."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._cache: dict[str, dict[str, str]] = {}
        self._loading: dict[str, asyncio.Future] = {}

    def cached(self, group_id: str) -> dict[str, str] | None:
        return self._cache.get(group_id)

    async def get(self, group_id: str) -> dict[str, str]:
        """The group's stored configs ({} when none); read once, then from the cache.  A
        store that cannot be read gives {} (the broker defaults) for now."""
        got = self._cache.get(group_id)
        if got is not None:
            return got
        fut = self._loading.get(group_id)
        if fut is None:
            fut = asyncio.ensure_future(self._load(group_id))
            self._loading[group_id] = fut
            fut.add_done_callback(lambda _: self._loading.pop(group_id, None))
        return await asyncio.shield(fut)

    async def _load(self, group_id: str) -> dict[str, str]:
        path = config_path(group_id)

        def changed(_event: WatchedEvent) -> None:
            self._cache.pop(group_id, None)
            asyncio.ensure_future(self._reload(group_id))

        try:
            try:
                data, _ = await self.store.get(path, watch=changed)
                configs = decode(data)
            except NoNodeError:
                if await self.store.exists(path, watch=changed) is not None:
                    return await self._load(group_id)
                configs = {}
        except (StoreError, ValueError) as e:
            log.warning(
                "group %s: its configs cannot be read (%s); using the defaults", group_id, e
            )
            return {}
        self._cache[group_id] = configs
        return configs

    async def _reload(self, group_id: str) -> None:
        try:
            await self.get(group_id)
        except Exception as e:  # (logged: the next get reads again)
            log.info("group %s: reading its configs again failed: %s", group_id, e)

    async def alter(self, group_id: str, configs: dict[str, str]) -> None:
        """Store the group's whole config set (an empty one deletes the znode).  StoreError."""
        path = config_path(group_id)
        if not configs:
            try:
                await self.store.delete(path)
            except NoNodeError:
                pass
        else:
            data = encode(configs)
            await set_or_create(self.store, path, data)
        self._cache[group_id] = dict(configs)

    def forget(self, group_id: str) -> None:
        self._cache.pop(group_id, None)
