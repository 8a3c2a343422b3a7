"""Authorization checks the handlers make, as Kafka's KafkaApis makes them (security/acl.py,
security/authorizer.py).  Without an authorizer (authorizer.class.name unset) everything is
allowed, as in Kafka."""

from __future__ import annotations

from pybroker.handlers.context import RequestContext
from pybroker.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, Operation, ResourceType
from pybroker.security.sasl import ANONYMOUS


def principal(ctx: RequestContext) -> str:
    return ctx.session.principal if ctx.session is not None else ANONYMOUS


def host(ctx: RequestContext) -> str:
    peer = ctx.peer
    return str(peer[0]) if isinstance(peer, tuple) and peer else "*"


def allowed(ctx: RequestContext, op: Operation, rtype: ResourceType, name: str) -> bool:
    a = ctx.services.authorizer
    if a is None:
        return True
    return a.authorize(principal(ctx), host(ctx), op, rtype, name)


def on_cluster(ctx: RequestContext, op: Operation) -> bool:
    return allowed(ctx, op, ResourceType.CLUSTER, CLUSTER_NAME)


def on_topic(ctx: RequestContext, op: Operation, topic: str) -> bool:
    return allowed(ctx, op, ResourceType.TOPIC, topic)


def on_group(ctx: RequestContext, op: Operation, group: str) -> bool:
    return allowed(ctx, op, ResourceType.GROUP, group)


def on_txn(ctx: RequestContext, op: Operation, transactional_id: str) -> bool:
    return allowed(ctx, op, ResourceType.TRANSACTIONAL_ID, transactional_id)


def enabled(ctx: RequestContext) -> bool:
    return ctx.services.authorizer is not None


def authorized_operations(ctx: RequestContext, rtype: ResourceType, name: str) -> int:
    """Kafka's authorized-operations bit field (Metadata v8+, DescribeGroups v3+,
    DescribeCluster): bit ``op`` set for each operation of the resource type allowed."""
    return sum(1 << op for op in SUPPORTED_OPERATIONS[rtype] if allowed(ctx, op, rtype, name))


def idempotent_write(ctx: RequestContext) -> bool:
    """An idempotent producer: IDEMPOTENT_WRITE on the cluster, or WRITE on any topic
    (KIP-679, Kafka 3.0+)."""
    a = ctx.services.authorizer
    if a is None:
        return True
    return on_cluster(ctx, Operation.IDEMPOTENT_WRITE) or a.authorize_any(
        principal(ctx), host(ctx), Operation.WRITE, ResourceType.TOPIC
    )
