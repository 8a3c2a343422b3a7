"""AddPartitionsToTxn (key 24), versions 0-5.

Versions 0-3 are the clients' form; 4-5 the brokers' batched form of KIP-890, authorized by
CLUSTER_ACTION (else a top-level CLUSTER_AUTHORIZATION_FAILED) and not per transactional id or
topic; a transaction marked verify_only is only checked: NONE for its partitions already in
the transaction, TRANSACTION_ABORTABLE (v4: INVALID_TXN_STATE) for the others, or the
producer's error for all (coord/txn_state.verify_partitions).  Otherwise, for each transaction:
the partitions join the producer's transaction at its coordinator (coord/txn/coordinator.py),
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
from pybroker.handlers._authz import on_cluster, on_topic, on_txn
from pybroker.handlers._txn import coordinator, older_error
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


async def _one(
    ctx: RequestContext, tid: str, pid: int, epoch: int, topics: list[dict], verify_only: bool
) -> list[dict]:
    """One transaction's partitions: the topic results (by Kafka's rules above)."""
    known = ctx.services.cluster.topics
    wanted = [(t["name"], p) for t in topics for p in dict.fromkeys(t["partitions"])]
    unknown = {(t, p) for t, p in wanted if t not in known or p not in known[t].partitions}
    coord = coordinator(ctx)
    brokers_form = ctx.version >= 4  # authorized by CLUSTER_ACTION as a whole
    denied = (
        set()
        if brokers_form
        else {tp for tp in wanted if not on_topic(ctx, Operation.WRITE, tp[0])}
    )
    if not brokers_form and not on_txn(ctx, Operation.WRITE, tid):
        codes = dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    elif brokers_form and not tid:
        codes = dict.fromkeys(wanted, ErrorCode.INVALID_REQUEST)
    elif denied or unknown:
        codes = {
            tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED
            if tp in denied
            else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if tp in unknown
            else ErrorCode.OPERATION_NOT_ATTEMPTED
            for tp in wanted
        }
    elif coord is None:
        codes = dict.fromkeys(wanted, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    elif verify_only:
        codes = await coord.verify_partitions(tid, pid, epoch, wanted)
    else:
        code = await coord.add_partitions(tid, pid, epoch, wanted)
        codes = dict.fromkeys(wanted, older_error(code, ctx.version, 2))
    if ctx.version == 4:  # TRANSACTION_ABORTABLE is v5's
        codes = {
            tp: ErrorCode.INVALID_TXN_STATE if c == ErrorCode.TRANSACTION_ABORTABLE else c
            for tp, c in codes.items()
        }
    by_topic: dict[str, list[dict]] = {}
    for (t, p), code in codes.items():
        by_topic.setdefault(t, []).append({"partition_index": p, "partition_error_code": code})
    return [{"name": t, "results_by_partition": parts} for t, parts in by_topic.items()]


@handler(24, 0, 5)
async def add_partitions_to_txn(ctx: RequestContext, req: dict) -> dict:
    if ctx.version < 4:
        results = await _one(
            ctx,
            req["v3_and_below_transactional_id"],
            req["v3_and_below_producer_id"],
            req["v3_and_below_producer_epoch"],
            req["v3_and_below_topics"],
            False,
        )
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": results}
    if not on_cluster(ctx, Operation.CLUSTER_ACTION):
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "results_by_transaction": [],
        }
    out = []
    for txn in req["transactions"]:
        topic_results = await _one(
            ctx,
            txn["transactional_id"],
            txn["producer_id"],
            txn["producer_epoch"],
            txn["topics"],
            txn["verify_only"],
        )
        out.append({"transactional_id": txn["transactional_id"], "topic_results": topic_results})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results_by_transaction": out}
