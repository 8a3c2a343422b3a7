"""DescribeProducers (key 61), version 0.

Per partition, the active idempotent and transactional producers in the local replica's
producer state (the state that deduplicates retries and tracks transactions): producer id,
epoch, last sequence, the timestamp of its last batch, the coordinator epoch of its last
transaction marker (-1: none) and the first offset of its ongoing transaction (-1: none).  As
in Kafka (ReplicaManager.activeProducerState) any replica hosting the partition answers, the
leader or a follower (whose state is rebuilt from the leader's batches); a broker without a
replica of it answers NOT_LEADER_OR_FOLLOWER.  UNKNOWN_TOPIC_OR_PARTITION for a topic or
partition the metadata does not know; INVALID_TOPIC_EXCEPTION for an illegal topic name.
"""

from __future__ import annotations

from pybroker.coord.metadata.topic_rules import validate_topic_name
from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers._authz import on_topic
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


def _partition(ctx: RequestContext, topic: str, index: int) -> dict:
    out = {"partition_index": index, "error_code": ErrorCode.NONE, "error_message": None}
    info = ctx.services.cluster.topics.get(topic)
    state = info.partitions.get(index) if info is not None else None
    if state is None:
        out.update(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, active_producers=[])
        return out
    replicas = ctx.services.replicas
    replica = replicas.replicas.get((topic, index))
    if replica is None and ctx.services.config.broker_id in state.replicas:
        replicas.sync_roles()  # created a moment ago: the change event is still queued
        replica = replicas.replicas.get((topic, index))
    if replica is None:
        out.update(error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER, active_producers=[])
        return out
    producers = replica.log.producer_state.producers
    out["active_producers"] = [
        {
            "producer_id": pid,
            "producer_epoch": entry.producer_epoch,
            "last_sequence": entry.last_seq,
            "last_timestamp": entry.last_timestamp,
            "coordinator_epoch": entry.coordinator_epoch,
            "current_txn_start_offset": (
                -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset
            ),
        }
        for pid, entry in sorted(producers.items())
    ]
    return out


@handler(61, 0, 0)
async def describe_producers(ctx: RequestContext, req: dict) -> dict:
    topics = []
    for t in req["topics"]:
        name = t["name"]
        try:
            if not on_topic(ctx, Operation.READ, name):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            validate_topic_name(name)
            error = None
        except KafkaError as e:
            error = e
        partitions = []
        for index in t["partition_indexes"]:
            if error is not None:
                partitions.append(
                    {
                        "partition_index": index,
                        "error_code": error.code,
                        "error_message": str(error),
                        "active_producers": [],
                    }
                )
            else:
                partitions.append(_partition(ctx, name, index))
        topics.append({"name": name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}
