"""WriteTxnMarkers (key 27), versions 0-1 (v1 is v0 made flexible): a transaction coordinator's
COMMIT / ABORT markers.  Each marker is appended as a control batch to each of its partitions
led here and replicated as an acks=all produce (Kafka's appendRecords, origin COORDINATOR,
request.timeout.ms); the log ends the producer's transaction there.  The append is the replica
manager's (ReplicaManager.append_txn_marker); the coordinator's marker sender calls
:func:`write_txn_markers` in process for the partitions this broker leads.  A marker for
(__consumer_offsets, p) completes the transactional offsets of p's groups, after its append to
p's log with offsets.storage=kafka, in the metadata store's cache otherwise.  Left out: v2
(KIP-890).  Errors: docs/internals.md ("pybroker/handlers/write_txn_markers.py").
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from pybroker.coord.metadata.placement import OFFSETS_TOPIC
from pybroker.coord.txn.markers import TxnMarker
from pybroker.errors import ErrorCode
from pybroker.handlers._authz import on_cluster
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation
from pybroker.services import BrokerServices

REQUEST_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms default, which the markers wait for


async def _write_one(
    services: BrokerServices, marker: TxnMarker, topic: str, partition: int, timeout_ms: int
) -> int:
    if topic == OFFSETS_TOPIC and services.offsets_topic is None:
        if services.groups is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return await services.groups.complete_txn(marker.producer_id, marker.committed, partition)
    code = await services.replicas.append_txn_marker(
        topic,
        partition,
        marker.producer_id,
        marker.producer_epoch,
        marker.committed,
        marker.coordinator_epoch,
        timeout_ms,
    )
    if topic == OFFSETS_TOPIC and code == ErrorCode.NONE and services.groups is not None:
        # offsets.storage=kafka: the marker is in the offsets partition's log; its groups'
        # pending transactional offsets become committed (or are dropped) in the cache
        code = await services.groups.complete_txn(marker.producer_id, marker.committed, partition)
    return code


async def write_txn_markers(
    services: BrokerServices, markers: Sequence[TxnMarker], timeout_ms: int = REQUEST_TIMEOUT_MS
) -> list[dict[tuple[str, int], int]]:
    """Write every marker to every one of its partitions (each appended on the event loop in
    request order, then all replicated concurrently); per marker, the error code of each
    partition (ErrorCode.NONE once the marker is below the high watermark)."""
    waits = []
    for m in markers:
        for topic, partition in m.partitions:
            waits.append(_write_one(services, m, topic, partition, timeout_ms))
    # the appends happen in order (each coroutine appends before its first await) ...
    tasks = [asyncio.ensure_future(w) for w in waits]
    codes = iter(await asyncio.gather(*tasks))
    out = []
    for m in markers:
        out.append({tp: next(codes) for tp in m.partitions})
    return out


@handler(27, 0, 1)
async def write_txn_markers_handler(ctx: RequestContext, req: dict) -> dict:
    if not on_cluster(ctx, Operation.CLUSTER_ACTION):
        return {
            "markers": [
                {
                    "producer_id": m["producer_id"],
                    "topics": [
                        {
                            "name": t["name"],
                            "partitions": [
                                {
                                    "partition_index": p,
                                    "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                }
                                for p in t["partition_indexes"]
                            ],
                        }
                        for t in m["topics"]
                    ],
                }
                for m in req["markers"]
            ]
        }
    markers = [
        TxnMarker(
            m["producer_id"],
            m["producer_epoch"],
            m["transaction_result"],
            m["coordinator_epoch"],
            [(t["name"], p) for t in m["topics"] for p in t["partition_indexes"]],
        )
        for m in req["markers"]
    ]
    results = await write_txn_markers(ctx.services, markers)
    out = []
    for m, codes in zip(req["markers"], results, strict=True):
        out.append(
            {
                "producer_id": m["producer_id"],
                "topics": [
                    {
                        "name": t["name"],
                        "partitions": [
                            {"partition_index": p, "error_code": codes[(t["name"], p)]}
                            for p in t["partition_indexes"]
                        ],
                    }
                    for t in m["topics"]
                ],
            }
        )
    return {"markers": out}
