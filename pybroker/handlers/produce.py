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
import functools
from typing import Any

from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers._authz import enabled, on_topic, on_txn
from pybroker.handlers._topics import (
    LONG_MAX,
    is_compacted,
    max_message_bytes,
    target_codec,
    timestamp_bounds,
)
from pybroker.handlers.context import CloseConnection, RequestContext
from pybroker.log.compacted_records import (
    compacted_topic_record_errors,
    read_records,
    rebuild_batch,
    record_errors_message,
)
from pybroker.log.validator import ValidationResult, validate_batch
from pybroker.registry import handler
from pybroker.security.acl import Operation
from pybroker.wire.compression import DecompressedSizeError
from pybroker.wire.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CREATE_TIME,
    LOG_APPEND_TIME,
    TRANSACTIONAL_MASK,
    BatchHeader,
    InvalidRecordError,
    parse_batches,
    set_max_timestamp,
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


def _record_errors(
    index: int, errors: list[tuple[int, str]], version: int, code: int = ErrorCode.INVALID_RECORD
) -> dict:
    """INVALID_RECORD (or ``code``) with Kafka's per-record errors (v8+ carries them)."""
    entry = _partition_error(index, code)
    if version >= 8:
        entry["record_errors"] = [
            {"batch_index": i, "batch_index_error_message": m} for i, m in errors
        ]
        entry["error_message"] = (
            "One or more records have been rejected due to invalid timestamp"
            if code == ErrorCode.INVALID_TIMESTAMP
            else record_errors_message(errors)
        )
    return entry


def timestamp_errors(
    now: int, config: Any, topic_configs: dict[str, str], records: Any, batches: list[BatchHeader]
) -> list[tuple[int, str]]:
    """Kafka's LogValidator.validateTimestamp: ``(batchIndex, message)`` of every record that
    on a CreateTime topic has its own timestamp (not -1) more than
    message.timestamp.before.max.ms before now or more than message.timestamp.after.max.ms
    after it (KIP-937), and of every other record of a batch the producer marked
    LogAppendTime (which Kafka refuses on any topic)."""
    create_time = (
        topic_configs.get("message.timestamp.type", config.log_message_timestamp_type)
        == "CreateTime"
    )
    before, after = timestamp_bounds(config, topic_configs)
    bounded = create_time and (before != LONG_MAX or after != LONG_MAX)
    out: list[tuple[int, str]] = []
    mv = memoryview(records)
    for h in batches:
        producer_lat = h.timestamp_type == LOG_APPEND_TIME
        if not bounded and not producer_lat:
            continue  # the default: nothing to walk
        _, recs = read_records(bytes(mv[h.position : h.position + h.size]))
        for i, r in enumerate(recs):
            diff = now - r.timestamp
            if create_time and r.timestamp != -1 and (diff > before or -diff > after):
                out.append(
                    (
                        i,
                        f"Timestamp {r.timestamp} of message with offset {r.offset} is out of"
                        f" range. The timestamp should be within [{now - before},"
                        f" {now + after}]",
                    )
                )
            elif producer_lat:
                out.append(
                    (
                        i,
                        f"Invalid timestamp type in message (offset={r.offset},"
                        f" timestamp={r.timestamp}). Producer should not set timestamp type to"
                        " LogAppendTime.",
                    )
                )
    return out


def _recompress_sync(
    records: Any, batches: list[BatchHeader], codec: int
) -> tuple[bytearray, list[BatchHeader]]:
    mv = memoryview(records)
    out = bytearray()
    for h in batches:
        raw = bytes(mv[h.position : h.position + h.size])
        if h.compression == codec:
            out += raw
            continue
        _, recs = read_records(raw)
        attrs = (h.attributes & ~COMPRESSION_MASK) | codec
        out += rebuild_batch(h._replace(attributes=attrs), recs)
    return out, parse_batches(out)


async def _recompress(
    records: Any, batches: list[BatchHeader], codec: int
) -> tuple[bytearray, list[BatchHeader]]:
    """Kafka's LogValidator when the topic's compression.type differs from the batch's codec:
    a new batch in the topic's codec, with the records, producer fields (id, epoch, base
    sequence, transactional flag) and timestamps kept.  Off the event loop (a thread)."""
    return await asyncio.get_running_loop().run_in_executor(
        None, _recompress_sync, records, batches, codec
    )


async def _validate(
    ctx: RequestContext, records: Any, h: BatchHeader, limit: int
) -> ValidationResult:
    cap = ctx.services.config.socket_request_max_bytes
    if h.compression == 0 and h.size > INLINE_BYTES:
        inline_cap = 0  # straight to the thread
    else:
        inline_cap = min(cap, INLINE_BYTES)
        try:
            return validate_batch(
                records, h, max_record_bytes=limit, max_uncompressed_bytes=inline_cap
            )
        except DecompressedSizeError:
            if inline_cap >= cap:
                raise
    return await asyncio.get_running_loop().run_in_executor(
        None,
        functools.partial(
            validate_batch, records, h, max_record_bytes=limit, max_uncompressed_bytes=cap
        ),
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
        if records is None or len(records) == 0:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "no record batch in the request")
        try:
            batches = parse_batches(records)
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
        limit = max_message_bytes(services.config, info.configs)
        for b in batches:
            if b.size > limit:
                raise KafkaError(
                    ErrorCode.MESSAGE_TOO_LARGE,
                    f"batch of {b.size} bytes exceeds max.message.bytes={limit}",
                )
            if b.compression == ZSTD and ctx.version < 7:
                raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "zstd needs Produce v7+")
            if b.is_transactional and transactional_id is None:
                raise KafkaError(
                    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "transactional records without a transactional id",
                )
        for i, b in enumerate(batches):
            try:
                result = await _validate(ctx, records, b, limit)
            except InvalidRecordError as e:
                raise KafkaError(e.code, str(e)) from None
            if b.timestamp_type == CREATE_TIME and result.max_timestamp != b.max_timestamp:
                set_max_timestamp(records, b.position, CREATE_TIME, result.max_timestamp)
                batches[i] = b._replace(max_timestamp=result.max_timestamp)
        # compression.type other than producer: batches in another codec are rebuilt
        codec = target_codec(services.config, info.configs)
        if codec is not None and any(b.compression != codec for b in batches):
            records, batches = await _recompress(records, batches, codec)
        # the walk may have waited for a thread: leadership is checked again
        replica = services.replicas.leader_replica(topic, index)
        log = replica.log
        info = services.cluster.topics.get(topic)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        errors = timestamp_errors(
            services.clock.time_ms(), services.config, info.configs, records, batches
        )
        if errors:
            return _record_errors(index, errors, ctx.version, ErrorCode.INVALID_TIMESTAMP), None
        if is_compacted(services.config, info.configs):
            errors = compacted_topic_record_errors(records, batches, f"{topic}-{index}")
            if errors:
                return _record_errors(index, errors, ctx.version), None
        if acks == -1:
            services.replicas.check_enough_replicas(replica)
        for b in batches:
            set_partition_leader_epoch(records, b.position, replica.leader_epoch)
        try:
            info = log.append(records, batches)
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
        metrics.produced(topic, len(records), records_count)
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
