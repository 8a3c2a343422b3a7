"""AlterReplicaLogDirs (key 34), versions 0-2: move replicas between this broker's log dirs.

Kafka's ReplicaManager.alterReplicaLogDirs, per (topic, partition, dir) (a partition named
twice: the last dir wins, as Kafka's map):

* ALTER on the CLUSTER resource, else CLUSTER_AUTHORIZATION_FAILED for every partition;
* a future dir name over 255 characters: INVALID_TOPIC_EXCEPTION;
* a path that is none of log.dirs: LOG_DIR_NOT_FOUND; an offline dir: KAFKA_STORAGE_ERROR;
* a move to another dir under way is abandoned (its future log removed);
* the dir is remembered for the partition, so that a replica created here later goes there
  (Kafka's preferred log dir: AlterReplicaLogDirs before the replica exists);
* a partition whose log was in a failed dir: KAFKA_STORAGE_ERROR; no replica here: unknown
  topic UNKNOWN_TOPIC_OR_PARTITION, else REPLICA_NOT_AVAILABLE;
* the replica already in that dir: NONE, nothing done; otherwise NONE and the move starts
  (log/mover.py): DescribeLogDirs shows the future replica until the swap.
"""

from __future__ import annotations

from pybroker.errors import ErrorCode
from pybroker.handlers._authz import on_cluster
from pybroker.handlers.context import RequestContext
from pybroker.log.manager import LogDirNotFoundError, OfflineLogDirError
from pybroker.registry import handler
from pybroker.security.acl import Operation
from pybroker.services import BrokerServices

MAX_DIR_NAME = 255


def alter_one(services: BrokerServices, topic: str, partition: int, path: str) -> int:
    """One partition's answer (the module docstring's rules)."""
    logs, mover = services.logs, services.log_mover
    key = (topic, partition)
    if len(f"{topic}-{partition}.{'0' * 32}-future") > MAX_DIR_NAME:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    try:
        target = logs.resolve_dir(path)
    except LogDirNotFoundError:
        return ErrorCode.LOG_DIR_NOT_FOUND
    except OfflineLogDirError:
        return ErrorCode.KAFKA_STORAGE_ERROR
    fut = logs.future_logs.get(key)
    if fut is not None and logs.dir_of(fut) != target:
        mover.cancel(topic, partition)
    if key in logs.offline_partitions:
        return ErrorCode.KAFKA_STORAGE_ERROR
    logs.preferred_dirs[key] = target
    if logs.get(topic, partition) is None:
        info = services.cluster.topics.get(topic) if services.cluster is not None else None
        if info is None or partition not in info.partitions:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return ErrorCode.REPLICA_NOT_AVAILABLE
    try:
        mover.start_move(topic, partition, target)
    except OfflineLogDirError:
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.NONE


@handler(34, 0, 2)
async def alter_replica_log_dirs(ctx: RequestContext, req: dict) -> dict:
    wanted: dict[tuple[str, int], str] = {}
    for d in req["dirs"]:
        for t in d["topics"]:
            for p in t["partitions"]:
                wanted[(t["name"], p)] = d["path"]
    allowed = on_cluster(ctx, Operation.ALTER)
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), path in wanted.items():
        if allowed:
            code = alter_one(ctx.services, topic, partition, path)
        else:
            code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
    return {
        "throttle_time_ms": 0,
        "results": [{"topic_name": t, "partitions": parts} for t, parts in by_topic.items()],
    }
