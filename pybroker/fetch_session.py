"""Incremental fetch sessions (KIP-227): the broker's cache of fetchers' partition sets.  After
a full answer that opens a session, a fetch names only the partitions whose parameters changed
and is answered only the partitions with news (Kafka's CachedPartition.maybeUpdateResponseData).
Epochs: -1 sessionless, 0 a new session, else the session's next epoch
(INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_ID_NOT_FOUND).  The cache holds
max.incremental.fetch.session.cache.slots sessions and evicts as Kafka's
FetchSessionCache.tryEvict.  Nothing here awaits: the Fetch handler owns the I/O.  Epochs and
eviction: docs/internals.md ("pybroker/fetch_session.py").
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTION_MS = 120_000
INT32_MAX = 2**31 - 1

# error codes this module answers (pybroker.errors is below it in the layers, but the
# numbers are Kafka's and fixed)
NONE = 0
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
FETCH_SESSION_TOPIC_ID_ERROR = 106


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == INT32_MAX else epoch + 1


@dataclass(slots=True)
class FetchPartition:
    """One partition of a fetch: what the fetcher asked for and, in a session, what it was
    last sent.  ``key`` is (topic name, partition) or, with topic ids, (topic id, partition)."""

    key: Hashable
    topic: str | None  # None: a topic id the broker does not know (resolved again each read)
    topic_id: object
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1
    high_watermark: int = -1  # as last sent (sessions only)
    sent_log_start_offset: int = -1
    # sessions only: the partition's state when an idle read of it was last answered (see
    # the Fetch handler); None after the fetcher changes its parameters
    idle_stamp: tuple | None = None
    order: int = 0  # sessions only: its place in the session's answer order (ascending)

    def update_request(self, req: FetchPartition) -> None:
        self.idle_stamp = None
        self.topic = req.topic
        self.fetch_offset = req.fetch_offset
        self.partition_max_bytes = req.partition_max_bytes
        self.current_leader_epoch = req.current_leader_epoch
        self.last_fetched_epoch = req.last_fetched_epoch
        self.log_start_offset = req.log_start_offset

    def must_respond(self, entry: dict, update: bool) -> bool:
        """Whether an incremental answer must include this partition's ``entry`` (and, with
        ``update``, remember what it tells the fetcher)."""
        must = bool(entry.get("records")) or entry.get("diverging_epoch") is not None
        if entry.get("preferred_read_replica", -1) >= 0:
            must = True
        if self.high_watermark != entry["high_watermark"]:
            must = True
            if update:
                self.high_watermark = entry["high_watermark"]
        if self.sent_log_start_offset != entry["log_start_offset"]:
            must = True
            if update:
                self.sent_log_start_offset = entry["log_start_offset"]
        if entry["error_code"] != NONE:
            # always sent; and sent again once the error is gone
            must = True
            if update:
                self.high_watermark = -1
        return must


@dataclass(eq=False)
class FetchSession:
    id: int
    privileged: bool
    uses_topic_ids: bool
    partitions: dict[Hashable, FetchPartition]  # in answer order
    creation_ms: int
    last_used_ms: int
    epoch: int
    cached_size: int = -1
    # the keys of partitions without an idle stamp (read on every round), kept with the
    # stamps, so that a round may look at only those and at what changed (Fetch handler)
    unstamped: set = field(default_factory=set)
    next_order: int = 0
    # the Fetch handler's own state for a follower's session (handlers/_follower_rounds.py)
    follower: object = None

    def __post_init__(self) -> None:
        for p in self.partitions.values():
            self.place_last(p)
            if p.idle_stamp is None:
                self.unstamped.add(p.key)

    def place_last(self, p: FetchPartition) -> None:
        self.next_order += 1
        p.order = self.next_order

    def update(self, fetch_data: Iterable[FetchPartition], forgotten: Iterable[Hashable]) -> None:
        for req in fetch_data:
            cached = self.partitions.get(req.key)
            if cached is None:
                self.partitions[req.key] = req
                self.place_last(req)
            else:
                cached.update_request(req)
            self.unstamped.add(req.key)
        for key in forgotten:
            self.partitions.pop(key, None)
            self.unstamped.discard(key)


@dataclass
class FetchContext:
    """What one Fetch request reads and how its answer is shaped.

    ``partitions``: the partitions to read, in answer order.  After the reads, ``respond``
    turns {key: partition entry} into (top-level error, session id, [(FetchPartition, entry)])
    and updates the session."""

    cache: FetchSessionCache
    partitions: list[FetchPartition] = field(default_factory=list)
    error: int = NONE
    session: FetchSession | None = None  # incremental
    create: bool = False  # full: try to create a session
    privileged: bool = False
    uses_topic_ids: bool = False
    request_epoch: int = FINAL_EPOCH

    def respond(
        self, entries: dict[Hashable, dict], now_ms: int, stamps: dict | None = None
    ) -> tuple[int, int, list[tuple[FetchPartition, dict]]]:
        """``stamps``: {key: the idle partition's state} for partitions read without records
        or error, remembered in the session (``FetchPartition.idle_stamp``) so the next read
        can skip them while that state holds."""
        if self.error != NONE:
            return self.error, INVALID_SESSION_ID, []
        if self.session is not None:
            return self._incremental(entries, stamps or {})
        if len(entries) == len(self.partitions):  # each named once: one entry each
            answered = [(p, entries[p.key]) for p in self.partitions]
        else:
            answered = []
            seen = set()
            for p in self.partitions:  # a partition named twice is answered once (Kafka's map)
                if p.key in entries and p.key not in seen:
                    seen.add(p.key)
                    answered.append((p, entries[p.key]))
        session_id = INVALID_SESSION_ID
        if self.create:
            for p, entry in answered:
                p.high_watermark = entry["high_watermark"] if entry["error_code"] == NONE else -1
                p.sent_log_start_offset = entry["log_start_offset"]
                p.idle_stamp = (stamps or {}).get(p.key)
            session_id = self.cache.maybe_create(
                now_ms,
                self.privileged,
                self.uses_topic_ids,
                {p.key: p for p, _ in answered},
            )
        return NONE, session_id, answered

    def _incremental(self, entries: dict[Hashable, dict], stamps: dict) -> tuple[int, int, list]:
        s = self.session
        assert s is not None
        if s.epoch != next_epoch(self.request_epoch):
            # another request of this session came in while this one waited
            return INVALID_FETCH_SESSION_EPOCH, s.id, []
        answered = []
        # the read partitions in the session's order (the others were skipped: idle as when
        # last answered), without a pass over the whole session
        read = [
            (cached, entry)
            for key, entry in entries.items()
            if (cached := s.partitions.get(key)) is not None
        ]
        read.sort(key=_by_order)
        unstamped = s.unstamped
        for cached, entry in read:
            key = cached.key
            stamp = cached.idle_stamp = stamps.get(key)
            if stamp is None:
                unstamped.add(key)
            else:
                unstamped.discard(key)
            if cached.must_respond(entry, True):
                answered.append((cached, entry))
                del s.partitions[key]  # to the end of the session's order
                s.partitions[key] = cached
                s.place_last(cached)
        return NONE, s.id, answered


def _by_order(item: tuple[FetchPartition, dict]) -> int:
    return item[0].order


class FetchSessionCache:
    """The broker's fetch sessions (one owner: the Fetch handler, on the event loop)."""

    def __init__(self, max_entries: int, eviction_ms: int = EVICTION_MS) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0

    def __len__(self) -> int:
        return len(self.sessions)

    @property
    def total_partitions(self) -> int:
        return sum(max(s.cached_size, 0) for s in self.sessions.values())

    def new_context(
        self,
        session_id: int,
        epoch: int,
        fetch_data: list[FetchPartition],
        forgotten: list[Hashable],
        *,
        privileged: bool,
        uses_topic_ids: bool,
        now_ms: int,
    ) -> FetchContext:
        """Kafka's FetchManager.newContext."""
        base = {"cache": self, "privileged": privileged, "uses_topic_ids": uses_topic_ids}
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)  # a full request closes the session it names
            return FetchContext(partitions=fetch_data, create=epoch == INITIAL_EPOCH, **base)
        s = self.sessions.get(session_id)
        if s is None:
            return FetchContext(error=FETCH_SESSION_ID_NOT_FOUND, **base)
        if s.epoch != epoch:
            return FetchContext(error=INVALID_FETCH_SESSION_EPOCH, **base)
        if s.uses_topic_ids != uses_topic_ids:
            return FetchContext(error=FETCH_SESSION_TOPIC_ID_ERROR, **base)
        s.update(fetch_data, forgotten)
        if not s.partitions:
            self.remove(s.id)
            return FetchContext(partitions=fetch_data, **base)
        self._touch(s, now_ms)
        s.epoch = next_epoch(s.epoch)
        return FetchContext(
            partitions=list(s.partitions.values()), session=s, request_epoch=epoch, **base
        )

    def maybe_create(
        self,
        now_ms: int,
        privileged: bool,
        uses_topic_ids: bool,
        partitions: dict[Hashable, FetchPartition],
    ) -> int:
        if len(self.sessions) >= self.max_entries and not self._try_evict(
            privileged, len(partitions), now_ms
        ):
            return INVALID_SESSION_ID
        if self.max_entries <= 0:
            return INVALID_SESSION_ID
        sid = INVALID_SESSION_ID
        while sid == INVALID_SESSION_ID or sid in self.sessions:
            sid = random.randint(1, INT32_MAX - 1)
        s = FetchSession(
            sid, privileged, uses_topic_ids, partitions, now_ms, now_ms, next_epoch(INITIAL_EPOCH)
        )
        self.sessions[sid] = s
        self._touch(s, now_ms)
        return sid

    def remove(self, session_id: int) -> FetchSession | None:
        return self.sessions.pop(session_id, None)

    def _touch(self, s: FetchSession, now_ms: int) -> None:
        s.last_used_ms = now_ms
        s.cached_size = len(s.partitions)

    def _evictable(self, s: FetchSession, by_privileged: bool) -> bool:
        # decided when the session was last touched, as Kafka's evictable maps are
        aged = s.last_used_ms - s.creation_ms > self.eviction_ms
        return aged or (by_privileged and not s.privileged)

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        if not self.sessions:
            return False
        lru = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - lru.last_used_ms > self.eviction_ms:
            self.remove(lru.id)
            self.evictions += 1
            return True
        candidates = [s for s in self.sessions.values() if self._evictable(s, privileged)]
        if not candidates:
            return False
        least = min(candidates, key=lambda s: (s.privileged, s.cached_size, s.id))
        if (privileged, size, 0) < (least.privileged, least.cached_size, least.id):
            return False
        self.remove(least.id)
        self.evictions += 1
        return True
