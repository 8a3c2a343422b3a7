"""EndTxn (key 26), versions 0-4.

Commit or abort the producer's transaction: its coordinator persists PrepareCommit /
PrepareAbort and answers; the markers are written to every partition of the transaction in
the background (coord/txn/markers.py), then CompleteCommit / CompleteAbort is persisted
(coord/txn/coordinator.py).  Until then the next transaction's requests get
CONCURRENT_TRANSACTIONS, which clients retry.  A retried EndTxn of a completed transaction is
answered NONE; the opposite outcome INVALID_TXN_STATE.  PRODUCER_FENCED is answered as
INVALID_PRODUCER_EPOCH below v2.

v4 (KIP-890) only tells the broker that the client knows TRANSACTION_ABORTABLE; pybroker
has no case that answers it, since partition leaders do not verify transactional appends
with the coordinator.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode
from pybroker.handlers._authz import on_txn
from pybroker.handlers._txn import coordinator, older_error
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


@handler(26, 0, 4)
async def end_txn(ctx: RequestContext, req: dict) -> dict:
    coord = coordinator(ctx)
    if not on_txn(ctx, Operation.WRITE, req["transactional_id"]):
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif coord is None:
        code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    else:
        code = await coord.end_txn(
            req["transactional_id"], req["producer_id"], req["producer_epoch"], req["committed"]
        )
    return {"throttle_time_ms": 0, "error_code": older_error(code, ctx.version, 2)}
