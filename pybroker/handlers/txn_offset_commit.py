"""TxnOffsetCommit (key 28), versions 0-4.

Sent by a transactional producer to the group's coordinator (sendOffsetsToTransaction, after
AddOffsetsToTxn): the offsets stay pending (coord/group/txn_offsets.py) until the transaction's
marker commits them as the group's offsets, or drops them.  v3 (KIP-447) carries the consumer's
member id, group instance id and generation, checked as Kafka does: UNKNOWN_MEMBER_ID,
ILLEGAL_GENERATION, FENCED_INSTANCE_ID.  Other errors: NOT_COORDINATOR, INVALID_GROUP_ID,
UNKNOWN_TOPIC_OR_PARTITION, OFFSET_METADATA_TOO_LARGE, INVALID_PRODUCER_EPOCH (a producer
epoch older than the one of its pending offsets for the group).

v4 (KIP-890) only tells the broker that the client knows TRANSACTION_ABORTABLE; pybroker
has no case that answers it, since partition leaders do not verify transactional appends
with the coordinator.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode
from pybroker.handlers._authz import on_txn
from pybroker.handlers._groups import commit_checks, commit_response, coordinator_error
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


@handler(28, 0, 4)
async def txn_offset_commit(ctx: RequestContext, req: dict) -> dict:
    code = (
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        if not on_txn(ctx, Operation.WRITE, req["transactional_id"])
        else coordinator_error(ctx, req["group_id"])
    )
    results, wanted = commit_checks(ctx, req, code)
    if wanted:
        results.update(
            await ctx.services.groups.txn_commit(
                req["group_id"],
                req["producer_id"],
                req["producer_epoch"],
                req.get("member_id", ""),
                req.get("group_instance_id"),
                req.get("generation_id", -1),
                wanted,
            )
        )
    return commit_response(req, results)
