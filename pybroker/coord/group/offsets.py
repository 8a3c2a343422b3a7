"""Committed consumer-group offsets in the metadata store (Kafka's ZooKeeper-era offset storage):
they survive consumer and broker restarts on both backends.  Every commit is compare-and-set in
one ``multi`` (all or nothing); the writes of one group apply one at a time in call order, with
no lock held across an await, and queued commits merge into one round trip; reads after the
first are served from the cache the writes keep.

Znode layout (Kafka's old-consumer layout, ``paths.consumer_offset``; JSON written by us)::

    /consumers/<group>                           ""  (created with the group's first commit)
    /consumers/<group>/offsets                   ""
    /consumers/<group>/offsets/<topic>           ""
    /consumers/<group>/offsets/<topic>/<p>       {"version":1,"offset":N,"leader_epoch":E,"metadata":"...","commit_timestamp":T}
                                                 (+ "expire_timestamp":T when the commit had one, OffsetCommit v2-v4)
                                                 or, as Kafka's old consumer wrote it, "<offset>": plain decimal text,
                                                 read as leader_epoch -1, metadata "", commit_timestamp = the znode's mtime

Names, caching, retries and concurrency: docs/internals.md ("pybroker/coord/group/offsets.py").
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from pybroker.clock import Clock
from pybroker.coord.metadata import paths
from pybroker.coord.metadata.model import TopicPartition
from pybroker.coord.metadata.store import (
    BadVersionError,
    Create,
    Delete,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SetData,
    StoreError,
)

log = logging.getLogger(__name__)

OFFSET_FORMAT_VERSION = 1
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_TIMESTAMP_REFRESH_MS = 60_000

# conflicts with another writer: re-read the group and try again
_RETRYABLE = (NodeExistsError, BadVersionError, NoNodeError, NotEmptyError)

T = TypeVar("T")


class CommittedOffset(NamedTuple):
    """One partition's committed offset (immutable; a NamedTuple, built on every commit)."""

    offset: int
    leader_epoch: int  # -1: unknown
    metadata: str
    commit_timestamp: int  # ms since the epoch
    expire_timestamp: int | None = None  # ms; only from OffsetCommit v2-v4 retention_time


Offsets = dict[TopicPartition, CommittedOffset]


# --------------------------------------------------------------------------- encoding


_json_str = json.encoder.encode_basestring_ascii  # the C implementation when available


def encode_offset(co: CommittedOffset) -> bytes:
    """The znode data: compact JSON, keys in this order (formatted directly: json.dumps with
    custom separators builds a new encoder per call, ten times slower on the commit path)."""
    text = (
        f'{{"version":{OFFSET_FORMAT_VERSION},"offset":{int(co.offset)},'
        f'"leader_epoch":{int(co.leader_epoch)},"metadata":{_json_str(co.metadata)},'
        f'"commit_timestamp":{int(co.commit_timestamp)}'
    )
    if co.expire_timestamp is not None:
        text += f',"expire_timestamp":{int(co.expire_timestamp)}'
    return (text + "}").encode()


def decode_offset(data: bytes, mtime: int) -> CommittedOffset:
    """JSON as written by encode_offset, or a legacy decimal offset (commit timestamp = the
    znode's ``mtime``).  Raises ValueError when the data is neither."""
    text = data.decode().strip()
    if not text.startswith("{"):
        return CommittedOffset(int(text), -1, "", mtime)
    obj = json.loads(text)
    if not isinstance(obj, dict) or "offset" not in obj:
        raise ValueError(f"not an offset: {text[:100]!r}")
    expire = obj.get("expire_timestamp")
    return CommittedOffset(
        offset=int(obj["offset"]),
        leader_epoch=int(obj.get("leader_epoch", -1)),
        metadata=obj["metadata"] if isinstance(obj.get("metadata"), str) else "",
        commit_timestamp=int(obj.get("commit_timestamp", mtime)),
        expire_timestamp=None if expire is None else int(expire),
    )


def _group_path(gc: str) -> str:
    return f"{paths.CONSUMERS}/{gc}"


def _offsets_path(gc: str) -> str:
    return f"{paths.CONSUMERS}/{gc}/offsets"


def _topic_path(gc: str, tc: str) -> str:
    return f"{paths.CONSUMERS}/{gc}/offsets/{tc}"


def _partition_component(child: str) -> int | None:
    """Partition znode name -> partition number; None for names we did not write."""
    try:
        p = int(child)
    except ValueError:
        return None
    return p if str(p) == child else None


# --------------------------------------------------------------------------- the cache


@dataclass
class _Group:
    """What the store holds for one group, as last read or written by us."""

    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    # every partition znode that exists (also ones whose data did not decode) -> its version
    versions: dict[TopicPartition, int] = field(default_factory=dict)
    # existing topic znodes (by znode name) -> the names of their children
    topics: dict[str, set[str]] = field(default_factory=dict)
    # children of /consumers/<group>; None when that znode does not exist
    group_children: set[str] | None = None
    stale: bool = False  # the last write's outcome is unknown: re-read before the next one

    @property
    def has_offsets_node(self) -> bool:
        return self.group_children is not None and "offsets" in self.group_children


class _Write:
    """A queued write: a commit (``offsets``) or another operation (``run``)."""

    __slots__ = ("offsets", "run", "done")

    def __init__(
        self,
        offsets: dict[TopicPartition, CommittedOffset] | None,
        run: Callable[[], Awaitable[Any]] | None = None,
    ) -> None:
        self.offsets = offsets
        self.run = run
        self.done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()


def _mark_retrieved(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


def _unchanged(old: CommittedOffset, new: CommittedOffset, refresh_ms: int) -> bool:
    return (
        old.offset == new.offset
        and old.leader_epoch == new.leader_epoch
        and old.metadata == new.metadata
        and old.expire_timestamp == new.expire_timestamp
        and 0 <= new.commit_timestamp - old.commit_timestamp < refresh_ms
    )


class OffsetStore:
    def __init__(
        self,
        store: MetadataStore,
        clock: Clock,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        timestamp_refresh_ms: int = DEFAULT_TIMESTAMP_REFRESH_MS,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self._store = store
        self._clock = clock
        self._max_attempts = max_attempts
        self._refresh_ms = timestamp_refresh_ms
        self._groups: dict[str, _Group] = {}
        self._loading: dict[str, asyncio.Future[_Group]] = {}
        self._queues: dict[str, collections.deque[_Write]] = {}
        self._writers: dict[str, asyncio.Task[None]] = {}
        # per group: store writes issued by us (done, or with unknown outcome); a read that
        # overlapped one is installed as stale, since it may predate the write
        self._writes: collections.Counter[str] = collections.Counter()
        self._consumers_exists = False
        self._epoch = 0  # bumped by forget/forget_all: reads started before are stale

    @property
    def store(self) -> MetadataStore:
        return self._store

    # ------------------------------------------------------------------ reads

    async def load(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        """The group's committed offsets (a copy).  Read from the store the first time (and
        after a write whose outcome is unknown), from memory afterwards."""
        g = self._groups.get(group)
        if g is None or g.stale:
            g = await self._reload(group)
        return dict(g.offsets)

    def cached(self, group: str) -> dict[TopicPartition, CommittedOffset] | None:
        """The cached offsets (a copy), None if the group was not loaded yet."""
        g = self._groups.get(group)
        return None if g is None else dict(g.offsets)

    def forget(self, group: str) -> None:
        """Drop the group's cache (its coordinator moved to another broker: when it comes
        back, the offsets must be read again)."""
        self._groups.pop(group, None)
        self._epoch += 1

    def forget_all(self) -> None:
        """Drop every group's cache: coordination may have moved (another broker may have
        written any group's offsets meanwhile), so the next use of each group reads the store
        again.  A read in flight now is installed stale (used once, re-read before the next
        use), since it may have started before the other broker's writes."""
        self._groups.clear()
        self._epoch += 1

    async def groups(self) -> list[str]:
        """Groups that have committed offsets (in the store; read, not cached)."""
        try:
            children = await self._store.get_children(paths.CONSUMERS)
        except NoNodeError:
            return []
        names = [paths.component_to_name(c) for c in children]

        async def has_offsets(name: str) -> bool:
            g = self._groups.get(name)
            if g is not None and not g.stale:
                return bool(g.versions)
            stat = await self._store.exists(_offsets_path(paths.name_to_component(name)))
            return stat is not None and stat.num_children > 0

        found = await asyncio.gather(*(has_offsets(n) for n in names))
        return sorted(n for n, ok in zip(names, found, strict=True) if ok)

    async def _reload(self, group: str) -> _Group:
        """Read the group from the store and install it in the cache; concurrent callers
        share one read."""
        fut = self._loading.get(group)
        if fut is None:
            fut = asyncio.ensure_future(self._read_group(group))
            self._loading[group] = fut
            writes = self._writes[group]
            epoch = self._epoch

            def installed(f: asyncio.Future[_Group]) -> None:
                if self._loading.get(group) is f:
                    del self._loading[group]
                if not f.cancelled() and f.exception() is None:
                    g = f.result()
                    g.stale = self._writes[group] != writes or self._epoch != epoch
                    self._groups[group] = g

            fut.add_done_callback(installed)
        return await asyncio.shield(fut)

    async def _read_group(self, group: str) -> _Group:
        store = self._store
        gc = paths.name_to_component(group)
        g = _Group()
        try:
            g.group_children = set(await store.get_children(_group_path(gc)))
        except NoNodeError:
            return g
        if "offsets" not in g.group_children:
            return g
        try:
            topic_names = await store.get_children(_offsets_path(gc))
        except NoNodeError:
            g.group_children.discard("offsets")
            return g

        async def children(tc: str) -> list[str] | None:
            try:
                return await store.get_children(_topic_path(gc, tc))
            except NoNodeError:
                return None

        listed = await asyncio.gather(*(children(tc) for tc in topic_names))
        wanted: list[tuple[str, int]] = []
        for tc, kids in zip(topic_names, listed, strict=True):
            if kids is None:
                continue
            g.topics[tc] = set(kids)
            for kid in kids:
                p = _partition_component(kid)
                if p is None:
                    log.warning("ignoring znode %s/%s", _topic_path(gc, tc), kid)
                else:
                    wanted.append((tc, p))

        async def read(tc: str, p: int):
            try:
                return await store.get(paths.consumer_offset(gc, tc, p))
            except NoNodeError:
                return None

        results = await asyncio.gather(*(read(tc, p) for tc, p in wanted))
        for (tc, p), res in zip(wanted, results, strict=True):
            if res is None:
                g.topics[tc].discard(str(p))
                continue
            data, stat = res
            key = (paths.component_to_name(tc), p)
            g.versions[key] = stat.version  # known, so a commit overwrites it with SetData
            try:
                g.offsets[key] = decode_offset(data, stat.mtime)
            except (ValueError, UnicodeDecodeError, TypeError) as e:
                log.warning(
                    "undecodable committed offset at %s: %s", paths.consumer_offset(gc, tc, p), e
                )
        return g

    # ------------------------------------------------------------------ writes

    async def commit(self, group: str, offsets: dict[TopicPartition, CommittedOffset]) -> None:
        """Store the offsets atomically in one multi (see the module docstring).  Raises a
        StoreError (ConnectionLossError, or the last conflict after max_attempts)."""
        if offsets:
            await self._submit(group, _Write(dict(offsets)))

    def commit_now(
        self, group: str, offsets: dict[TopicPartition, CommittedOffset]
    ) -> Awaitable[None]:
        """``commit``'s awaitable (a store write always waits; offsets_log.py's answers at
        once when it can)."""
        return self.commit(group, offsets)

    async def delete_offsets(self, group: str, partitions: Iterable[TopicPartition]) -> None:
        """Delete these partitions' offsets (one multi); missing ones are ignored."""
        wanted = set(partitions)
        if not wanted:
            return

        async def run() -> None:
            await self._with_retries(
                group, lambda g: self._delete_once(group, g, [k for k in g.versions if k in wanted])
            )

        await self._submit(group, _Write(None, run))

    async def expire(self, group: str, older_than_ms: int) -> int:
        """Delete offsets committed before ``older_than_ms`` (one multi); an offset committed
        with an explicit expire timestamp (OffsetCommit v2-v4) expires when the clock reaches
        it instead, as in Kafka.  Returns how many were deleted."""

        def expired(co: CommittedOffset, now: int) -> bool:
            if co.expire_timestamp is not None:
                return co.expire_timestamp <= now
            return co.commit_timestamp < older_than_ms

        async def run() -> int:
            now = self._clock.time_ms()
            return await self._with_retries(
                group,
                lambda g: self._delete_once(
                    group, g, [k for k, co in g.offsets.items() if expired(co, now)]
                ),
            )

        return await self._submit(group, _Write(None, run))

    async def delete_group(self, group: str) -> None:
        """Delete /consumers/<group> and everything under it (recursively; not atomic on
        ZooKeeper, but idempotent: call it again after an error)."""

        async def run() -> None:
            try:
                await self._store.delete(
                    _group_path(paths.name_to_component(group)), recursive=True
                )
            except NoNodeError:
                pass
            except StoreError:
                self._mark_stale(group)
                raise
            finally:
                self._writes[group] += 1
            self._groups[group] = _Group()

        await self._submit(group, _Write(None, run))

    # ------------------------------------------------------------------ write machinery

    async def _submit(self, group: str, write: _Write) -> Any:
        """Apply a write of the group after the ones before it.  ``_queues[group]`` exists
        while a write of the group is in flight.  If none is, the caller applies its write
        itself (no task, no queue: the common case costs nothing extra); writes arriving
        meanwhile queue up, and a writer task applies them in order when it is done, merging
        consecutive commits into one multi."""
        queue = self._queues.get(group)
        if queue is not None:
            queue.append(write)
            # a queued write goes ahead even if its caller is cancelled meanwhile (then nobody
            # reads its outcome: mark it read, or asyncio logs "exception never retrieved")
            write.done.add_done_callback(_mark_retrieved)
            return await asyncio.shield(write.done)
        queue = self._queues[group] = collections.deque()
        try:
            if write.offsets is not None:
                offsets = write.offsets
                return await self._with_retries(
                    group, lambda g: self._commit_once(group, g, offsets)
                )
            return await write.run()
        finally:
            if queue:
                self._writers[group] = asyncio.create_task(
                    self._write_loop(group, queue), name=f"offsets-writer-{group}"
                )
            else:
                del self._queues[group]

    async def _write_loop(self, group: str, queue: collections.deque[_Write]) -> None:
        batch: list[_Write] = []
        try:
            while queue:
                batch = [queue.popleft()]
                if batch[0].offsets is None:
                    run = batch[0].run
                else:
                    merged = dict(batch[0].offsets)
                    while queue and queue[0].offsets is not None:
                        batch.append(queue.popleft())
                        merged.update(batch[-1].offsets)  # later commits win, as if run in turn

                    def run(merged=merged) -> Awaitable[None]:
                        return self._with_retries(
                            group, lambda g: self._commit_once(group, g, merged)
                        )

                try:
                    result = await run()
                except Exception as e:
                    for w in batch:
                        if not w.done.done():
                            w.done.set_exception(e)
                else:
                    for w in batch:
                        if not w.done.done():
                            w.done.set_result(result)
        finally:
            del self._writers[group]
            if self._queues.get(group) is queue:
                del self._queues[group]
            for w in (*batch, *queue):  # only when this task is cancelled (the loop closing)
                if not w.done.done():
                    w.done.cancel()

    def _mark_stale(self, group: str) -> None:
        g = self._groups.get(group)
        if g is not None:
            g.stale = True

    async def _with_retries(self, group: str, attempt: Callable[[_Group], Awaitable[T]]) -> T:
        g = self._groups.get(group)
        if g is None or g.stale:
            g = await self._reload(group)
        for n in range(1, self._max_attempts + 1):
            try:
                return await attempt(g)
            except _RETRYABLE as e:
                if isinstance(e, NoNodeError):
                    self._consumers_exists = False
                self._mark_stale(group)
                if n == self._max_attempts:
                    raise
                log.debug("offsets of group %r changed behind our back (%s); re-reading", group, e)
                g = await self._reload(group)
            except StoreError:
                self._mark_stale(group)
                raise
        raise AssertionError("unreachable")

    async def _multi(self, group: str, g: _Group, ops: list[Op]) -> bool:
        """Run the multi; True if ``g`` is still the group's cache entry to update."""
        try:
            await self._store.multi(ops)
        except _RETRYABLE:
            raise  # a conflict: nothing was written
        except BaseException:  # connection lost, or the caller cancelled: outcome unknown
            self._writes[group] += 1
            self._mark_stale(group)
            raise
        self._writes[group] += 1
        if self._groups.get(group) is g:
            return True
        self._mark_stale(group)  # replaced meanwhile: its read may predate our write
        return False

    async def _commit_once(
        self, group: str, g: _Group, offsets: dict[TopicPartition, CommittedOffset]
    ) -> None:
        gc = paths.name_to_component(group)
        creates: list[Op] = []
        sets: list[Op] = []
        new_topics: set[str] = set()
        changes: list[tuple[TopicPartition, str, CommittedOffset, int | None]] = []
        for key, co in offsets.items():
            old = g.offsets.get(key)
            if old is not None and _unchanged(old, co, self._refresh_ms):
                continue
            topic, p = key
            tc = paths.name_to_component(topic)
            path = paths.consumer_offset(gc, tc, p)
            version = g.versions.get(key)
            if version is None:
                creates.append(Create(path, encode_offset(co)))
                if tc not in g.topics:
                    new_topics.add(tc)
            else:
                sets.append(SetData(path, encode_offset(co), version))
            changes.append((key, tc, co, version))
        if not changes:
            return
        parents: list[Op] = []
        if creates:
            if g.group_children is None:
                if not self._consumers_exists:
                    await self._store.ensure_path(paths.CONSUMERS)
                    self._consumers_exists = True
                parents.append(Create(_group_path(gc)))
            if not g.has_offsets_node:
                parents.append(Create(_offsets_path(gc)))
            parents.extend(Create(_topic_path(gc, tc)) for tc in sorted(new_topics))
        if not await self._multi(group, g, parents + creates + sets):
            return
        if creates:
            if g.group_children is None:
                g.group_children = set()
            g.group_children.add("offsets")
            for tc in new_topics:
                g.topics[tc] = set()
        for key, tc, co, version in changes:
            g.offsets[key] = co
            if version is None:
                g.versions[key] = 0
                g.topics[tc].add(str(key[1]))
            else:
                g.versions[key] = version + 1

    async def _delete_once(self, group: str, g: _Group, keys: list[TopicPartition]) -> int:
        if not keys:
            return 0
        gc = paths.name_to_component(group)
        ops: list[Op] = []
        removed: dict[str, set[str]] = {}
        for topic, p in keys:
            tc = paths.name_to_component(topic)
            ops.append(Delete(paths.consumer_offset(gc, tc, p), g.versions[(topic, p)]))
            removed.setdefault(tc, set()).add(str(p))
        emptied = sorted(tc for tc, gone in removed.items() if not g.topics.get(tc, set()) - gone)
        ops.extend(Delete(_topic_path(gc, tc)) for tc in emptied)
        drop_offsets = len(emptied) == len(g.topics)
        drop_group = drop_offsets and g.group_children == {"offsets"}
        if drop_offsets:
            ops.append(Delete(_offsets_path(gc)))
        if drop_group:
            ops.append(Delete(_group_path(gc)))
        if not await self._multi(group, g, ops):
            return len(keys)
        for key in keys:
            g.offsets.pop(key, None)
            del g.versions[key]
        for tc, gone in removed.items():
            g.topics[tc] -= gone
        for tc in emptied:
            del g.topics[tc]
        if drop_group:
            g.group_children = None
        elif drop_offsets and g.group_children is not None:
            g.group_children.discard("offsets")
        return len(keys)
