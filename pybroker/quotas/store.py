"""Client quotas in the metadata store, as Kafka on ZooKeeper keeps them (entities.py has
the paths).  A node holds ``{"version":1,"config":{"producer_byte_rate":"1048576",...}}``;
other keys in it (a user's SCRAM credentials) are kept as they are, and a node whose last
quota is removed stays, with what is left of its config (as Kafka leaves it).

:class:`QuotaStore` reads every entity's quotas (``load``), alters one entity's quotas in a
compare-and-set write (``alter``), and keeps an in-memory copy current (``watch``): it
watches /config/users, /config/clients, /config/ips, each /config/users/<u>/clients and
every node under them through the metadata store's watches, and on any event re-reads the
tree (one reload at a time; events during a reload cause one more).  Each broker sees a
change made through any broker, or by Kafka's tools writing ZooKeeper directly.

``alter`` also writes Kafka's /config/changes notification
(``{"version":2,"entity_path":"clients/perf"}``, coord/metadata/config_changes.py) in the same
multi, so Kafka's ZooKeeper-mode readers see the change; pybroker's brokers learn of it through the
watches above.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from pybroker.coord.metadata.config_changes import write_entity_config
from pybroker.coord.metadata.store import (
    MetadataStore,
    NoNodeError,
    StoreError,
    WatchedEvent,
)
from pybroker.quotas.entities import QUOTA_KEYS, Entity, entity_of_path, path_of

log = logging.getLogger("pybroker.quotas")

ROOTS = ("/config/users", "/config/clients", "/config/ips")

Quotas = dict[Entity, dict[str, float]]


def _parse(data: bytes) -> dict:
    try:
        doc = json.loads(data) if data else {}
    except ValueError:
        doc = {}
    if not isinstance(doc, dict):
        doc = {}
    doc.setdefault("version", 1)
    if not isinstance(doc.get("config"), dict):
        doc["config"] = {}
    return doc


def quota_values(config: dict) -> dict[str, float]:
    """The quota keys of a node's config, as numbers (unparsable values are skipped)."""
    out = {}
    for k, v in config.items():
        if k in QUOTA_KEYS:
            try:
                out[k] = float(v)
            except (TypeError, ValueError):
                continue
    return out


class QuotaStore:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self.quotas: Quotas = {}
        self._listeners: list[Callable[[Quotas], object]] = []
        self._watched: set[str] = set()
        self._dirty = False
        self._reloading: asyncio.Task | None = None
        self._closed = False

    # -- reading ----------------------------------------------------------------------------
    async def _children(self, path: str, watch: bool) -> list[str]:
        cb = self._watch_cb(path, "c") if watch else None
        try:
            return await self.store.get_children(path, cb)
        except NoNodeError:
            if watch:
                self._watched.discard(path + "#c")
                await self._exists_watch(path)
            return []

    async def _exists_watch(self, path: str) -> None:
        key = path + "#e"
        if key in self._watched:
            return
        self._watched.add(key)
        try:
            await self.store.exists(path, self._make_cb(key))
        except StoreError:
            self._watched.discard(key)

    def _watch_cb(self, path: str, kind: str) -> Callable[[WatchedEvent], object] | None:
        key = f"{path}#{kind}"
        if key in self._watched:
            return None
        self._watched.add(key)
        return self._make_cb(key)

    def _make_cb(self, key: str) -> Callable[[WatchedEvent], object]:
        def fired(_event: WatchedEvent) -> None:
            self._watched.discard(key)
            self._schedule_reload()

        return fired

    async def _get(self, path: str, watch: bool) -> dict[str, float] | None:
        cb = self._watch_cb(path, "d") if watch else None
        try:
            data, _ = await self.store.get(path, cb)
        except NoNodeError:
            self._watched.discard(path + "#d")
            return None
        return quota_values(_parse(data)["config"])

    async def load(self, watch: bool = False) -> Quotas:
        """Every entity with at least one quota."""
        out: Quotas = {}
        paths: list[str] = []
        for root in ROOTS:
            for child in await self._children(root, watch):
                paths.append(f"{root}/{child}")
                if root == "/config/users":
                    sub = f"{root}/{child}/clients"
                    paths.extend(f"{sub}/{c}" for c in await self._children(sub, watch))
        for p in paths:
            e = entity_of_path(p)
            values = await self._get(p, watch)
            if e is not None and values:
                out[e] = values
        return out

    # -- watching ---------------------------------------------------------------------------
    def add_listener(self, cb: Callable[[Quotas], object]) -> None:
        self._listeners.append(cb)

    async def watch(self) -> None:
        """Load with watches; from then on ``quotas`` follows the store."""
        self._set(await self.load(watch=True))

    async def refresh(self) -> None:
        """Read the quotas now (after a write here: this broker applies it before answering;
        the watches bring it to the others, and here too, a moment later)."""
        self._set(await self.load())

    def _set(self, quotas: Quotas) -> None:
        self.quotas = quotas
        for cb in self._listeners:
            cb(quotas)

    def _schedule_reload(self) -> None:
        if self._closed:
            return
        self._dirty = True
        if self._reloading is None or self._reloading.done():
            self._reloading = asyncio.get_running_loop().create_task(self._reload())

    async def _reload(self) -> None:
        while self._dirty and not self._closed:
            self._dirty = False
            try:
                self._set(await self.load(watch=True))
            except StoreError as e:
                log.warning("reading client quotas failed (%s); retrying", e)
                self._dirty = True
                await asyncio.sleep(1.0)

    def close(self) -> None:
        self._closed = True
        if self._reloading is not None:
            self._reloading.cancel()

    # -- writing ----------------------------------------------------------------------------
    async def alter(self, e: Entity, changes: dict[str, str | None]) -> None:
        """Set (a string value) or remove (None) quota keys of one entity: one compare-and-set
        write of its configs with the /config/changes notification, as kafka-configs does
        (other keys of the node, a user's SCRAM credentials, are kept)."""

        def update(config: dict[str, str]) -> dict[str, str]:
            for k, v in changes.items():
                if v is None:
                    config.pop(k, None)
                else:
                    config[k] = v
            return config

        await write_entity_config(self.store, path_of(e).removeprefix("/config/"), update)
