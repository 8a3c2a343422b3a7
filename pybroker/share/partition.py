"""One share-partition on its leader (KIP-932): Kafka's SharePartition, sans I/O.

A share group consumes a topic partition through its share-partition: the records from the
share-partition start offset (SPSO) up to the end of the in-flight records (SPEO) are
*in flight*, each in one of Kafka's states::

    Available --acquire--> Acquired --Accept--> Acknowledged
        ^                     |  --Reject / Gap--> Archived
        |                     |  --Release, lock timeout, session closed-->
        +---------------------+    Available, or Archived once the delivery count has
                                   reached share.delivery.count.limit

Acquiring a record increments its delivery count and locks it for the member for
share.record.lock.duration.ms (Renew extends the lock).  Records below the SPSO are done; the
SPSO moves over leading Acknowledged/Archived records.  At most share.partition.max.record.locks
records are in flight (SPEO - SPSO + 1): a full window acquires only records that are already
in flight and Available.

Representation and durability: docs/internals.md ("pybroker/share/partition.py").
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pybroker.coord.group.share_store import (
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    PartitionState,
)
from pybroker.errors import ErrorCode

GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
TERMINAL = (ACKNOWLEDGED, ARCHIVED)
EMPTY_MEMBER = ""


class Run:
    __slots__ = ("first", "last", "state", "dc", "member", "deadline")

    def __init__(
        self,
        first: int,
        last: int,
        state: int,
        dc: int,
        member: str = EMPTY_MEMBER,
        deadline: int = 0,
    ) -> None:
        self.first, self.last, self.state, self.dc = first, last, state, dc
        self.member, self.deadline = member, deadline

    def copy(self, first: int, last: int) -> Run:
        return Run(first, last, self.state, self.dc, self.member, self.deadline)

    def same(self, other: Run) -> bool:
        return (self.state, self.dc, self.member, self.deadline) == (
            other.state,
            other.dc,
            other.member,
            other.deadline,
        )

    def __repr__(self) -> str:
        return f"Run({self.first}-{self.last} s={self.state} dc={self.dc} m={self.member!r})"


@dataclass(frozen=True)
class Acquired:
    first_offset: int
    last_offset: int
    delivery_count: int


class AcknowledgeError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Limits:
    """The group's effective settings (share.* group configs over group.share.* defaults)."""

    max_delivery_count: int = 5
    lock_duration_ms: int = 30000
    max_in_flight: int = 2000
    renew_enabled: bool = True


class SharePartition:
    def __init__(self, start_offset: int, state_epoch: int, leader_epoch: int) -> None:
        self.start_offset = start_offset
        self.state_epoch = state_epoch
        self.leader_epoch = leader_epoch
        self.runs: list[Run] = []
        self._firsts: list[int] = []
        self.dirty = 0  # bumped on every change a snapshot shows

    @classmethod
    def load(cls, state: PartitionState, start_offset: int, leader_epoch: int) -> SharePartition:
        """From the stored state, with the SPSO resolved (share.auto.offset.reset for -1).
        Offsets between stored batches were never delivered: Available, delivery count 0."""
        sp = cls(start_offset, state.state_epoch, leader_epoch)
        runs: list[Run] = []
        nxt = start_offset
        for first, last, st, dc in sorted(state.batches):
            first = max(first, nxt)
            if last < first:
                continue
            if first > nxt:
                runs.append(Run(nxt, first - 1, AVAILABLE, 0))
            runs.append(Run(first, last, AVAILABLE if st == ACQUIRED else st, max(dc, 0)))
            nxt = last + 1
        sp.runs = runs
        sp._reindex()
        sp._advance_start()
        return sp

    # -- reading ----------------------------------------------------------------------------
    @property
    def end_offset(self) -> int:
        """One past the last in-flight record (the next new record to acquire)."""
        return self.runs[-1].last + 1 if self.runs else self.start_offset

    def in_flight(self) -> int:
        return self.end_offset - self.start_offset

    def fetch_offset(self) -> int:
        """Where the next read of the log starts: the first Available in-flight record, else
        the first record not in flight yet."""
        for r in self.runs:
            if r.state == AVAILABLE:
                return r.first
        return self.end_offset

    def can_acquire(self, high_watermark: int, limits: Limits) -> bool:
        """Whether a fetch could acquire anything now (the long poll waits otherwise)."""
        if any(r.state == AVAILABLE and r.first < high_watermark for r in self.runs):
            return True
        return self.end_offset < high_watermark and self.in_flight() < limits.max_in_flight

    def next_deadline(self) -> int | None:
        return min((r.deadline for r in self.runs if r.state == ACQUIRED), default=None)

    def counts(self) -> dict[str, int]:
        """Records per state among the in-flight ones (the console's and metrics' view)."""
        out = {"available": 0, "acquired": 0, "acknowledged": 0, "archived": 0}
        names = {AVAILABLE: "available", ACQUIRED: "acquired", ACKNOWLEDGED: "acknowledged"}
        for r in self.runs:
            out[names.get(r.state, "archived")] += r.last - r.first + 1
        return out

    def terminal_count(self) -> int:
        return sum(r.last - r.first + 1 for r in self.runs if r.state in TERMINAL)

    def snapshot(self) -> PartitionState:
        batches: list[tuple[int, int, int, int]] = []
        for r in self.runs:
            st, dc = (AVAILABLE, r.dc - 1) if r.state == ACQUIRED else (r.state, r.dc)
            if st == AVAILABLE and dc <= 0:
                continue
            if batches and batches[-1][1] + 1 == r.first and batches[-1][2:] == (st, dc):
                batches[-1] = (batches[-1][0], r.last, st, dc)
            else:
                batches.append((r.first, r.last, st, dc))
        return PartitionState(self.state_epoch, self.start_offset, self.leader_epoch, batches)

    # -- acquiring --------------------------------------------------------------------------
    def acquire(
        self,
        member: str,
        batches: Sequence[tuple[int, int]],
        *,
        max_records: int,
        batch_size: int,
        record_limit: bool,
        limits: Limits,
        now: int,
    ) -> list[Acquired]:
        """Acquire for ``member`` from the log batches read at ``fetch_offset()`` (their
        (base offset, last offset), all below the high watermark).  Returns the acquired
        ranges with their delivery counts, in offset order."""
        if not batches or max_records <= 0:
            return []
        lo, hi = batches[0][0], batches[-1][1]
        deadline = now + limits.lock_duration_ms
        out: list[Acquired] = []
        count = 0
        # 1. Available in-flight records the read covers
        i = self._index_at(max(lo, self.start_offset))
        while i < len(self.runs) and count < max_records:
            r = self.runs[i]
            if r.first > hi:
                break
            if r.state != AVAILABLE or r.last < lo:
                i += 1
                continue
            first = max(r.first, lo)
            last = min(r.last, hi)
            if record_limit:
                last = min(last, first + (max_records - count) - 1)
            i = self._isolate(i, first, last)
            r = self.runs[i]
            r.state, r.dc, r.member, r.deadline = ACQUIRED, r.dc + 1, member, deadline
            out.append(Acquired(r.first, r.last, r.dc))
            count += r.last - r.first + 1
            i += 1
        # 2. new records past the in-flight ones
        new_first = max(self.end_offset, self.start_offset, lo)
        room = min(max_records - count, limits.max_in_flight - self.in_flight())
        if room > 0 and new_first <= hi:
            out += self._acquire_new(
                member, batches, new_first, room, batch_size, record_limit, deadline
            )
        out.sort(key=lambda a: a.first_offset)
        return out

    def _acquire_new(
        self,
        member: str,
        batches: Sequence[tuple[int, int]],
        first: int,
        room: int,
        batch_size: int,
        record_limit: bool,
        deadline: int,
    ) -> list[Acquired]:
        want_last = first + room - 1
        last = min(want_last, batches[-1][1])
        if not record_limit:  # whole log batches: the batch holding the last one is taken
            for base, blast in batches:
                if base <= last <= blast:
                    last = blast
                    break
        # split into ranges of about batch_size at log batch boundaries (Kafka's createBatches)
        cuts = [first]
        if not record_limit and batch_size > 0 and last - first + 1 > batch_size:
            for base, _ in batches:
                if first < base <= last and base - cuts[-1] >= batch_size:
                    cuts.append(base)
        out = []
        if self.end_offset < first and self.runs:  # (the log moved past in-flight records)
            self.runs.append(Run(self.end_offset, first - 1, ARCHIVED, 0))
        if not self.runs:
            self.start_offset = first
        for k, start in enumerate(cuts):
            end = cuts[k + 1] - 1 if k + 1 < len(cuts) else last
            self.runs.append(Run(start, end, ACQUIRED, 1, member, deadline))
            out.append(Acquired(start, end, 1))
        self._reindex()
        return out

    def archive_missing(self, fetch_offset: int, base_offset: int) -> None:
        """The log read at ``fetch_offset`` began at a later batch: the Available in-flight
        records before it no longer exist (compacted or deleted), as Kafka's
        maybeArchiveStaleBatches."""
        if base_offset > fetch_offset and self._set_range(
            fetch_offset, base_offset - 1, AVAILABLE, ARCHIVED
        ):
            self._advance_start()
            self.dirty += 1

    def archive_range(self, first: int, last: int) -> None:
        """Records that must never be delivered (an aborted transaction's, for
        read_committed): Archived, whoever holds them."""
        changed = self._set_range(first, last, AVAILABLE, ARCHIVED)
        changed = self._set_range(first, last, ACQUIRED, ARCHIVED) or changed
        if changed:
            self._merge()
            self._advance_start()
            self.dirty += 1

    def move_log_start(self, log_start: int) -> None:
        """The log start moved past the SPSO (retention, DeleteRecords): what lies below is
        archived and the SPSO follows (Kafka's updateCacheAndOffsets)."""
        if log_start <= self.start_offset:
            return
        for state in (AVAILABLE, ACQUIRED):
            self._set_range(self.start_offset, log_start - 1, state, ARCHIVED)
        self.start_offset = log_start
        self._trim()
        self.dirty += 1

    # -- acknowledging ----------------------------------------------------------------------
    def acknowledge(
        self,
        member: str,
        acks: Iterable[tuple[int, int, Sequence[int]]],
        limits: Limits,
        now: int,
    ) -> None:
        """Apply (first, last, types) batches from ``member``, all or none (Kafka rolls back a
        partition's batches when one fails).  ``types``: one type for the whole batch, or one
        per offset.  Raises AcknowledgeError (INVALID_RECORD_STATE, INVALID_REQUEST)."""
        plan: list[tuple[int, int, int]] = []  # (first, last, type) per uniform piece
        for first, last, types in acks:
            if last < self.start_offset:
                continue  # already done (Kafka skips them)
            self._check_owned(member, max(first, self.start_offset), last, first)
            if len(types) == 1:
                plan.append((max(first, self.start_offset), last, types[0]))
                continue
            k = 0
            while k < len(types):  # per-offset types, as runs of one type
                j = k
                while j + 1 < len(types) and types[j + 1] == types[k]:
                    j += 1
                lo, hi = max(first + k, self.start_offset), first + j
                if lo <= hi:
                    plan.append((lo, hi, types[k]))
                k = j + 1
        if any(t == RENEW for _, _, t in plan) and not limits.renew_enabled:
            raise AcknowledgeError(
                ErrorCode.INVALID_RECORD_STATE,
                "Renewing acquisition locks is not enabled for the group.",
            )
        changed = False
        for first, last, t in plan:
            if t == RENEW:
                self._each(first, last, lambda r: _renew(r, now + limits.lock_duration_ms))
                continue
            changed = True
            self._each(first, last, lambda r, t=t: _settle(r, t, limits.max_delivery_count))
        if changed:
            self._merge()
            self._advance_start()
            self.dirty += 1

    def _check_owned(self, member: str, first: int, last: int, asked: int) -> None:
        """Kafka's checks: every offset in [first, last] in flight, Acquired, by ``member``."""
        i = self._index_at(first)
        if i >= len(self.runs) or self.runs[i].first > first:
            raise AcknowledgeError(
                ErrorCode.INVALID_RECORD_STATE,
                "Batch record not found. The request batch offsets are not found in the cache.",
            )
        if last >= self.end_offset:
            raise AcknowledgeError(
                ErrorCode.INVALID_REQUEST,
                "Batch record not found. The last offset in request is past acquired records.",
            )
        while i < len(self.runs) and self.runs[i].first <= last:
            r = self.runs[i]
            if r.state != ACQUIRED:
                raise AcknowledgeError(
                    ErrorCode.INVALID_RECORD_STATE,
                    "The batch cannot be acknowledged. The batch is not in the acquired state.",
                )
            if r.member != member:
                raise AcknowledgeError(
                    ErrorCode.INVALID_RECORD_STATE, "Member is not the owner of batch record"
                )
            i += 1

    def release_member(self, member: str, limits: Limits) -> bool:
        """The member's share session ended (ShareFetch epoch -1, or its connection closed):
        its Acquired records become Available again (delivery count kept)."""
        changed = False
        for r in self.runs:
            if r.state == ACQUIRED and r.member == member:
                _settle(r, RELEASE, limits.max_delivery_count)
                changed = True
        if changed:
            self._merge()
            self._advance_start()
            self.dirty += 1
        return changed

    def expire(self, now: int, limits: Limits) -> int:
        """Acquisition locks that ran out: Available again (or Archived at the delivery
        limit).  The number of records whose lock ran out."""
        changed = 0
        for r in self.runs:
            if r.state == ACQUIRED and r.deadline <= now:
                _settle(r, RELEASE, limits.max_delivery_count)
                changed += r.last - r.first + 1
        if changed:
            self._merge()
            self._advance_start()
            self.dirty += 1
        return changed

    # -- run bookkeeping --------------------------------------------------------------------
    def _reindex(self) -> None:
        self._firsts = [r.first for r in self.runs]

    def _index_at(self, offset: int) -> int:
        """Index of the run holding ``offset``, else of the first run after it."""
        i = bisect.bisect_right(self._firsts, offset) - 1
        if i >= 0 and self.runs[i].last >= offset:
            return i
        return i + 1

    def _isolate(self, i: int, first: int, last: int) -> int:
        """Split run i so that [first, last] (within it) is a run of its own; its index."""
        r = self.runs[i]
        if r.first == first and r.last == last:
            return i
        pieces = []
        if r.first < first:
            pieces.append(r.copy(r.first, first - 1))
        mid = r.copy(first, last)
        pieces.append(mid)
        if last < r.last:
            pieces.append(r.copy(last + 1, r.last))
        self.runs[i : i + 1] = pieces
        self._reindex()
        return i + (1 if r.first < first else 0)

    def _each(self, first: int, last: int, fn) -> None:  # type: ignore[no-untyped-def]
        i = self._index_at(first)
        while i < len(self.runs) and self.runs[i].first <= last:
            r = self.runs[i]
            i = self._isolate(i, max(first, r.first), min(last, r.last))
            fn(self.runs[i])
            i += 1

    def _set_range(self, first: int, last: int, from_state: int, to_state: int) -> bool:
        changed = False
        i = self._index_at(first)
        while i < len(self.runs) and self.runs[i].first <= last:
            r = self.runs[i]
            if r.state == from_state:
                i = self._isolate(i, max(first, r.first), min(last, r.last))
                r = self.runs[i]
                r.state, r.member, r.deadline = to_state, EMPTY_MEMBER, 0
                changed = True
            i += 1
        return changed

    def _merge(self) -> None:
        merged: list[Run] = []
        for r in self.runs:
            if merged and merged[-1].last + 1 == r.first and merged[-1].same(r):
                if r.state != ACQUIRED:  # separate acquisitions stay separate
                    merged[-1].last = r.last
                    continue
            merged.append(r)
        self.runs = merged
        self._reindex()

    def _advance_start(self) -> None:
        """Move the SPSO over leading Acknowledged/Archived records."""
        start = self.start_offset
        for r in self.runs:
            if r.last < start:
                continue
            if r.state in TERMINAL:
                start = r.last + 1
            else:
                break
        if start != self.start_offset:
            self.start_offset = start
        self._trim()

    def _trim(self) -> None:
        """Drop the runs wholly below the SPSO; cut the one it falls in."""
        k = 0
        while k < len(self.runs) and self.runs[k].last < self.start_offset:
            k += 1
        if k:
            del self.runs[:k]
        if self.runs and self.runs[0].first < self.start_offset:
            self.runs[0] = self.runs[0].copy(self.start_offset, self.runs[0].last)
        self._reindex()


def _settle(r: Run, ack_type: int, max_delivery_count: int) -> None:
    """Kafka's InFlightState.tryUpdateState for an Acquired run."""
    if ack_type == ACCEPT:
        r.state = ACKNOWLEDGED
    elif ack_type in (REJECT, GAP):
        r.state = ARCHIVED
    else:  # RELEASE, lock timeout, session closed
        r.state = ARCHIVED if r.dc >= max_delivery_count else AVAILABLE
    r.member, r.deadline = EMPTY_MEMBER, 0


def _renew(r: Run, deadline: int) -> None:
    r.deadline = deadline
