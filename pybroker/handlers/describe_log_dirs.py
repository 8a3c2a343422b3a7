"""DescribeLogDirs (key 35), versions 0-4.

pybroker has one log dir (the first of log.dirs): the answer is that directory (absolute
path) with every partition log in it, or only the partitions asked for (topics null: all;
partitions asked for that have no log here are left out, as are topics left with none).  Per
partition: the size (the bytes of its segment files' records), the offset lag (Kafka's
max(high watermark - log end offset, 0) for a current log, which is 0 on a leader) and
is_future_key false (pybroker never moves a replica between log dirs).  v3+ top-level error
code (NONE); v4 the file system's total and usable bytes (os.statvfs).
"""

from __future__ import annotations

import os

from pybroker.errors import ErrorCode
from pybroker.handlers._authz import on_cluster
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


@handler(35, 0, 4)
async def describe_log_dirs(ctx: RequestContext, req: dict) -> dict:
    log_dir = os.path.abspath(ctx.services.config.data_dir)
    if not on_cluster(ctx, Operation.DESCRIBE):  # Kafka: DESCRIBE on the cluster
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "results": [],
        }
    wanted: set[tuple[str, int]] | None = None
    if req["topics"] is not None:
        wanted = {(t["topic"], p) for t in req["topics"] for p in t["partitions"]}
    by_topic: dict[str, list[dict]] = {}
    for topic, partition, log in sorted(ctx.services.logs.partitions(), key=lambda e: (e[0], e[1])):
        if wanted is not None and (topic, partition) not in wanted:
            continue
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "partition_size": log.size,
                "offset_lag": max(log.high_watermark - log.log_end_offset, 0),
                "is_future_key": False,
            }
        )
    result = {
        "error_code": ErrorCode.NONE,
        "log_dir": log_dir,
        "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
        "total_bytes": -1,
        "usable_bytes": -1,
    }
    try:
        st = os.statvfs(log_dir)
    except OSError:  # the directory is gone or unreadable: Kafka's offline log dir
        result.update(error_code=ErrorCode.KAFKA_STORAGE_ERROR, topics=[])
    else:
        result["total_bytes"] = st.f_blocks * st.f_frsize
        result["usable_bytes"] = st.f_bavail * st.f_frsize
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results": [result]}
