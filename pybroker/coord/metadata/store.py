"""The metadata-store interface: ZooKeeper's data model, asynchronous, with two backends
(``zk.ZooKeeperStore``: a real ensemble through kazoo; ``local.LocalStore``: in process,
persisted under a directory).  Znodes with data, versions (a write with ``version=N`` is a
compare-and-set) and ``cversion``; ephemeral and sequential nodes; one-shot watches run on the
event loop (spurious events allowed: a watcher re-reads); atomic ``multi``.  Session states:
CONNECTED, SUSPENDED, LOST.  The data model in full: docs/internals.md
("pybroker/coord/metadata/store.py").
"""

from __future__ import annotations

import asyncio
import enum
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple


class Stat(NamedTuple):
    version: int
    ephemeral_owner: int  # session id of the owner, 0 for persistent nodes
    ctime: int  # ms since the epoch
    mtime: int
    num_children: int
    cversion: int = 0  # (addition to the docs/internals.md contract) child create/delete count


class EventType(enum.Enum):
    CREATED = "CREATED"
    DELETED = "DELETED"
    CHANGED = "CHANGED"
    CHILD = "CHILD"


class WatchedEvent(NamedTuple):
    type: EventType
    path: str


WatchCallback = Callable[[WatchedEvent], object]
SessionListener = Callable[[str], object]

CONNECTED = "CONNECTED"
SUSPENDED = "SUSPENDED"
LOST = "LOST"


# --------------------------------------------------------------------------- errors


class StoreError(Exception):
    """Base class of the store's errors.  ``path`` names the node concerned (when known);
    ``op_index`` is the index of the failing operation inside a ``multi``."""

    def __init__(self, message: str = "", path: str | None = None) -> None:
        super().__init__(message or (f"{type(self).__name__}: {path}" if path else ""))
        self.path = path
        self.op_index: int | None = None


class NoNodeError(StoreError):
    """The node (or, for create, its parent) does not exist."""


class NodeExistsError(StoreError):
    """create of a node that already exists."""


class BadVersionError(StoreError):
    """The compare-and-set version did not match."""


class NotEmptyError(StoreError):
    """delete of a node that has children (without recursive=True)."""


class NoChildrenForEphemeralsError(StoreError):
    """create under an ephemeral node."""


class ConnectionLossError(StoreError):
    """The store cannot be reached (or could not be reached in time at start); the outcome of
    an in-flight write is unknown."""


class SessionExpiredError(ConnectionLossError):
    """The session ended: its ephemeral nodes and watches are gone."""


# --------------------------------------------------------------------------- multi operations


@dataclass(frozen=True)
class Create:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequence: bool = False


@dataclass(frozen=True)
class SetData:
    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True)
class Delete:
    path: str
    version: int = -1


@dataclass(frozen=True)
class Check:
    path: str
    version: int


Op = Create | SetData | Delete | Check


# --------------------------------------------------------------------------- paths


class InvalidPathError(StoreError, ValueError):
    """A path the store cannot hold (ZooKeeper's BadArguments).  Names that reach the store
    come through escaping path builders, so this means a builder let a name through: a
    StoreError, so callers answer with their store error instead of failing."""


#: the longest path either backend holds: LocalStore journals a path with a u16 length, and
#: ZooKeeper's requests must fit jute.maxbuffer (1 MiB) with all the paths of a multi
MAX_PATH_BYTES = 32767
# characters ZooKeeper's PathUtils refuses anywhere in a path
_ZK_ILLEGAL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\uf8ff\ufff0-\uffff]")


def validate_path(path: str) -> None:
    """ZooKeeper's path rules: absolute, no empty, '.' or '..' component, no trailing slash
    (except the root), none of the characters ZooKeeper refuses (NUL, controls, surrogates,
    private use, specials); at most MAX_PATH_BYTES.  Raises InvalidPathError."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise InvalidPathError(f"path must be absolute: {str(path)[:200]!r}")
    if path == "/":
        return
    if path.endswith("/"):
        raise InvalidPathError(f"path must not end with '/': {path[:200]!r}")
    if (
        len(path) > MAX_PATH_BYTES // 4
        and len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES
    ):
        raise InvalidPathError(f"path longer than {MAX_PATH_BYTES} bytes: {path[:100]!r}...")
    bad = _ZK_ILLEGAL.search(path)
    if bad:
        raise InvalidPathError(f"path must not contain {bad.group()!r}: {path[:200]!r}")
    for part in path[1:].split("/"):
        if part in ("", ".", ".."):
            raise InvalidPathError(f"invalid path component {part!r} in {path[:200]!r}")


def parent_of(path: str) -> str:
    i = path.rfind("/")
    return "/" if i <= 0 else path[:i]


def join(parent: str, child: str) -> str:
    return parent + child if parent.endswith("/") else parent + "/" + child


# --------------------------------------------------------------------------- interface


class MetadataStore(ABC):
    """All methods are coroutines except the listener registration; see the module docstring
    for the semantics.  Implementations never block the event loop."""

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

    def started_up(self) -> None:  # noqa: B027 - optional: most stores cannot lose a link
        """The broker's start is over.  Until then a store that loses its connection waits
        for it (ZooKeeperStore: up to zookeeper.connection.timeout.ms) before failing a call;
        after it, such a call fails at once with ConnectionLossError.  A store that cannot
        lose a connection does nothing."""

    @property
    @abstractmethod
    def session_id(self) -> int:
        """The current session's id (the ``ephemeral_owner`` of the nodes it creates)."""

    def session_heard(self) -> tuple[float, int] | None:
        """``(t, session id)``: the latest ``time.monotonic()`` at which a request was sent
        that the server answered in that session (so the server heard from the session after
        ``t``, and the session cannot expire before ``t`` + its timeout), whatever the event
        loop was doing; None if unknown (a store without sessions, or no probe)."""
        return None

    @abstractmethod
    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        """Create a node; returns its actual path (with the sequence suffix).  ``makepath``
        creates missing (persistent, empty) ancestors first."""

    @abstractmethod
    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes, Stat]: ...

    async def get_many(
        self, paths: list[str], watches: list[WatchCallback | None] | None = None
    ) -> list[tuple[bytes, Stat] | None]:
        """``get`` of every path, together (ZooKeeper pipelines them on the session's
        connection: one round trip's latency for the lot instead of one each); ``None`` for a
        path with no node (which sets no watch, as ``get``).  ``watches[i]`` is path i's watch.
        A failure other than a missing node raises (and a watch may have been set for some
        paths: watchers tolerate a spurious event).  This default awaits ``get`` one by one."""
        out: list[tuple[bytes, Stat] | None] = []
        for i, path in enumerate(paths):
            try:
                out.append(await self.get(path, watches[i] if watches else None))
            except NoNodeError:
                out.append(None)
        return out

    async def barrier(self) -> None:
        """Return once every watch event the store received before the latest answer to a
        call of ours has been delivered (its callback has run).  A read followed by a barrier
        shows every change made before that read, through the watches."""
        await asyncio.sleep(0)  # (this default: watches are delivered by the loop itself)

    @abstractmethod
    async def set(self, path: str, data: bytes, version: int = -1) -> Stat: ...

    async def set_many(self, writes: list[tuple[str, bytes, int]]) -> list[Stat | StoreError]:
        """``set(path, data, version)`` of every ``writes`` entry, together and independently
        (ZooKeeper pipelines them on the session's connection, as Kafka's KafkaZkClient sends
        its batched setData requests): each entry's own outcome, its new Stat or its
        StoreError (a version conflict or a missing node fails that entry alone; the others
        are written).  This default awaits ``set`` one by one."""
        out: list[Stat | StoreError] = []
        for path, data, version in writes:
            try:
                out.append(await self.set(path, data, version))
            except StoreError as e:
                out.append(e)
        return out

    async def multi_many(self, batches: list[list[Op]]) -> list[StoreError | None]:
        """``multi`` of every batch, together and independently (ZooKeeper pipelines them;
        Kafka's controller sends each partition's state write as its own multi behind the
        controller epoch check, KafkaZkClient.wrapRequestWithControllerEpochCheck): each
        batch's own outcome, None (applied) or its StoreError (``op_index`` set as by
        ``multi``); one failing batch leaves the others written.  This default awaits
        ``multi`` one by one."""
        out: list[StoreError | None] = []
        for ops in batches:
            try:
                await self.multi(ops)
                out.append(None)
            except StoreError as e:
                out.append(e)
        return out

    @abstractmethod
    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        """Delete a node.  ``recursive`` deletes the subtree first (not atomic on ZooKeeper;
        ``version`` then applies to ``path`` itself)."""

    @abstractmethod
    async def exists(self, path: str, watch: WatchCallback | None = None) -> Stat | None: ...

    @abstractmethod
    async def get_children(self, path: str, watch: WatchCallback | None = None) -> list[str]:
        """Children names, sorted."""

    @abstractmethod
    async def multi(self, ops: list[Op]) -> None: ...

    @abstractmethod
    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its ancestors as empty persistent nodes where missing."""

    @abstractmethod
    def add_session_listener(self, cb: SessionListener) -> None: ...

    @abstractmethod
    def remove_session_listener(self, cb: SessionListener) -> None: ...


async def set_or_create(store: MetadataStore, path: str, data: bytes) -> None:
    """Write ``data`` at ``path`` whatever is there: set it, or create it (with its missing
    ancestors) when it does not exist; a create that lost the race to another writer sets."""
    try:
        await store.set(path, data)
    except NoNodeError:
        try:
            await store.create(path, data, makepath=True)
        except NodeExistsError:
            await store.set(path, data)
