"""DescribeShareGroupOffsets (key 90), versions 0-1: each share-partition's start offset, the
leader epoch that last wrote it and (v1) the lag, as Kafka's coordinator reads them from the
share-partition state: lag = high watermark - start offset - the Acknowledged/Archived records
past it, -1 when the start offset is not resolved yet (Kafka's computeLag).  Topics null: every
partition the group has state for.  DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED) and on
each topic (TOPIC_AUTHORIZATION_FAILED); a topic that does not exist gives
UNKNOWN_TOPIC_OR_PARTITION per partition; partitions without state answer start offset -1.
"""

from __future__ import annotations

from pybroker.coord.metadata.store import StoreError
from pybroker.errors import ErrorCode
from pybroker.handlers._authz import on_group, on_topic
from pybroker.handlers._groups import coordinator_error
from pybroker.handlers._share import end_offsets, share_enabled
from pybroker.handlers._topic_ids import ZERO
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


def _group_error(gid: str, code: int, message: str | None = None) -> dict:
    return {"group_id": gid, "topics": [], "error_code": code, "error_message": message}


async def _describe(ctx: RequestContext, g: dict) -> dict:
    gid = g["group_id"]
    if not on_group(ctx, Operation.DESCRIBE, gid):
        return _group_error(gid, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    code = coordinator_error(ctx, gid, Operation.DESCRIBE)
    if code is not None:
        return _group_error(gid, code)
    share_groups = ctx.services.share_groups
    code = share_groups.coordinator_error(gid)
    if code is not None:
        return _group_error(gid, code)
    try:
        infos = await share_groups.offsets(gid)
    except StoreError:
        return _group_error(gid, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    by_tp = {(i.topic, i.partition): i for i in infos}
    topics = ctx.services.cluster.topics
    if g.get("topics") is None:
        wanted: list[tuple[str, list[int]]] = []
        for i in infos:
            if wanted and wanted[-1][0] == i.topic:
                wanted[-1][1].append(i.partition)
            else:
                wanted.append((i.topic, [i.partition]))
    else:
        wanted = [(t["topic_name"], list(t["partitions"])) for t in g["topics"]]
    ends = await end_offsets(
        ctx, [(t, p) for t, ps in wanted for p in ps if (t, p) in by_tp and t in topics]
    )
    out = []
    for name, parts in wanted:
        info = topics.get(name)
        entries = []
        for p in parts:
            if not on_topic(ctx, Operation.DESCRIBE, name):
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif info is None or p not in info.partitions:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                code = ErrorCode.NONE
            i = by_tp.get((name, p))
            start = i.start_offset if i is not None and code == 0 else -1
            lag = -1
            if i is not None and start >= 0 and (name, p) in ends:
                lag = max(ends[(name, p)] - start - i.terminal, 0)
            entries.append(
                {
                    "partition_index": p,
                    "start_offset": start,
                    "leader_epoch": i.leader_epoch if i is not None and code == 0 else -1,
                    "lag": lag,
                    "error_code": code,
                    "error_message": None,
                }
            )
        out.append(
            {
                "topic_name": name,
                "topic_id": info.topic_id if info is not None else ZERO,
                "partitions": entries,
            }
        )
    return {"group_id": gid, "topics": out, "error_code": ErrorCode.NONE, "error_message": None}


@handler(90, 0, 1)
async def describe_share_group_offsets(ctx: RequestContext, req: dict) -> dict:
    groups = []
    for g in req["groups"]:
        if not share_enabled(ctx):
            groups.append(_group_error(g["group_id"], ErrorCode.UNSUPPORTED_VERSION))
        else:
            groups.append(await _describe(ctx, g))
    return {"throttle_time_ms": 0, "groups": groups}
