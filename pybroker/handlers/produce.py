"""Produce (key 0), versions 0-12.

Record batches of magic 2 are validated (sizes, CRC-32C, record count, codec), checked
against the idempotent producer's sequence state, and appended exactly as received: only
the base offset and the partition leader epoch (both outside the CRC) are patched, in the
request's own buffer, which the log writes once.  Before that, every record of the batch is
walked as Kafka's LogValidator does (pybroker/log/validator.py: record structure, count, offset
deltas, sizes; compressed batches are decompressed as a bounded stream): a malformed batch gets
CORRUPT_MESSAGE / INVALID_RECORD / MESSAGE_TOO_LARGE and nothing is stored.  The batch's
maxTimestamp is set to its records' largest timestamp (CreateTime), as Kafka does, so the time
index and ListOffsets -3 point at a real record.  Small uncompressed batches are walked on the
event loop; a compressed one is walked on the loop only while it inflates to at most
INLINE_BYTES, else (and for large uncompressed ones) in a worker thread.  A connection handles
its requests one at a time and the partitions of a request in order, so waiting for the thread
keeps each producer's per-partition append order.

acks: 0 (no response; an error closes the connection, as Kafka does), 1 (written to the
leader's log) and -1 (the ISR must hold at least min.insync.replicas, else NOT_ENOUGH_REPLICAS
and nothing is appended; the answer waits until the high watermark passes the batch, i.e.
every ISR member has it, or timeout_ms: REQUEST_TIMED_OUT; NOT_ENOUGH_REPLICAS_AFTER_APPEND
when the ISR shrank below the minimum meanwhile).  Errors per partition, as Kafka answers:
UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, CORRUPT_MESSAGE, MESSAGE_TOO_LARGE
(a batch above max.message.bytes / message.max.bytes), UNSUPPORTED_COMPRESSION_TYPE (zstd
before v7), OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, INVALID_REQUIRED_ACKS, INVALID_RECORD
for records without a key on a compacted topic (each one in record_errors from v8, Kafka's
LogValidator.validateKey; this decompresses the batches of compacted topics only).

Transactions (KIP-98): transactional batches are appended and tracked per producer (the first
offset of its ongoing transaction; pybroker/log/producer_state.py), with the idempotent checks
plus INVALID_TXN_STATE for a non-transactional batch of a producer inside a transaction.  A
request carrying transactional batches without a transactional_id is refused with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition, as Kafka does (no authorizer: any
transactional_id is allowed).  Control batches (transaction markers) are the coordinator's
(WriteTxnMarkers): a client's is INVALID_RECORD ("clients may not write control batches", as
Kafka's LogValidator).

Left out: magic 0/1 message sets are refused with UNSUPPORTED_FOR_MESSAGE_FORMAT (43) rather
than converted (every client pybroker targets writes magic 2 when Produce v3+ is offered);
KIP-890's transaction verification (Kafka 3.6+ asks the transaction
coordinator whether the partition was added to the transaction before appending a
transactional batch).
"""

from __future__ import annotations

import asyncio
from typing import Any

from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers._authz import enabled, on_topic, on_txn
from pybroker.handlers._topics import (
    is_compacted,
    max_message_bytes,
    target_codec,
    timestamp_bounds,
)
from pybroker.handlers.context import CloseConnection, RequestContext
from pybroker.log.validator import (
    RecordValidationError,
    ValidationConfig,
    analyze_records,
    check_batch_size,
    recompress,
    validate_records,
)
from pybroker.registry import handler
from pybroker.security.acl import Operation
from pybroker.wire.compression import DecompressedSizeError
from pybroker.wire.records import (
    ATTRIBUTES_OFFSET,
    TRANSACTIONAL_MASK,
    BatchHeader,
    InvalidRecordError,
    set_partition_leader_epoch,
)

ZSTD = 4
INLINE_BYTES = 64 * 1024  # records walked on the event loop per batch, at most


def _partition_error(index: int, code: int, message: str | None = None) -> dict:
    return {
        "index": index,
        "error_code": code,
        "base_offset": -1,
        "log_append_time_ms": -1,
        "log_start_offset": -1,
        "record_errors": [],
        "error_message": message,
    }


def _record_errors(index: int, e: RecordValidationError, version: int) -> dict:
    """INVALID_RECORD / INVALID_TIMESTAMP with Kafka's per-record errors (v8+ carries them)."""
    entry = _partition_error(index, e.code)
    if version >= 8:
        entry["record_errors"] = [
            {"batch_index": i, "batch_index_error_message": m} for i, m in e.record_errors
        ]
        entry["error_message"] = str(e)
    return entry


def validation_config(
    config: Any, topic_configs: dict[str, str], topic: str, index: int
) -> ValidationConfig:
    """What the topic's configs (and the broker's) ask of LogValidator for one append."""
    before, after = timestamp_bounds(config, topic_configs)
    timestamp_type = topic_configs.get("message.timestamp.type", config.log_message_timestamp_type)
    return ValidationConfig(
        topic_partition=f"{topic}-{index}",
        max_message_bytes=max_message_bytes(config, topic_configs),
        max_uncompressed_bytes=config.socket_request_max_bytes,
        target_codec=target_codec(config, topic_configs),
        compacted=is_compacted(config, topic_configs),
        log_append_time=timestamp_type == "LogAppendTime",
        timestamp_before_max_ms=before,
        timestamp_after_max_ms=after,
    )


def _inline(batches: list[BatchHeader]) -> bool:
    """Walked on the event loop first (with a 64 KiB inflation budget): no uncompressed batch
    larger than that."""
    return all(b.compression != 0 or b.size <= INLINE_BYTES for b in batches)


async def _validate(
    buf: Any, batches: list[BatchHeader], config: ValidationConfig, now: int
) -> list[BatchHeader]:
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


async def _append(
    ctx: RequestContext,
    topic: str,
    index: int,
    records,
    acks: int,
    transactional_id: str | None = None,
) -> tuple[dict, Any]:
    """Validate and append one partition's batch; (response entry, (replica, end offset) to
    wait for when acks=all)."""
    services = ctx.services
    try:
        services.replicas.leader_replica(topic, index)
        try:
            buf, batches = analyze_records(records)
        except InvalidRecordError as e:
            raise KafkaError(e.code, str(e)) from None
        if len(batches) != 1 and ctx.version >= 3:  # as Kafka's ProduceRequest.validateRecords
            raise KafkaError(
                ErrorCode.INVALID_RECORD,
                f"Produce requests with version {ctx.version} must contain exactly one record batch",
            )
        info = services.cluster.topics.get(topic)
        if info is None:  # deleted a moment ago; the replica goes when the change arrives
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic}")
        config = validation_config(services.config, info.configs, topic, index)
        for b in batches:
            try:
                check_batch_size(b, config)
            except InvalidRecordError as e:
                raise KafkaError(e.code, str(e)) from None
            if b.compression == ZSTD and ctx.version < 7:
                raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "zstd needs Produce v7+")
            if b.is_transactional and transactional_id is None:
                raise KafkaError(
                    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "transactional records without a transactional id",
                )
        try:
            batches = await _validate(buf, batches, config, services.clock.time_ms())
        except RecordValidationError as e:
            return _record_errors(index, e, ctx.version), None
        except InvalidRecordError as e:
            raise KafkaError(e.code, str(e)) from None
        # compression.type other than producer: batches in another codec are rebuilt
        codec = config.target_codec
        if codec is not None and any(b.compression != codec for b in batches):
            buf, batches = await asyncio.get_running_loop().run_in_executor(
                None, recompress, buf, batches, codec
            )
        # the walk may have waited for a thread: leadership is checked again
        replica = services.replicas.leader_replica(topic, index)
        log = replica.log
        if services.cluster.topics.get(topic) is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if acks == -1:
            services.replicas.check_enough_replicas(replica)
        for b in batches:
            set_partition_leader_epoch(buf, b.position, replica.leader_epoch)
        try:
            info = log.append(buf, batches)
        except OSError as e:  # the log dir failed: offline from now on (Kafka's answer)
            services.logs.fail_dir(services.logs.dir_of(log), e)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{topic}-{index}: {e}") from e
    except KafkaError as e:
        return _partition_error(index, e.code, str(e) if ctx.version >= 8 else None), None
    services.replicas.after_leader_append(replica)
    records_count = sum(b.records_count for b in batches)
    services.flusher.appended(topic, log, records_count)
    metrics = services.metrics
    if metrics is not None:  # Kafka's BytesInPerSec / MessagesInPerSec (the request's batches)
        metrics.produced(topic, len(buf), records_count)
    entry = {
        "index": index,
        "error_code": ErrorCode.NONE,
        "base_offset": info.first_offset,
        "log_append_time_ms": info.log_append_time,
        "log_start_offset": log.log_start_offset,
        "record_errors": [],
        "error_message": None,
    }
    return entry, (replica, info.last_offset + 1) if acks == -1 else None


def _first_batch_transactional(records: Any) -> bool:
    """The transactional bit of the first batch's attributes (a cheap look; _append parses)."""
    return (
        records is not None
        and len(records) > ATTRIBUTES_OFFSET + 1
        and bool(records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_MASK)
    )


def _settle(entry: dict, code: int) -> None:
    if code != ErrorCode.NONE:
        entry["error_code"] = code
        if code != ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
            entry["base_offset"] = -1


async def _await_commit(ctx: RequestContext, entry: dict, wait: Any, timeout_ms: int) -> None:
    replica, end = wait
    _settle(entry, await ctx.services.replicas.wait_for_commit(replica, end, timeout_ms))


@handler(0, 0, 12)
async def produce(ctx: RequestContext, req: dict) -> dict | None:
    acks = req["acks"]
    replicas = ctx.services.replicas
    transactional_id = req.get("transactional_id")
    # Kafka refuses the whole request (ProduceRequest.hasTransactionalRecords) when it
    # carries transactional batches without a transactional id the principal may WRITE
    refuse_transactional = (
        transactional_id is None or not on_txn(ctx, Operation.WRITE, transactional_id)
    ) and any(
        _first_batch_transactional(p["records"])
        for t in req["topic_data"]
        for p in t["partition_data"]
    )
    checked = enabled(ctx)
    responses = []
    waits = []
    for t in req["topic_data"]:
        topic = t["name"]
        parts = []
        for p in t["partition_data"]:
            if acks not in (0, 1, -1):
                parts.append(_partition_error(p["index"], ErrorCode.INVALID_REQUIRED_ACKS))
            elif refuse_transactional:
                parts.append(
                    _partition_error(p["index"], ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                )
            elif checked and not on_topic(ctx, Operation.WRITE, topic):
                parts.append(_partition_error(p["index"], ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            else:
                entry, wait = await _append(
                    ctx, topic, p["index"], p["records"], acks, transactional_id
                )
                parts.append(entry)
                if wait is not None:
                    # settled already when the ISR is this broker alone (or lags nothing)
                    replica, end = wait
                    code = replicas.commit_result(replica, end, replica.leader_epoch)
                    if code is not None:
                        _settle(entry, code)
                    else:
                        waits.append(_await_commit(ctx, entry, wait, req["timeout_ms"]))
        responses.append({"name": topic, "partition_responses": parts})
    if waits:
        await asyncio.gather(*waits)
    if acks == 0:
        # No response carries errors for acks=0: Kafka closes the connection instead, so the
        # client notices and refreshes its metadata.
        failed = [
            (r["name"], p["index"], p["error_code"])
            for r in responses
            for p in r["partition_responses"]
            if p["error_code"]
        ]
        if failed:
            raise CloseConnection(f"acks=0 produce failed: {failed[:5]}")
        return None
    return {"responses": responses, "throttle_time_ms": 0}
