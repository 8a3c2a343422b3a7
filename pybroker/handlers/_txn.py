"""What the transaction handlers share: the coordinator check and Kafka's error down-mapping."""

from __future__ import annotations

from pybroker.coord.txn.coordinator import TransactionCoordinator
from pybroker.errors import ErrorCode
from pybroker.handlers.context import RequestContext


def older_error(code: int, version: int, fenced_since: int) -> int:
    """PRODUCER_FENCED is answered only to versions that know it (Kafka's KafkaApis: older
    ones get INVALID_PRODUCER_EPOCH)."""
    if code == ErrorCode.PRODUCER_FENCED and version < fenced_since:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


def coordinator(ctx: RequestContext) -> TransactionCoordinator | None:
    """The broker's transaction coordinator; None while the broker is starting, or while its
    ZooKeeper session is suspended or lost (another broker may be coordinating)."""
    if not ctx.services.cluster.session_ok:
        return None
    return ctx.services.transactions
