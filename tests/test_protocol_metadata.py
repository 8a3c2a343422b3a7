"""Metadata v0..v12 against a real broker over TCP (Kafka as the spec)."""

from __future__ import annotations

import uuid

import pytest
from broker_fixture import (
    INVALID_TOPIC_EXCEPTION,
    METADATA,
    NONE,
    UNKNOWN_TOPIC_OR_PARTITION,
    unique_topic,
    wait_until,
)

LEADER_NOT_AVAILABLE = 5
ZERO_UUID = uuid.UUID(int=0)


@pytest.fixture
def broker(start_broker):
    return start_broker()


def names(body):
    return sorted(t["name"] for t in body["topics"])


def topic_of(body, name):
    (t,) = [t for t in body["topics"] if t["name"] == name]
    return t


def test_v0_empty_list_means_all_topics(client):
    a, b = unique_topic("a"), unique_topic("b")
    client.create_topic(a)
    client.create_topic(b, partitions=2)
    body = client.metadata([], version=0)
    assert names(body) == sorted([a, b])
    assert len(topic_of(body, b)["partitions"]) == 2


@pytest.mark.parametrize("version", range(1, 13))
def test_null_means_all_topics_and_empty_means_none(client, version):
    a, b = unique_topic("a"), unique_topic("b")
    client.create_topic(a)
    client.create_topic(b, partitions=3)
    body = client.metadata(None, version=version)
    assert names(body) == sorted([a, b])
    for t in body["topics"]:
        assert t["error_code"] == NONE
    parts = topic_of(body, b)["partitions"]
    assert [p["partition_index"] for p in parts] == [0, 1, 2]
    body = client.metadata([], version=version)
    assert body["topics"] == []


@pytest.mark.parametrize("version", range(0, 13))
def test_brokers_partitions_and_leaders(start_broker, version):
    broker = start_broker(**{"broker.id": 7})
    with broker.client() as c:
        name = unique_topic()
        c.create_topic(name, partitions=2)
        body = c.metadata([name], version=version)
    assert body["brokers"][0]["node_id"] == 7
    assert (body["brokers"][0]["host"], body["brokers"][0]["port"]) == (broker.host, broker.port)
    assert len(body["brokers"]) == 1
    t = topic_of(body, name)
    assert t["error_code"] == NONE
    for i, p in enumerate(t["partitions"]):
        assert p["error_code"] == NONE
        assert p["partition_index"] == i
        assert p["leader_id"] == 7
        assert p["replica_nodes"] == [7]
        assert p["isr_nodes"] == [7]
        if version >= 5:
            assert p["offline_replicas"] == []
        if version >= 7:
            assert p["leader_epoch"] == 0
    if version >= 1:
        assert body["controller_id"] == 7
        assert t["is_internal"] is False
    if version >= 2:
        assert isinstance(body["cluster_id"], str) and body["cluster_id"]
    if version >= 10:
        assert t["topic_id"] != ZERO_UUID


def test_auto_create_honours_num_partitions(start_broker):
    broker = start_broker(**{"num.partitions": 3})
    with broker.client() as c:
        name = unique_topic("auto")
        body = c.metadata([name], version=1)
        t = topic_of(body, name)
        # Kafka answers LEADER_NOT_AVAILABLE while the new topic's leaders are elected
        assert t["error_code"] in (NONE, LEADER_NOT_AVAILABLE)

        def ready():
            t = topic_of(c.metadata([name], version=9), name)
            return t["error_code"] == NONE and t

        t = wait_until(ready)
        assert [p["partition_index"] for p in t["partitions"]] == [0, 1, 2]
        assert name in names(c.metadata(None, version=1))


@pytest.mark.parametrize("version", [0, 3, 4, 12])
def test_auto_create_with_metadata_versions(client, version):
    name = unique_topic("auto")
    client.metadata([name], version=version)
    body = wait_until(lambda: topic_of(client.metadata([name], version=9), name))
    assert body["error_code"] in (NONE, LEADER_NOT_AVAILABLE)
    assert name in names(client.metadata(None, version=1))


@pytest.mark.parametrize("version", [4, 9, 12])
def test_no_auto_create_when_the_request_disallows_it(client, version):
    name = unique_topic("noauto")
    body = client.metadata([name], version=version, allow_auto_topic_creation=False)
    t = topic_of(body, name)
    assert t["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
    assert t["partitions"] == []
    assert name not in names(client.metadata(None, version=1))


@pytest.mark.parametrize("version", [1, 4])
def test_no_auto_create_when_the_broker_disallows_it(start_broker, version):
    broker = start_broker(**{"auto.create.topics.enable": False})
    with broker.client() as c:
        name = unique_topic("noauto")
        body = c.metadata([name], version=version)
        assert topic_of(body, name)["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
        assert name not in names(c.metadata(None, version=1))


@pytest.mark.parametrize("bad", ["bad name", "a/b", ".", "..", "x" * 250, "ü"])
def test_invalid_topic_name(client, bad):
    body = client.metadata([bad], version=9)
    t = topic_of(body, bad)
    assert t["error_code"] == INVALID_TOPIC_EXCEPTION
    assert t["partitions"] == []
    assert bad not in names(client.metadata(None, version=1))


def test_known_and_unknown_topics_in_one_request(client):
    known = unique_topic()
    client.create_topic(known)
    missing = unique_topic("missing")
    body = client.metadata([known, missing, "bad name"], version=9, allow_auto_topic_creation=False)
    got = {t["name"]: t["error_code"] for t in body["topics"]}
    assert got == {
        known: NONE,
        missing: UNKNOWN_TOPIC_OR_PARTITION,
        "bad name": INVALID_TOPIC_EXCEPTION,
    }


def test_topic_ids_and_cluster_id_are_stable_across_calls_and_restarts(broker):
    with broker.client() as c:
        a, b = unique_topic("a"), unique_topic("b")
        c.create_topic(a)
        c.create_topic(b, partitions=2)
        first = c.metadata(None, version=12)
        again = c.metadata([a, b], version=10)
    ids = {t["name"]: t["topic_id"] for t in first["topics"]}
    assert len(set(ids.values())) == 2 and ZERO_UUID not in ids.values()
    assert {t["name"]: t["topic_id"] for t in again["topics"]} == ids
    broker.restart()
    with broker.client() as c:
        after = c.metadata(None, version=12)
    assert {t["name"]: t["topic_id"] for t in after["topics"]} == ids
    assert after["cluster_id"] == first["cluster_id"]
    assert after["controller_id"] == broker.broker_id


def test_lookup_by_topic_id_v12(client):
    name = unique_topic()
    client.create_topic(name)
    tid = topic_of(client.metadata([name], version=12), name)["topic_id"]
    body = client.request(METADATA, 12, {"topics": [{"topic_id": tid, "name": None}]})
    (t,) = body["topics"]
    assert (t["error_code"], t["name"], t["topic_id"]) == (NONE, name, tid)
    unknown = uuid.uuid4()
    body = client.request(METADATA, 12, {"topics": [{"topic_id": unknown, "name": None}]})
    (t,) = body["topics"]
    assert t["error_code"] == 100  # UNKNOWN_TOPIC_ID


def test_lookup_by_topic_id_with_an_empty_name_as_the_java_client_sends_it(client):
    """Kafka's Java client 4.x asks by id with the name left at its default "" (it does so to
    resolve the topic ids of a KIP-848 assignment); a regression: this was answered
    INVALID_TOPIC_EXCEPTION, and a regex-subscribed consumer never took its partitions."""
    name = unique_topic()
    client.create_topic(name, partitions=2)
    tid = topic_of(client.metadata([name], version=12), name)["topic_id"]
    body = client.request(METADATA, 12, {"topics": [{"topic_id": tid, "name": ""}]})
    (t,) = body["topics"]
    assert (t["error_code"], t["name"], t["topic_id"]) == (NONE, name, tid)
    assert len(t["partitions"]) == 2


def test_authorized_operations_v8(client):
    name = unique_topic()
    client.create_topic(name)
    body = client.metadata(
        [name],
        version=8,
        include_cluster_authorized_operations=True,
        include_topic_authorized_operations=True,
    )
    assert topic_of(body, name)["topic_authorized_operations"] not in (0, -(2**31))
    assert body["cluster_authorized_operations"] not in (0, -(2**31))
    body = client.metadata([name], version=8)
    assert topic_of(body, name)["topic_authorized_operations"] == -(2**31)


def leader_epoch(client, name):
    return topic_of(client.metadata([name], version=9), name)["partitions"][0]["leader_epoch"]


def test_leader_epoch_change_of_a_topic_loaded_at_start(broker):
    with broker.client() as c:
        name = unique_topic()
        c.create_topic(name)
    broker.restart()
    with broker.client() as c:
        broker.set_leader_epoch(name, 0, 3)
        wait_until(lambda: leader_epoch(c, name) == 3)


def test_leader_epoch_change_of_a_topic_created_here(broker):
    with broker.client() as c:
        name = unique_topic()
        c.create_topic(name)
        broker.set_leader_epoch(name, 0, 3)
        wait_until(lambda: leader_epoch(c, name) == 3, timeout=1.5)


CREATE_PARTITIONS, DELETE_TOPICS = 37, 20


def test_answers_follow_topic_changes_after_being_cached(client):
    """Topic entries are encoded once and reused: every change of the topic shows at once, in
    every version that has already answered for it."""
    name = unique_topic()
    client.create_topic(name, partitions=2)
    first = {v: client.metadata([name], version=v) for v in (1, 9, 12)}
    for v, body in first.items():
        assert len(topic_of(body, name)["partitions"]) == 2, v
    assert client.metadata(None, version=12) == client.metadata(None, version=12)

    body = client.request(
        CREATE_PARTITIONS,
        3,
        {
            "topics": [{"name": name, "count": 5, "assignments": None}],
            "timeout_ms": 10_000,
            "validate_only": False,
        },
    )
    assert body["results"][0]["error_code"] == NONE
    for v in (1, 9, 12):
        parts = topic_of(client.metadata([name], version=v), name)["partitions"]
        assert [p["partition_index"] for p in parts] == [0, 1, 2, 3, 4], v
    parts = topic_of(client.metadata(None, version=12), name)["partitions"]
    assert len(parts) == 5
    old_id = topic_of(client.metadata([name], version=12), name)["topic_id"]

    body = client.request(DELETE_TOPICS, 4, {"topic_names": [name], "timeout_ms": 10_000})
    assert body["responses"][0]["error_code"] == NONE
    assert name not in names(client.metadata(None, version=12))
    body = client.metadata([name], version=12, allow_auto_topic_creation=False)
    assert topic_of(body, name)["error_code"] == UNKNOWN_TOPIC_OR_PARTITION

    client.create_topic(name, partitions=1)
    t = topic_of(client.metadata([name], version=12), name)
    assert t["topic_id"] != old_id
    assert [p["partition_index"] for p in t["partitions"]] == [0]


def test_auto_create_of_a_topic_another_broker_just_created():
    """Issue 10, defect 7: on a cluster, a Metadata request auto-creating a topic that another
    broker has just created (the store says TOPIC_ALREADY_EXISTS, our cache has not seen it
    yet) answers LEADER_NOT_AVAILABLE for it, as Kafka does while a topic is being created;
    it used to raise AttributeError ('NoneType' object has no attribute 'name')."""
    import asyncio
    from types import SimpleNamespace

    from pybroker.errors import ErrorCode, KafkaError
    from pybroker.handlers.context import RequestContext
    from pybroker.handlers.metadata import metadata

    class RacingCluster:
        def __init__(self):
            self.topics = {}
            self.brokers = {}
            self.metadata_brokers = {}
            self.cluster_id = "c"
            self.controller_id = -1

        async def create_topic(self, *args, **kwargs):
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS)

    config = SimpleNamespace(
        auto_create_topics_enable=True, num_partitions=1, default_replication_factor=1
    )
    services = SimpleNamespace(cluster=RacingCluster(), config=config, authorizer=None)
    ctx = RequestContext(services, 3, 9, 1, "c")
    resp = asyncio.run(metadata(ctx, {"topics": [{"name": "racing"}]}))
    [t] = resp["topics"]
    assert t["name"] == "racing"
    assert t["error_code"] == LEADER_NOT_AVAILABLE
