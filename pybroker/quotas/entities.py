"""Quota entities, their ZooKeeper paths and Kafka's precedence (pure functions).  An entity is a
dict ``{entity type: name}`` (``user``, ``client-id``, or ``ip`` alone; ``None`` is the default
entity), its configs one node as Kafka on ZooKeeper keeps them::

    user and client-id  /config/users/<user>/clients/<client-id>
    user                /config/users/<user>
    client-id           /config/clients/<client-id>
    ip                  /config/ips/<ip>

Names are sanitized as Kafka's Sanitizer does.  The quota of a connection is the first match
in DefaultQuotaCallback's order; the order and sensor sharing: docs/internals.md
("pybroker/quotas/entities.py").
"""

from __future__ import annotations

from urllib.parse import quote, unquote

USER, CLIENT_ID, IP = "user", "client-id", "ip"
DEFAULT = "<default>"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

# Kafka's DynamicConfig.User/Client config keys with their types (QuotaConfigs), and Ip's
CLIENT_KEYS = {
    PRODUCER_BYTE_RATE: "LONG",
    CONSUMER_BYTE_RATE: "LONG",
    REQUEST_PERCENTAGE: "DOUBLE",
    CONTROLLER_MUTATION_RATE: "DOUBLE",
}
IP_KEYS = {CONNECTION_CREATION_RATE: "INT"}
QUOTA_KEYS = frozenset(CLIENT_KEYS) | frozenset(IP_KEYS)

Entity = tuple[tuple[str, str | None], ...]  # sorted (type, name) pairs; hashable


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize: URLEncoder (UTF-8), with '*' as '%2A' and space as '%20';
    and "." and ".." (legal names, which Kafka's ZooKeeper paths cannot hold) as "%2E" and
    "%2E%2E", which Kafka's Sanitizer.desanitize reads back."""
    if name in (".", ".."):
        return "%2E" * len(name)
    return quote(name, safe="-_.").replace("~", "%7E")


def desanitize(name: str) -> str:
    """URLDecoder.decode ('+' is a space)."""
    return unquote(name.replace("+", " "))


def _zk_name(name: str | None) -> str:
    return DEFAULT if name is None else sanitize(name)


def _from_zk(name: str) -> str | None:
    return None if name == DEFAULT else desanitize(name)


def entity(**parts: str | None) -> Entity:
    """entity(user="alice", client_id=None): keyword client_id stands for client-id."""
    return tuple(sorted((k.replace("_", "-"), v) for k, v in parts.items()))


def path_of(e: Entity) -> str:
    """The znode of an entity; ValueError for a combination Kafka refuses."""
    d = dict(e)
    if len(d) != len(e):
        raise ValueError("duplicate entity type")
    if IP in d:
        if len(d) != 1:
            raise ValueError("IP entity should not be combined with User or ClientId entity")
        return f"/config/ips/{_zk_name(d[IP])}"
    if set(d) == {USER, CLIENT_ID}:
        return f"/config/users/{_zk_name(d[USER])}/clients/{_zk_name(d[CLIENT_ID])}"
    if set(d) == {USER}:
        return f"/config/users/{_zk_name(d[USER])}"
    if set(d) == {CLIENT_ID}:
        return f"/config/clients/{_zk_name(d[CLIENT_ID])}"
    raise ValueError("Invalid client quota entity")


def entity_of_path(path: str) -> Entity | None:
    """The inverse of :func:`path_of` (None for a path that names no quota entity)."""
    parts = path.strip("/").split("/")
    if len(parts) == 3 and parts[:2] == ["config", "users"]:
        return ((USER, _from_zk(parts[2])),)
    if len(parts) == 5 and parts[:2] == ["config", "users"] and parts[3] == "clients":
        return ((CLIENT_ID, _from_zk(parts[4])), (USER, _from_zk(parts[2])))
    if len(parts) == 3 and parts[:2] == ["config", "clients"]:
        return ((CLIENT_ID, _from_zk(parts[2])),)
    if len(parts) == 3 and parts[:2] == ["config", "ips"]:
        return ((IP, _from_zk(parts[2])),)
    return None


def precedence(user: str, client_id: str) -> list[tuple[Entity, tuple[str, str]]]:
    """The eight entities in the order they are consulted, each with the sensor's metric
    tags (user, client-id) if its quota applies."""
    u, c = user, client_id
    return [
        (entity(user=u, client_id=c), (u, c)),
        (entity(user=u, client_id=None), (u, c)),
        (entity(user=u), (u, "")),
        (entity(user=None, client_id=c), (u, c)),
        (entity(user=None, client_id=None), (u, c)),
        (entity(user=None), (u, "")),
        (entity(client_id=c), ("", c)),
        (entity(client_id=None), ("", c)),
    ]


def resolve(
    quotas: dict[Entity, dict[str, float]], key: str, user: str, client_id: str
) -> tuple[float, tuple[str, str]] | None:
    """(bound, metric tags) of the quota ``key`` for a user and client id, or None."""
    for e, tags in precedence(user, client_id):
        cfg = quotas.get(e)
        if cfg is not None and key in cfg:
            return cfg[key], tags
    return None
