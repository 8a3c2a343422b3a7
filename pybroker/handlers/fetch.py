"""Fetch (key 1), versions 0-17.  A real long poll (``min_bytes`` / ``max_wait_ms``, woken by
appends through the purgatory); ``max_bytes`` and ``partition_max_bytes`` bound the answer,
except the first batch of the first non-empty partition (KIP-74).  Records go out as file
regions (sendfile).  Consumers never read above the high watermark, read_committed ones never
at or above the last stable offset and get the aborted transactions; followers read up to the
log end.  The reads are the replica manager's (ReplicaManager.read_from_log); this module
decodes, authorizes, keeps the fetch session (KIP-227) and the long poll, and answers.
Versions, errors, sessions, topic ids and followers: docs/internals.md
("pybroker/handlers/fetch.py").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pybroker.errors import ErrorCode
from pybroker.fetch_session import FetchContext, FetchPartition
from pybroker.handlers._authz import enabled, on_cluster, on_topic
from pybroker.handlers._down_conversion import convert_fetched_data
from pybroker.handlers._follower_rounds import FollowerRound
from pybroker.handlers._topic_ids import Resolver
from pybroker.handlers.context import RequestContext
from pybroker.quotas.client import fetch_bound, fetch_throttle
from pybroker.registry import handler
from pybroker.replica_manager import READ_COMMITTED, FetchParams, LogReadResult
from pybroker.replication.changes import IdleFetches
from pybroker.replication.manager import consumer_key, follower_key, leo_key
from pybroker.replication.replica import followers_append_key
from pybroker.security.acl import Operation

if TYPE_CHECKING:
    from pybroker.metrics import BrokerMetrics

# a follower that owes a new leader here its first fetch of a partition is answered after at
# most this (its fetch may not name the partition yet: it has not learned of the new leader)
OWED_FETCH_WAIT_S = 0.01


def _empty(index: int, code: int, hw: int = -1, lso: int = -1, start: int = -1) -> dict:
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": hw,
        "last_stable_offset": lso,
        "log_start_offset": start,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",
    }


def _request_partitions(req: dict, uses_ids: bool, resolver: Resolver) -> list[FetchPartition]:
    parts = []
    append = parts.append
    for t in req["topics"]:
        if uses_ids:
            topic_id = t["topic_id"]
            name = resolver.name(topic_id)
        else:
            name = t["topic"]
            topic_id = None
        topic_key = topic_id if uses_ids else name
        for p in t["partitions"]:
            index = p["partition"]
            get = p.get
            append(
                FetchPartition(
                    (topic_key, index),
                    name,
                    topic_id,
                    index,
                    p["fetch_offset"],
                    p["partition_max_bytes"],
                    get("current_leader_epoch", -1),
                    get("last_fetched_epoch", -1),
                    get("log_start_offset", -1),
                )
            )
    return parts


def _forgotten(req: dict, uses_ids: bool) -> list:
    return [
        (t["topic_id"] if uses_ids else t["topic"], index)
        for t in req.get("forgotten_topics_data") or ()
        for index in t["partitions"]
    ]


def _entry(index: int, r: LogReadResult) -> dict:
    entry = {
        "partition_index": index,
        "error_code": r.error,
        "high_watermark": r.high_watermark,
        "last_stable_offset": r.last_stable_offset,
        "log_start_offset": r.log_start_offset,
        "aborted_transactions": None
        if r.aborted_transactions is None
        else [{"producer_id": pid, "first_offset": first} for pid, first in r.aborted_transactions],
        "preferred_read_replica": -1,
        "records": r.records if r.records is not None else b"",
    }
    if r.diverging_epoch is not None:
        entry["diverging_epoch"] = {
            "epoch": r.diverging_epoch[0],
            "end_offset": r.diverging_epoch[1],
        }
    return entry


async def _read_all(
    ctx: RequestContext,
    req: dict,
    partitions: list[FetchPartition],
    replica_id: int,
    uses_ids: bool,
    resolver: Resolver,
    track_idle: bool = False,
    follower_round: FollowerRound | None = None,
) -> tuple[dict, int, bool, dict]:
    """One pass over the partitions: ({key: partition entry}, bytes found, any error,
    {key: idle stamp}).  The reads are the replica manager's (read_from_log); here the topic
    names, authorization and the fetch session's idle partitions.

    A consumer's session partition whose idle state is unchanged since it was last answered
    (``FetchPartition.idle_stamp`` equals ReplicaManager.fetch_stamp now, and the fetcher did
    not change its parameters) is skipped: its answer would carry no records, no error and the
    high watermark and log start the fetcher already has, which an incremental answer leaves
    out.  An in-sync follower's session partitions the same way (follower_fetch_stamp), its
    fetch of the skipped ones recorded at once (``IdleFetches``): it stays in sync.  Either
    session's round looks only at the partitions that changed since its last answer
    (``follower_round``, handlers/_follower_rounds.py: the leader's change feed), the others
    skipped with them, so an incremental fetch of many idle partitions costs what changed."""
    replicas = ctx.services.replicas
    read_committed = req.get("isolation_level", 0) == READ_COMMITTED
    errors = False
    entries: dict = {}
    checked = enabled(ctx)  # followers need CLUSTER_ACTION, consumers READ on each topic
    follower_ok = replica_id < 0 or not checked or on_cluster(ctx, Operation.CLUSTER_ACTION)
    allowed: dict[str, bool] = {}
    names: dict[Any, str | None] = {}  # topic id -> name, once per request
    stamps: dict = {}
    stamping = track_idle and replica_id < 0  # a consumer's session remembers idle ones
    # and an in-sync follower's, at its log end (the lease read once, as read_from_log)
    following = track_idle and replica_id >= 0 and replicas.lease_ok
    idle_followed: list = []  # the Replica of each partition a follower's fetch skipped
    to_read: list[FetchPartition] = []
    read_stamps: list[Any] = []
    idle = None  # the follower session's IdleFetches (its skipped partitions' last fetch)
    # (a consumer's round looks at every partition while ACLs are checked: a READ revoked on
    # an idle partition's topic is answered at the next fetch, as Kafka authorizes each one)
    picking = following or (stamping and not checked and replicas.lease_ok)
    if follower_round is not None and picking:
        if following:
            idle = follower_round.idle
        if follower_ok:
            picked = follower_round.pick(replicas, replica_id, replicas.clock.time_ms())
            if picked is not None:
                partitions = picked
    for p in partitions:
        if uses_ids:
            topic_id = p.topic_id
            topic = names.get(topic_id, _UNRESOLVED)
            if topic is _UNRESOLVED:
                topic = names[topic_id] = resolver.name(topic_id)
        else:
            topic = p.topic
        if topic is None:
            errors = True
            code = ErrorCode.UNKNOWN_TOPIC_ID if uses_ids else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            entries[p.key] = _empty(p.partition, code)
            continue
        if checked:
            ok = allowed.get(topic)
            if ok is None:
                ok = allowed[topic] = follower_ok and (
                    replica_id >= 0 or on_topic(ctx, Operation.READ, topic)
                )
            if not ok:
                errors = True
                entries[p.key] = _empty(p.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                continue
        if stamping:
            stamp = replicas.fetch_stamp(topic, p.partition, read_committed)
            if stamp is not None and stamp == p.idle_stamp:
                stamps[p.key] = stamp
                continue
            read_stamps.append(stamp)
        elif following:
            stamp = replicas.follower_fetch_stamp(topic, p.partition, replica_id)
            if stamp is not None and stamp == p.idle_stamp:
                stamps[p.key] = stamp
                idle_followed.append(stamp[0])
                continue
            read_stamps.append(stamp)
        p.topic = topic  # the name as resolved for this request (read_from_log reads it)
        to_read.append(p)
    if idle is not None and to_read:  # (their idle rounds so far recorded: read from now on)
        replicas.settle_follower_reads(replica_id, [(p.topic, p.partition) for p in to_read])
    if not to_read:
        if idle is not None:
            _idle_round(replicas, replica_id, idle_followed, idle)
        return entries, 0, errors, stamps
    params = FetchParams(
        replica_id,
        req.get("max_bytes", 0x7FFFFFFF),
        req.get("isolation_level", 0),
        check_diverging=ctx.version >= 12,
        hard_max_bytes_limit=ctx.version <= 2,
    )
    results, total = await replicas.read_from_log_in_slices(params, to_read)
    for k, (p, r) in enumerate(zip(to_read, results, strict=True)):
        entry = _entry(p.partition, r)
        if r.error:
            errors = True
            if ctx.version >= 16 and r.error in _LEADER_MOVED:
                _current_leader(ctx, p.topic, p.partition, entry)
        elif r.diverging_epoch is not None or r.hw_caught_up:
            # answer at once: a diverging follower truncates; a fetch that brought a new
            # leader's high watermark to its epoch start tells the follower so
            errors = True
        elif r.idle and (stamping or following) and read_stamps[k] is not None:
            # idle: nothing to read, not records that max_bytes left out this time
            stamps[p.key] = read_stamps[k]
            if idle is not None:
                idle_followed.append(read_stamps[k][0])
        entries[p.key] = entry
    if idle is not None:
        _idle_round(replicas, replica_id, idle_followed, idle)
    return entries, total, errors, stamps


def _idle_round(replicas: Any, replica_id: int, skipped: list, idle: IdleFetches) -> None:
    """A follower session's round: the partitions it skipped or found idle are skipped from
    the next round on unless they change, and each round counts as their fetch at the log end
    (one assignment for all of them)."""
    replicas.follower_skips(replica_id, skipped, idle)
    idle.last_ms = replicas.clock.time_ms()


def _settle_forgotten(
    ctx: RequestContext, replica_id: int, forgotten: list, uses_ids: bool, resolver: Resolver
) -> None:
    keys = []
    for topic_key, index in forgotten:
        name = resolver.name(topic_key) if uses_ids else topic_key
        if name is not None:
            keys.append((name, index))
    ctx.services.replicas.settle_follower_reads(replica_id, keys)


_UNRESOLVED = object()
_LEADER_MOVED = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)


def _current_leader(ctx: RequestContext, topic: str, index: int, entry: dict) -> None:
    """v16+ (KIP-951): where the partition's leader is now, so the client need not ask
    Metadata first."""
    info = ctx.services.cluster.topics.get(topic)
    state = info.partitions.get(index) if info is not None else None
    if state is None or state.leader < 0 or state.leader_epoch < 0:
        return
    entry["current_leader"] = {"leader_id": state.leader, "leader_epoch": state.leader_epoch}


def _node_endpoints(ctx: RequestContext, answered: list) -> list[dict]:
    ids = {e["current_leader"]["leader_id"] for _, e in answered if "current_leader" in e}
    nodes = []
    for node_id in sorted(ids):
        b = ctx.services.cluster.brokers.get(node_id)
        ep = b.endpoint(ctx.listener) if b is not None else None
        if ep is not None:
            nodes.append({"node_id": node_id, "host": ep[0], "port": ep[1], "rack": b.rack})
    return nodes


def _group_by_topic(answered: list, uses_ids: bool) -> list[dict]:
    """Consecutive partitions of one topic share a topic entry, as Kafka's FetchResponse."""
    responses: list[dict] = []
    last = None
    for p, entry in answered:
        topic_key = p.key[0]
        if not responses or topic_key != last:
            t = {"topic_id": p.topic_id} if uses_ids else {"topic": p.topic}
            t["partitions"] = []
            responses.append(t)
            last = topic_key
        responses[-1]["partitions"].append(entry)
    return responses


def _records_size(records: Any) -> int:
    """A log region's size, or the length of records read into memory (read_from_log)."""
    if isinstance(records, bytes | bytearray | memoryview):
        return len(records)
    return getattr(records, "size", 0)


def _count_bytes_out(
    metrics: BrokerMetrics, answered: list, replica_id: int, uses_ids: bool, resolver: Resolver
) -> None:
    """Kafka's BytesOutPerSec (consumers, per topic) and ReplicationBytesOutPerSec."""
    if replica_id >= 0:
        metrics.replication_bytes_out += sum(
            _records_size(e["records"]) for _, e in answered if e.get("records")
        )
        return
    for p, e in answered:
        size = _records_size(e.get("records"))
        if size:
            topic = resolver.name(p.topic_id) if uses_ids else p.topic
            if topic is not None:
                metrics.consumed(topic, size)


@handler(1, 0, 17)
async def fetch(ctx: RequestContext, req: dict) -> dict:
    version = ctx.version
    uses_ids = version >= 13
    if version >= 15:
        replica_id = (req.get("replica_state") or {}).get("replica_id", -1)
    else:
        replica_id = req.get("replica_id", -1)
    clock = ctx.services.clock
    resolver = Resolver(ctx.services.cluster)
    requested = _request_partitions(req, uses_ids, resolver)
    if version >= 7:
        forgotten = _forgotten(req, uses_ids)
        if forgotten and replica_id >= 0:  # (no longer fetched: its idle rounds end)
            _settle_forgotten(ctx, replica_id, forgotten, uses_ids, resolver)
        context = ctx.services.fetch_sessions.new_context(
            req.get("session_id", 0),
            req.get("session_epoch", -1),
            requested,
            forgotten,
            privileged=replica_id >= 0,
            uses_topic_ids=uses_ids,
            now_ms=int(clock.monotonic() * 1000),
        )
    else:
        context = FetchContext(ctx.services.fetch_sessions, partitions=requested)
    if context.error != ErrorCode.NONE:
        return {
            "throttle_time_ms": 0,
            "error_code": context.error,
            "session_id": 0,
            "responses": [],
        }
    partitions = context.partitions
    if replica_id < 0:  # a consumer's fetch is bounded by its quota's window (Kafka)
        bound = fetch_bound(ctx.services, ctx.session, ctx.client_id)
        if bound is not None:
            req["max_bytes"] = max(min(req.get("max_bytes", 0x7FFFFFFF), bound), 0)
            req["min_bytes"] = min(req["min_bytes"], req["max_bytes"])
    deadline = clock.monotonic() + max(req["max_wait_ms"], 0) / 1000.0
    wake = leo_key if replica_id >= 0 else consumer_key
    track_idle = context.session is not None or context.create
    follower_round = None
    if context.session is not None:  # (a consumer's session too: issue 27)
        follower_round = FollowerRound(
            context.session,
            fast=True,
            uses_ids=uses_ids,
            consumer=replica_id < 0,
            read_committed=req.get("isolation_level", 0) == READ_COMMITTED,
        )
    while True:
        entries, total, errors, stamps = await _read_all(
            ctx, req, partitions, replica_id, uses_ids, resolver, track_idle, follower_round
        )
        if total >= req["min_bytes"] or errors:
            break
        if replica_id >= 0 and ctx.services.replicas.owes_fetch(replica_id):
            # a new leader here waits for this follower's first fetch of a partition
            deadline = min(deadline, clock.monotonic() + OWED_FETCH_WAIT_S)
        left = deadline - clock.monotonic()
        if left <= 0:
            break
        if replica_id >= 0 and follower_round is not None and follower_round.fast:
            keys = [followers_append_key()]  # (any append: one key, not one per partition)
        else:
            keys = [
                wake(name, p.partition)
                for p in partitions
                if (name := (resolver.name(p.topic_id) if uses_ids else p.topic)) is not None
            ]
        if replica_id >= 0:
            keys.append(follower_key(replica_id))
        if not keys:
            break
        await ctx.services.purgatory.wait_any(keys, left)
    if replica_id < 0 and total:
        throttle = fetch_throttle(ctx.services, ctx.session, ctx.client_id, total)
        if throttle:  # Kafka's getThrottledResponse: nothing read, the session unchanged
            throttled = {
                "throttle_time_ms": throttle,
                "error_code": ErrorCode.NONE,
                "session_id": context.session.id if context.session is not None else 0,
                "responses": [],
            }
            if version >= 16:
                throttled["node_endpoints"] = []
            return throttled
    error, session_id, answered = context.respond(entries, int(clock.monotonic() * 1000), stamps)
    if follower_round is not None and error == ErrorCode.NONE:
        follower_round.answered()
    metrics = ctx.services.metrics
    if metrics is not None and total:
        _count_bytes_out(metrics, answered, replica_id, uses_ids, resolver)
    if replica_id < 0 and version < 10:  # (the bytes out counted before, as Kafka)
        answered = await convert_fetched_data(ctx, answered)
    resp = {
        "throttle_time_ms": 0,
        "error_code": error,
        "session_id": session_id,
        "responses": _group_by_topic(answered, uses_ids),
    }
    if version >= 16:
        resp["node_endpoints"] = _node_endpoints(ctx, answered)
    return resp
