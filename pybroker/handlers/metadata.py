"""Metadata (key 3), versions 0-12.

Brokers with their advertised endpoints and racks, the cluster id, the controller (always a
live broker), and per topic its id, partitions with leader, leader epoch, replicas, ISR and
offline replicas.  Topics are requested by name (v10+ may send topic ids; ids resolve to
names, an unknown id is UNKNOWN_TOPIC_ID; a topic given by id may carry an empty name, as
the Java client's do).  Auto-creation follows auto.create.topics.enable
and the request's allow_auto_topic_creation (v4+; always allowed before v4).  With no ACLs
every operation is authorized: the authorized-operations bit fields say so when asked (v8+).
With an authorizer (Kafka's rules): the list of all topics holds only those the principal may
DESCRIBE; a requested topic it may not DESCRIBE answers TOPIC_AUTHORIZATION_FAILED (also when
it does not exist, so its existence is not revealed); auto-creation needs CREATE on the
cluster or the topic (else UNKNOWN_TOPIC_OR_PARTITION); the bit fields are the principal's.

A topic's entry is encoded once per version and reused until the topic's metadata or the set of
live brokers changes (both are replaced, never mutated, by the cluster cache): with thousands
of partitions, building and encoding every partition on every request was the broker's whole
cost of a Metadata answer.
"""

from __future__ import annotations

import uuid
import weakref
from typing import TYPE_CHECKING, Any

from pybroker.coord.metadata.model import BrokerInfo, TopicInfo
from pybroker.coord.metadata.placement import INTERNAL_TOPICS
from pybroker.coord.metadata.topic_rules import validate_topic_name
from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers._authz import authorized_operations, enabled, on_cluster, on_topic
from pybroker.handlers._topics import auto_create
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import CLUSTER_NAME, Operation, ResourceType
from pybroker.wire.codec import Encoded, encode_struct
from pybroker.wire.schema import SCHEMAS

if TYPE_CHECKING:
    from pybroker.coord.metadata.cluster import Cluster

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
# AclOperation codes: READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8,
# DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11 (topic); CREATE, ALTER, DESCRIBE, CLUSTER_ACTION 9,
# DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE 12 (cluster).
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
ZERO_UUID = uuid.UUID(int=0)


METADATA = SCHEMAS.by_key[3].response


class _TopicEntries:
    """Encoded topic entries of one cluster's metadata cache, by topic name."""

    def __init__(self) -> None:
        # name -> (TopicInfo, brokers dict, {(version, include_ops, listener): Encoded})
        self.by_name: dict[
            str,
            tuple[TopicInfo, dict[int, BrokerInfo], dict[tuple[int, bool, str | None], Encoded]],
        ] = {}

    def get(self, ctx: RequestContext, info: TopicInfo, include_ops: bool) -> Encoded:
        brokers = ctx.services.cluster.metadata_brokers
        entry = self.by_name.get(info.name)
        if entry is None or entry[0] is not info or entry[1] is not brokers:
            entry = (info, brokers, {})
            self.by_name[info.name] = entry
        if include_ops and enabled(ctx):  # the operations are the principal's: not cached
            return encode_struct(
                METADATA, ("topics",), ctx.version, topic_metadata(ctx, info, include_ops)
            )
        key = (ctx.version, include_ops, ctx.listener)
        encoded = entry[2].get(key)
        if encoded is None:
            body = topic_metadata(ctx, info, include_ops)
            encoded = encode_struct(METADATA, ("topics",), ctx.version, body)
            entry[2][key] = encoded
        return encoded

    def prune(self, topics: dict) -> None:
        for name in [n for n in self.by_name if n not in topics]:
            del self.by_name[name]


_ENTRIES: weakref.WeakKeyDictionary[Cluster, _TopicEntries] = weakref.WeakKeyDictionary()


def _entries(cluster: Cluster) -> _TopicEntries:
    entries = _ENTRIES.get(cluster)
    if entries is None:
        entries = _ENTRIES[cluster] = _TopicEntries()
    return entries


def topic_metadata(ctx: RequestContext, info: TopicInfo, include_ops: bool) -> dict:
    live = ctx.services.cluster.metadata_brokers
    reachable = {b.id for b in live.values() if b.endpoint(ctx.listener) is not None}
    # a live leader without the request's listener: Kafka's LISTENER_NOT_FOUND (v6+)
    unreachable = (
        ErrorCode.LISTENER_NOT_FOUND if ctx.version >= 6 else ErrorCode.LEADER_NOT_AVAILABLE
    )
    partitions = []
    for index in sorted(info.partitions):
        p = info.partitions[index]
        if p.leader in reachable:
            leader_error = ErrorCode.NONE
        elif p.leader in live:
            leader_error = unreachable
        else:
            leader_error = ErrorCode.LEADER_NOT_AVAILABLE
        partitions.append(
            {
                "error_code": leader_error,
                "partition_index": index,
                "leader_id": p.leader if p.leader in reachable else -1,
                "leader_epoch": p.leader_epoch,
                "replica_nodes": list(p.replicas),
                "isr_nodes": list(p.isr),
                "offline_replicas": [r for r in p.replicas if r not in live],
            }
        )
    return {
        "error_code": ErrorCode.NONE,
        "name": info.name,
        "topic_id": info.topic_id,
        "is_internal": info.name in INTERNAL_TOPICS,
        "partitions": partitions,
        "topic_authorized_operations": (
            authorized_operations(ctx, ResourceType.TOPIC, info.name)
            if include_ops and enabled(ctx)
            else TOPIC_OPERATIONS
            if include_ops
            else AUTHORIZED_OPERATIONS_OMITTED
        ),
    }


@handler(3, 0, 12)
async def metadata(ctx: RequestContext, req: dict) -> dict:
    services = ctx.services
    cluster = services.cluster
    v = ctx.version
    include_ops = bool(req.get("include_topic_authorized_operations"))
    requested = req["topics"]
    if v == 0 and requested == []:
        requested = None  # v0: an empty list means all topics
    allow_auto = services.config.auto_create_topics_enable and (
        v < 4 or req.get("allow_auto_topic_creation", True)
    )

    entries = _entries(cluster)
    topics: list[Any] = []
    if len(entries.by_name) > len(cluster.topics):
        entries.prune(cluster.topics)  # deleted topics
    checked = enabled(ctx)
    if requested is None:
        for name in sorted(cluster.topics):
            if checked and not on_topic(ctx, Operation.DESCRIBE, name):
                continue
            topics.append(entries.get(ctx, cluster.topics[name], include_ops))
    else:
        by_id = {t.topic_id: t for t in cluster.topics.values()}
        for t in requested:
            name = t.get("name")
            topic_id = t.get("topic_id") or ZERO_UUID
            # by id: the Java client (4.x) sends the name as "" (its default) beside the id
            if not name and topic_id != ZERO_UUID:
                info = by_id.get(topic_id)
                if info is None:
                    topics.append(_error_topic(None, ErrorCode.UNKNOWN_TOPIC_ID, topic_id))
                    continue
                if checked and not on_topic(ctx, Operation.DESCRIBE, info.name):
                    topics.append(
                        _error_topic(None, ErrorCode.TOPIC_AUTHORIZATION_FAILED, topic_id)
                    )
                    continue
                topics.append(entries.get(ctx, info, include_ops))
                continue
            info = cluster.topics.get(name)
            describe_ok = not checked or on_topic(ctx, Operation.DESCRIBE, name)
            if info is not None and not describe_ok:
                topics.append(_error_topic(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            if info is None:
                try:
                    validate_topic_name(name)
                    create_ok = not checked or (
                        on_cluster(ctx, Operation.CREATE) or on_topic(ctx, Operation.CREATE, name)
                    )
                    if not allow_auto or not create_ok:
                        raise KafkaError(
                            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                            if describe_ok
                            else ErrorCode.TOPIC_AUTHORIZATION_FAILED
                        )
                    info = await auto_create(ctx, name)
                except KafkaError as e:
                    topics.append(_error_topic(name, e.code))
                    continue
            topics.append(entries.get(ctx, info, include_ops))

    advertised = {}
    for b in cluster.metadata_brokers.values():
        ep = b.endpoint(ctx.listener)
        if ep is not None:  # brokers without this listener are left out, as Kafka does
            advertised[b.id] = {"node_id": b.id, "host": ep[0], "port": ep[1], "rack": b.rack}
    return {
        "throttle_time_ms": 0,
        "brokers": [advertised[i] for i in sorted(advertised)],
        "cluster_id": cluster.cluster_id,
        "controller_id": cluster.controller_id if cluster.controller_id in cluster.brokers else -1,
        "topics": topics,
        "cluster_authorized_operations": (
            AUTHORIZED_OPERATIONS_OMITTED
            if not req.get("include_cluster_authorized_operations")
            else authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
            if checked
            else CLUSTER_OPERATIONS
        ),
    }


def _error_topic(name: str | None, code: int, topic_id: uuid.UUID = ZERO_UUID) -> dict:
    return {
        "error_code": code,
        "name": name,
        "topic_id": topic_id,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }
