"""ACL authorization with Kafka's ZooKeeper AclAuthorizer layout (authorizer.class.name =
kafka.security.authorizer.AclAuthorizer), so Kafka's kafka-acls tool and an existing Kafka's
ACL data both work.

Store layout (Kafka's)::

    /kafka-acl/<ResourceType>/<name>                      LITERAL bindings of one resource
    /kafka-acl-extended/prefixed/<ResourceType>/<name>    PREFIXED bindings
        {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                              "operation":"Read","host":"*"}, ...]}
    /kafka-acl-changes/acl_changes_<seq>                  "<ResourceType>:<name>" (literal)
    /kafka-acl-extended-changes/acl_changes_<seq>         {"version":1,"resourceType":...,
                                                           "name":...,"patternType":"PREFIXED"}

Every broker keeps all bindings in memory (decisions read only memory) and watches the two
change directories: a change made through any broker (or by kafka-acls against ZooKeeper)
is read again on every broker.  Writes are compare-and-set per resource node, then a change
notification; notifications older than 15 minutes are purged, as Kafka does.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Sequence

from pybroker.coord.metadata.store import (
    BadVersionError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    StoreError,
    WatchedEvent,
)
from pybroker.security import acl
from pybroker.security.acl import (
    RESOURCE_NAMES,
    Acls,
    Binding,
    Entry,
    Filter,
    Operation,
    PatternType,
    Resource,
    ResourceType,
)

log = logging.getLogger("pybroker.security.authorizer")

LITERAL_ROOT, PREFIXED_ROOT = "/kafka-acl", "/kafka-acl-extended/prefixed"
LITERAL_CHANGES, EXTENDED_CHANGES = "/kafka-acl-changes", "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
PURGE_AFTER_MS = 15 * 60 * 1000
_TYPES = {v: k for k, v in RESOURCE_NAMES.items()}


def resource_path(r: Resource) -> str:
    root = LITERAL_ROOT if r.pattern == PatternType.LITERAL else PREFIXED_ROOT
    return f"{root}/{RESOURCE_NAMES[r.type]}/{r.name}"


class Authorizer:
    def __init__(
        self,
        store: MetadataStore,
        *,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
        now_ms=None,
    ) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_if_no_acls = allow_everyone_if_no_acl_found
        self.acls = Acls()
        self._now_ms = now_ms
        self._reload_task: asyncio.Task | None = None
        self._dirty = False
        self._lock = asyncio.Lock()

    # -- decisions ---------------------------------------------------------------------------
    def authorize(
        self, principal: str, host: str, operation: Operation, rtype: ResourceType, name: str
    ) -> bool:
        return acl.authorize(
            self.acls,
            principal,
            host,
            operation,
            rtype,
            name,
            super_users=self.super_users,
            allow_if_no_acls=self.allow_if_no_acls,
        )

    def authorize_any(
        self, principal: str, host: str, operation: Operation, rtype: ResourceType
    ) -> bool:
        return acl.authorize_any(
            self.acls, principal, host, operation, rtype, super_users=self.super_users
        )

    # -- loading -------------------------------------------------------------------------------
    async def start(self) -> None:
        for path in (LITERAL_CHANGES, EXTENDED_CHANGES):
            await self.store.ensure_path(path)
        await self._watch_and_load()

    async def _watch_and_load(self) -> None:
        for path in (LITERAL_CHANGES, EXTENDED_CHANGES):
            children = await self.store.get_children(path, watch=self._changed)
            await self._purge(path, children)
        self.acls = await self._load_all()

    def _changed(self, event: WatchedEvent) -> None:
        self._dirty = True
        if self._reload_task is None or self._reload_task.done():
            self._reload_task = asyncio.get_running_loop().create_task(
                self._reload(), name="acl-reload"
            )

    async def _reload(self) -> None:
        while self._dirty:
            self._dirty = False
            try:
                await self._watch_and_load()
            except StoreError as e:
                log.warning("reloading ACLs failed (retrying): %s", e)
                self._dirty = True
                await asyncio.sleep(1)

    async def _load_all(self) -> Acls:
        bindings: dict[Resource, frozenset[Entry]] = {}
        for root, pattern in (
            (LITERAL_ROOT, PatternType.LITERAL),
            (PREFIXED_ROOT, PatternType.PREFIXED),
        ):
            try:
                types = await self.store.get_children(root)
            except NoNodeError:
                continue
            for tname in types:
                rtype = _TYPES.get(tname)
                if rtype is None:
                    continue
                try:
                    names = await self.store.get_children(f"{root}/{tname}")
                except NoNodeError:
                    continue
                for name in names:
                    r = Resource(rtype, name, pattern)
                    entries, _ = await self._read(r)
                    if entries:
                        bindings[r] = entries
        return Acls(bindings)

    async def _read(self, r: Resource) -> tuple[frozenset[Entry], int | None]:
        try:
            data, stat = await self.store.get(resource_path(r))
        except NoNodeError:
            return frozenset(), None
        try:
            doc = json.loads(data) if data else {}
            entries = frozenset(Entry.from_json(a) for a in doc.get("acls", []))
        except (ValueError, KeyError, TypeError):
            log.warning("unreadable ACL node %s ignored", resource_path(r))
            entries = frozenset()
        return entries, stat.version

    async def _purge(self, path: str, children: list[str]) -> None:
        if self._now_ms is None:
            return
        for child in children:
            try:
                stat = await self.store.exists(f"{path}/{child}")
                if stat is not None and self._now_ms() - stat.ctime > PURGE_AFTER_MS:
                    await self.store.delete(f"{path}/{child}")
            except (NoNodeError, NotEmptyError):
                continue

    # -- changes (CreateAcls / DeleteAcls) ---------------------------------------------------------
    async def _update(self, r: Resource, add: frozenset[Entry], remove: frozenset[Entry]) -> None:
        for _ in range(20):
            entries, version = await self._read(r)
            new = (entries | add) - remove
            if new == entries:
                return
            path = resource_path(r)
            data = json.dumps(
                {"version": 1, "acls": [e.to_json() for e in sorted(new, key=repr)]},
                separators=(",", ":"),
            ).encode()
            try:
                if version is None:
                    await self.store.create(path, data, makepath=True)
                elif new:
                    await self.store.set(path, data, version)
                else:
                    await self.store.delete(path, version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # changed meanwhile: read again
            await self._notify(r)
            return
        raise BadVersionError(f"ACLs of {r} kept changing", resource_path(r))

    async def _notify(self, r: Resource) -> None:
        if r.pattern == PatternType.LITERAL:
            path, data = LITERAL_CHANGES, f"{RESOURCE_NAMES[r.type]}:{r.name}".encode()
        else:
            path = EXTENDED_CHANGES
            data = json.dumps(
                {
                    "version": 1,
                    "resourceType": RESOURCE_NAMES[r.type],
                    "name": r.name,
                    "patternType": r.pattern.name,
                }
            ).encode()
        await self.store.create(f"{path}/{CHANGE_PREFIX}", data, sequence=True, makepath=True)

    async def create(self, bindings: Sequence[Binding]) -> None:
        async with self._lock:
            by_resource: dict[Resource, set[Entry]] = {}
            for r, e in bindings:
                by_resource.setdefault(r, set()).add(e)
            for r, es in by_resource.items():
                await self._update(r, frozenset(es), frozenset())
            self.acls = await self._load_all()

    async def delete(self, filters: Sequence[Filter]) -> list[list[Binding]]:
        """The bindings each filter deleted (Kafka: a binding matched by several filters is
        reported under each)."""
        async with self._lock:
            current = await self._load_all()
            matched = [[(r, e) for r, e in current.bindings() if f.matches(r, e)] for f in filters]
            doomed: dict[Resource, set[Entry]] = {}
            for group in matched:
                for r, e in group:
                    doomed.setdefault(r, set()).add(e)
            for r, es in doomed.items():
                await self._update(r, frozenset(), frozenset(es))
            self.acls = await self._load_all()
            return matched

    def describe(self, f: Filter) -> list[Binding]:
        return [(r, e) for r, e in self.acls.bindings() if f.matches(r, e)]

    async def stop(self) -> None:
        if self._reload_task is not None:
            self._reload_task.cancel()
            try:
                await self._reload_task
            except (asyncio.CancelledError, Exception):
                pass
