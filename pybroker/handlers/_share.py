"""Shared by the share-group handlers (KIP-932): is the feature on, Kafka's member-id check,
where a partition's leader is."""

from __future__ import annotations

import asyncio
from typing import Any

from pybroker.coord.metadata.paths import MAX_NAME_CHARS
from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers._authz import on_group, on_topic
from pybroker.handlers._topic_ids import Resolver
from pybroker.handlers.context import RequestContext
from pybroker.replication.client import BrokerConnection
from pybroker.security import listeners as listener_security
from pybroker.security.acl import Operation
from pybroker.share.manager import settle

# ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch, ShareAcknowledge,
# DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets
SHARE_APIS = (76, 77, 78, 79, 90, 91, 92)
SHARE_VERSION = 1  # the share.version feature level served (Kafka 4.2's)


def share_enabled(ctx: RequestContext) -> bool:
    """group.share.enable (share.version finalized at 1); the share services exist then."""
    return bool(ctx.services.config.group_share_enable) and (ctx.services.share_groups is not None)


def member_id_valid(member_id: str | None) -> bool:
    """Kafka's isMemberIdValid: present, not empty, at most 36 characters."""
    return bool(member_id) and len(member_id) <= 36


def session_request_error(ctx: RequestContext, req: dict) -> tuple[int, str | None] | None:
    """The checks ShareFetch and ShareAcknowledge open with (Kafka's handleShareFetchRequest and
    handleShareAcknowledgeRequest): share groups on, a group id (INVALID_REQUEST), READ on the
    group, a valid member id (INVALID_REQUEST); (error code, message), or None."""
    if not share_enabled(ctx):
        return ErrorCode.UNSUPPORTED_VERSION, None
    gid = req.get("group_id")
    if gid is None:
        return ErrorCode.INVALID_REQUEST, "Invalid group id in the request."
    if not on_group(ctx, Operation.READ, gid):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    if len(gid) > MAX_NAME_CHARS:  # pybroker's bound on stored names
        return ErrorCode.INVALID_REQUEST, "Invalid group id in the request."
    if not member_id_valid(req.get("member_id")):
        return ErrorCode.INVALID_REQUEST, "Invalid member id in the request."
    return None


def top_level_error(code: int, message: str | None = None) -> dict:
    """ShareFetch's and ShareAcknowledge's answer to a request refused whole."""
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "error_message": message,
        "acquisition_lock_timeout_ms": 0,
        "responses": [],
        "node_endpoints": [],
    }


def current_leader(ctx: RequestContext, topic: str | None, partition: int) -> tuple[int, int]:
    """(leader id, leader epoch) from the cluster metadata; (-1, -1) when unknown."""
    info = ctx.services.cluster.topics.get(topic) if topic is not None else None
    state = info.partitions.get(partition) if info is not None else None
    if state is None:
        return -1, -1
    return state.leader, state.leader_epoch


def node_endpoints(ctx: RequestContext, node_ids: set[int]) -> list[dict[str, Any]]:
    nodes = []
    for node_id in sorted(n for n in node_ids if n >= 0):
        b = ctx.services.cluster.brokers.get(node_id)
        ep = b.endpoint(ctx.listener) if b is not None else None
        if ep is not None:
            nodes.append({"node_id": node_id, "host": ep[0], "port": ep[1], "rack": b.rack})
    return nodes


def _batches_invalid(batches: list[dict], max_type: int, is_renew_ack: bool) -> bool:
    """Kafka's validateAcknowledgementBatches for one partition: ordered, non-empty types,
    one type or one per offset, types within range, Renew only in a renew request."""
    prev_end = -1
    for b in batches:
        first, last, types = b["first_offset"], b["last_offset"], b["acknowledge_types"]
        if first > last or first < prev_end or not types:
            return True
        if len(types) > 1 and last - first != len(types) - 1:
            return True
        if any(t < 0 or t > max_type for t in types):
            return True
        if 4 in types and not is_renew_ack:
            return True
        prev_end = last
    return False


async def acknowledge_all(
    ctx: RequestContext,
    group_id: str,
    member_id: str,
    topics: list[dict],
    *,
    supports_renew: bool,
    is_renew_ack: bool,
) -> dict[tuple[Any, int], tuple[int, str | None, Any]]:
    """Apply the acknowledgements of a ShareFetch or ShareAcknowledge to the share-partitions
    (Kafka's handleAcknowledgements): {(topic id, partition): (error code, message, the write
    to wait for or None)} for every partition that carried a list of batches.  ``settled``
    turns that into the answers once the writes are done."""
    resolver = Resolver(ctx.services.cluster)
    shares = ctx.services.shares
    max_type = 4 if supports_renew else 3
    results: dict[tuple[Any, int], tuple[int, str | None, Any]] = {}
    work = []
    for t in topics:
        tid = t["topic_id"]
        name = resolver.name(tid)
        for p in t["partitions"]:
            batches = p.get("acknowledgement_batches")
            if batches is None:
                continue
            key = (tid, p["partition_index"])
            if name is None:
                results[key] = (ErrorCode.UNKNOWN_TOPIC_ID, None, None)
            elif _batches_invalid(batches, max_type, is_renew_ack):
                results[key] = (ErrorCode.INVALID_REQUEST, None, None)
            elif not on_topic(ctx, Operation.READ, name):
                results[key] = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, None)
            elif p["partition_index"] not in ctx.services.cluster.topics[name].partitions:
                results[key] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, None)
            elif not batches:
                results[key] = (ErrorCode.NONE, None, None)
            else:
                acks = [
                    (b["first_offset"], b["last_offset"], list(b["acknowledge_types"]))
                    for b in batches
                ]
                work.append((key, name, acks))
    for key, name, acks in work:  # one at a time: applied in the request's order
        results[key] = await shares.apply_acknowledgements(
            group_id, member_id, name, key[0], key[1], acks
        )
    return results


async def settled(
    pending: dict[tuple[Any, int], tuple[int, str | None, Any]],
) -> dict[tuple[Any, int], tuple[int, str | None]]:
    """The acknowledgements' answers, once their writes are done."""
    return {key: await settle(*outcome) for key, outcome in pending.items()}


def partition_entry(
    index: int, code: int, message: str | None, leader: tuple[int, int]
) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": code,
        "error_message": message,
        "current_leader": {"leader_id": leader[0], "leader_epoch": leader[1]},
    }


async def end_offsets(ctx: RequestContext, partitions: list[tuple[str, int]]) -> dict:
    """{(topic, partition): high watermark} for the lag: from the local log where this broker
    leads, else ListOffsets (latest) to the leader; partitions that cannot be asked are left
    out (their lag is -1)."""
    out: dict[tuple[str, int], int] = {}
    remote: dict[int, list[tuple[str, int]]] = {}
    for topic, p in partitions:
        try:
            out[(topic, p)] = ctx.services.replicas.leader_replica(topic, p).log.high_watermark
            continue
        except KafkaError:
            pass
        leader, _ = current_leader(ctx, topic, p)
        if leader >= 0:
            remote.setdefault(leader, []).append((topic, p))
    cfg = ctx.services.config
    for node, tps in remote.items():
        b = ctx.services.cluster.brokers.get(node)
        ep = b.endpoint(cfg.inter_broker_listener) if b is not None else None
        if ep is None:
            continue
        conn = BrokerConnection(
            ep[0], ep[1], f"broker-{cfg.broker_id}-share-lag", timeout_s=5.0,
            ssl=listener_security.inter_broker_ssl_context(cfg),
            sasl=listener_security.inter_broker_sasl(cfg),
        )  # fmt: skip
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        body = {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": t,
                    "partitions": [
                        {"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                        for p in ps
                    ],
                }
                for t, ps in by_topic.items()
            ],
        }
        try:
            resp = await asyncio.wait_for(conn.request(2, 5, body), 5.0)
        except (OSError, ConnectionError, TimeoutError):
            continue
        finally:
            conn.close()
        for t in resp.get("topics", []):
            for p in t["partitions"]:
                if p["error_code"] == 0:
                    out[(t["name"], p["partition_index"])] = p["offset"]
    return out
