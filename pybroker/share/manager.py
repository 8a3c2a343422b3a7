"""The share-partitions this broker leads and the share sessions of its share consumers: Kafka's
SharePartitionManager and DelayedShareFetch, as the asyncio shell around share/partition.py.

The event loop owns every SharePartition; a fetch or an acknowledgement applies to it without
awaiting, so each is atomic.  A share-partition is loaded from its stored state on first use
and used only while this broker leads the partition in the leader epoch it was loaded in.
State changes are written by the partition's writer task (group commit, compare-and-set); an
acknowledgement is answered after a write that includes it, and a failed write drops the
share-partition (records may be delivered again, never lost).  A fetch with nothing to
acquire waits up to max_wait_ms.  Loading, writes and fetching: docs/internals.md
("pybroker/share/manager.py").
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pybroker.clock import Clock
from pybroker.coord.group.group_configs import (
    SHARE_AUTO_OFFSET_RESET,
    SHARE_DELIVERY_COUNT_LIMIT,
    SHARE_ISOLATION_LEVEL,
    SHARE_PARTITION_MAX_RECORD_LOCKS,
    SHARE_RECORD_LOCK_DURATION_MS,
    SHARE_RENEW_ACKNOWLEDGE_ENABLE,
    AutoOffsetReset,
    GroupConfigCache,
)
from pybroker.coord.group.share_store import ShareStateStore
from pybroker.coord.metadata.store import BadVersionError, NoNodeError, StoreError
from pybroker.errors import ErrorCode, KafkaError
from pybroker.purgatory import Purgatory
from pybroker.replication.manager import consumer_key
from pybroker.share.partition import (
    AcknowledgeError,
    Acquired,
    Limits,
    SharePartition,
)
from pybroker.share.session import ShareSessionCache
from pybroker.wire.records import scan_batches

log = logging.getLogger("pybroker.share")

# the most read from one partition's log at a time (the read repeats while records are wanted)
READ_CHUNK_BYTES = 256 * 1024
MAX_READS_PER_PARTITION = 8


def share_key(group_id: str, topic: str, partition: int) -> tuple:
    """Purgatory key notified when a share-partition may have records to acquire again."""
    return ("share", group_id, topic, partition)


@dataclass(frozen=True)
class ShareDefaults:
    """The group.share.* broker configs a group's share.* configs override."""

    record_lock_duration_ms: int = 30000
    delivery_count_limit: int = 5
    partition_max_record_locks: int = 2000
    auto_offset_reset: str = "latest"
    isolation_level: str = "read_uncommitted"


@dataclass(frozen=True)
class ShareSettings:
    limits: Limits
    auto_offset_reset: AutoOffsetReset
    read_committed: bool


def settings_from(configs: dict[str, str], d: ShareDefaults) -> ShareSettings:
    def num(key: str, default: int) -> int:
        try:
            return int(configs.get(key, default))
        except ValueError:
            return default

    try:
        reset = AutoOffsetReset.parse(configs.get(SHARE_AUTO_OFFSET_RESET, d.auto_offset_reset))
    except ValueError:
        reset = AutoOffsetReset("latest")
    return ShareSettings(
        Limits(
            max_delivery_count=num(SHARE_DELIVERY_COUNT_LIMIT, d.delivery_count_limit),
            lock_duration_ms=num(SHARE_RECORD_LOCK_DURATION_MS, d.record_lock_duration_ms),
            max_in_flight=num(SHARE_PARTITION_MAX_RECORD_LOCKS, d.partition_max_record_locks),
            renew_enabled=configs.get(SHARE_RENEW_ACKNOWLEDGE_ENABLE, "true").lower() == "true",
        ),
        reset,
        configs.get(SHARE_ISOLATION_LEVEL, d.isolation_level) == "read_committed",
    )


@dataclass
class _Entry:
    group_id: str
    topic: str
    topic_id: Any
    partition: int
    sp: SharePartition
    version: int  # the state znode's version we last read or wrote
    written: int = 0  # sp.dirty as of the last successful write
    writer: asyncio.Task | None = None
    waiters: list[tuple[int, asyncio.Future]] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None
    dead: bool = False
    lock_timeouts: int = 0  # records whose acquisition lock ran out (AcquisitionLockTimeout)


@dataclass
class PartitionFetch:
    """One partition's part of a ShareFetch answer."""

    error: int = ErrorCode.NONE
    message: str | None = None
    records: bytes = b""
    acquired: list[Acquired] = field(default_factory=list)
    leader: tuple[int, int] | None = None  # (leader id, epoch), with NOT_LEADER_OR_FOLLOWER


class SharePartitionManager:
    def __init__(
        self,
        store: ShareStateStore,
        replicas: Any,
        purgatory: Purgatory,
        clock: Clock,
        configs: GroupConfigCache,
        defaults: Callable[[], ShareDefaults],
        *,
        max_sessions: int = 2000,
    ) -> None:
        self.store = store
        self.replicas = replicas
        self.purgatory = purgatory
        self.clock = clock
        self.configs = configs
        self.defaults = defaults
        self.sessions = ShareSessionCache(max_sessions)
        self.partitions: dict[tuple[str, str, int], _Entry] = {}
        self._loading: dict[tuple[str, str, int], asyncio.Future] = {}
        self._tasks: set[asyncio.Task] = set()
        self.stats: dict[str, float] = {
            "acquired": 0, "accepted": 0, "released": 0, "rejected": 0, "renewed": 0,
            "state_writes": 0, "state_write_seconds": 0.0,
        }  # fmt: skip

    def _now(self) -> int:
        return int(self.clock.monotonic() * 1000)

    async def settings(self, group_id: str) -> ShareSettings:
        return settings_from(await self.configs.get(group_id), self.defaults())

    def settings_now(self, group_id: str) -> ShareSettings:
        return settings_from(self.configs.cached(group_id) or {}, self.defaults())

    # -- share-partitions -------------------------------------------------------------------
    def _leader(self, topic: str, partition: int) -> Any:
        return self.replicas.leader_replica(topic, partition)

    async def partition(self, group_id: str, topic: str, topic_id: Any, partition: int) -> _Entry:
        """The share-partition, loaded if needed.  Raises KafkaError."""
        key = (group_id, topic, partition)
        while True:
            replica = self._leader(topic, partition)
            entry = self.partitions.get(key)
            if entry is not None and not entry.dead:
                if entry.sp.leader_epoch == replica.leader_epoch and entry.topic_id == topic_id:
                    return entry
                self._drop(entry, "the leader epoch or topic changed")
            fut = self._loading.get(key)
            if fut is None:
                fut = asyncio.ensure_future(self._load(group_id, topic, topic_id, partition))
                self._loading[key] = fut
                fut.add_done_callback(lambda _: self._loading.pop(key, None))
            await asyncio.shield(fut)

    async def _load(self, group_id: str, topic: str, topic_id: Any, partition: int) -> None:
        replica = self._leader(topic, partition)
        settings = await self.settings(group_id)
        try:
            got = await self.store.read(group_id, topic_id, partition)
        except (StoreError, ValueError) as e:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e)) from e
        if got is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"Read on uninitialized share partition {group_id}:{topic}-{partition}",
            )
        state, version = got
        if state.leader_epoch > replica.leader_epoch:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "a newer leader loaded it")
        # the replica may have changed while we read: check again
        replica = self._leader(topic, partition)
        log_ = replica.log
        start = state.start_offset
        if start < 0:
            start = self._reset_offset(log_, settings.auto_offset_reset)
        start = max(start, log_.log_start_offset)
        sp = SharePartition.load(state, start, replica.leader_epoch)
        entry = _Entry(group_id, topic, topic_id, partition, sp, version)
        try:  # the load write: our leader epoch and the resolved start offset
            entry.version = await self.store.write(
                group_id, topic_id, partition, sp.snapshot(), version
            )
        except (BadVersionError, NoNodeError) as e:
            raise KafkaError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, "the share-partition state changed meanwhile"
            ) from e
        except StoreError as e:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e)) from e
        entry.written = sp.dirty
        old = self.partitions.get((group_id, topic, partition))
        if old is not None:
            self._drop(old, "loaded again")
        self.partitions[(group_id, topic, partition)] = entry
        log.info(
            "share-partition %s:%s-%d loaded at start offset %d (leader epoch %d)",
            group_id,
            topic,
            partition,
            sp.start_offset,
            sp.leader_epoch,
        )

    def _reset_offset(self, log_: Any, reset: AutoOffsetReset) -> int:
        if reset.kind == "earliest":
            return log_.log_start_offset
        if reset.kind == "by_duration":
            found = log_.offset_for_timestamp(self.clock.time_ms() - reset.duration_ms)
            if found is not None:
                return found[0]
        return log_.high_watermark

    def _drop(self, entry: _Entry, why: str) -> None:
        if entry.dead:
            return
        entry.dead = True
        if self.partitions.get((entry.group_id, entry.topic, entry.partition)) is entry:
            del self.partitions[(entry.group_id, entry.topic, entry.partition)]
        if entry.timer is not None:
            entry.timer.cancel()
        for _, fut in entry.waiters:
            if not fut.done():
                fut.set_exception(KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, why))
        entry.waiters.clear()
        log.info(
            "share-partition %s:%s-%d dropped: %s", entry.group_id, entry.topic, entry.partition,
            why,
        )  # fmt: skip

    # -- writing ----------------------------------------------------------------------------
    def _changed(self, entry: _Entry) -> asyncio.Future:
        """After a change: the future of the write that will include it; timers re-armed and
        parked fetches of the group woken."""
        self._schedule(entry)
        self.purgatory.notify(share_key(entry.group_id, entry.topic, entry.partition))
        fut = asyncio.get_running_loop().create_future()
        if entry.written >= entry.sp.dirty:
            fut.set_result(None)
            return fut
        entry.waiters.append((entry.sp.dirty, fut))
        if entry.writer is None or entry.writer.done():
            entry.writer = asyncio.ensure_future(self._write(entry))
        return fut

    async def _write(self, entry: _Entry) -> None:
        while not entry.dead and entry.written < entry.sp.dirty:
            seq = entry.sp.dirty
            t0 = self.clock.monotonic()
            try:
                entry.version = await self.store.write(
                    entry.group_id, entry.topic_id, entry.partition, entry.sp.snapshot(),
                    entry.version,
                )  # fmt: skip
            except (BadVersionError, NoNodeError):
                self._fail(entry, ErrorCode.NOT_LEADER_OR_FOLLOWER, "state written by another")
                return
            except StoreError as e:
                self._fail(entry, ErrorCode.COORDINATOR_NOT_AVAILABLE, f"state not written: {e}")
                return
            entry.written = seq
            self.stats["state_writes"] += 1
            self.stats["state_write_seconds"] += self.clock.monotonic() - t0
            keep = []
            for s, fut in entry.waiters:
                if s <= seq:
                    if not fut.done():
                        fut.set_result(None)
                else:
                    keep.append((s, fut))
            entry.waiters = keep

    def _fail(self, entry: _Entry, code: int, why: str) -> None:
        waiters, entry.waiters = entry.waiters, []
        self._drop(entry, why)
        for _, fut in waiters:
            if not fut.done():
                fut.set_exception(KafkaError(code, why))

    def _schedule(self, entry: _Entry) -> None:
        if entry.timer is not None:
            entry.timer.cancel()
            entry.timer = None
        deadline = entry.sp.next_deadline()
        if deadline is None or entry.dead:
            return
        delay = max(deadline - self._now(), 0) / 1000.0
        entry.timer = asyncio.get_running_loop().call_later(delay, self._expire, entry)

    def _expire(self, entry: _Entry) -> None:
        entry.timer = None
        if entry.dead:
            return
        try:
            replica = self._leader(entry.topic, entry.partition)
        except KafkaError:
            self._drop(entry, "no longer the leader")
            return
        if replica.leader_epoch != entry.sp.leader_epoch:
            self._drop(entry, "the leader epoch changed")
            return
        limits = self.settings_now(entry.group_id).limits
        expired = entry.sp.expire(self._now(), limits)
        if expired:
            entry.lock_timeouts += expired
            self._background(self._changed(entry))
        else:
            self._schedule(entry)

    def _background(self, fut: asyncio.Future) -> None:
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())

    # -- acknowledging ----------------------------------------------------------------------
    async def apply_acknowledgements(
        self,
        group_id: str,
        member_id: str,
        topic: str,
        topic_id: Any,
        partition: int,
        acks: list[tuple[int, int, list[int]]],
    ) -> tuple[int, str | None, asyncio.Future | None]:
        """Apply one partition's acknowledgement batches to the share-partition now (a fetch
        that follows sees them, as in Kafka): (error code, message, the future of the write
        that stores them)."""
        try:
            entry = await self.partition(group_id, topic, topic_id, partition)
            settings = await self.settings(group_id)
            entry.sp.acknowledge(member_id, acks, settings.limits, self._now())
        except AcknowledgeError as e:
            return e.code, e.message, None
        except KafkaError as e:
            return e.code, e.message, None
        self._count(acks)
        return ErrorCode.NONE, None, self._changed(entry)

    async def acknowledge(
        self,
        group_id: str,
        member_id: str,
        topic: str,
        topic_id: Any,
        partition: int,
        acks: list[tuple[int, int, list[int]]],
    ) -> tuple[int, str | None]:
        """Apply one partition's acknowledgement batches and wait until they are stored:
        (error code, message)."""
        code, message, stored = await self.apply_acknowledgements(
            group_id, member_id, topic, topic_id, partition, acks
        )
        return await settle(code, message, stored)

    def _count(self, acks: list[tuple[int, int, list[int]]]) -> None:
        names = {1: "accepted", 2: "released", 3: "rejected", 4: "renewed"}
        for first, last, types in acks:
            if len(types) == 1:
                name = names.get(types[0])
                if name:
                    self.stats[name] += last - first + 1
            else:
                for t in types:
                    name = names.get(t)
                    if name:
                        self.stats[name] += 1

    async def release(self, group_id: str, member_id: str, keys: Iterable[tuple]) -> None:
        """The member's session ended: its Acquired records in these partitions go back."""
        waits = []
        for topic_id, topic, partition in keys:
            entry = self.partitions.get((group_id, topic, partition))
            if entry is None or entry.dead or entry.topic_id != topic_id:
                continue
            limits = self.settings_now(group_id).limits
            if entry.sp.release_member(member_id, limits):
                waits.append(self._changed(entry))
        for w in waits:
            try:
                await w
            except KafkaError as e:
                log.info("releasing %s's records of group %s: %s", member_id, group_id, e)

    def disconnected(self, connection: Hashable) -> None:
        """A client connection closed: the share sessions it opened end, their members'
        records are released (Kafka's onMemberLeave)."""
        for session in self.sessions.disconnected(connection):
            task = asyncio.ensure_future(
                self.release(session.group_id, session.member_id, session.partitions.values())
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    # -- fetching ---------------------------------------------------------------------------
    async def fetch(
        self,
        group_id: str,
        member_id: str,
        keys: list[tuple],
        *,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        max_records: int,
        batch_size: int,
        record_limit: bool,
        rotate: int = 0,
        live: Callable[[], bool] = lambda: True,
    ) -> dict[tuple, PartitionFetch]:
        """Acquire records for the member from ``keys`` ((topic id, topic, partition)); the
        long poll of the module docstring.  ``min_bytes`` is taken as 1: acquired records are
        answered at once (Kafka's DelayedShareFetch checks min_bytes before acquiring, which
        comes to the same for the clients' default fetch.min.bytes=1).  ``live()``: whether
        the request's share session still stands; once it ended (its connection closed, the
        member's records released) nothing more is acquired: the answer has nobody to go to,
        and records acquired for it would stay locked until their lock ran out."""
        if keys and rotate:
            k = rotate % len(keys)
            keys = keys[k:] + keys[:k]
        deadline = self.clock.monotonic() + max(max_wait_ms, 0) / 1000.0
        settings = await self.settings(group_id)
        while True:
            out: dict[tuple, PartitionFetch] = {}
            got_bytes = 0
            records_left, bytes_left = max_records, max_bytes
            errors = False
            for key in keys:
                pf = PartitionFetch()
                out[key] = pf
                if records_left <= 0 or bytes_left <= 0 or not live():
                    continue
                try:
                    await self._fetch_one(
                        group_id, member_id, key, pf, settings,
                        records_left, bytes_left, batch_size, record_limit, live,
                    )  # fmt: skip
                except KafkaError as e:
                    pf.error, pf.message = e.code, e.message
                    errors = True
                n = sum(a.last_offset - a.first_offset + 1 for a in pf.acquired)
                records_left -= n
                bytes_left -= len(pf.records)
                got_bytes += len(pf.records)
            # (records acquired are answered at once: holding them back for min_bytes would
            # lock them in a response never sent)
            if got_bytes > 0 or errors:
                return out
            left = deadline - self.clock.monotonic()
            if left <= 0 or not keys or not live():
                return out
            waits = [k for _, topic, p in keys for k in self._wake_keys(group_id, topic, p)]
            await self.purgatory.wait_any(waits, left)

    def _wake_keys(self, group_id: str, topic: str, partition: int) -> list:
        return [consumer_key(topic, partition), share_key(group_id, topic, partition)]

    async def _fetch_one(
        self,
        group_id: str,
        member_id: str,
        key: tuple,
        pf: PartitionFetch,
        settings: ShareSettings,
        max_records: int,
        max_bytes: int,
        batch_size: int,
        record_limit: bool,
        live: Callable[[], bool],
    ) -> None:
        topic_id, topic, partition = key
        entry = await self.partition(group_id, topic, topic_id, partition)
        if not live():  # the session ended while the share-partition loaded
            return
        replica = self._leader(topic, partition)
        log_ = replica.log
        sp = entry.sp
        if log_.log_start_offset > sp.start_offset:
            sp.move_log_start(log_.log_start_offset)
            self._background(self._changed(entry))
        upper = log_.last_stable_offset if settings.read_committed else log_.high_watermark
        limits = settings.limits
        chunks: list[bytes] = []
        acquired: list[Acquired] = []
        for _ in range(MAX_READS_PER_PARTITION):
            if max_records <= 0 or max_bytes <= 0 or not sp.can_acquire(upper, limits):
                break
            offset = sp.fetch_offset()
            if offset >= upper:
                break
            data, headers = self._read(log_, offset, min(max_bytes, READ_CHUNK_BYTES), upper)
            if not headers:
                break
            if headers[0].base_offset > offset:
                sp.archive_missing(offset, headers[0].base_offset)
            aborted = (
                _aborted_batches(log_, headers, offset, upper) if settings.read_committed else []
            )
            got = sp.acquire(
                member_id,
                [(h.base_offset, h.last_offset) for h in headers],
                max_records=max_records,
                batch_size=batch_size,
                record_limit=record_limit,
                limits=limits,
                now=self._now(),
            )
            if aborted and got:
                got = _without(got, aborted)
                for first, last in aborted:
                    sp.archive_range(first, last)
            if not got:
                if sp.dirty > entry.written:
                    continue  # (archived what was read: read on)
                break
            acquired += got
            sliced = _slice(data, headers, got)
            chunks.append(sliced)
            max_records -= sum(a.last_offset - a.first_offset + 1 for a in got)
            max_bytes -= len(sliced)
        if acquired:
            self._schedule(entry)
            self.stats["acquired"] += sum(a.last_offset - a.first_offset + 1 for a in acquired)
            pf.acquired = _coalesce(acquired)
            pf.records = b"".join(chunks)
        if sp.dirty > entry.written:
            self._background(self._changed(entry))

    def _read(self, log_: Any, offset: int, max_bytes: int, upper: int) -> tuple[bytes, list]:
        try:
            region = log_.read(offset, max_bytes, min_one_batch=True, max_offset=upper)
        except OSError as e:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, str(e)) from e
        if region is None or not region.size:
            return b"", []
        data = os.pread(region.file.fileno(), region.size, region.position)
        headers = [h for h in scan_batches(data) if h.last_offset < upper]
        return data, headers

    # -- reading, for operators -------------------------------------------------------------
    def views(self) -> list[dict]:
        """The share-partitions this broker leads now, for the console and metrics."""
        out = []
        for (group_id, topic, partition), e in sorted(self.partitions.items()):
            if e.dead:
                continue
            counts = e.sp.counts()
            out.append(
                {
                    "group": group_id,
                    "topic": topic,
                    "partition": partition,
                    "start_offset": e.sp.start_offset,
                    "end_offset": e.sp.end_offset,
                    "in_flight": e.sp.in_flight(),
                    "batches": len(e.sp.runs),
                    "lock_timeouts": e.lock_timeouts,
                    **counts,
                }
            )
        return out

    async def stop(self) -> None:
        for e in list(self.partitions.values()):
            if e.timer is not None:
                e.timer.cancel()
            if e.writer is not None and not e.writer.done():
                try:
                    await asyncio.wait_for(asyncio.shield(e.writer), 2.0)
                except (TimeoutError, Exception):
                    pass
        for t in list(self._tasks):
            t.cancel()


async def settle(
    code: int, message: str | None, stored: asyncio.Future | None
) -> tuple[int, str | None]:
    """The final answer of an acknowledgement once its write is done."""
    if stored is None:
        return code, message
    try:
        await stored
    except KafkaError as e:
        return e.code, e.message
    return code, message


def _slice(data: bytes, headers: list, acquired: list[Acquired]) -> bytes:
    """The batches of ``data`` that hold acquired records (Kafka's maybeSliceFetchRecords)."""
    lo = acquired[0].first_offset
    hi = max(a.last_offset for a in acquired)
    keep = [h for h in headers if h.last_offset >= lo and h.base_offset <= hi]
    if not keep:
        return b""
    start = keep[0].position
    end = keep[-1].position + keep[-1].size
    return data[start:end]


def _coalesce(acquired: list[Acquired]) -> list[Acquired]:
    return sorted(acquired, key=lambda a: a.first_offset)


def _aborted_batches(log_: Any, headers: list, offset: int, upper: int) -> list[tuple[int, int]]:
    """read_committed: the (first, last) of the batches read that belong to aborted
    transactions (Kafka's fetchAbortedTransactionRecordBatches), never delivered."""
    aborted = log_.collect_aborted_transactions(offset, upper)
    if not aborted:
        return []
    starts = sorted((a.first_offset, a.producer_id) for a in aborted)
    open_pids: set[int] = set()
    out = []
    k = 0
    for h in headers:
        while k < len(starts) and starts[k][0] <= h.last_offset:
            open_pids.add(starts[k][1])
            k += 1
        if not h.is_transactional or h.producer_id not in open_pids:
            continue
        if h.is_control:
            open_pids.discard(h.producer_id)  # the abort marker ends it
            continue
        out.append((h.base_offset, h.last_offset))
    return out


def _without(got: list[Acquired], cut: list[tuple[int, int]]) -> list[Acquired]:
    """The acquired ranges minus the offsets in ``cut`` (Kafka's
    filterRecordBatchesFromAcquiredRecords)."""
    out = []
    for a in got:
        pieces = [(a.first_offset, a.last_offset)]
        for lo, hi in cut:
            nxt = []
            for f, last in pieces:
                if hi < f or lo > last:
                    nxt.append((f, last))
                    continue
                if f < lo:
                    nxt.append((f, lo - 1))
                if last > hi:
                    nxt.append((hi + 1, last))
            pieces = nxt
        out += [Acquired(f, last, a.delivery_count) for f, last in pieces]
    return out


__all__ = ["PartitionFetch", "SharePartitionManager", "ShareDefaults", "share_key"]
