"""DescribeLogDirs (key 35), versions 0-4.

One result per entry of log.dirs (absolute path, in log.dirs order), as Kafka's
ReplicaManager.describeLogDirs:

* an online dir: NONE and every partition log in it, current and future (a replica being
  moved there by AlterReplicaLogDirs: ``is_future_key`` true), or only the partitions asked
  for (topics null: all; partitions asked for that have no log there are left out, as are
  topics left with none).  Per partition: the size (its segment files' bytes), the offset lag
  (a current log: max(high watermark - log end offset, 0), 0 on a leader; a future log: how
  far it is behind the current one, max(current log end - its log end, 0)).  v4: the file
  system's total and usable bytes (os.statvfs).
* an offline dir (an I/O error took it offline, LogManager.fail_dir), or one that cannot be
  stat'ed: KAFKA_STORAGE_ERROR, no topics, total and usable -1.

v3+ top-level error code NONE (CLUSTER_AUTHORIZATION_FAILED without DESCRIBE on the cluster).
"""

from __future__ import annotations

import os

from pybroker.errors import ErrorCode
from pybroker.handlers._authz import on_cluster
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


def _offline(path: str) -> dict:
    return {
        "error_code": ErrorCode.KAFKA_STORAGE_ERROR,
        "log_dir": path,
        "topics": [],
        "total_bytes": -1,
        "usable_bytes": -1,
    }


@handler(35, 0, 4)
async def describe_log_dirs(ctx: RequestContext, req: dict) -> dict:
    if not on_cluster(ctx, Operation.DESCRIBE):  # Kafka: DESCRIBE on the cluster
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "results": [],
        }
    wanted: set[tuple[str, int]] | None = None
    if req["topics"] is not None:
        wanted = {(t["topic"], p) for t in req["topics"] for p in t["partitions"]}
    logs = ctx.services.logs
    results = []
    for d in logs.log_dirs:
        if d in logs.offline_dirs:
            results.append(_offline(str(d)))
            continue
        try:
            st = os.statvfs(d)
        except OSError:  # gone or unreadable: Kafka's offline log dir
            results.append(_offline(str(d)))
            continue
        by_topic: dict[str, list[dict]] = {}
        for (topic, partition), plog, future in logs.logs_in(d):
            if wanted is not None and (topic, partition) not in wanted:
                continue
            if future:
                current = logs.get(topic, partition)
                lag = max(current.log_end_offset - plog.log_end_offset, 0) if current else -1
            else:
                lag = max(plog.high_watermark - plog.log_end_offset, 0)
            by_topic.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "partition_size": plog.size,
                    "offset_lag": lag,
                    "is_future_key": future,
                }
            )
        results.append(
            {
                "error_code": ErrorCode.NONE,
                "log_dir": str(d),
                "topics": [{"name": n, "partitions": parts} for n, parts in by_topic.items()],
                "total_bytes": st.f_blocks * st.f_frsize,
                "usable_bytes": st.f_bavail * st.f_frsize,
            }
        )
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results": results}
