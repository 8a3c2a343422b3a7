"""pybroker speaks at Kafka 3.9's level: ApiVersions against Kafka 3.9.0's own answer, client
version inference, and the semantics of the versions added to reach it (ListGroups v5,
FindCoordinator v5-6, AddPartitionsToTxn v4-5, DescribeTopicPartitions)."""

from __future__ import annotations

import uuid

import pytest
from broker_fixture import API_VERSIONS, NONE, batch, unique_topic

FIND_COORDINATOR, LIST_GROUPS, INIT_PRODUCER_ID, ADD_PARTITIONS = 10, 16, 22, 24
DESCRIBE_TOPIC_PARTITIONS = 75
INVALID_REQUEST, COORDINATOR_NOT_AVAILABLE = 42, 15
INVALID_TXN_STATE, TRANSACTION_ABORTABLE, UNKNOWN_TOPIC_OR_PARTITION = 48, 120, 3

# What Apache Kafka 3.9.0 (KRaft, one node) answers to ApiVersions v0 (measured with
# bench/kafka_reference.start_kafka): api key -> (min, max).
KAFKA_39 = {
    0: (0, 11), 1: (0, 17), 2: (0, 9), 3: (0, 12), 8: (0, 9), 9: (0, 9), 10: (0, 6),
    11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 5), 16: (0, 5), 17: (0, 1),
    18: (0, 4), 19: (0, 7), 20: (0, 6), 21: (0, 2), 22: (0, 5), 23: (0, 4), 24: (0, 5),
    25: (0, 4), 26: (0, 4), 27: (0, 1), 28: (0, 4), 29: (0, 3), 30: (0, 3), 31: (0, 3),
    32: (0, 4), 33: (0, 2), 34: (0, 2), 35: (0, 4), 36: (0, 2), 37: (0, 3), 38: (0, 3),
    39: (0, 2), 40: (0, 2), 41: (0, 3), 42: (0, 2), 43: (0, 2), 44: (0, 1), 45: (0, 0),
    46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1), 50: (0, 0), 51: (0, 0), 55: (0, 2),
    57: (0, 1), 60: (0, 1), 61: (0, 0), 64: (0, 0), 65: (0, 0), 66: (0, 1), 68: (0, 0),
    69: (0, 0), 74: (0, 0), 75: (0, 0), 80: (0, 0), 81: (0, 0),
}  # fmt: skip

# Share groups (KIP-932): what Apache Kafka 4.4.0 answers for them (measured the same way with
# start_kafka(kafka4=True)); Kafka 3.9 had only their early-access v0, off by default.
KAFKA_44_SHARE = {76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2), 90: (0, 1), 91: (0, 0),
                  92: (0, 0)}  # fmt: skip

# Where pybroker serves versions above Kafka 3.9's, and why (nothing else may differ; every
# minimum is Kafka 3.9's, since Kafka 3.9 still serves the versions 4.0 removed).
DIFFERENT = {
    0: "Produce v12 (Kafka 4.0) is served too: the same request as v11",
    68: "ConsumerGroupHeartbeat v1 (Kafka 4.0: regex subscriptions, client-chosen member ids)",
    69: "ConsumerGroupDescribe v1 (Kafka 4.0: member types)",
}


def advertised(client) -> dict[int, tuple[int, int]]:
    body = client.request(
        API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
    )
    return {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}


def test_every_api_pybroker_serves_has_kafka_39s_newest_version(client):
    ours = advertised(client)
    for key, (lo, hi) in ours.items():
        if key in KAFKA_44_SHARE:
            assert (lo, hi) == KAFKA_44_SHARE[key], (key, (lo, hi))
            continue
        assert key in KAFKA_39, f"api {key} is not one Kafka 3.9 serves"
        if key in DIFFERENT:
            continue
        assert (lo, hi) == KAFKA_39[key], (key, (lo, hi), KAFKA_39[key])
    for key, why in DIFFERENT.items():
        assert ours[key] != KAFKA_39[key], f"api {key} now matches: drop its entry ({why})"
        assert ours[key][0] == KAFKA_39[key][0], (key, ours[key])  # nothing missing below
        assert ours[key][1] > KAFKA_39[key][1], (key, ours[key])


def test_kafka_python_infers_kafka_3_9(broker):
    kafka = pytest.importorskip("kafka")
    admin = kafka.KafkaAdminClient(
        bootstrap_servers=f"{broker.host}:{broker.port}", client_id="infer"
    )
    try:
        assert admin._client.check_version()[:2] == (3, 9)
    finally:
        admin.close()


# -- ListGroups v5 ---------------------------------------------------------------------------


def test_list_groups_v5_reports_and_filters_the_group_type(client, topic_with_group):
    group = topic_with_group
    body = client.request(LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
    mine = [g for g in body["groups"] if g["group_id"] == group]
    assert mine and mine[0]["group_type"] == "classic"
    body = client.request(LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["CLASSIC"]})
    assert group in {g["group_id"] for g in body["groups"]}
    body = client.request(LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["consumer"]})
    assert body["error_code"] == NONE and body["groups"] == []


@pytest.fixture
def topic_with_group(client):
    """A group known to the coordinator through a committed offset."""
    topic = unique_topic()
    client.create_topic(topic)
    group = f"g-{uuid.uuid4().hex[:8]}"
    body = client.request(
        8,
        2,
        {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "retention_time_ms": -1,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": 0, "committed_offset": 0, "committed_metadata": ""}
                    ],
                }
            ],
        },
    )
    assert body["topics"][0]["partitions"][0]["error_code"] == NONE
    return group


# -- FindCoordinator v5-6 --------------------------------------------------------------------


def test_find_coordinator_share_groups_as_kafka_39_without_them(start_broker):
    b = start_broker(**{"group.share.enable": "false"})
    with b.client() as client:
        for version, expected in ((5, INVALID_REQUEST), (6, COORDINATOR_NOT_AVAILABLE)):
            body = client.request(
                FIND_COORDINATOR, version, {"key_type": 2, "coordinator_keys": ["s"]}
            )
            assert body["coordinators"][0]["error_code"] == expected, version
        body = client.request(FIND_COORDINATOR, 6, {"key_type": 0, "coordinator_keys": ["g"]})
        assert body["coordinators"][0]["error_code"] == NONE


def test_find_coordinator_share_keys_as_kafka_44(client):
    """Share groups on (the default): below v6 and for a key that is not
    group:topicId:partition, INVALID_REQUEST (Kafka 4.4's KafkaApis.getCoordinator)."""
    for version in (5, 6):
        body = client.request(FIND_COORDINATOR, version, {"key_type": 2, "coordinator_keys": ["s"]})
        assert body["coordinators"][0]["error_code"] == INVALID_REQUEST, version


# -- AddPartitionsToTxn v4-5 (brokers' verification form) ------------------------------------


def _txn_producer(client, tid):
    body = client.request(
        INIT_PRODUCER_ID, 4, {"transactional_id": tid, "transaction_timeout_ms": 60000}
    )
    assert body["error_code"] == NONE
    return body["producer_id"], body["producer_epoch"]


def _batched(client, version, tid, pid, epoch, topic, partitions, verify_only):
    body = client.request(
        ADD_PARTITIONS,
        version,
        {
            "transactions": [
                {
                    "transactional_id": tid,
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "verify_only": verify_only,
                    "topics": [{"name": topic, "partitions": partitions}],
                }
            ]
        },
    )
    assert body["error_code"] == NONE
    (txn,) = body["results_by_transaction"]
    assert txn["transactional_id"] == tid
    return {
        p["partition_index"]: p["partition_error_code"]
        for t in txn["topic_results"]
        for p in t["results_by_partition"]
    }


def test_add_partitions_v4_v5_adds_and_verifies(client):
    topic = unique_topic()
    client.create_topic(topic, partitions=3)
    tid = f"t-{uuid.uuid4().hex[:8]}"
    pid, epoch = _txn_producer(client, tid)
    assert _batched(client, 5, tid, pid, epoch, topic, [0], False) == {0: NONE}
    assert _batched(client, 5, tid, pid, epoch, topic, [0, 1], True) == {
        0: NONE,
        1: TRANSACTION_ABORTABLE,
    }
    assert _batched(client, 4, tid, pid, epoch, topic, [1], True) == {1: INVALID_TXN_STATE}
    # a stale epoch is fenced, an unknown topic is refused
    assert _batched(client, 5, tid, pid, epoch - 1 if epoch else 99, topic, [0], True)[0] != NONE
    assert _batched(client, 5, tid, pid, epoch, "no-such-topic-x", [0], True) == {
        0: UNKNOWN_TOPIC_OR_PARTITION
    }


# -- DescribeTopicPartitions (75) ------------------------------------------------------------


def describe(client, names, limit=2000, cursor=None):
    return client.request(
        DESCRIBE_TOPIC_PARTITIONS,
        0,
        {
            "topics": [{"name": n} for n in names],
            "response_partition_limit": limit,
            "cursor": cursor,
        },
    )


def test_describe_topic_partitions_pages_with_a_cursor(client):
    a, b = sorted([unique_topic(), unique_topic()])
    client.create_topic(a, partitions=5)
    client.create_topic(b, partitions=3)
    client.produce(a, 0, batch([b"x"]))
    seen = []
    cursor = None
    pages = 0
    while True:
        body = describe(client, [b, a], limit=4, cursor=cursor)
        pages += 1
        for t in body["topics"]:
            assert t["error_code"] == NONE and t["topic_id"] != uuid.UUID(int=0)
            for p in t["partitions"]:
                assert p["leader_id"] == 0 and p["isr_nodes"] == [0]
                assert p["eligible_leader_replicas"] == [] and p["last_known_elr"] == []
                seen.append((t["name"], p["partition_index"]))
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == [(a, i) for i in range(5)] + [(b, i) for i in range(3)]
    assert pages == 2


def test_describe_topic_partitions_errors(client):
    topic = unique_topic()
    client.create_topic(topic)
    body = describe(client, [topic, "no-such-topic-y"])
    codes = {t["name"]: t["error_code"] for t in body["topics"]}
    assert codes == {topic: NONE, "no-such-topic-y": UNKNOWN_TOPIC_OR_PARTITION}
    body = describe(client, [topic], cursor={"topic_name": "elsewhere", "partition_index": 0})
    assert [t["error_code"] for t in body["topics"]] == [INVALID_REQUEST]


def test_describe_topic_partitions_of_all_topics(client):
    topic = unique_topic()
    client.create_topic(topic, partitions=2)
    body = describe(client, [])
    names = [t["name"] for t in body["topics"]]
    assert topic in names and names == sorted(names)
