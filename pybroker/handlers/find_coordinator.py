"""FindCoordinator (key 10), versions 0-6.

Group keys (key_type 0) and transactional ids (key_type 1) map to the owner of their
partition (Kafka's partitionFor): with the metadata-store storages (offsets.storage /
transaction.state.storage=zookeeper) a live broker chosen by rendezvous hashing over
/brokers/ids over 50 partitions (pybroker.coord.metadata.placement); with the internal-topic
storages (=kafka) the leader of the key's partition of __consumer_offsets /
__transaction_state, the topic created on the first lookup as Kafka's
AutoTopicCreationManager does (COORDINATOR_NOT_AVAILABLE while it cannot be: fewer live brokers
than its replication factor, or no leader yet).  v4 batches several keys; v5 only
tells the broker that the client knows TRANSACTION_ABORTABLE.  Share consumers find their
group's coordinator with key_type 0.  key_type 2 (v6, KIP-932, brokers asking for a
share-partition's state owner, key "group:topicId:partition") needs CLUSTER_ACTION
(CLUSTER_AUTHORIZATION_FAILED) and, with group.share.enable, names the partition's leader: in
pybroker the leader writes the share-partition state itself (docs/internals.md); a key that does
not parse, or an unknown partition, is INVALID_REQUEST / COORDINATOR_NOT_AVAILABLE.  Without
group.share.enable the answers are Kafka 3.9's for a broker without share groups: below v6
INVALID_REQUEST, from v6 COORDINATOR_NOT_AVAILABLE.  Other key types and empty keys get
INVALID_REQUEST, as in Kafka; so do group and transactional keys longer than
``paths.MAX_NAME_CHARS`` (pybroker's bound on names it hashes and stores).
"""

from __future__ import annotations

from pybroker.coord.metadata.paths import MAX_NAME_CHARS, parse_kafka_uuid
from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers._authz import on_cluster, on_group, on_txn
from pybroker.handlers._share import share_enabled
from pybroker.handlers._topic_ids import Resolver
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation

GROUP, TRANSACTION, SHARE = 0, 1, 2


def _share_partition_leader(ctx: RequestContext, key: str) -> tuple[int | None, str | None]:
    """The leader of the partition a share-partition key names; (None, why) if none."""
    group, _, rest = key.partition(":")
    tid, _, p = rest.rpartition(":")
    try:
        topic_id, partition = parse_kafka_uuid(tid), int(p)
    except ValueError:
        return None, "invalid share-partition key"
    if not group or partition < 0:
        return None, "invalid share-partition key"
    name = Resolver(ctx.services.cluster).name(topic_id)
    info = ctx.services.cluster.topics.get(name) if name is not None else None
    state = info.partitions.get(partition) if info is not None else None
    if state is None or state.leader < 0:
        return -1, "no leader for the share-partition"
    return state.leader, None


async def _coordinator_node(ctx: RequestContext, key: str, key_type: int) -> tuple[int, str]:
    """(the coordinator's broker id or -1, why there is none)."""
    services = ctx.services
    coord = services.groups if key_type == GROUP else services.transactions
    topic = services.offsets_topic if key_type == GROUP else services.txn_topic
    if coord is None:
        return -1, "the coordinator is starting"
    if topic is not None and not topic.exists():
        try:
            await topic.ensure()
        except KafkaError as e:
            return -1, f"{topic.name} cannot be created: {e}"
    node = coord.coordinator_node(key)
    return node, "" if node >= 0 else "no leader for the key's partition"


async def _lookup(ctx: RequestContext, key: str, key_type: int) -> dict:
    cluster = ctx.services.cluster
    node, why = None, ""
    if key_type == SHARE and ctx.version >= 6:
        if not on_cluster(ctx, Operation.CLUSTER_ACTION):
            code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None
        elif not share_enabled(ctx):
            code, message = ErrorCode.COORDINATOR_NOT_AVAILABLE, "share groups are not enabled"
        else:
            node, message = _share_partition_leader(ctx, key)
            code = ErrorCode.INVALID_REQUEST if node is None else ErrorCode.NONE
            if node is not None and node < 0:
                code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    elif key_type not in (GROUP, TRANSACTION):
        code, message = ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}"
    elif key_type == GROUP and not on_group(ctx, Operation.DESCRIBE, key):
        code, message = ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    elif key_type == TRANSACTION and not on_txn(ctx, Operation.DESCRIBE, key):
        code, message = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None
    elif not key:
        what = "group id" if key_type == GROUP else "transactional id"
        code, message = ErrorCode.INVALID_REQUEST, f"empty {what}"
    elif len(key) > MAX_NAME_CHARS:
        code, message = ErrorCode.INVALID_REQUEST, f"key longer than {MAX_NAME_CHARS} characters"
    else:
        node, why = await _coordinator_node(ctx, key, key_type)
        code, message = ErrorCode.NONE, None
    if code == ErrorCode.NONE:
        broker = cluster.brokers.get(node)
        endpoint = broker.endpoint(ctx.listener) if broker is not None else None
        if endpoint is not None:
            return {
                "key": key,
                "error_code": ErrorCode.NONE,
                "error_message": None,
                "node_id": broker.id,
                "host": endpoint[0],
                "port": endpoint[1],
            }
        code, message = (
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            (
                why or "no live broker"
                if broker is None
                else f"no {ctx.listener} listener on the coordinator"
            ),
        )
    return {
        "key": key,
        "error_code": code,
        "error_message": message,
        "node_id": -1,
        "host": "",
        "port": -1,
    }


@handler(10, 0, 6)
async def find_coordinator(ctx: RequestContext, req: dict) -> dict:
    key_type = req.get("key_type", GROUP)
    if ctx.version >= 4:
        return {
            "throttle_time_ms": 0,
            "coordinators": [await _lookup(ctx, k, key_type) for k in req["coordinator_keys"]],
        }
    result = await _lookup(ctx, req["key"], key_type)
    result.pop("key")
    result["throttle_time_ms"] = 0
    return result
