"""The admin APIs against a real broker over TCP (Kafka as the spec): DescribeAcls,
CreateAcls, DeleteAcls, DeleteRecords, OffsetDelete, DescribeLogDirs, IncrementalAlterConfigs,
AlterConfigs, ElectLeaders, ListPartitionReassignments, DescribeProducers, ListTransactions."""

from __future__ import annotations

import struct

import pytest
from broker_fixture import (
    INVALID_CONFIG,
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    NONE,
    OFFSET_OUT_OF_RANGE,
    UNKNOWN_TOPIC_OR_PARTITION,
    BrokerFactory,
    batch,
    fetched_values,
    unique_topic,
    wait_until,
)

from pybroker.coord.metadata import paths
from pybroker.wire.consumer_protocol import subscription_topics

SECURITY_DISABLED = 54
NOT_LEADER_OR_FOLLOWER = 6
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
DELETE_RECORDS, DESCRIBE_LOG_DIRS = 21, 35
DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 44
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
ELECT_LEADERS, LIST_PARTITION_REASSIGNMENTS = 43, 46
DESCRIBE_PRODUCERS, LIST_TRANSACTIONS = 61, 66
NOT_CONTROLLER, PREFERRED_LEADER_NOT_AVAILABLE, ELECTION_NOT_NEEDED = 41, 80, 84
OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, SYNC_GROUP, OFFSET_DELETE = 8, 9, 11, 14, 47
INVALID_GROUP_ID, NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, GROUP_SUBSCRIBED_TO_TOPIC = 24, 68, 69, 86
EARLIEST = -2


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    """One broker for the tests that need no special settings (each uses its own topics)."""
    with BrokerFactory(tmp_path_factory.mktemp("shared")) as factory:
        yield factory(**{"group.initial.rebalance.delay.ms": 0})


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


# --------------------------------------------------------------------------- OffsetDelete


def unique_group() -> str:
    return unique_topic("group")


def commit(client, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """A simple consumer's commit (generation -1, no member id)."""
    by_topic: dict[str, list[dict]] = {}
    for (topic, p), o in offsets.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": p, "committed_offset": o, "committed_metadata": ""}
        )
    body = client.request(
        OFFSET_COMMIT,
        2,
        {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "retention_time_ms": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        },
    )
    assert all(p["error_code"] == NONE for t in body["topics"] for p in t["partitions"]), body


def committed(client, group: str) -> dict[tuple[str, int], int]:
    body = client.request(OFFSET_FETCH, 2, {"group_id": group, "topics": None})
    return {
        (t["name"], p["partition_index"]): p["committed_offset"]
        for t in body["topics"]
        for p in t["partitions"]
    }


def offset_delete(client, group: str, wanted: dict[str, list[int]]) -> tuple[int, dict]:
    body = client.request(
        OFFSET_DELETE,
        0,
        {
            "group_id": group,
            "topics": [
                {"name": t, "partitions": [{"partition_index": p} for p in ps]}
                for t, ps in wanted.items()
            ],
        },
    )
    return body["error_code"], {
        (t["name"], p["partition_index"]): p["error_code"]
        for t in body["topics"]
        for p in t["partitions"]
    }


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v1: topics, null user data, no owned partitions."""
    out = struct.pack(">hi", 1, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1) + struct.pack(">i", 0)


def join_and_sync(broker, group: str, protocol_type: str, metadata: bytes) -> None:
    """One member joins (JoinGroup v1) and, as leader, syncs (SyncGroup v1): the group is
    Stable with that member.  Its connection stays open (the member is not heartbeating, but
    its session timeout is long)."""
    c = broker.client()
    joined = c.request(
        JOIN_GROUP,
        1,
        {
            "group_id": group,
            "session_timeout_ms": 30000,
            "rebalance_timeout_ms": 30000,
            "member_id": "",
            "protocol_type": protocol_type,
            "protocols": [{"name": "range", "metadata": metadata}],
        },
    )
    assert joined["error_code"] == NONE, joined
    synced = c.request(
        SYNC_GROUP,
        1,
        {
            "group_id": group,
            "generation_id": joined["generation_id"],
            "member_id": joined["member_id"],
            "assignments": [{"member_id": joined["member_id"], "assignment": b""}],
        },
    )
    assert synced["error_code"] == NONE, synced
    c.close()


def test_offset_delete_unknown_and_invalid_groups(client):
    topic = unique_topic("od")
    client.create_topic(topic)
    assert offset_delete(client, unique_group(), {topic: [0]}) == (GROUP_ID_NOT_FOUND, {})
    assert offset_delete(client, "", {topic: [0]}) == (INVALID_GROUP_ID, {})


def test_offset_delete_on_an_empty_group(client):
    a, b = unique_topic("od"), unique_topic("od")
    client.create_topic(a, partitions=2)
    client.create_topic(b)
    group = unique_group()
    commit(client, group, {(a, 0): 5, (a, 1): 6, (b, 0): 7})
    absent = unique_topic("absent")
    code, results = offset_delete(client, group, {a: [0, 7], absent: [0]})
    assert code == NONE
    assert results == {
        (a, 0): NONE,
        (a, 7): UNKNOWN_TOPIC_OR_PARTITION,
        (absent, 0): UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert committed(client, group) == {(a, 1): 6, (b, 0): 7}
    # a partition without a commit: nothing to delete, no error
    assert offset_delete(client, group, {a: [0]}) == (NONE, {(a, 0): NONE})
    # the last offsets go: the empty group goes with them (Kafka: Empty -> Dead)
    assert offset_delete(client, group, {a: [1], b: [0]}) == (NONE, {(a, 1): NONE, (b, 0): NONE})
    assert committed(client, group) == {}
    assert offset_delete(client, group, {a: [1]}) == (GROUP_ID_NOT_FOUND, {})


def test_offset_delete_refuses_subscribed_topics_of_a_live_consumer_group(broker, client):
    a, b = unique_topic("od"), unique_topic("od")
    client.create_topic(a)
    client.create_topic(b)
    group = unique_group()
    commit(client, group, {(a, 0): 1, (b, 0): 2})
    join_and_sync(broker, group, "consumer", subscription(a))
    code, results = offset_delete(client, group, {a: [0], b: [0]})
    assert code == NONE
    assert results == {(a, 0): GROUP_SUBSCRIBED_TO_TOPIC, (b, 0): NONE}
    assert committed(client, group) == {(a, 0): 1}


def test_offset_delete_with_unreadable_subscriptions_counts_every_topic_subscribed(broker, client):
    a = unique_topic("od")
    client.create_topic(a)
    group = unique_group()
    commit(client, group, {(a, 0): 1})
    join_and_sync(broker, group, "consumer", b"\x00")
    assert offset_delete(client, group, {a: [0]}) == (NONE, {(a, 0): GROUP_SUBSCRIBED_TO_TOPIC})
    assert committed(client, group) == {(a, 0): 1}


def test_offset_delete_on_a_live_group_of_another_protocol_type(broker, client):
    a = unique_topic("od")
    client.create_topic(a)
    group = unique_group()
    commit(client, group, {(a, 0): 1})
    join_and_sync(broker, group, "connect", b"whatever")
    assert offset_delete(client, group, {a: [0]}) == (NON_EMPTY_GROUP, {})
    assert committed(client, group) == {(a, 0): 1}


def test_subscription_topics_reads_the_v0_prefix_of_any_version():
    assert subscription_topics(subscription("a", "bc")) == ["a", "bc"]
    v3 = struct.pack(">hi", 3, 1) + struct.pack(">h", 1) + b"x" + struct.pack(">i", 2) + b"ud"
    assert subscription_topics(v3 + b"owned partitions, generation, rack") == ["x"]
    for bad in (b"", b"\x00", subscription("a")[:9], struct.pack(">hi", -1, 0)):
        with pytest.raises(ValueError):
            subscription_topics(bad)


# --------------------------------------------------------------------------- DescribeLogDirs


@pytest.mark.parametrize("version", range(0, 5))
def test_describe_log_dirs(broker, client, version):
    a, b = unique_topic("ld"), unique_topic("ld")
    client.create_topic(a, partitions=2)
    client.create_topic(b)
    fill(client, a, 1, 5)
    wait_until(lambda: broker.broker.logs.get(b, 0) is not None)
    body = client.request(DESCRIBE_LOG_DIRS, version, {"topics": None})
    assert body.get("error_code", NONE) == NONE
    (result,) = body["results"]
    assert result["error_code"] == NONE
    assert result["log_dir"] == str(broker.log_dir.absolute())
    parts = {
        (t["name"], p["partition_index"]): p for t in result["topics"] for p in t["partitions"]
    }
    assert {(a, 0), (a, 1), (b, 0)} <= set(parts)
    log = broker.broker.logs.get(a, 1)
    assert parts[(a, 1)]["partition_size"] == log.size > 0
    assert parts[(a, 0)]["partition_size"] == 0
    assert all(p["offset_lag"] == 0 and p["is_future_key"] is False for p in parts.values())
    if version >= 4:
        assert result["total_bytes"] >= result["usable_bytes"] > 0
    # a filter: only the partitions asked for that have a log here; other topics vanish
    body = client.request(
        DESCRIBE_LOG_DIRS,
        version,
        {
            "topics": [
                {"topic": a, "partitions": [1, 9]},
                {"topic": unique_topic("absent"), "partitions": [0]},
            ]
        },
    )
    (result,) = body["results"]
    assert [
        (t["name"], [p["partition_index"] for p in t["partitions"]]) for t in result["topics"]
    ] == [(a, [1])]
    body = client.request(DESCRIBE_LOG_DIRS, version, {"topics": []})
    assert body["results"][0]["topics"] == []


# --------------------------------------------------------------------------- configs


def topic_overrides(client, topic: str) -> dict[str, str]:
    body = client.request(
        DESCRIBE_CONFIGS,
        4,
        {
            "resources": [
                {
                    "resource_type": TOPIC_RESOURCE,
                    "resource_name": topic,
                    "configuration_keys": None,
                }
            ]
        },
    )
    (r,) = body["results"]
    assert r["error_code"] == NONE, r
    return {c["name"]: c["value"] for c in r["configs"] if c["config_source"] == 1}


def incremental(client, version, resources, validate_only=False) -> list[tuple[int, str | None]]:
    """resources: (type, name, [(config, op, value)]) -> [(error code, message)]."""
    body = client.request(
        INCREMENTAL_ALTER_CONFIGS,
        version,
        {
            "resources": [
                {
                    "resource_type": rtype,
                    "resource_name": name,
                    "configs": [
                        {"name": k, "config_operation": op, "value": v} for k, op, v in ops
                    ],
                }
                for rtype, name, ops in resources
            ],
            "validate_only": validate_only,
        },
    )
    assert [(r["resource_type"], r["resource_name"]) for r in body["responses"]] == [
        (rtype, name) for rtype, name, _ in resources
    ]
    return [(r["error_code"], r["error_message"]) for r in body["responses"]]


def legacy_alter(client, version, resources, validate_only=False) -> list[int]:
    """resources: (type, name, {config: value}) -> [error code]."""
    body = client.request(
        ALTER_CONFIGS,
        version,
        {
            "resources": [
                {
                    "resource_type": rtype,
                    "resource_name": name,
                    "configs": [{"name": k, "value": v} for k, v in configs.items()],
                }
                for rtype, name, configs in resources
            ],
            "validate_only": validate_only,
        },
    )
    return [r["error_code"] for r in body["responses"]]


@pytest.mark.parametrize("version", range(0, 2))
def test_incremental_alter_configs_set_and_delete(broker, client, version):
    topic = unique_topic("cfg")
    client.create_topic(topic, configs={"segment.bytes": "100000"})
    got = incremental(
        client,
        version,
        [
            (
                TOPIC_RESOURCE,
                topic,
                [("retention.ms", SET, "123456"), ("segment.bytes", DELETE, None)],
            )
        ],
    )
    assert got == [(NONE, None)]
    assert topic_overrides(client, topic) == {"retention.ms": "123456"}
    log = broker.broker.logs.get(topic, 0)
    wait_until(lambda: log.config.retention_ms == 123456)
    assert log.config.segment_bytes == broker.broker.config.log_segment_bytes
    data, _ = broker.run(broker.broker.store.get(paths.topic_config(topic)))
    assert paths.decode_topic_config(data) == {"retention.ms": "123456"}
    # validate_only: checked, not written
    got = incremental(
        client, version, [(TOPIC_RESOURCE, topic, [("retention.ms", SET, "5")])], True
    )
    assert got == [(NONE, None)]
    assert topic_overrides(client, topic) == {"retention.ms": "123456"}
    # deleting an override that is not there is fine
    got = incremental(
        client, version, [(TOPIC_RESOURCE, topic, [("retention.bytes", DELETE, None)])]
    )
    assert got == [(NONE, None)]


@pytest.mark.parametrize("version", range(0, 2))
def test_incremental_alter_configs_list_operations(client, version):
    topic = unique_topic("cfg")
    client.create_topic(topic)

    def one(*ops):
        (r,) = incremental(client, version, [(TOPIC_RESOURCE, topic, list(ops))])
        return r[0]

    assert one(("cleanup.policy", APPEND, "delete")) == NONE  # the default already
    assert topic_overrides(client, topic) == {"cleanup.policy": "delete"}
    assert one(("cleanup.policy", APPEND, "compact")) == NONE
    assert topic_overrides(client, topic) == {"cleanup.policy": "delete,compact"}
    assert one(("cleanup.policy", SUBTRACT, "delete")) == NONE
    assert topic_overrides(client, topic) == {"cleanup.policy": "compact"}
    assert one(("cleanup.policy", SUBTRACT, "delete")) == NONE  # not in the list
    assert topic_overrides(client, topic) == {"cleanup.policy": "compact"}
    assert one(("retention.ms", APPEND, "5")) == INVALID_CONFIG  # not a list
    # Kafka 3.9 looks an APPEND's key up with a lookup that throws for unknown names:
    # UNKNOWN_SERVER_ERROR without a message (a SET of one is INVALID_CONFIG)
    assert one(("no.such.config", APPEND, "5")) == -1
    assert one(("no.such.config", SET, "5")) == INVALID_CONFIG
    assert topic_overrides(client, topic) == {"cleanup.policy": "compact"}
    # nothing left: an empty policy (neither retention nor compaction), as Kafka 3.9 stores it
    assert one(("cleanup.policy", SUBTRACT, "compact")) == NONE
    assert topic_overrides(client, topic) == {"cleanup.policy": ""}


def test_incremental_list_operations_on_kafkas_defaults_and_items(start_broker):
    """APPEND with no override starts from LogConfig's default, not the broker's setting, and
    items split as Java's String.split does (a trailing empty item is dropped): both
    differed from Kafka before."""
    b = start_broker(**{"log.cleanup.policy": "compact"})
    with b.client() as c:
        topic = unique_topic("cfg")
        c.create_topic(topic)

        def one(*ops):
            (r,) = incremental(c, 1, [(TOPIC_RESOURCE, topic, list(ops))])
            return r

        assert one(("cleanup.policy", APPEND, "delete")) == (NONE, None)
        assert topic_overrides(c, topic) == {"cleanup.policy": "delete"}
        assert one(("cleanup.policy", DELETE, None)) == (NONE, None)
        assert one(("cleanup.policy", APPEND, "compact,")) == (NONE, None)
        assert topic_overrides(c, topic) == {"cleanup.policy": "delete,compact"}
        assert one(("cleanup.policy", SUBTRACT, "compact,,")) == (NONE, None)
        assert topic_overrides(c, topic) == {"cleanup.policy": "delete"}


@pytest.mark.parametrize("version", range(0, 2))
def test_incremental_alter_configs_errors(client, version):
    topic, other = unique_topic("cfg"), unique_topic("cfg")
    client.create_topic(topic)
    client.create_topic(other)
    got = incremental(
        client,
        version,
        [
            (TOPIC_RESOURCE, topic, [("compression.type", SET, "brotli")]),  # no such codec
            (TOPIC_RESOURCE, other, [("retention.ms", SET, "soon")]),  # Kafka's check
            (TOPIC_RESOURCE, unique_topic("absent"), [("retention.ms", SET, "1")]),
            (BROKER_RESOURCE, "0", [("log.dirs", SET, "/elsewhere")]),  # static only
            (TOPIC_RESOURCE, "", [("retention.ms", SET, "1")]),
        ],
    )
    assert [code for code, _ in got] == [
        INVALID_CONFIG,
        INVALID_CONFIG,
        UNKNOWN_TOPIC_OR_PARTITION,
        INVALID_REQUEST,
        INVALID_REQUEST,
    ]
    assert got[3][1] == "Cannot update these configs dynamically: Set(log.dirs)"
    got = incremental(
        client,
        version,
        [
            (TOPIC_RESOURCE, topic, [("retention.ms", SET, "1"), ("retention.ms", DELETE, None)]),
            (TOPIC_RESOURCE, other, [("retention.ms", SET, None)]),
        ],
    )
    assert [code for code, _ in got] == [INVALID_REQUEST, INVALID_REQUEST]
    got = incremental(
        client,
        version,
        [
            (TOPIC_RESOURCE, topic, [("retention.ms", 7, "1")]),  # unknown operation
            (TOPIC_RESOURCE, other, [("retention.ms", SET, "1")]),
            (TOPIC_RESOURCE, other, [("retention.bytes", SET, "1")]),  # twice
        ],
    )
    assert [code for code, _ in got] == [INVALID_REQUEST] * 3
    assert topic_overrides(client, topic) == {} and topic_overrides(client, other) == {}
    # one bad resource does not stop the others
    got = incremental(
        client,
        version,
        [
            (TOPIC_RESOURCE, topic, [("retention.ms", SET, "-5")]),
            (TOPIC_RESOURCE, other, [("retention.ms", SET, "1000")]),
        ],
    )
    assert [code for code, _ in got] == [INVALID_CONFIG, NONE]
    assert topic_overrides(client, other) == {"retention.ms": "1000"}


@pytest.mark.parametrize("version", range(0, 3))
def test_alter_configs_replaces_every_override(broker, client, version):
    topic = unique_topic("cfg")
    client.create_topic(topic, configs={"retention.ms": "100000", "segment.bytes": "100000"})
    assert legacy_alter(
        client, version, [(TOPIC_RESOURCE, topic, {"retention.bytes": "9999"})]
    ) == [NONE]
    assert topic_overrides(client, topic) == {"retention.bytes": "9999"}
    log = broker.broker.logs.get(topic, 0)
    wait_until(lambda: log.config.retention_bytes == 9999)
    assert legacy_alter(client, version, [(TOPIC_RESOURCE, topic, {})], validate_only=True) == [
        NONE
    ]
    assert topic_overrides(client, topic) == {"retention.bytes": "9999"}
    assert legacy_alter(
        client,
        version,
        [
            (TOPIC_RESOURCE, topic, {"cleanup.policy": "compact"}),  # the topic twice: both
            (TOPIC_RESOURCE, unique_topic("absent"), {}),
            (BROKER_RESOURCE, "0", {"broker.id": "7"}),  # static only
            (TOPIC_RESOURCE, topic, {"retention.ms": None}),
        ],
    ) == [INVALID_REQUEST, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST, INVALID_REQUEST]
    assert legacy_alter(client, version, [(TOPIC_RESOURCE, topic, {"retention.ms": None})]) == [
        INVALID_REQUEST
    ]
    assert legacy_alter(client, version, [(TOPIC_RESOURCE, topic, {"preallocate": "maybe"})]) == [
        INVALID_CONFIG
    ]
    assert legacy_alter(client, version, [(TOPIC_RESOURCE, topic, {})]) == [NONE]
    assert topic_overrides(client, topic) == {}


# --------------------------------------------------------------------------- ElectLeaders


def elect(client, version, election_type, wanted: dict[str, list[int]] | None) -> dict:
    body = client.request(
        ELECT_LEADERS,
        version,
        {
            "election_type": election_type,
            "topic_partitions": None
            if wanted is None
            else [{"topic": t, "partitions": ps} for t, ps in wanted.items()],
            "timeout_ms": 10000,
        },
    )
    assert body.get("error_code", NONE) == NONE, body
    return {
        (r["topic"], p["partition_id"]): p["error_code"]
        for r in body["replica_election_results"]
        for p in r["partition_result"]
    }


def leader_of(broker, topic: str, partition: int) -> tuple[int, int]:
    st = broker.broker.cluster.topics[topic].partitions[partition]
    return st.leader, st.leader_epoch


@pytest.mark.parametrize("version", range(0, 3))
def test_elect_leaders_preferred(start_broker, version):
    b = start_broker()
    topic = unique_topic("el")
    with b.client() as c:
        c.create_topic(topic, partitions=2)
        absent = unique_topic("absent")
        got = elect(c, version, 0, {topic: [0, 1, 7], absent: [0]})
        assert got == {
            (topic, 0): ELECTION_NOT_NEEDED,
            (topic, 1): ELECTION_NOT_NEEDED,
            (topic, 7): UNKNOWN_TOPIC_OR_PARTITION,
            (absent, 0): UNKNOWN_TOPIC_OR_PARTITION,
        }
        assert elect(c, version, 0, None) == {}  # not needed anywhere: nothing to report
        take_offline(b, topic, 1)  # no leader, empty ISR: the preferred replica cannot lead
        assert elect(c, version, 0, {topic: [1]}) == {(topic, 1): PREFERRED_LEADER_NOT_AVAILABLE}
        assert elect(c, version, 0, None) == {(topic, 1): PREFERRED_LEADER_NOT_AVAILABLE}


@pytest.mark.parametrize("version", range(1, 3))
def test_elect_leaders_unclean(start_broker, version):
    b = start_broker()
    topic = unique_topic("el")
    with b.client() as c:
        c.create_topic(topic)
        fill(c, topic, 0, 3)
        assert elect(c, version, 1, {topic: [0]}) == {(topic, 0): ELECTION_NOT_NEEDED}
        take_offline(b, topic, 0)
        _, epoch = leader_of(b, topic, 0)
        assert elect(c, version, 1, {topic: [0]}) == {(topic, 0): NONE}
        assert leader_of(b, topic, 0) == (0, epoch + 1)
        assert b.broker.cluster.topics[topic].partitions[0].isr == [0]
        wait_until(lambda: c.produce(topic, 0, batch([b"after"]))["error_code"] == NONE)
        body = c.request(ELECT_LEADERS, version, {"election_type": 5, "topic_partitions": None})
        assert body["error_code"] == INVALID_REQUEST


def test_elect_leaders_elsewhere_than_on_the_controller(start_broker):
    b = start_broker()
    topic = unique_topic("el")
    cluster = b.broker.cluster
    with b.client() as c:
        c.create_topic(topic)

        async def pretend(controller_id: int) -> None:
            cluster.controller_id = controller_id

        b.run(pretend(7))
        try:
            assert elect(c, 2, 0, {topic: [0]}) == {(topic, 0): NOT_CONTROLLER}
            assert elect(c, 2, 0, None) == {}
        finally:
            b.run(pretend(b.broker_id))


# --------------------------------------------------------------------------- reassignments


def test_list_partition_reassignments_is_always_empty(start_broker):
    b = start_broker()
    topic = unique_topic("lr")
    with b.client() as c:
        c.create_topic(topic, partitions=2)
        for topics in (
            None,
            [{"name": topic, "partition_indexes": [0, 1, 9]}],
            [{"name": unique_topic("absent"), "partition_indexes": [0]}],
        ):
            body = c.request(
                LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 1000, "topics": topics}
            )
            assert (body["error_code"], body["error_message"], body["topics"]) == (NONE, None, [])
        cluster = b.broker.cluster

        async def pretend(controller_id: int) -> None:
            cluster.controller_id = controller_id

        b.run(pretend(7))
        try:
            body = c.request(LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 1000, "topics": None})
            assert body["error_code"] == NOT_CONTROLLER and body["topics"] == []
        finally:
            b.run(pretend(b.broker_id))


# --------------------------------------------------------------------------- transactions


def describe_producers(client, wanted: dict[str, list[int]]) -> dict:
    body = client.request(
        DESCRIBE_PRODUCERS,
        0,
        {"topics": [{"name": t, "partition_indexes": ps} for t, ps in wanted.items()]},
    )
    return {(t["name"], p["partition_index"]): p for t in body["topics"] for p in t["partitions"]}


def test_describe_producers(start_broker):
    b = start_broker()
    topic = unique_topic("dp")
    with b.client() as c:
        c.create_topic(topic, partitions=2)
        pid = c.init_producer_id()["producer_id"]
        other = c.init_producer_id()["producer_id"]
        for seq, ts in ((0, 1_700_000_000_000), (3, 1_700_000_000_500)):
            records = batch(
                [b"a", b"b", b"c"],
                producer_id=pid,
                producer_epoch=0,
                base_sequence=seq,
                timestamp=ts,
            )
            assert c.produce(topic, 0, records)["error_code"] == NONE
        records = batch([b"x"], producer_id=other, producer_epoch=0, base_sequence=0, timestamp=5)
        assert c.produce(topic, 0, records)["error_code"] == NONE
        fill(c, topic, 1, 2)  # not idempotent: no producer state
        absent = unique_topic("absent")
        got = describe_producers(c, {topic: [0, 1, 5], absent: [0], "bad name!": [0]})
        p0 = got[(topic, 0)]
        assert p0["error_code"] == NONE
        assert p0["active_producers"] == [
            {
                "producer_id": pid,
                "producer_epoch": 0,
                "last_sequence": 5,
                "last_timestamp": 1_700_000_000_500,
                "coordinator_epoch": -1,
                "current_txn_start_offset": -1,
            },
            {
                "producer_id": other,
                "producer_epoch": 0,
                "last_sequence": 0,
                "last_timestamp": 5,
                "coordinator_epoch": -1,
                "current_txn_start_offset": -1,
            },
        ]
        assert (got[(topic, 1)]["error_code"], got[(topic, 1)]["active_producers"]) == (NONE, [])
        assert got[(topic, 5)]["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
        assert got[(absent, 0)]["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
        assert got[("bad name!", 0)]["error_code"] == INVALID_TOPIC_EXCEPTION
        # a replica that does not lead still hosts the state (as a Kafka follower does)
        take_offline(b, topic, 0)
        got = describe_producers(c, {topic: [0]})
        assert [p["producer_id"] for p in got[(topic, 0)]["active_producers"]] == [pid, other]
    b.restart()  # rebuilt from the snapshot and the log
    with b.client() as c:
        got = describe_producers(c, {topic: [0]})
        assert [p["last_sequence"] for p in got[(topic, 0)]["active_producers"]] == [5, 0]


@pytest.mark.parametrize("version", range(0, 2))
def test_list_transactions_is_always_empty(client, version):
    body = client.request(
        LIST_TRANSACTIONS,
        version,
        {"state_filters": [], "producer_id_filters": [], "duration_filter": -1},
    )
    assert (body["error_code"], body["unknown_state_filters"], body["transaction_states"]) == (
        NONE,
        [],
        [],
    )
    body = client.request(
        LIST_TRANSACTIONS,
        version,
        {
            "state_filters": ["Ongoing", "Bogus", "CompleteAbort"],
            "producer_id_filters": [1, 2],
            "duration_filter": 1000,
        },
    )
    assert body["error_code"] == NONE
    assert body["unknown_state_filters"] == ["Bogus"]
    assert body["transaction_states"] == []


def test_delete_records_on_a_partition_whose_log_is_gone_answers_an_error(broker, client):
    """Found by the protocol fuzzer (tests/fuzz): DeleteRecords while a topic is being deleted
    (metadata still lists the partition, its log is already gone) raised KeyError from
    LogManager.delete_records and lost the connection.  Kafka answers NOT_LEADER_OR_FOLLOWER
    for a partition the metadata knows but this broker does not host."""
    topic = unique_topic()
    client.create_topic(topic, partitions=1)
    broker.run(_drop_log(broker, topic, 0))  # the window between the two steps of a deletion
    assert delete_records(client, 1, {topic: [(0, -1)]}) == {
        (topic, 0): (NOT_LEADER_OR_FOLLOWER, -1)
    }
    assert client.metadata([topic])["topics"][0]["error_code"] == NONE  # still answering


async def _drop_log(broker, topic: str, partition: int) -> None:
    broker.broker.logs.delete(topic, partition)


def test_a_topic_deleted_and_created_again_at_once_starts_empty_and_keeps_what_it_acknowledges(
    start_broker,
):
    """Found by the protocol fuzzer: DeleteTopics, CreateTopics and Produce pipelined on one
    connection.  The Produce ran before the queued metadata events and appended to the deleted
    incarnation's replica and log; the deleted log's removal then unlinked files by their old
    paths, which the new log now used, so what was acknowledged was gone after a restart.
    Logs know their incarnation (partition.metadata's topic id), a replica of another
    incarnation is replaced before any append or read, and a deleted log's paths move with
    its renamed directory."""
    from broker_fixture import produce_body

    from pybroker.wire import codec

    b = start_broker()
    topic = unique_topic("recreate")
    create = {
        "topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                    "assignments": [], "configs": []}],
        "timeout_ms": 1000,
        "validate_only": False,
    }  # fmt: skip
    with b.client() as c:
        c.create_topic(topic)
        assert c.produce(topic, 0, batch([b"old"]))["error_code"] == NONE
        c.send_raw(  # one connection, pipelined, as an admin tool or a test harness may do
            codec.encode_request(20, 4, 1, "x", {"topic_names": [topic], "timeout_ms": 1000})
            + codec.encode_request(19, 5, 2, "x", create)
            + codec.encode_request(0, 8, 3, "x", produce_body(topic, 0, batch([b"new"])))
        )
        for api, version in ((20, 4), (19, 5)):
            codec.decode_response(api, version, c.recv_frame())
        _, produced = codec.decode_response(0, 8, c.recv_frame())
        (p,) = produced["responses"][0]["partition_responses"]
        assert p["error_code"] == NONE
        assert fetched_values(c.fetch(topic, 0, 0)["records"]) == [(0, b"new")]
    b.restart()
    with b.client() as c:
        assert fetched_values(c.fetch(topic, 0, 0)["records"]) == [(0, b"new")]
