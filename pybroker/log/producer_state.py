"""Producer state of one partition (Kafka's ProducerStateManager): idempotence and transactions.
Per producer id: its epoch, its last 5 batches, its last marker's coordinator epoch and its
ongoing transaction's first offset.  A duplicate batch is answered with its original offsets;
an older epoch is INVALID_PRODUCER_EPOCH, a sequence gap OUT_OF_ORDER_SEQUENCE_NUMBER.  The
last stable offset is min(first unstable offset, high watermark).  Rules and transactions:
docs/internals.md ("pybroker/log/producer_state.py").

Snapshot file ``<20-digit offset>.snapshot`` in the partition directory, where offset is the
log end offset the state reflects (pybroker's own layout, not Kafka's).  Byte layout
(big-endian)::

    offset  size  field
         0     4  magic            b"PBPS"
         4     2  version          int16 = 2 (1: without the two transaction fields)
         6     4  crc              uint32  CRC-32C of every byte after this field
        10     8  end offset       int64   same as the file name
        18     4  entry count      int32
        22     -  entries:
                    producer id     int64
                    producer epoch  int16
                    last timestamp  int64
                    coordinator epoch        int32  (version 2; -1: none)
                    current txn first offset int64  (version 2; -1: no ongoing transaction)
                    batch count     int8    (<= 5)
                    batches:        first seq int32, last seq int32, first offset int64,
                                    last offset int64, max timestamp int64
"""

from __future__ import annotations

import os
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c

from pybroker.errors import ErrorCode, KafkaError
from pybroker.wire.control_records import EndTransactionMarker
from pybroker.wire.records import (
    CONTROL_MASK,
    INT32_MAX,
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    TRANSACTIONAL_MASK,
    BatchHeader,
)

NUM_BATCHES_TO_RETAIN = 5
SNAPSHOT_SUFFIX = ".snapshot"
_MAGIC = b"PBPS"
_VERSION = 2
_HEAD = struct.Struct(">4shI")
_BODY_HEAD = struct.Struct(">qi")
_ENTRY_V1 = struct.Struct(">qhqb")
_ENTRY = struct.Struct(">qhqiqb")
_BATCH = struct.Struct(">iiqqq")


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int


@dataclass
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=deque)
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int | None = None

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def maybe_update_epoch(self, epoch: int) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def add_batch(self, epoch: int, batch: BatchMetadata) -> None:
        self.maybe_update_epoch(epoch)
        if len(self.batches) == NUM_BATCHES_TO_RETAIN:
            self.batches.popleft()
        self.batches.append(batch)
        self.last_timestamp = batch.max_timestamp


class CompletedTxn(NamedTuple):
    """A transaction ended by a marker at ``last_offset`` (Kafka's CompletedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


class ProducerStateManager:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0  # the state reflects the log below this offset
        # first offset -> producer id of each ongoing transaction (Kafka's ongoingTxns)
        self.ongoing_txns: dict[int, int] = {}
        # first offset -> completed transaction whose marker may be above the high watermark
        self.unreplicated_txns: dict[int, CompletedTxn] = {}
        # the offsets of the snapshots written without fsync (a roll's), fsynced by the flush
        # that moves the recovery point to them (flush_snapshots)
        self.unflushed_snapshots: list[int] = []

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    # -- validation and update ----------------------------------------------------------------

    def check(
        self, batches: Iterable[BatchHeader], *, coordinator: bool = False
    ) -> BatchMetadata | None:
        """Validate the idempotent batches of one append, in order.  Returns the original
        metadata if a batch duplicates a retained one (append nothing, answer its offsets);
        raises KafkaError(INVALID_PRODUCER_EPOCH | OUT_OF_ORDER_SEQUENCE_NUMBER |
        INVALID_TXN_STATE).  ``coordinator``: a group coordinator's transactional offset
        commit (Kafka's AppendOrigin.COORDINATOR): the epoch is checked, sequences and
        duplicates are not."""
        pending: dict[int, tuple[int, int]] = {}  # pid -> (epoch, last seq) within this append
        for h in batches:
            if not h.has_producer_id:
                continue
            pid, epoch, first_seq = h.producer_id, h.producer_epoch, h.base_sequence
            current = self.producers.get(pid)
            if current is not None and not coordinator:
                dup = current.find_duplicate(epoch, first_seq, h.last_sequence)
                if dup is not None:
                    return dup
            current_epoch = current.producer_epoch if current else NO_PRODUCER_EPOCH
            upd_epoch, upd_last = pending.get(pid, (current_epoch, None))
            if epoch < upd_epoch:
                raise KafkaError(
                    ErrorCode.INVALID_PRODUCER_EPOCH,
                    f"producer {pid} epoch {epoch} is older than {upd_epoch}",
                )
            if coordinator:
                pass
            elif epoch != upd_epoch:
                if first_seq != 0 and upd_epoch != NO_PRODUCER_EPOCH:
                    raise KafkaError(
                        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                        f"producer {pid} new epoch {epoch} starts at sequence {first_seq}",
                    )
            else:
                if upd_last is not None:
                    last = upd_last
                elif current is not None and epoch == current.producer_epoch:
                    last = current.last_seq
                else:
                    last = NO_SEQUENCE
                if current_epoch != NO_PRODUCER_EPOCH and not in_sequence(last, first_seq):
                    raise KafkaError(
                        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                        f"producer {pid}: sequence {first_seq} after {last}",
                    )
            # after the epoch and sequence checks, as Kafka's appendDataBatch
            if (
                not h.is_transactional
                and current is not None
                and current.current_txn_first_offset is not None
            ):
                raise KafkaError(
                    ErrorCode.INVALID_TXN_STATE,
                    f"expected a transactional write from producer {pid}: its transaction"
                    f" started at offset {current.current_txn_first_offset} is ongoing",
                )
            pending[pid] = (epoch, h.last_sequence)
        return None

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Validate a transaction marker written by a coordinator (Kafka's appendEndTxnMarker,
        coordinator origin): raises KafkaError(INVALID_PRODUCER_EPOCH) for an epoch older
        than the producer's, KafkaError(TRANSACTION_COORDINATOR_FENCED) for a coordinator
        epoch older than the one of the producer's last marker."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.producer_epoch:
            raise KafkaError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"marker epoch {producer_epoch} of producer {producer_id} is older than"
                f" {entry.producer_epoch}",
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise KafkaError(
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                f"marker of producer {producer_id} from coordinator epoch {coordinator_epoch},"
                f" older than {entry.coordinator_epoch}",
            )

    def update(
        self,
        header: BatchHeader,
        first_offset: int,
        max_timestamp: int | None = None,
        marker: EndTransactionMarker | None = None,
    ) -> CompletedTxn | None:
        """Record an appended batch (``first_offset`` is its assigned base offset); for a
        control batch, ``marker`` is its transaction marker (None: another control type).
        Returns the transaction a marker completed, which the caller indexes (if aborted) and
        hands to :meth:`complete_txn`."""
        last_offset = first_offset + header.last_offset_delta
        self.map_end_offset = max(self.map_end_offset, last_offset + 1)
        if not header.has_producer_id:
            return None
        pid = header.producer_id
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(pid)
        ts = header.max_timestamp if max_timestamp is None else max_timestamp
        if header.attributes & CONTROL_MASK:
            if marker is None:
                return None
            completed = None
            if entry.current_txn_first_offset is not None:
                completed = CompletedTxn(
                    pid, entry.current_txn_first_offset, last_offset, not marker.committed
                )
            entry.maybe_update_epoch(header.producer_epoch)
            entry.coordinator_epoch = marker.coordinator_epoch
            entry.current_txn_first_offset = None
            entry.last_timestamp = ts
            return completed
        entry.add_batch(
            header.producer_epoch,
            BatchMetadata(
                header.base_sequence, header.last_sequence, first_offset, last_offset, ts
            ),
        )
        if header.attributes & TRANSACTIONAL_MASK and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = first_offset
            self.ongoing_txns[first_offset] = pid
        return None

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO recorded with an aborted transaction: the first offset of the earliest
        ongoing transaction of another producer, else the marker's offset + 1."""
        others = [off for off, pid in self.ongoing_txns.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        self.ongoing_txns.pop(completed.first_offset, None)
        self.unreplicated_txns[completed.first_offset] = completed

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the earliest transaction that is ongoing, or completed by a
        marker not yet below ``high_watermark`` (those below it are forgotten here)."""
        # (on the owner's thread: the log cleaner asks it through its handoff)
        if not self.ongoing_txns and not self.unreplicated_txns:
            return None  # the common case, asked for every partition of every fetch
        unreplicated = list(self.unreplicated_txns.items())
        if any(t.last_offset < high_watermark for _, t in unreplicated):
            unreplicated = [(f, t) for f, t in unreplicated if t.last_offset >= high_watermark]
            self.unreplicated_txns = dict(unreplicated)
        firsts = [*list(self.ongoing_txns), *(f for f, _ in unreplicated)]
        return min(firsts) if firsts else None

    def reset(self, offset: int) -> None:
        self.producers.clear()
        self.ongoing_txns.clear()
        self.unreplicated_txns.clear()
        self.map_end_offset = offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """The log was emptied and restarts at ``offset``: forget every producer and delete
        every snapshot (Kafka's truncateFullyAndStartAt)."""
        for off in self.snapshot_offsets():
            snapshot_path(self.directory, off).unlink(missing_ok=True)
        self.reset(offset)

    # -- snapshots ----------------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        out = []
        for name in os.listdir(self.directory):
            stem, _, suffix = name.partition(".")
            if "." + suffix == SNAPSHOT_SUFFIX and len(stem) == 20 and stem.isdigit():
                out.append(int(stem))
        return sorted(out)

    def encode(self) -> bytes:
        body = bytearray(_BODY_HEAD.pack(self.map_end_offset, len(self.producers)))
        for e in self.producers.values():
            txn_first = -1 if e.current_txn_first_offset is None else e.current_txn_first_offset
            body += _ENTRY.pack(
                e.producer_id,
                e.producer_epoch,
                e.last_timestamp,
                e.coordinator_epoch,
                txn_first,
                len(e.batches),
            )
            for b in e.batches:
                body += _BATCH.pack(*b)
        return _HEAD.pack(_MAGIC, _VERSION, crc32c(bytes(body))) + body

    def take_snapshot(self, *, fsync: bool = False) -> Path:
        """Write ``<map_end_offset>.snapshot`` atomically.  Without fsync a crash may leave it
        torn, which load() detects by CRC and ignores."""
        path = snapshot_path(self.directory, self.map_end_offset)
        tmp = path.with_name(path.name + ".tmp")
        data = self.encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        if not fsync:
            self.unflushed_snapshots.append(self.map_end_offset)
        return path

    def flush_snapshots(self, upto: int) -> bool:
        """fsync the snapshots written without fsync at offsets up to ``upto``, before the
        recovery point moves there (Kafka's flushProducerStateSnapshot in the roll's flush,
        KAFKA-15046): recovery trusts what is below the recovery point, and an unsynced
        snapshot may be empty after a power loss.  One deleted meanwhile is skipped.  May run
        in a worker thread.  Returns whether any was due (its directory entry is new too)."""
        due = [off for off in list(self.unflushed_snapshots) if off <= upto]
        for off in due:
            try:
                fd = os.open(snapshot_path(self.directory, off), os.O_RDONLY)
            except FileNotFoundError:
                pass
            else:
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            try:
                self.unflushed_snapshots.remove(off)
            except ValueError:
                pass  # (another flush of the log took it)
        return bool(due)

    @staticmethod
    def decode(data: bytes) -> tuple[int, dict[int, ProducerStateEntry]]:
        """Parse a snapshot; raises ValueError if torn or corrupt."""
        if len(data) < _HEAD.size + _BODY_HEAD.size:
            raise ValueError("short snapshot")
        magic, version, crc = _HEAD.unpack_from(data)
        if magic != _MAGIC or version not in (1, _VERSION) or crc32c(data[_HEAD.size :]) != crc:
            raise ValueError("bad snapshot header or CRC")
        end_offset, count = _BODY_HEAD.unpack_from(data, _HEAD.size)
        pos = _HEAD.size + _BODY_HEAD.size
        producers: dict[int, ProducerStateEntry] = {}
        try:
            for _ in range(count):
                if version == 1:
                    pid, epoch, last_ts, n = _ENTRY_V1.unpack_from(data, pos)
                    coord_epoch, txn_first = -1, -1
                    pos += _ENTRY_V1.size
                else:
                    pid, epoch, last_ts, coord_epoch, txn_first, n = _ENTRY.unpack_from(data, pos)
                    pos += _ENTRY.size
                batches: deque[BatchMetadata] = deque()
                for _b in range(n):
                    batches.append(BatchMetadata(*_BATCH.unpack_from(data, pos)))
                    pos += _BATCH.size
                producers[pid] = ProducerStateEntry(
                    pid, epoch, batches, last_ts, coord_epoch, None if txn_first < 0 else txn_first
                )
        except struct.error as e:
            raise ValueError("truncated snapshot") from e
        if pos != len(data):
            raise ValueError("trailing bytes in snapshot")
        return end_offset, producers

    def load_latest_snapshot(self, max_offset: int) -> int | None:
        """Delete snapshots above ``max_offset`` (the recovered log end) and tmp files, load
        the newest valid one at or below it.  Returns its offset (state must be rebuilt from
        the log from there), or None (empty state: rebuild from the log start)."""
        for name in os.listdir(self.directory):
            if name.endswith(SNAPSHOT_SUFFIX + ".tmp"):
                os.unlink(self.directory / name)
        self.reset(0)
        for off in reversed(self.snapshot_offsets()):
            path = snapshot_path(self.directory, off)
            if off > max_offset:
                path.unlink(missing_ok=True)
                continue
            try:
                end_offset, producers = self.decode(path.read_bytes())
                if end_offset != off:
                    raise ValueError("offset mismatch")
            except (OSError, ValueError):
                path.unlink(missing_ok=True)
                continue
            self.producers = producers
            self.map_end_offset = off
            for pid, entry in producers.items():
                if entry.current_txn_first_offset is not None:
                    self.ongoing_txns[entry.current_txn_first_offset] = pid
            return off
        return None

    def delete_snapshots_before(self, offset: int) -> None:
        """Delete snapshots below ``offset`` but always keep the newest one, so retention
        never loses the state of producers that are still alive."""
        offsets = self.snapshot_offsets()
        for off in offsets[:-1]:
            if off < offset:
                snapshot_path(self.directory, off).unlink(missing_ok=True)
