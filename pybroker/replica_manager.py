"""The replica manager's request paths, as Kafka's ReplicaManager.appendRecords and readFromLog:
the one owner of appending a client's records to this broker's partitions and of reading them
back for a Fetch.  The handlers decode, authorize and answer; everything between their request
and the partition's log is here (:meth:`ReplicaManager.append_records`,
:meth:`ReplicaManager.read_from_log`, :meth:`ReplicaManager.append_txn_marker`, and
:meth:`ReplicaManager.append_as_coordinator` for a coordinator's own batch to an internal
topic, which clients may not write to).  Everything runs on the event loop, which owns the
partitions' state; only the validation of a large batch runs in a worker thread, on a batch no
one else holds, and leadership is checked again after.  The walk of a Produce:
docs/internals.md ("Append and read: the replica manager", "pybroker/replica_manager.py").
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from pybroker import topic_config
from pybroker.coord.metadata.placement import INTERNAL_TOPICS
from pybroker.errors import ErrorCode, KafkaError
from pybroker.log.legacy_validator import up_convert
from pybroker.log.validator import (
    LONG_MAX,
    RecordValidationError,
    ValidationConfig,
    analyze_records,
    check_batch_size,
    find_record,
    recompress,
    validate_records,
)
from pybroker.replication.manager import LEADER, Replica
from pybroker.replication.manager import ReplicaManager as PartitionReplicas
from pybroker.wire.compression import DecompressedSizeError
from pybroker.wire.records import (
    COMPRESSION_MASK,
    COMPRESSION_NONE,
    COMPRESSION_TYPES,
    COMPRESSION_ZSTD,
    BatchHeader,
    InvalidRecordError,
    set_partition_leader_epoch,
    unpack_header,
)

if TYPE_CHECKING:
    from pybroker.config import Config
    from pybroker.flusher import Flusher
    from pybroker.log.partition_log import PartitionLog
    from pybroker.metrics import BrokerMetrics

INLINE_BYTES = 64 * 1024  # records walked on the event loop per batch, at most
MAGIC_OFFSET = 16  # of every entry: v0/v1 messages and v2 batches alike
LEGACY_INLINE_BYTES = 16 * 1024  # uncompressed v0/v1 message sets converted on the loop
TIMESTAMP_INLINE_BYTES = 16 * 1024  # ListOffsets: uncompressed batches walked on the loop
# A read's log regions (FileSlice) each hold their segment's descriptor until the answer is
# written (sendfile), also when the descriptor cache has let go of it: a read of thousands of
# partitions with a few records each (a follower catching up after a produce to every
# partition) held thousands at once, past the cache's bound (EMFILE at 33,334 partitions per
# broker, docs/scale.md).  Past the first PINNED_REGIONS regions of a read, those of at most
# SMALL_REGION bytes are read into memory at once (bytes, as records): one read holds at most
# PINNED_REGIONS + max_bytes / SMALL_REGION descriptors.
PINNED_REGIONS = 64
SMALL_REGION = 64 * 1024
READ_COMMITTED = 1
# A Produce naming thousands of partitions (a client producing to every partition a broker
# leads: 16,700 at W22's 100,000 replicas) is applied in slices of APPEND_SLICE partitions,
# the loop's other work between two (as the fetcher applies a leader's answer): one callback
# for all of them held a follower's loop 2-7 s under load (docs/scale.md).
APPEND_SLICE = 256
READ_SLICE = 256  # the same for a Fetch's reads (read_from_log_in_slices)


class PartitionResponse(NamedTuple):
    """One partition's answer to an append (Kafka's ProduceResponse.PartitionResponse)."""

    error: int
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    record_errors: tuple[tuple[int, str], ...] = ()  # (batchIndex, message)
    error_message: str | None = None


class FetchParams(NamedTuple):
    """What a Fetch asks of every partition it reads (Kafka's FetchParams)."""

    replica_id: int  # >= 0: a follower broker; -1: a consumer
    max_bytes: int  # for the whole response
    isolation_level: int = 0  # 1: read_committed
    check_diverging: bool = False  # Fetch v12+: compare last_fetched_epoch with ours
    hard_max_bytes_limit: bool = False  # Fetch v0-2: no batch above partition_max_bytes


class ReadPartition(NamedTuple):
    """One partition to read: the fields of pybroker.fetch_session.FetchPartition that
    read_from_log uses (the Fetch handler passes its FetchPartitions, with ``topic`` the name
    resolved for this request)."""

    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    topic_id: Any = None  # Fetch v13+: the log must belong to this incarnation


class _ReadBudget:
    """What a read (read_from_log) has used so far: bytes left of max_bytes, bytes read, log
    regions (FileSlice) held."""

    __slots__ = ("remaining", "total", "regions")

    def __init__(self, max_bytes: int) -> None:
        self.remaining = max_bytes
        self.total = 0
        self.regions = 0


class LogReadResult(NamedTuple):
    """One partition's read (Kafka's LogReadResult)."""

    error: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: Any = None  # a pybroker.log.FileSlice or bytes (read_from_log), None: nothing read
    aborted_transactions: list[tuple[int, int]] | None = None  # (producer id, first offset)
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset) to truncate to
    idle: bool = False  # nothing to read: the fetcher is at the upper bound
    hw_caught_up: bool = False  # a follower's fetch brought a new leader's HW to its epoch start


_LEVELS = ("gzip", "lz4", "zstd")  # the codecs with a compression.<codec>.level


def validation_config(
    config: Config, topic_configs: dict[str, str], topic: str, partition: int
) -> ValidationConfig:
    """What a topic's configs (each falling back to its broker setting: pybroker/topic_config.py
    over ``Config.topic_defaults()``) ask of LogValidator: max.message.bytes, compression.type,
    compression.<codec>.level, cleanup.policy, message.timestamp.type and KIP-937's before/after bounds (each its own
    setting unless Long.MAX, then message.timestamp.difference.max.ms, as Kafka 3.9's
    LogConfig)."""
    defaults = config.topic_defaults()

    def get(name: str) -> Any:
        return topic_config.value(name, topic_configs, defaults)

    codec = get("compression.type")
    diff = get("message.timestamp.difference.max.ms")
    before = get("message.timestamp.before.max.ms")
    after = get("message.timestamp.after.max.ms")
    return ValidationConfig(
        topic_partition=f"{topic}-{partition}",
        max_message_bytes=get("max.message.bytes"),
        max_uncompressed_bytes=config.socket_request_max_bytes,
        target_codec=COMPRESSION_TYPES[codec],
        target_level=get(f"compression.{codec}.level") if codec in _LEVELS else None,
        compacted="compact" in get("cleanup.policy"),
        log_append_time=get("message.timestamp.type") == "LogAppendTime",
        timestamp_before_max_ms=before if before != LONG_MAX else diff,
        timestamp_after_max_ms=after if after != LONG_MAX else diff,
    )


def _inline(batches: list[BatchHeader]) -> bool:
    """Walked on the event loop first (with an INLINE_BYTES inflation budget): no
    uncompressed batch larger than that."""
    return all(b.compression != COMPRESSION_NONE or b.size <= INLINE_BYTES for b in batches)


async def _validate(
    buf: Any, batches: list[BatchHeader], config: ValidationConfig, now: int
) -> list[BatchHeader]:
    """validate_records on the loop while a batch inflates to at most INLINE_BYTES, else (and
    for large uncompressed batches) again in a worker thread with the whole budget."""
    if _inline(batches):
        inline_cap = min(config.max_uncompressed_bytes, INLINE_BYTES)
        try:
            return validate_records(buf, batches, config, now, max_uncompressed_bytes=inline_cap)
        except DecompressedSizeError:
            if inline_cap >= config.max_uncompressed_bytes:
                raise
    return await asyncio.get_running_loop().run_in_executor(
        None, validate_records, buf, batches, config, now
    )


def _settled(r: PartitionResponse, code: int) -> PartitionResponse:
    """An acks=all answer once the wait is over (the offset kept only for
    NOT_ENOUGH_REPLICAS_AFTER_APPEND, as Kafka)."""
    if code == ErrorCode.NONE:
        return r
    if code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
        return r._replace(error=code)
    return r._replace(error=code, base_offset=-1)


class ReplicaManager(PartitionReplicas):
    """The partitions' roles (the base class) and the append and read paths over them."""

    def __init__(
        self,
        *args: Any,
        config: Config,
        flusher: Flusher,
        metrics: BrokerMetrics | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.config = config  # the broker's (dynamic values read at use)
        self.flusher = flusher  # flush.messages / flush.ms after each append
        self.metrics = metrics  # BytesIn / MessagesIn (None: not counted)

    # -- append ---------------------------------------------------------------------------
    async def append_records(
        self,
        entries: Sequence[tuple[str, int, Any]],
        *,
        acks: int,
        timeout_ms: int,
        produce_version: int,
        transactional_id: str | None = None,
    ) -> list[PartitionResponse]:
        """Append each ``(topic, partition, records)`` in order as the leader (records: the
        Produce request's bytes, patched in place); one PartitionResponse each, in order.
        acks=-1: waits until the high watermark passes every appended batch or
        ``timeout_ms`` (REQUEST_TIMED_OUT)."""
        out: list[PartitionResponse] = []
        waits: list[tuple[int, asyncio.Future[int]]] = []
        deadline = self.clock.monotonic() + max(timeout_ms, 0) / 1000.0
        try:
            for n, (topic, partition, records) in enumerate(entries):
                if n and n % APPEND_SLICE == 0:
                    await asyncio.sleep(0)  # (each partition's leadership checked at its append)
                resp, replica, end = await self._append(
                    topic, partition, records, acks, produce_version, transactional_id
                )
                if replica is not None:  # acks=all: settled already when the ISR lags nothing
                    code = self.commit_result(replica, end, replica.leader_epoch)
                    if code is not None:
                        resp = _settled(resp, code)
                    else:  # its answer is fixed once the high watermark passes its end
                        left_ms = int((deadline - self.clock.monotonic()) * 1000)
                        wait = self.wait_for_commit(replica, end, left_ms)
                        waits.append((len(out), asyncio.ensure_future(wait)))
                out.append(resp)
            if waits:
                codes = await asyncio.gather(*(w for _, w in waits))
                for (i, _), code in zip(waits, codes, strict=True):
                    out[i] = _settled(out[i], code)
        except BaseException:  # (cancelled: the connection went) no wait outlives its request
            for _, w in waits:
                w.cancel()
            raise
        return out

    async def _from_legacy(self, topic: str, partition: int, records: Any, version: int) -> Any:
        """Produce v0-2 may carry message format v0/v1 (Kafka checks the magic from v3 only,
        in ProduceRequest.validateRecords: INVALID_RECORD): one v2 batch with its records
        (log/legacy_validator.py), converted on the loop when small and uncompressed, else in a
        worker thread.  The records as they are when their first entry is not v0/v1."""
        if records is None or len(records) <= MAGIC_OFFSET or records[MAGIC_OFFSET] >= 2:
            return records
        if version >= 3:
            raise InvalidRecordError(
                ErrorCode.INVALID_RECORD,
                f"Produce requests with version {version} are only allowed to contain record"
                " batches with magic version 2",
            )
        info = self.cluster.topics.get(topic)
        if info is None:  # deleted a moment ago
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic}")
        config = validation_config(self.config, info.configs, topic, partition)
        convert = functools.partial(
            up_convert,
            records,
            max_message_bytes=config.max_message_bytes,
            max_uncompressed_bytes=config.max_uncompressed_bytes,
            create_time=not config.log_append_time,
        )
        if len(records) <= LEGACY_INLINE_BYTES and not records[MAGIC_OFFSET + 1] & COMPRESSION_MASK:
            return bytearray(convert())
        return bytearray(await asyncio.get_running_loop().run_in_executor(None, convert))

    async def _append(
        self,
        topic: str,
        partition: int,
        records: Any,
        acks: int,
        version: int,
        transactional_id: str | None,
    ) -> tuple[PartitionResponse, Replica | None, int]:
        """Validate and append one partition's records: (answer, and for acks=all the replica
        and end offset the high watermark must reach)."""
        try:
            if topic in INTERNAL_TOPICS:
                raise KafkaError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {topic}"
                )
            self.leader_replica(topic, partition)
            try:
                records = await self._from_legacy(topic, partition, records, version)
                buf, batches = analyze_records(records)
            except InvalidRecordError as e:
                raise KafkaError(e.code, str(e)) from None
            if len(batches) != 1 and version >= 3:  # Kafka's ProduceRequest.validateRecords
                raise KafkaError(
                    ErrorCode.INVALID_RECORD,
                    f"Produce requests with version {version} must contain exactly one record"
                    " batch",
                )
            info = self.cluster.topics.get(topic)
            if info is None:  # deleted a moment ago; the replica goes when the change arrives
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic}")
            config = validation_config(self.config, info.configs, topic, partition)
            for b in batches:
                try:
                    check_batch_size(b, config)
                except InvalidRecordError as e:
                    raise KafkaError(e.code, str(e)) from None
                if b.compression == COMPRESSION_ZSTD and version < 7:
                    raise KafkaError(
                        ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "zstd needs Produce v7+"
                    )
                if b.is_transactional and transactional_id is None:
                    raise KafkaError(
                        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                        "transactional records without a transactional id",
                    )
            try:
                batches = await _validate(buf, batches, config, self.clock.time_ms())
            except RecordValidationError as e:
                errors = tuple(e.record_errors)
                return (
                    PartitionResponse(e.code, record_errors=errors, error_message=str(e)),
                    None,
                    0,
                )
            except InvalidRecordError as e:
                raise KafkaError(e.code, str(e)) from None
            # compression.type other than producer: batches in another codec are rebuilt
            codec = config.target_codec
            if codec is not None and any(b.compression != codec for b in batches):
                buf, batches = await asyncio.get_running_loop().run_in_executor(
                    None, recompress, buf, batches, codec, config.target_level
                )
            # the walk may have waited for a thread: leadership is checked again
            replica = self.leader_replica(topic, partition)
            log = replica.log
            if self.cluster.topics.get(topic) is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            if acks == -1:
                self.check_enough_replicas(replica)
            for b in batches:
                set_partition_leader_epoch(buf, b.position, replica.leader_epoch)
            try:
                appended = log.append(buf, batches)
            except OSError as e:  # the log dir failed: offline from now on (Kafka's answer)
                self.logs.fail_dir(self.logs.dir_of(log), e)
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{topic}-{partition}: {e}") from e
        except KafkaError as e:
            return PartitionResponse(e.code, error_message=str(e)), None, 0
        self.after_leader_append(replica)
        records_count = sum(b.records_count for b in batches)
        self.flusher.appended(topic, log, records_count)
        if self.metrics is not None:  # Kafka's BytesInPerSec / MessagesInPerSec
            self.metrics.produced(topic, len(buf), records_count)
        resp = PartitionResponse(
            ErrorCode.NONE, appended.first_offset, appended.log_append_time, log.log_start_offset
        )
        if acks == -1:
            return resp, replica, appended.last_offset + 1
        return resp, None, 0

    async def append_txn_marker(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
        timeout_ms: int,
    ) -> int:
        """A transaction coordinator's marker appended as the leader (Kafka's appendRecords
        with origin COORDINATOR and acks=-1): the error code once the high watermark passes it
        (or NOT_ENOUGH_REPLICAS, INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED, ...)."""
        replica = None
        try:
            info = self.cluster.topics.get(topic)
            if info is None or partition not in info.partitions:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            replica = self.leader_replica(topic, partition)
            self.check_enough_replicas(replica)
            log = replica.log
            appended = log.append_txn_marker(
                producer_id,
                producer_epoch,
                coordinator_epoch,
                committed,
                leader_epoch=replica.leader_epoch,
            )
        except KafkaError as e:
            return e.code
        except OSError as e:  # the log dir failed: offline from now on (Kafka's answer)
            self.logs.fail_dir(self.logs.dir_of(replica.log), e)
            return ErrorCode.KAFKA_STORAGE_ERROR
        self.after_leader_append(replica)
        self.flusher.appended(topic, log, 1)
        end = appended.last_offset + 1
        code = self.commit_result(replica, end, replica.leader_epoch)
        if code is None:
            code = await self.wait_for_commit(replica, end, timeout_ms)
        return code

    def append_as_coordinator(
        self,
        topic: str,
        partition: int,
        buf: bytearray,
        *,
        leader_epoch: int,
        timeout_ms: int,
    ) -> tuple[int, int] | Awaitable[tuple[int, int]]:
        """A coordinator's own v2 batch (one, built by it in ``buf`` with
        records.build_batch_buffer, so neither parsed nor validated again: its header is
        read back as built) appended as the leader in ``leader_epoch``
        (NOT_LEADER_OR_FOLLOWER once the epoch moved: the coordinator's fencing), then waited
        for as an acks=all produce (Kafka's appendRecords with origin COORDINATOR,
        requiredAcks -1).  (error code, the batch's last offset) when that is known at once
        (an error, or the in-sync replicas have it already: a partition with no other ISR
        member), else an awaitable of it (the wait for the high watermark): the coordinator's
        commit is then answered without a coroutine in between (issue 28)."""
        replica = None
        try:
            replica = self.leader_replica(topic, partition)
            if replica.leader_epoch != leader_epoch:
                raise KafkaError(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    f"{topic}-{partition} is at leader epoch {replica.leader_epoch}, not"
                    f" {leader_epoch}",
                )
            self.check_enough_replicas(replica)
            header = unpack_header(buf)
            if header.partition_leader_epoch != leader_epoch:
                set_partition_leader_epoch(buf, 0, leader_epoch)
            batches = [header]
            log = replica.log
            appended = log.append(buf, batches, coordinator=True)
        except KafkaError as e:
            return e.code, -1
        except InvalidRecordError as e:
            return e.code, -1
        except OSError as e:  # the log dir failed: offline from now on (Kafka's answer)
            self.logs.fail_dir(self.logs.dir_of(replica.log), e)
            return ErrorCode.KAFKA_STORAGE_ERROR, -1
        self.after_leader_append(replica)
        self.flusher.appended(topic, log, header.records_count)
        end = appended.last_offset + 1
        code = self.commit_result(replica, end, replica.leader_epoch)
        if code is None:
            return self._coordinator_wait(replica, end, timeout_ms, appended.last_offset)
        return code, appended.last_offset

    async def _coordinator_wait(
        self, replica: Replica, end: int, timeout_ms: int, last_offset: int
    ) -> tuple[int, int]:
        return await self.wait_for_commit(replica, end, timeout_ms), last_offset

    # -- ListOffsets by timestamp (Kafka's fetchOffsetForTimestamp) -------------------------
    async def offset_for_timestamp(self, log: PartitionLog, ts: int) -> tuple[int, int]:
        """(offset, timestamp) of the first record at or after ``ts`` and the log start: the
        time index finds the batch, a walk of it the record; (-1, -1) for none."""
        after = None
        while (got := log.batch_for_timestamp(ts, after)) is not None:
            h, data = got
            start = log.log_start_offset
            found = await self._find_record(
                h, data, lambda o, t, start=start: t >= ts and o >= start
            )
            if found is not None:
                return found
            after = h.next_offset
        return -1, -1

    async def offset_of_max_timestamp(self, log: PartitionLog) -> tuple[int, int]:
        """KIP-734: (offset, timestamp) of the record with the largest timestamp, or (-1, -1)."""
        got = log.batch_of_max_timestamp()
        if got is None:
            return -1, -1
        h, data, max_ts = got
        found = await self._find_record(h, data, lambda _o, t: t == max_ts)
        return found or (h.last_offset, max_ts)

    async def _find_record(
        self, h: BatchHeader, data: bytes, wanted: Callable[[int, int], bool]
    ) -> tuple[int, int] | None:
        """find_record on the loop for a small uncompressed batch, else in a worker thread."""
        h = h._replace(position=0)
        limit = self.config.socket_request_max_bytes
        if h.compression == COMPRESSION_NONE and h.size <= TIMESTAMP_INLINE_BYTES:
            return find_record(data, h, wanted, max_uncompressed_bytes=limit)
        return await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(find_record, data, h, wanted, max_uncompressed_bytes=limit)
        )

    # -- read -----------------------------------------------------------------------------
    async def read_from_log_in_slices(
        self, params: FetchParams, partitions: Sequence[ReadPartition]
    ) -> tuple[list[LogReadResult], int]:
        """read_from_log in slices of READ_SLICE partitions, the loop's other work between two
        (a follower's fetch of the 16,700 partitions a produce to each just wrote held the
        leader's loop for seconds); the answer is what one read_from_log would give."""
        if len(partitions) <= READ_SLICE:
            return self.read_from_log(params, partitions)
        budget = _ReadBudget(params.max_bytes)
        out: list[LogReadResult] = []
        for i in range(0, len(partitions), READ_SLICE):
            if i:
                await asyncio.sleep(0)  # (each partition's leadership checked at its read)
            out += self.read_from_log(params, partitions[i : i + READ_SLICE], budget)[0]
        return out, budget.total

    def read_from_log(
        self,
        params: FetchParams,
        partitions: Sequence[ReadPartition],
        budget: _ReadBudget | None = None,
    ) -> tuple[list[LogReadResult], int]:
        """Read each partition in order from this broker's leader replica: (one result each,
        the bytes read).  ``params.max_bytes`` bounds the total and ``partition_max_bytes``
        each partition, except that the first batch of the first partition with records is
        returned whole (KIP-74; not with ``hard_max_bytes_limit``, Fetch v0-2).  Followers (replica_id >= 0) read up to the log end and
        record their position (ISR, high watermark); consumers up to the high watermark, or
        below the last stable offset for read_committed, which also get the aborted
        transactions overlapping what they read.  ``budget``: what earlier slices of the same
        read used (read_from_log_in_slices)."""
        if budget is None:
            budget = _ReadBudget(params.max_bytes)
        remaining, total, regions = budget.remaining, budget.total, budget.regions
        out: list[LogReadResult] = []
        append = out.append
        lease_ok = self.lease_ok  # once a request, not per partition
        read = self._read
        # A consumer's partition with nothing to read (at the high watermark or LSO) that this
        # broker leads in the asked epoch: its answer without the full path (most partitions
        # of a full fetch of many partitions are such).  Anything else takes _read.
        idle_path = params.replica_id < 0 and lease_ok and not self.offline
        check_diverging = params.check_diverging
        read_committed = params.isolation_level == READ_COMMITTED
        replicas_get = self.replicas.get
        topics_get = self.cluster.topics.get
        last_topic: Any = None
        info: Any = None
        hard_limit = params.hard_max_bytes_limit
        for p in partitions:
            if idle_path:
                topic = p.topic
                if topic is not last_topic:
                    last_topic, info = topic, topics_get(topic)
                r = replicas_get((topic, p.partition))
                epoch = p.current_leader_epoch
                if (
                    r is not None
                    and info is not None
                    and r.checked_info is info
                    and r.role == LEADER
                    and (epoch < 0 or epoch == r.leader_epoch)
                    and not (check_diverging and p.last_fetched_epoch >= 0)
                    and (p.topic_id is None or p.topic_id == r.log.topic_id)
                ):
                    log = r.log
                    offset = p.fetch_offset
                    hw = log.high_watermark
                    lso = log.last_stable_offset
                    if offset == (lso if read_committed else hw) and offset >= log.log_start_offset:
                        aborted = [] if read_committed else None
                        append(
                            LogReadResult(
                                _NONE, hw, lso, log.log_start_offset, None, aborted, None, True
                            )
                        )
                        continue
            result = read(params, p, remaining, total == 0 and not hard_limit, lease_ok)
            records = result.records
            if records is not None:
                total += records.size
                remaining -= records.size
                regions += 1
                if regions > PINNED_REGIONS and records.size <= SMALL_REGION:
                    # read now: the region's descriptor is let go of at once
                    result = result._replace(records=records.read_bytes())
            append(result)
        budget.remaining, budget.total, budget.regions = remaining, total, regions
        return out, total

    def _read(
        self,
        params: FetchParams,
        p: ReadPartition,
        remaining: int,
        min_one_batch: bool,
        lease_ok: bool,
    ) -> LogReadResult:
        replica_id = params.replica_id
        topic, index = p.topic, p.partition
        log = None
        try:
            replica = self.leader_replica(topic, index, p.current_leader_epoch, lease_ok)
            log = replica.log
            if p.topic_id is not None and log.topic_id is not None and log.topic_id != p.topic_id:
                raise KafkaError(ErrorCode.INCONSISTENT_TOPIC_ID)
            offset = p.fetch_offset
            log_end = log.log_end_offset
            # the diverging epoch first, as Kafka's fetchRecords: a follower whose divergent
            # tail runs past our log end truncates at once rather than after OUT_OF_RANGE
            diverging = None
            if params.check_diverging and p.last_fetched_epoch >= 0:
                # the fetcher's last fetched epoch disagrees with our log (KIP-595 style)
                epoch, end = log.leader_epochs.end_offset_for(p.last_fetched_epoch, log_end)
                if epoch != p.last_fetched_epoch or end < offset:
                    diverging = (epoch, end)
            if diverging is None and (offset < log.log_start_offset or offset > log_end):
                raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE)
            caught_up = False
            if replica_id >= 0 and diverging is None:  # (may move the high watermark)
                caught_up = self.record_follower_fetch(replica, replica_id, offset)
            # Followers copy up to the log end; consumers see only what the ISR holds,
            # read_committed ones only what no open transaction may still abort.
            hw = log.high_watermark
            lso = log.last_stable_offset
            read_committed = params.isolation_level == READ_COMMITTED
            throttled = held = False
            if replica_id >= 0:
                upper = log.log_end_offset
                throttles = self.throttles
                throttled = throttles is not None and throttles.leader_throttled(topic, index)
                held = throttled and replica_id not in replica.isr and throttles.leader_exceeded()
            else:
                upper = lso if read_committed else hw
            region = None
            if offset < upper and diverging is None and remaining > 0 and not held:
                limit = min(p.partition_max_bytes, remaining)
                try:
                    region = log.read(offset, limit, min_one_batch=min_one_batch, max_offset=upper)
                except OSError as e:  # the log dir failed: offline from now on
                    self.logs.fail_dir(self.logs.dir_of(log), e)
                    raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR) from e
                if region is not None and region.size:
                    if throttled:
                        self.throttles.record_leader(region.size)
                else:
                    region = None
            aborted = None
            if read_committed and replica_id < 0:
                aborted = []
                if region is not None:
                    aborted = [
                        (a.producer_id, a.first_offset)
                        for a in log.collect_aborted_transactions(offset, upper)
                    ]
            return LogReadResult(
                _NONE,
                hw,
                lso,
                log.log_start_offset,
                region,
                aborted,
                diverging,
                idle=diverging is None and region is None and offset >= upper,
                hw_caught_up=caught_up,
            )
        except KafkaError as e:
            if e.code == ErrorCode.OFFSET_OUT_OF_RANGE and log is not None:
                return LogReadResult(
                    e.code, log.high_watermark, log.last_stable_offset, log.log_start_offset
                )
            return LogReadResult(e.code)


_NONE = ErrorCode.NONE

__all__ = [
    "FetchParams",
    "LogReadResult",
    "PartitionResponse",
    "ReadPartition",
    "ReplicaManager",
    "validation_config",
]
