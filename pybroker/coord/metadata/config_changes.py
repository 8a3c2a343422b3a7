"""Entity configs and their change notifications, in Kafka's ZooKeeper layout
(AdminZkClient.changeEntityConfig, ZkConfigManager / ZkNodeChangeNotificationListener).

An entity's configs live at ``/config/<entity type>/<sanitized name>`` as
``{"version":1,"config":{...}}``; every change is followed (in the same store ``multi`` here,
two writes in Kafka) by a sequential ``/config/changes/config_change_<10 digits>`` holding
``{"version":2,"entity_path":"<entity type>/<name>"}``.  Every broker watches the children of
/config/changes, reads the notifications newer than the last one it processed and re-reads the
entity each names (metadata/broker_set.py: the ``("changes",)`` refresh key).  Notifications older
than ``CHANGE_EXPIRATION_MS`` (Kafka's 15 minutes) are deleted by whichever broker sees them.

Entity types written today: ``brokers`` (this module's callers: dynamic broker configs, entity
``<default>`` or a broker id) and ``topics`` (AlterConfigs on topics).  Other helpers' entity
types (``clients``, ``users``) reach their listeners as ``ClusterEvent("ENTITY_CONFIG_CHANGED",
entity_path)``.
"""

from __future__ import annotations

from collections.abc import Callable

from pybroker.coord.metadata import paths
from pybroker.coord.metadata.store import (
    BadVersionError,
    Create,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    SetData,
)

# ZkConfigManager's changeExpirationMs
CHANGE_EXPIRATION_MS = 15 * 60 * 1000


def sequence_of(child: str) -> int:
    """The sequence number of a ``config_change_<seq>`` child; -1 for any other name."""
    if not child.startswith(paths.CONFIG_CHANGE_PREFIX):
        return -1
    try:
        return int(child[len(paths.CONFIG_CHANGE_PREFIX) :])
    except ValueError:
        return -1


def entity_config_path(entity_path: str) -> str:
    """/config/<entity type>/<name> of an entity path ("brokers/1")."""
    return f"{paths.CONFIG}/{entity_path}"


class ChangeCursor:
    """Which notifications were processed (ZkNodeChangeNotificationListener.lastExecutedChange)
    and when each seen one was created (for the purge)."""

    def __init__(self) -> None:
        self.last = -1
        self.ctimes: dict[str, int] = {}

    def unseen(self, children: list[str]) -> list[str]:
        """Notifications after the last processed one, oldest first."""
        seqs = sorted((sequence_of(c), c) for c in children)
        return [c for s, c in seqs if s > self.last]

    def forget_missing(self, children: list[str]) -> None:
        present = set(children)
        for name in [n for n in self.ctimes if n not in present]:
            del self.ctimes[name]

    def expired(self, now_ms: int) -> list[str]:
        return [n for n, t in self.ctimes.items() if t < now_ms - CHANGE_EXPIRATION_MS]


async def write_entity_config(
    store: MetadataStore,
    entity_path: str,
    update: Callable[[dict[str, str]], dict[str, str]],
    *,
    validate_only: bool = False,
    attempts: int = 50,
) -> tuple[dict[str, str], dict[str, str]]:
    """Compare-and-set an entity's configs: ``update(current) -> new`` (it may raise; it is
    called again when another writer got in first), then the change notification, in one
    multi.  Returns (old, new); with validate_only nothing is written.  Store errors other than
    a lost race propagate (the caller maps them to Kafka codes)."""
    path = entity_config_path(entity_path)
    for _ in range(attempts):
        try:
            data, stat = await store.get(path)
            current, version = paths.decode_topic_config(data), stat.version
        except NoNodeError:
            current, version = {}, None
        new = update(dict(current))
        if validate_only:
            return current, new
        encoded = paths.encode_topic_config(new)
        write = (
            Create(path, encoded) if version is None else SetData(path, encoded, version=version)
        )
        notification = Create(
            paths.config_change(), paths.encode_config_change(entity_path), sequence=True
        )
        try:
            if version is None:
                await store.ensure_path(path.rsplit("/", 1)[0])
            await store.multi([write, notification])
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue  # written (or deleted) meanwhile: read again and apply again
        return current, new
    raise BadVersionError(f"{path} keeps changing concurrently")
