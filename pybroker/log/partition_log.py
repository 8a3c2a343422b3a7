"""The log of one partition: its segments, offsets, roll, retention, truncation and recovery
(Kafka's UnifiedLog and LogLoader).  Offsets: log start <= high watermark <= log end offset
(LEO); everything below the recovery point is fsynced.  Recovery trusts segments below the
recovery point (or all after a clean shutdown) and scans the rest, truncating at the first torn
or corrupt batch, so its cost grows with the unflushed tail.  One owner (the event loop)
appends, reads, rolls and truncates; ``flush`` and ``delete_pending_files`` may run in a worker
thread.  At most one descriptor per partition in steady state.  Directory layout, recovery and
descriptors: docs/internals.md ("pybroker/log/partition_log.py").
"""

from __future__ import annotations

import bisect
import logging
import random
import struct
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from pybroker.clock import SYSTEM_CLOCK, Clock
from pybroker.errors import ErrorCode, KafkaError
from pybroker.log import partition_metadata
from pybroker.log.descriptors import DescriptorCache, FileSlice
from pybroker.log.leader_epoch import LeaderEpochCache
from pybroker.log.log_config import LogConfig
from pybroker.log.log_loader import LogLoader
from pybroker.log.offsets_by_time import OffsetsByTime
from pybroker.log.producer_state import CompletedTxn, ProducerStateManager
from pybroker.log.retention import LogRetention
from pybroker.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
)
from pybroker.log.txn_index import AbortedTxn
from pybroker.wire.control_records import (
    ABORT,
    COMMIT,
    EndTransactionMarker,
    end_txn_marker_batch,
    read_end_txn_marker,
)
from pybroker.wire.records import (
    CONTROL_MASK,
    LOG_APPEND_TIME,
    PARTITION_LEADER_EPOCH_OFFSET,
    BatchHeader,
    InvalidRecordError,
    parse_batches,
    set_base_offset,
    set_max_timestamp,
    set_partition_leader_epoch,
)

INT32_MAX = 2**31 - 1
logger = logging.getLogger(__name__)
_INT32 = struct.Struct(">i")


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    duplicate: bool = False  # an idempotent retry: nothing appended, original offsets


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


FUTURE_DIR_SUFFIX = "-future"


def parse_future_dir(name: str) -> tuple[str, int] | None:
    """``<topic>-<partition>.<32 hex>-future`` (Kafka's logFutureDirName): the copy of a
    replica being moved to another log dir (AlterReplicaLogDirs), or None."""
    if not name.endswith(FUTURE_DIR_SUFFIX):
        return None
    stem, dot, unique = name[: -len(FUTURE_DIR_SUFFIX)].rpartition(".")
    if not dot or len(unique) != 32 or any(c not in "0123456789abcdef" for c in unique):
        return None
    return parse_partition_dir(stem)


class PartitionLog(LogLoader, OffsetsByTime, LogRetention):
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        rng: random.Random | None = None,
        descriptors: DescriptorCache | None = None,
    ) -> None:
        self.directory = directory
        self.config = config
        self.clock = clock
        self.rng = rng or random.Random()  # segment.jitter.ms draws
        # the LRU bounding its segments' open descriptors (the log manager's; None: unbounded)
        self.descriptors = descriptors
        parsed = parse_partition_dir(directory.name) or parse_future_dir(directory.name)
        self.topic, self.partition = parsed if parsed else (directory.name, 0)
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.high_watermark = 0
        self.recovery_point = 0
        # (log end offset, active segment, its size) at the last flush: see flush()
        self._flushed: tuple[int, object, int] | None = None
        self._truncations = 0  # (a flush that saw one under way leaves the recovery point)
        self.on_roll: Callable[[PartitionLog, int], None] | None = None
        self.producer_state = ProducerStateManager(directory)
        self.leader_epochs = LeaderEpochCache.for_directory(directory)
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._reader: LogSegment | None = None  # the older segment last read (has a handle)
        self.closed = False
        # lowest log end offset a truncation left since the log cleaner last looked (it pulls
        # its checkpoint back there: records below it may have been replaced)
        self.truncated_to: int | None = None
        # a copy of this log being made in another log dir (log/mover.py): truncations are
        # applied to it at once, so it is always a prefix of this log
        self.future_copy: PartitionLog | None = None
        # the incarnation of the topic this directory holds (partition.metadata), if known
        self.topic_id: uuid.UUID | None = partition_metadata.read(directory)

    # -- opening and recovery -----------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        clock: Clock = SYSTEM_CLOCK,
        *,
        recovery_point: int = 0,
        clean_shutdown: bool = False,
        log_start_offset: int = 0,
        rng: random.Random | None = None,
        descriptors: DescriptorCache | None = None,
    ) -> PartitionLog:
        """Open (creating if needed) and recover a partition log.  ``recovery_point`` comes
        from the log dir's recovery-point-offset-checkpoint, ``log_start_offset`` from its
        log-start-offset-checkpoint, ``clean_shutdown`` from its ``.kafka_cleanshutdown``
        marker (LogManager passes all three)."""
        directory.mkdir(parents=True, exist_ok=True)
        log = cls(directory, config, clock, rng, descriptors)
        log._load(recovery_point, clean_shutdown, log_start_offset)
        return log

    def _new_segment(self, base_offset: int) -> LogSegment:
        seg = LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.max_index_bytes,
            descriptors=self.descriptors,
        )
        seg.roll_jitter_ms = self._random_segment_jitter()
        return seg

    def _random_segment_jitter(self) -> int:
        """Kafka's LogConfig.randomSegmentJitter, drawn once per segment when it is created or
        loaded: a non-negative int below min(segment.jitter.ms, segment.ms), taken off the
        segment's segment.ms (so segments of many partitions created together do not all roll
        at once); 0 without jitter."""
        jitter = self.config.roll_jitter_ms
        if jitter <= 0:
            return 0
        return self.rng.randrange(2**31) % min(jitter, self.config.roll_ms)

    def _headers_from(self, start: int) -> Iterator[BatchHeader]:
        """Headers of every batch from the one containing offset ``start`` to the LEO."""
        for seg in self.segments[self._segment_index(start) :]:
            if seg.next_offset <= start:
                continue
            self._reading(seg)
            h0 = seg.translate_offset(start) if seg.base_offset < start else None
            yield from seg.headers_from(h0.position if h0 else 0)

    def _segment_headers_from(self, start: int) -> Iterator[tuple[LogSegment, BatchHeader]]:
        for seg in self.segments[self._segment_index(start) :]:
            if seg.next_offset <= start:
                continue
            self._reading(seg)
            h0 = seg.translate_offset(start) if seg.base_offset < start else None
            for h in seg.headers_from(h0.position if h0 else 0):
                yield seg, h

    def _stored_marker(self, seg: LogSegment, h: BatchHeader) -> EndTransactionMarker | None:
        if not h.has_producer_id:
            return None
        return self._marker_in(seg.read_batch(h), h)

    def _marker_in(self, data: bytes | memoryview, h: BatchHeader) -> EndTransactionMarker | None:
        try:
            return read_end_txn_marker(data)
        except InvalidRecordError as e:
            logger.warning(
                "%s-%d: control batch at offset %d is unreadable: %s",
                self.topic,
                self.partition,
                h.base_offset,
                e,
            )
            return None

    def _index_completed(self, seg: LogSegment, completed: CompletedTxn) -> None:
        """A marker in ``seg`` completed a transaction: index it if aborted (with the LSO of
        that moment), then hand it over to the unreplicated transactions (Kafka's
        UnifiedLog.append: segment.updateTxnIndex, producerStateManager.completeTxn)."""
        ps = self.producer_state
        if completed.is_aborted:
            seg.txn_index.append(
                AbortedTxn(
                    completed.producer_id,
                    completed.first_offset,
                    completed.last_offset,
                    ps.last_stable_offset(completed),
                )
            )
        ps.complete_txn(completed)

    # -- appending ----------------------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    def _should_roll(self, size: int, last_offset_delta: int, now: int) -> bool:
        seg = self.segments[-1]
        if seg.size == 0:
            return False
        config = self.config
        if seg.size > config.segment_bytes - size:
            return True
        if (
            seg.rolling_base_ms is not None
            and now - seg.rolling_base_ms > config.max_segment_ms - seg.roll_jitter_ms
        ):
            return True
        if seg.should_roll_for_index():
            return True
        return self.log_end_offset + last_offset_delta - seg.base_offset > INT32_MAX

    def roll(self) -> LogSegment:
        """Start a new active segment at the LEO (no-op if the active one is empty) and
        snapshot the producer state there, as Kafka does."""
        if self.active_segment.size == 0:
            return self.active_segment
        seg = self._new_segment(self.log_end_offset)
        self.segments.append(seg)
        self._bases.append(seg.base_offset)
        self.producer_state.map_end_offset = self.log_end_offset
        self.producer_state.take_snapshot()
        if self.on_roll is not None:
            self.on_roll(self, seg.base_offset)
        return seg

    def append(
        self,
        buf: bytearray,
        batches: list[BatchHeader],
        *,
        leader_epoch: int | None = None,
        coordinator: bool = False,
    ) -> AppendInfo:
        """Append validated batches (parse_batches) held in ``buf`` as the leader: assign
        offsets by patching base offsets in place and write the bytes once.  Idempotent retries
        are answered with the original offsets and not written again.  The batches'
        partitionLeaderEpoch (patched by the produce handler, or here if ``leader_epoch`` is
        given) feeds the leader epoch cache; -1 is ignored.  ``coordinator``: a coordinator's
        own batches (producer_state.check's coordinator origin)."""
        if not batches:
            raise ValueError("nothing to append")
        dup = self.producer_state.check(batches, coordinator=coordinator)
        if dup is not None:
            return AppendInfo(dup.first_offset, dup.last_offset, -1, self.log_start_offset, True)
        size = self._check_size(batches)
        now = self.clock.time_ms()
        first = self.log_end_offset
        offset = first
        for h in batches:
            set_base_offset(buf, h.position, offset)
            if leader_epoch is not None:
                set_partition_leader_epoch(buf, h.position, leader_epoch)
            offset += h.last_offset_delta + 1
        append_time = -1
        if self.config.message_timestamp_type == "LogAppendTime":
            append_time = now
            for h in batches:
                set_max_timestamp(buf, h.position, LOG_APPEND_TIME, now)
        self._write(buf, batches, size, first, offset, now, None if append_time < 0 else now)
        # The high watermark is not moved here: the replica manager advances it once every ISR
        # member has the records (at once when this broker is the only one).
        return AppendInfo(first, offset - 1, append_time, self.log_start_offset)

    def append_as_follower(self, buf: bytearray, batches: list[BatchHeader]) -> AppendInfo:
        """Append a leader's batches (parse_batches of a Fetch response) unchanged: they carry
        their offsets, which must start at the LEO and be contiguous, else
        KafkaError(OFFSET_OUT_OF_RANGE) and nothing is written.  No sequence checks (the leader
        made them), but the producer state is updated from the headers, so this replica
        dedups retries once it leads.  The high watermark is the caller's to move."""
        if not batches:
            raise ValueError("nothing to append")
        expected = self.log_end_offset
        contiguous = True
        for h in batches:
            if h.base_offset < expected:
                raise KafkaError(
                    ErrorCode.OFFSET_OUT_OF_RANGE,
                    f"follower append: batch at offset {h.base_offset}, expected {expected}"
                    f" ({self.topic}-{self.partition} log end {self.log_end_offset})",
                )
            # a compacted leader's log has gaps (offsets only ascend), as Kafka allows
            contiguous &= h.base_offset == expected
            expected = h.next_offset
        size = self._check_size(batches)
        first = self.log_end_offset
        if contiguous:
            self._write(buf, batches, size, first, expected, self.clock.time_ms(), None)
        else:
            self._write_with_gaps(buf, batches, size, expected)
        return AppendInfo(batches[0].base_offset, expected - 1, -1, self.log_start_offset)

    def _write_with_gaps(
        self, buf: bytearray, batches: list[BatchHeader], size: int, end: int
    ) -> None:
        """A follower's append of a compacted leader's batches: their own offsets, gaps
        included (the segment indexes them by their last offsets)."""
        now = self.clock.time_ms()
        if self._should_roll(size, end - 1 - self.log_end_offset, now):
            self.roll()
        start = batches[0].position
        seg = self.active_segment
        if seg.size == 0 and seg.rolling_base_ms is None:
            seg.rolling_base_ms = now
        seg.append_batches(
            memoryview(buf)[start : start + size],
            [h._replace(position=h.position - start) for h in batches],
        )
        epochs_changed = False
        for h in batches:
            self._update_producer_state(buf, h, h.base_offset, None, seg)
            (epoch,) = _INT32.unpack_from(buf, h.position + PARTITION_LEADER_EPOCH_OFFSET)
            if epoch >= 0:
                epochs_changed |= self.leader_epochs.assign(epoch, h.base_offset, flush=False)
        if epochs_changed or self.leader_epochs.dirty:
            self.leader_epochs.flush()
        self.log_end_offset = end

    def _check_size(self, batches: list[BatchHeader]) -> int:
        size = batches[-1].position + batches[-1].size - batches[0].position
        if size > self.config.segment_bytes:
            raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE, f"{size} bytes > segment.bytes")
        return size

    def _write(
        self,
        buf: bytearray,
        batches: list[BatchHeader],
        size: int,
        first: int,
        end: int,
        now: int,
        append_time: int | None,
    ) -> None:
        """Roll if needed, write ``batches`` (offsets ``first`` .. ``end`` - 1, already in
        ``buf``) with one os.write, then update producer state, epoch cache and LEO."""
        if self._should_roll(size, end - 1 - first, now):
            self.roll()
        start = batches[0].position
        seg = self.active_segment
        seg.append(memoryview(buf)[start : start + size], batches, first, now, append_time)
        offset = first
        epochs_changed = False
        update = self.producer_state.update
        for h in batches:
            if h.attributes & CONTROL_MASK:
                self._update_producer_state(buf, h, offset, append_time, seg)
            else:  # (the hot path: a data batch completes no transaction)
                update(h, offset, append_time)
            (epoch,) = _INT32.unpack_from(buf, h.position + PARTITION_LEADER_EPOCH_OFFSET)
            if epoch >= 0:
                epochs_changed |= self.leader_epochs.assign(epoch, offset, flush=False)
            offset += h.last_offset_delta + 1
        if epochs_changed or self.leader_epochs.dirty:
            self.leader_epochs.flush()  # before the LEO moves: see recovery above
        self.log_end_offset = offset

    def _update_producer_state(
        self,
        buf: bytearray,
        h: BatchHeader,
        offset: int,
        append_time: int | None,
        seg: LogSegment,
    ) -> None:
        marker = None
        if h.is_control and h.has_producer_id:
            marker = self._marker_in(memoryview(buf)[h.position : h.position + h.size], h)
        completed = self.producer_state.update(h, offset, append_time, marker)
        if completed is not None:
            self._index_completed(seg, completed)

    def append_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        committed: bool,
        *,
        leader_epoch: int = -1,
    ) -> AppendInfo:
        """Append a COMMIT or ABORT marker for ``producer_id`` as the leader (Kafka's
        appendAsLeader with origin COORDINATOR): a control batch of one record (isControl |
        isTransactional, base sequence -1, timestamp now), ending the producer's ongoing
        transaction here; an aborted one with data goes to the transaction index.  Raises
        KafkaError(INVALID_PRODUCER_EPOCH) for an epoch older than the producer's and
        KafkaError(TRANSACTION_COORDINATOR_FENCED) for an older coordinator epoch, appending
        nothing.  The high watermark is the replica manager's to move."""
        self.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch)
        now = self.clock.time_ms()
        marker = EndTransactionMarker(COMMIT if committed else ABORT, coordinator_epoch)
        buf = bytearray(
            end_txn_marker_batch(
                producer_id,
                producer_epoch,
                marker,
                timestamp=now,
                partition_leader_epoch=leader_epoch,
            )
        )
        batches = parse_batches(buf, allow_control=True)
        size = self._check_size(batches)
        first = self.log_end_offset
        set_base_offset(buf, 0, first)
        self._write(buf, batches, size, first, first + 1, now, None)
        return AppendInfo(first, first, -1, self.log_start_offset)

    @property
    def last_stable_offset(self) -> int:
        """The LSO: min(first offset of the earliest transaction that is ongoing or whose
        marker is not yet below the high watermark, high watermark) (Kafka's
        UnifiedLog.lastStableOffset).  read_committed consumers read below it."""
        hw = self.high_watermark
        ps = self.producer_state
        if not ps.ongoing_txns and not ps.unreplicated_txns:
            return hw  # no transaction in flight (asked for every partition of every fetch)
        first_unstable = ps.first_unstable_offset(hw)
        return hw if first_unstable is None or first_unstable >= hw else first_unstable

    def collect_aborted_transactions(self, start: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start, upper_bound) (a read_committed
        fetch), from the transaction indexes of the segment holding ``start`` on, until an
        entry's last stable offset reaches ``upper_bound`` (Kafka's
        collectAbortedTransactions)."""
        out: list[AbortedTxn] = []
        for seg in self.segments[self._segment_index(start) :]:
            got, complete = seg.txn_index.collect(start, upper_bound)
            out += got
            if complete:
                break
        return out

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(largest epoch <= epoch, its end offset)``, see
        LeaderEpochCache.end_offset_for; (-1, -1) if unknown."""
        return self.leader_epochs.end_offset_for(epoch, self.log_end_offset)

    # -- reading ------------------------------------------------------------------------------

    def _segment_index(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    def _reading(self, seg: LogSegment) -> None:
        """About to read ``seg``: if it is an older segment, it becomes the one older segment
        whose descriptor stays open (the previous one is released)."""
        if seg is self.segments[-1] or seg is self._reader:
            return
        prev, self._reader = self._reader, seg
        if prev is not None and prev is not self.segments[-1]:
            prev.release()

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        min_one_batch: bool = True,
        max_offset: int | None = None,
    ) -> FileSlice | None:
        """Whole batches from the one containing ``offset`` (one segment per call).  None at
        the LEO; KafkaError(OFFSET_OUT_OF_RANGE) outside [log start, LEO]."""
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} not in [{self.log_start_offset}, {self.log_end_offset}]",
            )
        if offset == self.log_end_offset:
            return None
        for seg in self.segments[self._segment_index(offset) :]:
            if seg.next_offset <= offset:
                continue
            if max_offset is not None and seg.base_offset >= max_offset:
                return None
            self._reading(seg)
            got = seg.read(offset, max_bytes, min_one_batch, max_offset)
            if got is not None or seg.size:
                return got
        return None

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    # -- truncation, flush, close -------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove everything at and above ``offset`` (whole batches: the LEO may end below
        ``offset`` if it falls inside a batch), as a follower does before replicating from a
        new leader.  The high watermark, recovery point, producer state (newest snapshot at
        or below the new LEO plus the headers after it) and epoch cache follow.

        At or above the LEO no record goes, but the epoch cache still loses its entries
        starting at the LEO, as Kafka's truncateTo (why: docs/replication.md, Followers)."""
        if offset >= self.log_end_offset:
            self.leader_epochs.truncate_from_end(self.log_end_offset)
            return
        if offset <= self.log_start_offset:
            self.truncate_fully_and_start_at(offset if offset >= 0 else self.log_start_offset)
            return
        while len(self.segments) > 1 and self.active_segment.base_offset >= offset:
            seg = self.segments.pop()
            self._bases.pop()
            seg.delete_files()
        self.active_segment.truncate_to(offset)
        self.log_end_offset = self.active_segment.next_offset
        self._note_truncation(self.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        self._reload_producer_state()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset`` (a follower whose log
        is wholly below the leader's log start).  As Kafka: producer state and its snapshots
        and the epoch cache are cleared."""
        for seg in self.segments:
            seg.delete_files()
        self.segments = [self._new_segment(offset)]
        self._bases = [offset]
        self.log_start_offset = self.log_end_offset = self.high_watermark = offset
        self.recovery_point = offset
        self._note_truncation(offset)
        self.producer_state.truncate_fully_and_start_at(offset)
        self.leader_epochs.clear()

    def _note_truncation(self, offset: int) -> None:
        self._flushed = None  # (the same end and size may hold other bytes now)
        self._truncations += 1
        self.truncated_to = offset if self.truncated_to is None else min(self.truncated_to, offset)
        future = self.future_copy
        if future is not None and future.log_end_offset > offset:
            future.truncate_to(offset)

    def exchange_state(self, other: PartitionLog) -> None:
        """AlterReplicaLogDirs' swap (LogManager.replace_current_with_future): this object (the
        one every holder keeps) takes ``other``'s whole state and ``other`` this one's, to be
        deleted.  Owner (event loop) only, no await between the last catch-up and this call."""
        self.__dict__, other.__dict__ = other.__dict__, self.__dict__

    # -- the log cleaner's swap ---------------------------------------------------------------

    def replace_segments(
        self,
        new: LogSegment,
        old: list[LogSegment],
        step: Callable[[str], None] | None = None,
    ) -> bool:
        """Swap a cleaned segment (files ``*.swap``, fsynced) in for ``old``, consecutive
        segments of this log that it replaces (Kafka's replaceSegments).  Called by the owner
        (the event loop), the one writer of the segment list.  Returns False, changing
        nothing, when the log moved on meanwhile (a retention, truncation or deletion took
        one of ``old``); the caller then deletes ``new``.  Order on disk and recovery of an
        interrupted swap: docs/internals.md (log cleaner)."""
        if self.closed or not old or not new.log_path.exists():
            return False  # (a deleted topic's directory was renamed away)
        try:
            i = next(k for k, seg in enumerate(self.segments) if seg is old[0])
        except StopIteration:
            return False
        if self.segments[i : i + len(old)] != old or i + len(old) >= len(self.segments):
            return False  # changed, or would replace the active segment
        if any(seg.deleted for seg in old) or new.base_offset != old[0].base_offset:
            return False
        due = self.clock.time_ms() + self.config.file_delete_delay_ms
        for seg in old:
            if seg is self._reader:
                self._reader = None
            seg.rename_for_delete()
            seg.release()
            self._pending_deletes.append((due, seg))
            if step is not None:
                step(f"renamed {seg.log_path.name}")
        new.change_file_suffixes(
            SWAP_SUFFIX, "", None if step is None else lambda p: step(f"renamed to {p.name}")
        )
        self.segments[i : i + len(old)] = [new]
        self._bases[i : i + len(old)] = [new.base_offset]
        return True

    def _reload_producer_state(self) -> None:
        for off in self.producer_state.snapshot_offsets():
            if off > self.log_end_offset:
                (self.directory / f"{off:020d}.snapshot").unlink(missing_ok=True)
        self._load_producer_state()

    def flush(self, upto: int | None = None) -> int:
        """fsync the segments holding data from the recovery point to ``upto`` (None: the LEO
        seen now; a roll passes the new segment's base, Kafka's flushUptoOffsetExclusive), each
        .log then its index entries (written here: a segment below the recovery point has
        whole indexes on disk); the recovery point moves there unless a truncation ran
        meanwhile; older segments' descriptors are released.  May run in a worker thread."""
        target = self.log_end_offset if upto is None else min(upto, self.log_end_offset)
        truncations, segments = self._truncations, list(self.segments)
        active = segments[-1]
        if upto is not None and target <= self.recovery_point:
            return self.recovery_point
        # nothing appended, truncated or rolled since the last flush: no fsync (an idle log
        # costs nothing); an empty log's recovery point stays (nothing below it to protect)
        unchanged = (target, active, active.size)
        empty = len(segments) == 1 and active.size == 0 and target == self.recovery_point
        if (unchanged != self._flushed or target != self.recovery_point) and not empty:
            for seg in segments:
                below = seg.next_offset > self.recovery_point and seg.base_offset < target
                if below or (seg is active and upto is None):
                    seg.flush()
            self._flushed = unchanged if upto is None else self._flushed
        if not empty:
            self.leader_epochs.sync()  # (its writes are not fsynced: leader_epoch.py)
        for seg in segments[:-1]:
            if seg.has_handle:
                seg.release()
        if truncations == self._truncations:
            self.recovery_point = max(self.recovery_point, target)
        return self.recovery_point

    def close(self) -> None:
        """Flush, snapshot the producer state at the LEO (fsynced), close the files."""
        if self.closed:
            return
        if self.leader_epochs.dirty:
            self.leader_epochs.flush()
        self.flush()
        self.producer_state.map_end_offset = self.log_end_offset
        self.producer_state.take_snapshot(fsync=True)
        for seg in self.segments:
            seg.close()
        self.delete_pending_files(force=True)
        self.closed = True

    def moved_to(self, directory: Path) -> None:
        """LogManager renamed this log's directory (Kafka's renameDir, for a deletion): every
        path it holds now names the new place, so that removing its files later cannot touch
        a new log created under the old name."""
        self.directory = directory
        for seg in [*self.segments, *(s for _, s in self._pending_deletes)]:
            seg.moved_to(directory)
        self.producer_state.directory = directory
        if self.leader_epochs.path is not None:
            self.leader_epochs.path = directory / self.leader_epochs.path.name

    def delete(self) -> None:
        """Close and remove every file of this log (the directory itself is LogManager's)."""
        for seg in self.segments:
            seg.delete_files()
        self.delete_pending_files(force=True)
        self.leader_epochs.delete_file()
        self.closed = True


__all__ = [
    "AppendInfo",
    "FileSlice",
    "INDEX_SUFFIX",
    "LOG_SUFFIX",
    "LogConfig",
    "PartitionLog",
    "TIME_INDEX_SUFFIX",
    "parse_future_dir",
    "parse_partition_dir",
]
