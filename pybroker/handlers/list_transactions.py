"""ListTransactions (key 66), versions 0-1.

The transactions this broker coordinates (kafka-transactions.sh list asks every broker),
Dead ones left out, as Kafka's coordinator lists them: filtered by state names (names that are
no transaction state are echoed back as unknown_state_filters), by producer ids (v0+) and, v1+,
by duration (only transactions running longer than duration_filter ms; -1: all).
COORDINATOR_NOT_AVAILABLE while the broker cannot coordinate.
"""

from __future__ import annotations

from pybroker.coord.txn.state import TxnState
from pybroker.errors import ErrorCode
from pybroker.handlers._authz import on_txn
from pybroker.handlers._txn import coordinator
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation

STATES = frozenset(s.value for s in TxnState)


@handler(66, 0, 1)
async def list_transactions(ctx: RequestContext, req: dict) -> dict:
    unknown = list(dict.fromkeys(s for s in req["state_filters"] if s not in STATES))
    coord = coordinator(ctx)
    if coord is None:
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
            "unknown_state_filters": unknown,
            "transaction_states": [],
        }
    known = [s for s in req["state_filters"] if s in STATES]
    if req["state_filters"] and not known:
        listed = []  # only unknown states asked for: nothing matches
    else:
        listed = coord.list_states(req["producer_id_filters"], known)
    listed = [md for md in listed if on_txn(ctx, Operation.DESCRIBE, md.transactional_id)]
    duration = req.get("duration_filter", -1)
    if duration >= 0:
        now = ctx.services.clock.time_ms()
        listed = [md for md in listed if now - md.start_ms > duration]
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "unknown_state_filters": unknown,
        "transaction_states": [
            {
                "transactional_id": md.transactional_id,
                "producer_id": md.producer_id,
                "transaction_state": md.state.value,
            }
            for md in listed
        ],
    }
