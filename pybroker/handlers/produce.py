"""Produce (key 0), versions 0-12.  This module decodes, authorizes and answers; the append is the
replica manager's (ReplicaManager.append_records, as Kafka's ReplicaManager.appendRecords):
batches are validated as Kafka's LogValidator does (nothing of a malformed batch is stored),
checked against the producer's sequence and transaction state, and appended exactly as
received, only the base offset and partition leader epoch patched.  acks 0 (an error closes
the connection), 1 (the leader's log) and -1 (min.insync.replicas, then the high watermark).
Message sets v0/v1 on Produce v0-2 become one v2 batch first.  Left out: KIP-890's transaction
verification.  Errors and transactions: docs/internals.md ("pybroker/handlers/produce.py").
"""

from __future__ import annotations

from typing import Any

from pybroker.errors import ErrorCode
from pybroker.handlers._authz import enabled, on_topic, on_txn
from pybroker.handlers.context import CloseConnection, RequestContext
from pybroker.registry import handler
from pybroker.replica_manager import PartitionResponse
from pybroker.security.acl import Operation
from pybroker.wire.records import ATTRIBUTES_OFFSET, TRANSACTIONAL_MASK

MAGIC_OFFSET = 16  # of every entry: v0/v1 messages and v2 batches alike


def _partition_response(index: int, r: PartitionResponse, version: int) -> dict:
    v8 = version >= 8  # record_errors and error_message exist from v8
    return {
        "index": index,
        "error_code": r.error,
        "base_offset": r.base_offset,
        "log_append_time_ms": r.log_append_time,
        "log_start_offset": r.log_start_offset,
        "record_errors": [
            {"batch_index": i, "batch_index_error_message": m} for i, m in r.record_errors
        ]
        if v8
        else [],
        "error_message": r.error_message if v8 else None,
    }


def _first_batch_transactional(records: Any) -> bool:
    """The transactional bit of the first batch's attributes (a cheap look; the replica
    manager parses)."""
    return (
        records is not None
        and len(records) > ATTRIBUTES_OFFSET + 1
        and records[MAGIC_OFFSET] == 2  # a v0/v1 message has a key or timestamp byte there
        and bool(records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_MASK)
    )


@handler(0, 0, 12)
async def produce(ctx: RequestContext, req: dict) -> dict | None:
    acks = req["acks"]
    version = ctx.version
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
    appends = []  # (topic, partition, records) for the replica manager, in request order
    slots = []  # where each append's answer goes
    for t in req["topic_data"]:
        topic = t["name"]
        parts = []
        for p in t["partition_data"]:
            index = p["index"]
            if acks not in (0, 1, -1):
                code = ErrorCode.INVALID_REQUIRED_ACKS
            elif refuse_transactional:
                code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            elif checked and not on_topic(ctx, Operation.WRITE, topic):
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            else:
                appends.append((topic, index, p["records"]))
                slots.append((parts, len(parts)))
                parts.append(None)
                continue
            parts.append(_partition_response(index, PartitionResponse(code), version))
        responses.append({"name": topic, "partition_responses": parts})
    if appends:
        answers = await ctx.services.replicas.append_records(
            appends,
            acks=acks,
            timeout_ms=req["timeout_ms"],
            produce_version=version,
            transactional_id=transactional_id,
        )
        for (parts, i), (_, index, _), r in zip(slots, appends, answers, strict=True):
            parts[i] = _partition_response(index, r, version)
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
