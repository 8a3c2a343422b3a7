"""AddOffsetsToTxn (key 25), versions 0-4.

Adds the group's offsets partition, (__consumer_offsets, partitionFor(group_id)) with Kafka's
partitioning (coord/group/coordinator.py), to the producer's transaction, so the transaction's
marker reaches the group's coordinator, which then commits or drops the offsets the producer
sent with TxnOffsetCommit (coord/group/txn_offsets.py).  Errors as AddPartitionsToTxn's.

v4 (KIP-890) only tells the broker that the client knows TRANSACTION_ABORTABLE; pybroker
has no case that answers it, since partition leaders do not verify transactional appends
with the coordinator.
"""

from __future__ import annotations

from pybroker.coord.metadata.placement import OFFSETS_TOPIC
from pybroker.errors import ErrorCode
from pybroker.handlers._authz import on_group, on_txn
from pybroker.handlers._txn import coordinator, older_error
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


@handler(25, 0, 4)
async def add_offsets_to_txn(ctx: RequestContext, req: dict) -> dict:
    coord = coordinator(ctx)
    if not on_txn(ctx, Operation.WRITE, req["transactional_id"]):
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not on_group(ctx, Operation.READ, req["group_id"]):
        code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif coord is None or ctx.services.groups is None:
        code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    else:
        code = await coord.add_partitions(
            req["transactional_id"],
            req["producer_id"],
            req["producer_epoch"],
            [(OFFSETS_TOPIC, ctx.services.groups.partition_of(req["group_id"]))],
        )
    return {"throttle_time_ms": 0, "error_code": older_error(code, ctx.version, 2)}
