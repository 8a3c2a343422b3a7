"""Fetch (key 1), versions 4-12.

A real long poll: the answer leaves as soon as ``min_bytes`` are available across the
requested partitions or ``max_wait_ms`` has passed; appends wake parked fetches through the
purgatory (no timer loop).  ``max_bytes`` bounds the response and ``partition_max_bytes`` each
partition, except that the first batch of the first non-empty partition is always returned
whole, as in KIP-74.  Data never passes through Python objects: each partition's records are
a region of a segment file, sent with sendfile.

Every answer carries high watermark, last stable offset (LSO: below the first offset of the
earliest open transaction, pybroker/log/partition_log.py) and log start offset.  Consumers
never read above the high watermark; read_committed ones (isolation_level 1) never at or above
the LSO, and get the aborted transactions (producer id, first offset) overlapping the offsets
up to the LSO from the segments' .txnindex (Kafka's collectAbortedTransactions), so that they
drop the aborted records; read_uncommitted ones get aborted_transactions null.  The LSO moves
only when the high watermark does (a marker counts once it is below it), so the high
watermark's wake-up serves parked read_committed fetches too.  Errors per partition:
UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, OFFSET_OUT_OF_RANGE, FENCED_LEADER_EPOCH /
UNKNOWN_LEADER_EPOCH (v9+ current_leader_epoch), UNSUPPORTED_COMPRESSION_TYPE is not needed
(batches are served as stored; zstd producers already required v7+).

Fetch sessions (KIP-227, v7+): the broker creates none.  A request with session_id 0 is
answered as a full fetch with session_id 0, which tells the client to keep sending full fetch
requests; an unknown non-zero session id gets FETCH_SESSION_ID_NOT_FOUND.

Follower replicas (replica_id >= 0) read up to the log end and long-poll on appends; their
fetch offset tells the leader how far they have copied (ISR and high watermark).  v12's
last_fetched_epoch is checked against the leader-epoch cache: a mismatch answers
diverging_epoch so the follower truncates.  Preferred read replicas (v11) are always -1.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers._authz import enabled, on_cluster, on_topic
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.replication.manager import consumer_key, leo_key
from pybroker.security.acl import Operation

READ_COMMITTED = 1


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


def _diverging(log, p: dict) -> dict | None:
    """v12+: the fetcher's last fetched epoch disagrees with our log (KIP-595 style check)."""
    last = p.get("last_fetched_epoch", -1)
    if last < 0:
        return None
    epoch, end = log.leader_epochs.end_offset_for(last, log.log_end_offset)
    if epoch != last or end < p["fetch_offset"]:
        return {"epoch": epoch, "end_offset": end}
    return None


def _read_all(ctx: RequestContext, req: dict) -> tuple[list[dict], int, bool]:
    """One pass over the requested partitions: (responses, bytes found, any error)."""
    replicas = ctx.services.replicas
    replica_id = req.get("replica_id", -1)
    remaining = req.get("max_bytes", 0x7FFFFFFF)
    read_committed = req.get("isolation_level", 0) == READ_COMMITTED
    total = 0
    errors = False
    responses = []
    denied: set[str] = set()
    if enabled(ctx):  # followers need CLUSTER_ACTION, consumers READ on each topic
        follower_ok = replica_id < 0 or on_cluster(ctx, Operation.CLUSTER_ACTION)
        denied = {
            t["topic"]
            for t in req["topics"]
            if not follower_ok or (replica_id < 0 and not on_topic(ctx, Operation.READ, t["topic"]))
        }
    for t in req["topics"]:
        topic = t["topic"]
        parts = []
        for p in t["partitions"]:
            index = p["partition"]
            if topic in denied:
                errors = True
                parts.append(_empty(index, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            try:
                replica = replicas.leader_replica(topic, index, p.get("current_leader_epoch", -1))
                log = replica.log
                offset = p["fetch_offset"]
                if offset < log.log_start_offset or offset > log.log_end_offset:
                    raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE)
                diverging = _diverging(log, p) if ctx.version >= 12 else None
                if replica_id >= 0 and diverging is None:
                    replicas.record_follower_fetch(replica, replica_id, offset)
                # Followers copy up to the log end; consumers see only what the ISR holds,
                # read_committed ones only what no open transaction may still abort.
                hw = log.high_watermark
                lso = log.last_stable_offset
                if replica_id >= 0:
                    upper = log.log_end_offset
                else:
                    upper = lso if read_committed else hw
                region = None
                if diverging is None and offset < upper and remaining > 0:
                    limit = min(p["partition_max_bytes"], remaining)
                    region = log.read(offset, limit, min_one_batch=total == 0, max_offset=upper)
                    if region is not None and region.size:
                        total += region.size
                        remaining -= region.size
                    else:
                        region = None
                aborted = None
                if read_committed and replica_id < 0:
                    aborted = []
                    if region is not None:
                        aborted = [
                            {"producer_id": a.producer_id, "first_offset": a.first_offset}
                            for a in log.collect_aborted_transactions(offset, upper)
                        ]
                entry = {
                    "partition_index": index,
                    "error_code": ErrorCode.NONE,
                    "high_watermark": hw,
                    "last_stable_offset": lso,
                    "log_start_offset": log.log_start_offset,
                    "aborted_transactions": aborted,
                    "preferred_read_replica": -1,
                    "records": region if region is not None else b"",
                }
                if diverging is not None:
                    entry["diverging_epoch"] = diverging
                    errors = True  # answer at once
                parts.append(entry)
            except KafkaError as e:
                errors = True
                entry = _empty(index, e.code)
                if e.code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    entry.update(
                        high_watermark=log.high_watermark,
                        last_stable_offset=log.last_stable_offset,
                        log_start_offset=log.log_start_offset,
                    )
                parts.append(entry)
        responses.append({"topic": t["topic"], "partitions": parts})
    return responses, total, errors


@handler(1, 4, 12)
async def fetch(ctx: RequestContext, req: dict) -> dict:
    session_id = req.get("session_id", 0)
    if session_id != 0:
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
            "session_id": 0,
            "responses": [],
        }
    clock = ctx.services.clock
    deadline = clock.monotonic() + max(req["max_wait_ms"], 0) / 1000.0
    wake = leo_key if req.get("replica_id", -1) >= 0 else consumer_key
    keys = [wake(t["topic"], p["partition"]) for t in req["topics"] for p in t["partitions"]]
    while True:
        responses, total, errors = _read_all(ctx, req)
        if total >= req["min_bytes"] or errors:
            break
        left = deadline - clock.monotonic()
        if left <= 0 or not keys:
            break
        await ctx.services.purgatory.wait_any(keys, left)
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "session_id": 0,
        "responses": responses,
    }
