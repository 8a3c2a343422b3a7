"""Kafka's ZooKeeper layout (kafka.zk.ZkData in Apache Kafka 3.x) in one place: the znode paths
and the JSON Kafka writes into them, byte for byte the same keys, so a Kafka tool or broker
reading our ZooKeeper sees familiar data.

    /cluster/id                                  {"version":"1","id":"<22-char base64url uuid>"}
    /controller                    (ephemeral)   {"version":2,"brokerid":1,"timestamp":"<ms>","kraftControllerEpoch":-1}
    /controller_epoch                            "<int>" (plain decimal text)
    /brokers/ids/<id>              (ephemeral)   broker registration v5, see encode_broker()
    /brokers/topics/<t>                          {"partitions":{"0":[1,2]},"topic_id":"..","adding_replicas":{},"removing_replicas":{},"version":3}
    /brokers/topics/<t>/partitions/<p>/state     {"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1]}
    /config/topics/<t>                           {"version":1,"config":{"k":"v"}}
    /config/brokers/<id>, /config/brokers/<default>   {"version":1,"config":{"k":"v"}} (dynamic broker configs)
    /config/changes/config_change_<10-digit seq> {"version":2,"entity_path":"brokers/<id>"} (written
                                                 after every entity config change; see coord/metadata/config_changes.py)
    /admin/delete_topics                         (notification parent, not used yet)
    /admin/reassign_partitions                   {"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]}]}
    /latest_producer_id_block                    {"version":1,"broker":1,"block_start":"0","block_end":"999"}
    /consumers/<group>/offsets/<topic>/<p>       "<offset>" (the old consumer's layout)
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from typing import Any
from urllib.parse import unquote

CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONFIG = "/config"
CONFIG_TOPICS = "/config/topics"
CONFIG_CHANGES = "/config/changes"
CONFIG_BROKERS = "/config/brokers"
# ConfigEntityChangeNotificationSequenceZNode: sequential children of /config/changes
CONFIG_CHANGE_PREFIX = "config_change_"
# ZooKeeperInternals.DEFAULT_STRING: the cluster-wide default entity's name
DEFAULT_ENTITY = "<default>"
ADMIN = "/admin"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CONSUMERS = "/consumers"
# pybroker's own (no Kafka path): a broker in controlled shutdown holds the ephemeral
# <CONTROLLED_SHUTDOWN>/<id> until its session ends; the controller watches the children
CONTROLLED_SHUTDOWN = "/pybroker/controlled_shutdown"
# pybroker's own (Kafka's controller sends LeaderAndIsr/UpdateMetadata requests instead): the
# states a controller just wrote, pushed to each live broker as ephemeral sequential children
# <LEADER_AND_ISR>/<id>/n-<seq> of the controller's session, read and deleted by broker <id>
# (coord/metadata/pushed_states.py), so brokers need not wait for the read-back of every
# changed state znode
LEADER_AND_ISR = "/pybroker/leader_and_isr"
# KIP-848 consumer groups' records (coord/group/consumer_store.py)
CONSUMER_GROUPS = "/pybroker/consumer_groups"
# offsets.storage=zookeeper after kafka: one child per partition of __consumer_offsets whose
# offsets were moved into the metadata store (coord/group/offsets_drain.py)
OFFSETS_DRAINED = "/pybroker/offsets_drained"
# classic groups' metadata without members (coord/classic_group_store.py)
CLASSIC_GROUPS = "/pybroker/classic_groups"
# pybroker's own (Kafka ZooKeeper mode writes /log_dir_event_notification and learns the
# offline replicas through LeaderAndIsr, which pybroker has not): a broker whose log dir
# failed creates an ephemeral sequential <OFFLINE_REPLICAS>/<id>-<seq> holding
# {"version": 1, "broker": id, "partitions": [[topic, partition], ...]}; they go with its
# session (a restarted broker looks at its dirs again)
OFFLINE_REPLICAS = "/pybroker/offline_replicas"

#: The longest group id, transactional.id or coordinator key pybroker serves (characters): the
#: longest a non-flexible request's string can be.  Longer names (only compact strings carry
#: them) get INVALID_GROUP_ID / INVALID_REQUEST before they are hashed or escaped, so their
#: cost stays bounded; a name up to this length whose escaped store path is still too long
#: (store.MAX_PATH_BYTES) gets the store error of the API.
MAX_NAME_CHARS = 32767

# kafka.zk.ZkData.PersistentZkPaths: the persistent paths a Kafka broker ensures at startup
PERSISTENT_PATHS: tuple[str, ...] = (
    CONSUMERS,
    BROKER_IDS,
    TOPICS,
    CONFIG_CHANGES,
    DELETE_TOPICS,
    "/brokers/seqid",
    "/isr_change_notification",
    PRODUCER_ID_BLOCK,
    "/log_dir_event_notification",
    CONFIG_TOPICS,
    "/config/clients",
    "/config/users",
    "/config/brokers",
    "/config/ips",
    CONTROLLED_SHUTDOWN,
    LEADER_AND_ISR,
    CONSUMER_GROUPS,
    CLASSIC_GROUPS,
    OFFLINE_REPLICAS,
)


def broker(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def controlled_shutdown(broker_id: int) -> str:
    return f"{CONTROLLED_SHUTDOWN}/{broker_id}"


def leader_and_isr(broker_id: int) -> str:
    """The parent of the states pushed to ``broker_id``."""
    return f"{LEADER_AND_ISR}/{broker_id}"


def offline_replicas_prefix(broker_id: int) -> str:
    return f"{OFFLINE_REPLICAS}/{broker_id}-"


def topic(name: str) -> str:
    return f"{TOPICS}/{name}"


def partitions(name: str) -> str:
    return f"{TOPICS}/{name}/partitions"


def partition(name: str, p: int) -> str:
    return f"{TOPICS}/{name}/partitions/{p}"


def partition_state(name: str, p: int) -> str:
    return f"{TOPICS}/{name}/partitions/{p}/state"


def topic_config(name: str) -> str:
    return f"{CONFIG_TOPICS}/{name}"


def broker_config(entity: str) -> str:
    """/config/brokers/<id>, or /config/brokers/<default> for the cluster-wide defaults."""
    return f"{CONFIG_BROKERS}/{entity}"


def config_change(sequence_name: str = "") -> str:
    """/config/changes/config_change_ (the prefix a sequential create appends to)."""
    return f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}{sequence_name}"


def delete_topic(name: str) -> str:
    return f"{DELETE_TOPICS}/{name}"


def consumer_offset(group: str, topic_name: str, p: int) -> str:
    return f"{CONSUMERS}/{group}/offsets/{topic_name}/{p}"


# --------------------------------------------------------------------------- JSON


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _loads(data: bytes) -> Any:
    return json.loads(data.decode() if data else "null")


def kafka_uuid_str(u: uuid.UUID) -> str:
    """org.apache.kafka.common.Uuid.toString: base64url of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def parse_kafka_uuid(s: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)))


def random_kafka_uuid() -> uuid.UUID:
    """Uuid.randomUuid: never the zero or one ("metadata topic") uuid, never a string that
    starts with '-' (it would read as a command-line flag)."""
    while True:
        u = uuid.uuid4()
        if u.int > 1 and not kafka_uuid_str(u).startswith("-"):
            return u


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return _loads(data)["id"]


def encode_controller(broker_id: int, timestamp_ms: int, kraft_controller_epoch: int = -1) -> bytes:
    return _dumps(
        {
            "version": 2,
            "brokerid": broker_id,
            "timestamp": str(timestamp_ms),
            "kraftControllerEpoch": kraft_controller_epoch,
        }
    )


def decode_controller(data: bytes) -> int:
    return int(_loads(data)["brokerid"])


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    return int(data.decode())


_KNOWN_PROTOCOLS = {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"}


def format_endpoint(listener: str, host: str, port: int) -> str:
    """EndPoint.connectionString: LISTENER://host:port, IPv6 hosts in brackets."""
    shown = f"[{host}]" if ":" in host else host
    return f"{listener}://{shown}:{port}"


_ENDPOINT = re.compile(r"^([^:/]+)://\[?([0-9a-zA-Z\-%._:]*?)\]?:(-?[0-9]+)$")


def parse_endpoint(s: str) -> tuple[str, str, int]:
    m = _ENDPOINT.match(s)
    if not m:
        raise ValueError(f"not an endpoint: {s!r}")
    return m.group(1), m.group(2), int(m.group(3))


def encode_broker(
    endpoints: list[tuple[str, str, int]],
    timestamp_ms: int,
    rack: str | None = None,
    security_protocols: dict[str, str] | None = None,
) -> bytes:
    """BrokerIdZNode.encode, version 5.  Top-level host/port are the PLAINTEXT endpoint's
    (null/-1 without one), as Kafka writes them for old clients."""
    protocols = {
        name: (security_protocols or {}).get(
            name, name if name in _KNOWN_PROTOCOLS else "PLAINTEXT"
        )
        for name, _, _ in endpoints
    }
    plaintext = next(
        ((h, p) for name, h, p in endpoints if protocols[name] == "PLAINTEXT"), (None, -1)
    )
    obj: dict[str, Any] = {
        "listener_security_protocol_map": protocols,
        "endpoints": [format_endpoint(*e) for e in endpoints],
        "jmx_port": -1,
        "features": {},
        "host": plaintext[0],
        "timestamp": str(timestamp_ms),
        "port": plaintext[1],
        "version": 5,
    }
    if rack is not None:
        obj["rack"] = rack
    return _dumps(obj)


def decode_broker(data: bytes) -> dict[str, Any]:
    """-> {"endpoints": [(listener, host, port)], "rack": str|None, "host", "port"}"""
    obj = _loads(data)
    if obj.get("version", 1) >= 2 and obj.get("endpoints"):
        endpoints = [parse_endpoint(e) for e in obj["endpoints"]]
    else:
        endpoints = [("PLAINTEXT", obj["host"], int(obj["port"]))]
    return {
        "endpoints": endpoints,
        "rack": obj.get("rack"),
        "host": obj.get("host"),
        "port": obj.get("port", -1),
    }


def encode_topic(
    topic_id: uuid.UUID | None,
    assignment: dict[int, list[int]],
    adding: dict[int, list[int]] | None = None,
    removing: dict[int, list[int]] | None = None,
) -> bytes:
    """TopicZNode.encode, version 3: the full replica set of each partition, and for partitions
    being reassigned (KIP-455) the replicas being added and removed."""
    obj: dict[str, Any] = {
        "partitions": {str(p): list(r) for p, r in sorted(assignment.items())},
    }
    if topic_id is not None:
        obj["topic_id"] = kafka_uuid_str(topic_id)
    obj["adding_replicas"] = {str(p): list(r) for p, r in sorted((adding or {}).items()) if r}
    obj["removing_replicas"] = {str(p): list(r) for p, r in sorted((removing or {}).items()) if r}
    obj["version"] = 3
    return _dumps(obj)


def decode_topic(data: bytes) -> tuple[uuid.UUID | None, dict[int, list[int]]]:
    obj = _loads(data) or {}
    tid = obj.get("topic_id")
    assignment = {int(p): [int(b) for b in r] for p, r in (obj.get("partitions") or {}).items()}
    return (parse_kafka_uuid(tid) if tid else None), assignment


def decode_topic_reassignment(
    data: bytes,
) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """The adding_replicas and removing_replicas of a topic znode (empty before version 2)."""
    obj = _loads(data) or {}

    def part(key: str) -> dict[int, list[int]]:
        return {int(p): [int(b) for b in r] for p, r in (obj.get(key) or {}).items() if r}

    return part("adding_replicas"), part("removing_replicas")


def encode_reassignment(targets: dict[tuple[str, int], list[int]]) -> bytes:
    """ReassignPartitionsZNode.encode: the target replicas of each partition."""
    return _dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": t, "partition": p, "replicas": list(r)}
                for (t, p), r in sorted(targets.items())
            ],
        }
    )


def decode_reassignment(data: bytes) -> dict[tuple[str, int], list[int]]:
    """ReassignPartitionsZNode.decode; raises ValueError on what Kafka would not parse."""
    try:
        obj = _loads(data)
        return {
            (str(e["topic"]), int(e["partition"])): [int(b) for b in e["replicas"]]
            for e in obj["partitions"]
        }
    except (TypeError, KeyError, AttributeError) as e:
        raise ValueError(f"unreadable reassignment: {e}") from e


def encode_partition_state(
    leader: int, leader_epoch: int, isr: list[int], controller_epoch: int
) -> bytes:
    """TopicPartitionStateZNode.encode (leader_recovery_state only when not RECOVERED)."""
    return _dumps(
        {
            "controller_epoch": controller_epoch,
            "leader": leader,
            "version": 1,
            "leader_epoch": leader_epoch,
            "isr": list(isr),
        }
    )


def decode_partition_state(data: bytes) -> dict[str, Any]:
    obj = _loads(data)
    return {
        "leader": int(obj["leader"]),
        "leader_epoch": int(obj["leader_epoch"]),
        "isr": [int(b) for b in obj["isr"]],
        "controller_epoch": int(obj["controller_epoch"]),
    }


# one pushed state: (topic, topic id, partition, leader, leader epoch, isr, zk version)
PushedState = tuple[str, str, int, int, int, list[int], int]


def encode_leader_and_isr(controller_epoch: int, states: list[PushedState]) -> bytes:
    """The states a controller wrote (LEADER_AND_ISR's children): each with the topic id
    (a recreated topic's states are not another's) and the state znode's version after the
    write (Kafka's partition epoch)."""
    return _dumps({"version": 1, "controller_epoch": controller_epoch, "states": states})


def decode_leader_and_isr(data: bytes) -> tuple[int, list[PushedState]]:
    obj = _loads(data)
    states = [
        (str(t), str(tid), int(p), int(leader), int(epoch), [int(b) for b in isr], int(zkv))
        for t, tid, p, leader, epoch, isr, zkv in obj["states"]
    ]
    return int(obj["controller_epoch"]), states


def encode_topic_config(configs: dict[str, str]) -> bytes:
    """ConfigEntityZNode.encode."""
    return _dumps({"version": 1, "config": dict(configs)})


def decode_topic_config(data: bytes) -> dict[str, str]:
    obj = _loads(data) or {}
    return {k: str(v) for k, v in (obj.get("config") or {}).items()}


def encode_config_change(entity_path: str) -> bytes:
    """ConfigEntityChangeNotificationSequenceZNode.generateChangeNode (version 2):
    entity_path is "<entity type>/<sanitized name>", e.g. "brokers/1", "topics/t"."""
    return _dumps({"version": 2, "entity_path": entity_path})


def decode_config_change(data: bytes) -> str | None:
    """The entity_path of a version 2 notification; None for anything else (Kafka's version 1
    notifications named the entity type apart; pybroker never wrote them)."""
    try:
        obj = _loads(data)
    except ValueError:
        return None
    if not isinstance(obj, dict) or obj.get("version") != 2:
        return None
    path = obj.get("entity_path")
    return path if isinstance(path, str) else None


def encode_producer_id_block(broker_id: int, block_start: int, block_end: int) -> bytes:
    """ProducerIdBlockZNode.generateProducerIdBlockJson (block_end inclusive)."""
    return _dumps(
        {
            "version": 1,
            "broker": broker_id,
            "block_start": str(block_start),
            "block_end": str(block_end),
        }
    )


def decode_producer_id_block(data: bytes) -> tuple[int, int, int] | None:
    """-> (broker, block_start, block_end), None for the empty znode Kafka starts with."""
    if not data:
        return None
    obj = _loads(data)
    return int(obj["broker"]), int(obj["block_start"]), int(obj["block_end"])


# --------------------------------------------------------------------------- client names

# characters that may not appear in a znode name (ZooKeeper's PathUtils), plus '/' and the
# escape character itself
_UNSAFE = re.compile(r"[%/\x00-\x1f\x7f-\x9f\ud800-\uf8ff\ufff0-\uffff]")


# every _UNSAFE character -> its escape (str.translate: linear in C, however long the name)
_ESCAPES = {
    cp: "".join(f"%{b:02X}" for b in chr(cp).encode("utf-8", "surrogatepass"))
    for cp in (*range(0x20), *range(0x7F, 0xA0), *range(0xD800, 0xF900), *range(0xFFF0, 0x10000))
}
_ESCAPES[ord("%")], _ESCAPES[ord("/")] = "%25", "%2F"


def name_to_component(name: str) -> str:
    """A group id or topic name -> the znode name it is stored under (bijective)."""
    if name == "":
        return "%"  # never produced otherwise: an escape is always '%' + two hex digits
    if name in (".", ".."):
        return "%2E" * len(name)
    return name.translate(_ESCAPES)


def component_to_name(component: str) -> str:
    if component == "%":
        return ""
    if "%" not in component:
        return component
    return unquote(component, errors="surrogatepass")
