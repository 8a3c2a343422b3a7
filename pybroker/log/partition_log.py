"""The log of one partition (Kafka's UnifiedLog): its fields, opening, appends (leader,
follower, transaction markers), roll and producer state.  Offsets: log start <= high watermark
<= log end offset (LEO); everything below the recovery point is fsynced.  Its parts:
local_log.py (reads, truncation, flush, close: Kafka's LocalLog), log_loader.py (opening and
recovery: trusts segments below the recovery point, or all after a clean shutdown, and scans
the rest, truncating at the first torn or corrupt batch), offsets_by_time.py, retention.py.
One owner (the event loop) appends, reads, rolls and truncates; ``flush`` and
``delete_pending_files`` may run in a worker thread.  At most one descriptor per partition in
steady state.  Directory layout, recovery and descriptors: docs/internals.md
("pybroker/log/partition_log.py").
"""

from __future__ import annotations

import logging
import random
import struct
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from pybroker.clock import SYSTEM_CLOCK, Clock
from pybroker.errors import ErrorCode, KafkaError
from pybroker.log import partition_metadata
from pybroker.log.descriptors import DescriptorCache, FileSlice
from pybroker.log.leader_epoch import LeaderEpochCache
from pybroker.log.local_log import LocalLog
from pybroker.log.log_config import LogConfig
from pybroker.log.log_loader import LogLoader
from pybroker.log.offsets_by_time import OffsetsByTime
from pybroker.log.producer_state import CompletedTxn, ProducerStateManager
from pybroker.log.retention import LogRetention
from pybroker.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
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


class PartitionLog(LocalLog, LogLoader, OffsetsByTime, LogRetention):
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

    def exchange_state(self, other: PartitionLog) -> None:
        """AlterReplicaLogDirs' swap (LogManager.replace_current_with_future): this object (the
        one every holder keeps) takes ``other``'s whole state and ``other`` this one's, to be
        deleted.  Owner (event loop) only, no await between the last catch-up and this call."""
        self.__dict__, other.__dict__ = other.__dict__, self.__dict__


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
