"""The admin APIs against a real broker over TCP (Kafka as the spec): DescribeAcls,
CreateAcls, DeleteAcls, DeleteRecords, OffsetDelete, DescribeLogDirs, IncrementalAlterConfigs,
AlterConfigs, ElectLeaders, ListPartitionReassignments, DescribeProducers, ListTransactions."""

from __future__ import annotations

import pytest
from broker_fixture import (
    NONE,
    OFFSET_OUT_OF_RANGE,
    UNKNOWN_TOPIC_OR_PARTITION,
    BrokerFactory,
    batch,
    fetched_values,
    unique_topic,
    wait_until,
)

from pybroker.coord import paths

SECURITY_DISABLED = 54
NOT_LEADER_OR_FOLLOWER = 6
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
DELETE_RECORDS = 21
EARLIEST = -2


@pytest.fixture
def start_broker(tmp_path):
    with BrokerFactory(tmp_path) as factory:
        yield factory


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    """One broker for the tests that need no special settings (each uses its own topics)."""
    with BrokerFactory(tmp_path_factory.mktemp("shared")) as factory:
        yield factory(**{"group.initial.rebalance.delay.ms": 0})


@pytest.fixture
def broker(shared_broker):
    return shared_broker


@pytest.fixture
def client(broker):
    with broker.client() as c:
        yield c


# --------------------------------------------------------------------------- ACLs


def acl_filter(version: int) -> dict:
    f = {
        "resource_type_filter": 1,  # ANY
        "resource_name_filter": None,
        "principal_filter": None,
        "host_filter": None,
        "operation": 1,  # ANY
        "permission_type": 1,  # ANY
    }
    if version >= 1:
        f["pattern_type_filter"] = 1  # ANY
    return f


@pytest.mark.parametrize("version", range(0, 4))
def test_describe_acls_security_disabled(client, version):
    body = client.request(DESCRIBE_ACLS, version, acl_filter(version))
    assert body["error_code"] == SECURITY_DISABLED
    assert body["error_message"] == "No Authorizer is configured on the broker"
    assert body["resources"] == []


@pytest.mark.parametrize("version", range(0, 4))
def test_create_acls_security_disabled_per_creation(client, version):
    creation = {
        "resource_type": 2,  # TOPIC
        "resource_name": "t",
        "resource_pattern_type": 3,  # LITERAL
        "principal": "User:alice",
        "host": "*",
        "operation": 3,  # READ
        "permission_type": 3,  # ALLOW
    }
    body = client.request(CREATE_ACLS, version, {"creations": [creation, dict(creation)]})
    assert [r["error_code"] for r in body["results"]] == [SECURITY_DISABLED] * 2
    assert all(r["error_message"] == "No Authorizer is configured." for r in body["results"])
    body = client.request(CREATE_ACLS, version, {"creations": []})
    assert body["results"] == []


@pytest.mark.parametrize("version", range(0, 4))
def test_delete_acls_security_disabled_per_filter(client, version):
    body = client.request(
        DELETE_ACLS, version, {"filters": [acl_filter(version), acl_filter(version)]}
    )
    results = body["filter_results"]
    assert [r["error_code"] for r in results] == [SECURITY_DISABLED] * 2
    assert all(r["matching_acls"] == [] for r in results)


def fill(client, topic: str, partition: int = 0, n: int = 10, per_batch: int = 1) -> None:
    for i in range(0, n, per_batch):
        values = [f"v{j}".encode() for j in range(i, min(i + per_batch, n))]
        assert client.produce(topic, partition, batch(values))["error_code"] == NONE


def take_offline(broker, topic: str, partition: int) -> None:
    """Write the partition state with no leader and an empty ISR (as after losing every ISR
    member with unclean election off): the controller leaves it offline, this broker keeps
    its replica (and log) but does not lead it."""
    path = paths.partition_state(topic, partition)
    store = broker.broker.store

    async def offline() -> None:
        data, _ = await store.get(path)
        st = paths.decode_partition_state(data)
        await store.set(
            path,
            paths.encode_partition_state(-1, st["leader_epoch"] + 1, [], st["controller_epoch"]),
        )

    broker.run(offline())
    wait_until(lambda: broker.broker.cluster.topics[topic].partitions[partition].leader == -1)


# --------------------------------------------------------------------------- DeleteRecords


def delete_records(client, version, wanted: dict[str, list[tuple[int, int]]]) -> dict:
    body = client.request(
        DELETE_RECORDS,
        version,
        {
            "topics": [
                {
                    "name": name,
                    "partitions": [{"partition_index": p, "offset": o} for p, o in parts],
                }
                for name, parts in wanted.items()
            ],
            "timeout_ms": 10000,
        },
    )
    return {
        (t["name"], p["partition_index"]): (p["error_code"], p["low_watermark"])
        for t in body["topics"]
        for p in t["partitions"]
    }


@pytest.mark.parametrize("version", range(0, 3))
def test_delete_records_moves_the_log_start(client, version):
    topic = unique_topic("dr")
    client.create_topic(topic, partitions=2, configs={"segment.bytes": "200"})
    fill(client, topic, 0, 10)
    fill(client, topic, 1, 4)
    got = delete_records(client, version, {topic: [(0, 5), (1, -1)]})
    assert got == {(topic, 0): (NONE, 5), (topic, 1): (NONE, 4)}
    assert client.list_offset(topic, 0, EARLIEST)["offset"] == 5
    assert client.list_offset(topic, 1, EARLIEST)["offset"] == 4
    assert client.fetch(topic, 0, 4)["error_code"] == OFFSET_OUT_OF_RANGE
    p = client.fetch(topic, 0, 5)
    assert p["error_code"] == NONE and p["log_start_offset"] == 5
    # at or below the current start: nothing changes; -1 is the high watermark
    assert delete_records(client, version, {topic: [(0, 3)]}) == {(topic, 0): (NONE, 5)}
    assert delete_records(client, version, {topic: [(0, -1)]}) == {(topic, 0): (NONE, 10)}
    assert client.list_offset(topic, 0, EARLIEST)["offset"] == 10


@pytest.mark.parametrize("version", range(0, 3))
def test_delete_records_errors(client, version):
    topic = unique_topic("dr")
    client.create_topic(topic)
    fill(client, topic, 0, 3)
    got = delete_records(
        client, version, {topic: [(0, 4), (1, 0)], unique_topic("absent"): [(0, 0)]}
    )
    assert got[(topic, 0)] == (OFFSET_OUT_OF_RANGE, -1)  # beyond the high watermark
    assert got[(topic, 1)] == (UNKNOWN_TOPIC_OR_PARTITION, -1)
    assert [v for k, v in got.items() if k[0] != topic] == [(UNKNOWN_TOPIC_OR_PARTITION, -1)]
    assert delete_records(client, version, {topic: [(0, -2)]}) == {
        (topic, 0): (OFFSET_OUT_OF_RANGE, -1)
    }
    assert client.list_offset(topic, 0, EARLIEST)["offset"] == 0


def test_delete_records_on_a_partition_this_broker_does_not_lead(start_broker):
    b = start_broker()
    topic = unique_topic("dr")
    with b.client() as c:
        c.create_topic(topic)
        fill(c, topic, 0, 3)
        take_offline(b, topic, 0)
        assert delete_records(c, 2, {topic: [(0, 1)]}) == {(topic, 0): (NOT_LEADER_OR_FOLLOWER, -1)}


def test_delete_records_survives_a_restart(start_broker):
    b = start_broker()
    topic = unique_topic("dr")
    with b.client() as c:
        c.create_topic(topic)
        fill(c, topic, 0, 6)
        assert delete_records(c, 1, {topic: [(0, 4)]}) == {(topic, 0): (NONE, 4)}
    b.restart()
    with b.client() as c:
        wait_until(lambda: c.list_offset(topic, 0, EARLIEST)["error_code"] == NONE)
        assert c.list_offset(topic, 0, EARLIEST)["offset"] == 4
        assert [v for _, v in fetched_values(c.fetch(topic, 0, 4)["records"])] == [b"v4", b"v5"]
