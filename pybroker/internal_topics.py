"""The internal topics __consumer_offsets and __transaction_state as the coordinators see them
(coord/metadata/internal_log.py's InternalLog), over this broker's replica manager and logs:
the broker side of ``offsets.storage=kafka`` and ``transaction.state.storage=kafka``.

* Creation, as Kafka's AutoTopicCreationManager does for the coordinator topics: on the first
  FindCoordinator for one of their keys (``ensure``), with Kafka's settings (partitions,
  replication factor and segment bytes from offsets.topic.* / transaction.state.log.*,
  cleanup.policy=compact, compression.type=producer for __consumer_offsets and uncompressed,
  min.insync.replicas=transaction.state.log.min.isr, unclean election off for
  __transaction_state).  Fewer live brokers than the replication factor: the topic is not
  created and FindCoordinator answers COORDINATOR_NOT_AVAILABLE, as in Kafka.
* ``append``: one v2 batch built here (wire/records.py), appended as the leader in the
  coordinator's leader epoch and waited for as acks=all (ReplicaManager.append_as_coordinator).
* ``replay``: the partition's batches from its log start to its log end, read from the
  segment files in a worker thread (offsets.load.buffer.size at a time) and decoded there.
* Leadership: the replica manager tells this module when this broker starts or stops leading
  a partition of either topic; it calls the owning store's ``on_election`` /
  ``on_resignation`` (coord/group/offsets_log.py, coord/txn/state_log.py), which load and
  unload the partition, as Kafka's onLeadershipChange does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from pybroker.coord.metadata.internal_log import CoordinatorWriteError, LogBatch, Record
from pybroker.coord.metadata.placement import OFFSETS_TOPIC, TXN_STATE_TOPIC
from pybroker.errors import ErrorCode, KafkaError
from pybroker.replication.manager import LEADER
from pybroker.wire.control_records import read_end_txn_marker
from pybroker.wire.record_walker import decode_records
from pybroker.wire.records import (
    HEADER_SIZE,
    InvalidRecordError,
    build_keyed_batch,
    scan_batches,
)

if TYPE_CHECKING:
    from pybroker.clock import Clock
    from pybroker.coord.metadata.cluster import Cluster
    from pybroker.replication.replica import Replica

log = logging.getLogger(__name__)
_NONE = ErrorCode.NONE  # (read once: an Enum class attribute is a slow lookup on 3.11)

LOAD_BUFFER_BYTES = 5 * 1024 * 1024  # offsets.load.buffer.size's default


class CoordinatorAppends(Protocol):
    """The replica manager as an internal topic uses it (pybroker/replica_manager.py)."""

    replicas: dict[tuple[str, int], Replica]

    def append_as_coordinator(
        self, topic: str, partition: int, batch: bytes, *, leader_epoch: int, timeout_ms: int
    ) -> tuple[int, int] | Awaitable[tuple[int, int]]: ...


class Host(Protocol):
    """What an internal topic uses of its broker (pybroker/services.py's BrokerServices has
    them; this module stands below it)."""

    cluster: Cluster
    clock: Clock
    replicas: CoordinatorAppends


class PartitionOwner(Protocol):
    """A coordinator store loading and unloading the partitions this broker leads."""

    def on_election(self, partition: int, leader_epoch: int, continued: bool = False) -> None: ...

    def on_resignation(self, partition: int) -> None: ...

    async def stop(self) -> None: ...


class LeaderPlacement:
    """The coordinator placement of the internal-topic storages (coord/metadata/placement.py's
    Placement): the leader of the key's partition in the cluster metadata, as Kafka's
    FindCoordinator answers; ``epoch`` moves when this broker's leadership of a partition of
    the topic changes, and ``term`` is the partition's load here (the store's)."""

    def __init__(self, cluster: Any, topic: str, partitions: int, store: Any):
        self.cluster = cluster
        self.topic = topic
        self.partitions = partitions
        self._store = store  # the LogOffsetStore / TxnStateLog: epoch, term(partition)

    def epoch(self) -> int:
        return self._store.epoch

    def term(self, partition: int) -> object:
        return self._store.term(partition)

    def owner(self, partition: int) -> int:
        info = self.cluster.topics.get(self.topic)
        state = info.partitions.get(partition) if info is not None else None
        return -1 if state is None else state.leader


def decode_batches(data: bytes) -> list[LogBatch]:
    """Whole v2 batches -> LogBatch (records decompressed and decoded; control batches with
    their marker).  Runs in a worker thread."""
    out: list[LogBatch] = []
    for h in scan_batches(data):
        raw = memoryview(data)[h.position : h.position + h.size]
        control = None
        records: list[tuple[int, bytes | None, bytes | None]] = []
        if h.is_control:
            marker = read_end_txn_marker(raw)
            if marker is None:
                continue  # another control record type: nothing for the coordinators
            control = marker.committed
        elif h.size > HEADER_SIZE:
            try:
                records = [(r.offset, r.key, r.value) for r in decode_records(raw)]
            except InvalidRecordError as e:  # (CRC checked: a codec that fails) skipped, loudly
                log.error("internal topic batch at offset %d cannot be read: %s", h.base_offset, e)
        out.append(
            LogBatch(
                h.base_offset,
                h.last_offset,
                h.producer_id,
                h.producer_epoch,
                h.is_transactional,
                control,
                records,
            )
        )
    return out


class InternalTopic:
    """One internal topic on this broker (module docstring)."""

    def __init__(
        self,
        broker: Host,
        name: str,
        *,
        partitions: int,
        replication_factor: Callable[[], int],
        configs: Callable[[], dict[str, str]],
        timeout_ms: Callable[[], int],
        owner: PartitionOwner | None,
        load_buffer_bytes: int = LOAD_BUFFER_BYTES,
    ) -> None:
        self.broker = broker
        self.name = name
        self.partitions = partitions
        self._replication_factor = replication_factor
        self._configs = configs
        self._timeout_ms = timeout_ms
        self.owner = owner
        self.load_buffer_bytes = load_buffer_bytes
        self._creating: asyncio.Future[None] | None = None

    # -- creation --------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.name in self.broker.cluster.topics

    async def ensure(self) -> None:
        """Create the topic unless it exists (concurrent callers share one attempt).  Raises
        KafkaError (INVALID_REPLICATION_FACTOR with fewer live brokers than it needs)."""
        if self.exists():
            return
        if self._creating is None or self._creating.done():
            self._creating = asyncio.ensure_future(self._create())
        await asyncio.shield(self._creating)

    async def _create(self) -> None:
        try:
            await self.broker.cluster.create_topic(
                self.name, self.partitions, self._replication_factor(), self._configs()
            )
            log.info("created the internal topic %s (%d partitions)", self.name, self.partitions)
        except KafkaError as e:
            if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("creating the internal topic %s: %s", self.name, e)
                raise

    # -- leadership ------------------------------------------------------------------------
    def leadership_changed(
        self, topic: str, partition: int, epoch: int | None, continued: bool
    ) -> None:
        """The replica manager's leadership listener."""
        if topic != self.name:
            return
        if epoch is None:
            self.owner.on_resignation(partition)
        else:
            self.owner.on_election(partition, epoch, continued)

    def take_up_led_partitions(self) -> None:
        """At start: the partitions this broker leads already (set up before the listener)."""
        for (topic, partition), r in list(self.broker.replicas.replicas.items()):
            if topic == self.name and r.role == LEADER:
                self.owner.on_election(partition, r.leader_epoch, False)

    # -- InternalLog -----------------------------------------------------------------------
    async def append(
        self,
        partition: int,
        records: Sequence[Record],
        *,
        leader_epoch: int,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> int:
        """Append ``records`` as one batch to the partition as its leader in
        ``leader_epoch`` and wait for the in-sync replicas; the batch's last offset."""
        got = self.append_now(
            partition,
            records,
            leader_epoch=leader_epoch,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            transactional=transactional,
        )
        return got if type(got) is int else await got

    def append_now(
        self,
        partition: int,
        records: Sequence[Record],
        *,
        leader_epoch: int,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> int | Awaitable[int]:
        """``append`` without a coroutine when nothing waits: the batch's last offset once
        the in-sync replicas have it at once, else an awaitable of it.  Raises
        CoordinatorWriteError (at once, or from the awaitable)."""
        batch = build_keyed_batch(
            records,
            self.broker.clock.time_ms(),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=0 if producer_id >= 0 else -1,
            is_transactional=transactional,
            partition_leader_epoch=leader_epoch,
        )
        got = self.broker.replicas.append_as_coordinator(
            self.name,
            partition,
            batch,
            leader_epoch=leader_epoch,
            timeout_ms=self._timeout_ms(),
        )
        if type(got) is tuple:
            return self._appended(partition, got)
        return self._replicated(partition, got)

    async def _replicated(self, partition: int, waiting: Awaitable[tuple[int, int]]) -> int:
        return self._appended(partition, await waiting)

    def _appended(self, partition: int, got: tuple[int, int]) -> int:
        code, last = got
        if code != _NONE:
            raise CoordinatorWriteError(code, f"{self.name}-{partition}: {ErrorCode(code).name}")
        return last

    async def stop(self) -> None:
        """Stop the owner's loads."""
        if self.owner is not None:
            await self.owner.stop()

    def _leader_log(self, partition: int, leader_epoch: int) -> Any:
        r = self.broker.replicas.replicas.get((self.name, partition))
        if r is None or r.role != LEADER or r.leader_epoch != leader_epoch:
            raise CoordinatorWriteError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{self.name}-{partition}: not led here"
            )
        return r.log

    async def replay(self, partition: int, leader_epoch: int) -> AsyncIterator[LogBatch]:
        plog = self._leader_log(partition, leader_epoch)
        offset = plog.log_start_offset
        while True:
            plog = self._leader_log(partition, leader_epoch)
            offset = max(offset, plog.log_start_offset)
            if offset >= plog.log_end_offset:
                return
            try:
                piece = plog.read(offset, self.load_buffer_bytes, min_one_batch=True)
            except KafkaError as e:  # retention or the cleaner moved the log start meanwhile
                if e.code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    continue
                raise CoordinatorWriteError(e.code, str(e)) from e
            if piece is None or piece.size == 0:
                return
            batches = await asyncio.to_thread(_read_and_decode, piece)
            if not batches:  # a batch that fails its CRC: what follows it cannot be read
                log.error(
                    "%s-%d: no valid batch at offset %d (log end %d): loaded up to there",
                    self.name,
                    partition,
                    offset,
                    plog.log_end_offset,
                )
                return
            for b in batches:
                if b.last_offset >= offset:
                    yield b
            offset = batches[-1].last_offset + 1


def _read_and_decode(piece: Any) -> list[LogBatch]:
    f = piece.file
    f.seek(piece.position)
    return decode_batches(f.read(piece.size))


__all__ = [
    "OFFSETS_TOPIC",
    "TXN_STATE_TOPIC",
    "InternalTopic",
    "LeaderPlacement",
    "PartitionOwner",
    "decode_batches",
]
