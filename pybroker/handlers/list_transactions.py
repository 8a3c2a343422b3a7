"""ListTransactions (key 66), versions 0-1.

pybroker has no transaction coordinator and never has a transaction: the list is always
empty, with no error.  As Kafka's coordinator does, state filters that name no transaction
state are echoed back as unknown_state_filters; producer id (v0+) and duration (v1+) filters
can only narrow an empty list.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler

# kafka.coordinator.transaction.TransactionState names
STATES = frozenset(
    {
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
        "Dead",
        "PrepareEpochFence",
    }
)


@handler(66, 0, 1)
async def list_transactions(ctx: RequestContext, req: dict) -> dict:
    unknown = list(dict.fromkeys(s for s in req["state_filters"] if s not in STATES))
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "unknown_state_filters": unknown,
        "transaction_states": [],
    }
