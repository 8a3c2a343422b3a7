"""DescribeTransactions (key 65), version 0.

Each transactional.id's state at its coordinator (kafka-transactions.sh describe,
Admin.describeTransactions): state, timeout, start time (-1 outside a transaction), producer
id and epoch, and the partitions of the current transaction (Kafka lists those that have no
marker yet; pybroker lists the transaction's partitions until it completes).  Errors per id:
NOT_COORDINATOR (ask FindCoordinator with key_type 1), TRANSACTIONAL_ID_NOT_FOUND (unknown or
expired), COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode
from pybroker.handlers._authz import on_txn
from pybroker.handlers._txn import coordinator
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


def _state(tid: str, code: int, md=None) -> dict:
    topics: dict[str, list[int]] = {}
    if md is not None:
        for t, p in sorted(md.partitions):
            topics.setdefault(t, []).append(p)
    return {
        "error_code": code,
        "transactional_id": tid,
        "transaction_state": md.state.value if md is not None else "",
        "transaction_timeout_ms": md.timeout_ms if md is not None else 0,
        "transaction_start_time_ms": md.start_ms if md is not None else -1,
        "producer_id": md.producer_id if md is not None else -1,
        "producer_epoch": md.producer_epoch if md is not None else -1,
        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
    }


@handler(65, 0, 0)
async def describe_transactions(ctx: RequestContext, req: dict) -> dict:
    coord = coordinator(ctx)
    states = []
    for tid in req["transactional_ids"]:
        if not on_txn(ctx, Operation.DESCRIBE, tid):
            states.append(_state(tid, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
            continue
        if coord is None:
            states.append(_state(tid, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            continue
        code, md = await coord.describe(tid)
        states.append(_state(tid, code, md))
    return {"throttle_time_ms": 0, "transaction_states": states}
