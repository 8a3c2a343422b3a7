"""Produce (key 0), versions 0-12.

Record batches of magic 2 are validated (sizes, CRC-32C, record count, codec), checked
against the idempotent producer's sequence state, and appended exactly as received: only
the base offset and the partition leader epoch (both outside the CRC) are patched, in the
request's own buffer, which the log writes once.  No decompression on this path.

acks: 0 (no response; an error closes the connection, as Kafka does), 1 and -1 (on one broker -1 means written to the leader's log; with
replication the wait moves to the purgatory).  Errors per partition, as Kafka answers:
UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, CORRUPT_MESSAGE, MESSAGE_TOO_LARGE
(a batch above max.message.bytes / message.max.bytes), UNSUPPORTED_COMPRESSION_TYPE (zstd
before v7), OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, INVALID_REQUIRED_ACKS.

Left out: magic 0/1 message sets are refused with UNSUPPORTED_FOR_MESSAGE_FORMAT (43) rather
than converted (every client pybroker targets writes magic 2 when Produce v3+ is offered);
transactions (a transactional batch or transactional_id gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
since no transaction coordinator exists); LogAppendTime topics.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers._topics import leader_log, max_message_bytes, partition_state
from pybroker.handlers.context import CloseConnection, RequestContext
from pybroker.registry import handler
from pybroker.wire.records import InvalidRecordError, parse_batches, set_partition_leader_epoch

ZSTD = 4


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


def _append(ctx: RequestContext, topic: str, index: int, records) -> dict:
    services = ctx.services
    try:
        log = leader_log(ctx, topic, index)
        state = partition_state(ctx, topic, index)
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
        limit = max_message_bytes(services.config, services.cluster.topics[topic].configs)
        for b in batches:
            if b.size > limit:
                raise KafkaError(
                    ErrorCode.MESSAGE_TOO_LARGE,
                    f"batch of {b.size} bytes exceeds max.message.bytes={limit}",
                )
            if b.compression == ZSTD and ctx.version < 7:
                raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "zstd needs Produce v7+")
            if b.is_transactional or b.is_control:
                raise KafkaError(
                    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "transactions are not supported by this broker",
                )
        for b in batches:
            set_partition_leader_epoch(records, b.position, state.leader_epoch)
        info = log.append(records, batches)
    except KafkaError as e:
        return _partition_error(index, e.code, str(e) if ctx.version >= 8 else None)
    services.purgatory.notify((topic, index))
    return {
        "index": index,
        "error_code": ErrorCode.NONE,
        "base_offset": info.first_offset,
        "log_append_time_ms": info.log_append_time,
        "log_start_offset": log.log_start_offset,
        "record_errors": [],
        "error_message": None,
    }


@handler(0, 0, 12)
async def produce(ctx: RequestContext, req: dict) -> dict | None:
    acks = req["acks"]
    responses = []
    for t in req["topic_data"]:
        topic = t["name"]
        parts = []
        for p in t["partition_data"]:
            if acks not in (0, 1, -1):
                parts.append(_partition_error(p["index"], ErrorCode.INVALID_REQUIRED_ACKS))
            elif req.get("transactional_id") is not None:
                parts.append(
                    _partition_error(p["index"], ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                )
            else:
                parts.append(_append(ctx, topic, p["index"], p["records"]))
        responses.append({"name": topic, "partition_responses": parts})
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
