"""Broker config values beyond ConfigDef's types: the listeners and their security map, the
metrics endpoint, the converters from a Kafka-typed value to the attribute pybroker reads, and
:func:`render`, the way back to the string Kafka prints."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pybroker.configdef import java_double


class ConfigError(ValueError):
    pass


# -- converters: a Kafka-typed value -> the attribute pybroker reads -------------------------


def policy(items: list[str]) -> str:
    """log.cleanup.policy: ``compact``, ``delete`` or both, as a comma-separated string."""
    return ",".join(items)


# group.consumer.assignors: Kafka's class names or the assignors' names
ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def assignors(items: list[str]) -> tuple[str, ...]:
    out = []
    for item in items:
        name = ASSIGNOR_CLASSES.get(item, item.lower())
        if name not in ("uniform", "range"):
            raise ValueError(f"{item} is not a known assignor (uniform, range)")
        out.append(name)
    if not out:
        raise ValueError("must name an assignor")
    return tuple(out)


def protocols(items: list[str]) -> tuple[str, ...]:
    protocols = tuple(p.lower() for p in items if p)
    wrong = [p for p in protocols if p not in ("classic", "consumer")]
    if wrong or "classic" not in protocols:
        raise ValueError("must list classic, and may list consumer")
    return protocols


def migration_policy(s: str) -> str:
    """group.consumer.migration.policy (Kafka's ConsumerGroupMigrationPolicy, any case)."""
    v = s.lower()
    if v not in ("disabled", "upgrade", "downgrade", "bidirectional"):
        raise ValueError("must be one of disabled, upgrade, downgrade, bidirectional")
    return v


def _items(s: str) -> list[str]:
    """A comma-separated list's items, stripped, the empty ones left out."""
    return [item for item in (part.strip() for part in s.split(",")) if item]


def ip_overrides(s: str) -> tuple[tuple[str, int], ...]:
    """max.connections.per.ip.overrides: ``host:limit`` pairs, comma-separated (an IPv6
    address's last colon separates the limit)."""
    out = []
    for item in _items(s):
        host, sep, limit = item.rpartition(":")
        if not sep or not host.strip():
            raise ValueError(f"expected host:limit, got {item!r}")
        n = int(limit)
        if n < 0:
            raise ValueError(f"{host.strip()}: must be >= 0")
        out.append((host.strip().strip("[]"), n))
    return tuple(out)


def super_users(s: str) -> tuple[str, ...]:
    users = tuple(u.strip() for u in s.split(";") if u.strip())
    for u in users:
        if ":" not in u or u.startswith(":"):
            raise ValueError(f"{u!r} is not Type:name")
    return users


@dataclass(frozen=True)
class HttpEndpoint:
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def http_listener(s: str) -> HttpEndpoint | None:
    """metrics.listener: ``http://host:port`` (port 0: any free port); empty: off."""
    if not s:
        return None
    m = re.fullmatch(r"http://(\[[^\]]*\]|[^:/\[\]]*):(\d+)/?", s)
    if not m:
        raise ValueError("expected http://host:port (e.g. http://127.0.0.1:9308)")
    port = int(m.group(2))
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} out of range")
    return HttpEndpoint(m.group(1).strip("[]"), port)


@dataclass(frozen=True)
class Endpoint:
    listener: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.listener}://{self.host}:{self.port}"


def listeners(s: str) -> tuple[Endpoint, ...]:
    out = []
    for item in _items(s):
        m = re.fullmatch(r"([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:]*):(\d+)", item)
        if not m:
            raise ValueError(f"expected LISTENER://host:port, got {item!r}")
        host = m.group(2).strip("[]")
        port = int(m.group(3))
        if not 0 <= port <= 65535:
            raise ValueError(f"port {port} out of range")
        out.append(Endpoint(m.group(1).upper(), host, port))
    if not out:
        raise ValueError("no listener given")
    return tuple(out)


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"


def protocol_map(s: str) -> tuple[tuple[str, str], ...]:
    """listener.security.protocol.map: NAME:PROTOCOL,... (Kafka's: a given map replaces the
    default one whole)."""
    out = []
    for item in _items(s):
        name, sep, proto = item.partition(":")
        proto = proto.strip().upper()
        if not sep or not name.strip():
            raise ValueError(f"expected LISTENER:PROTOCOL, got {item!r}")
        if proto not in SECURITY_PROTOCOLS:
            raise ValueError(f"unknown security protocol {proto!r} (one of {SECURITY_PROTOCOLS})")
        out.append((name.strip().upper(), proto))
    return tuple(out)


AUTHORIZERS = (
    "kafka.security.authorizer.AclAuthorizer",  # Kafka's ZooKeeper ACL authorizer
    "kafka.security.auth.SimpleAclAuthorizer",  # its name before Kafka 2.4
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",  # KRaft's, same model
)


def render(value: Any) -> str | None:
    """A Config attribute as Kafka prints its value (None: unset)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return java_double(value)
    if isinstance(value, tuple):
        return ",".join(
            ":".join(str(i) for i in v) if isinstance(v, tuple) else str(v) for v in value
        )
    return str(value)
