"""AddPartitionsToTxn (key 24), versions 0-3 (the clients' form).

The partitions join the producer's transaction at its coordinator (coord/transactions.py),
which persists them before answering; the first one starts the transaction (Ongoing) and its
timeout.  As Kafka answers: without WRITE on the transactional id every partition gets
TRANSACTIONAL_ID_AUTHORIZATION_FAILED; a partition of a topic the principal may not WRITE
gets TOPIC_AUTHORIZATION_FAILED, one of a topic that does not exist
UNKNOWN_TOPIC_OR_PARTITION, and every other partition of the request OPERATION_NOT_ATTEMPTED;
otherwise one code for all: NOT_COORDINATOR, INVALID_PRODUCER_ID_MAPPING,
PRODUCER_FENCED (INVALID_PRODUCER_EPOCH below v2), CONCURRENT_TRANSACTIONS while the previous
transaction's markers are being written, INVALID_TXN_STATE.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode
from pybroker.handlers._authz import on_topic, on_txn
from pybroker.handlers._txn import coordinator, older_error
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


@handler(24, 0, 3)
async def add_partitions_to_txn(ctx: RequestContext, req: dict) -> dict:
    topics = ctx.services.cluster.topics
    wanted = [
        (t["name"], p) for t in req["v3_and_below_topics"] for p in dict.fromkeys(t["partitions"])
    ]
    unknown = {(t, p) for t, p in wanted if t not in topics or p not in topics[t].partitions}
    coord = coordinator(ctx)
    tid = req["v3_and_below_transactional_id"]
    denied = {(t, p) for t, p in wanted if not on_topic(ctx, Operation.WRITE, t)}
    if not on_txn(ctx, Operation.WRITE, tid):
        codes = dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    elif denied or unknown:
        codes = {
            tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED
            if tp in denied
            else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if tp in unknown
            else ErrorCode.OPERATION_NOT_ATTEMPTED
            for tp in wanted
        }
    else:
        if coord is None:
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        else:
            code = await coord.add_partitions(
                req["v3_and_below_transactional_id"],
                req["v3_and_below_producer_id"],
                req["v3_and_below_producer_epoch"],
                wanted,
            )
        codes = dict.fromkeys(wanted, older_error(code, ctx.version, 2))
    by_topic: dict[str, list[dict]] = {}
    for (t, p), code in codes.items():
        by_topic.setdefault(t, []).append({"partition_index": p, "partition_error_code": code})
    return {
        "throttle_time_ms": 0,
        "results_by_topic_v3_and_below": [
            {"name": t, "results_by_partition": parts} for t, parts in by_topic.items()
        ],
    }
