"""InitProducerId (key 22), versions 0-5.

Idempotent producers (transactional_id null) get a fresh producer id with epoch 0 every time,
as Kafka's transaction coordinator does for them (v3+ requests that carry the current id and
epoch are answered the same way: a new id supersedes the old one).  Producer ids come in
blocks claimed from the metadata store, so they stay unique across restarts and brokers.

With a transactional_id the request goes to the transaction coordinator
(coord/txn/coordinator.py): NOT_COORDINATOR unless this broker coordinates the id, the epoch
bumped (a new producer id once it is exhausted), an older instance fenced, an ongoing
transaction aborted first (CONCURRENT_TRANSACTIONS until its markers are written, which
clients retry), KIP-360's producer_id/producer_epoch (v3+) checked, and
INVALID_TRANSACTION_TIMEOUT above transaction.max.timeout.ms.  PRODUCER_FENCED is answered as
INVALID_PRODUCER_EPOCH below v4, as Kafka does.

v5 (KIP-890) only tells the broker that the client knows TRANSACTION_ABORTABLE; pybroker
has no case that answers it, since partition leaders do not verify transactional appends
with the coordinator.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers._authz import idempotent_write, on_txn
from pybroker.handlers._txn import coordinator, older_error
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


def _answer(code: int, pid: int = -1, epoch: int = -1) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": pid, "producer_epoch": epoch}


@handler(22, 0, 5)
async def init_producer_id(ctx: RequestContext, req: dict) -> dict:
    tid = req.get("transactional_id")
    if tid is not None:
        coord = coordinator(ctx)
        if tid == "":
            return _answer(ErrorCode.INVALID_REQUEST)
        if not on_txn(ctx, Operation.WRITE, tid):
            return _answer(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if coord is None:
            return _answer(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        code, pid, epoch = await coord.init_producer_id(
            tid,
            req["transaction_timeout_ms"],
            req.get("producer_id", -1),
            req.get("producer_epoch", -1),
        )
        return _answer(older_error(code, ctx.version, 4), pid, epoch)
    if not idempotent_write(ctx):
        return _answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    try:
        pid = await ctx.services.cluster.allocate_producer_id()
    except KafkaError as e:
        return _answer(e.code)
    return _answer(ErrorCode.NONE, pid, 0)
