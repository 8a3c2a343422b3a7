"""CreateTopics v0..v7 and InitProducerId v0..v4 against a real broker over TCP (Kafka as
the spec)."""

from __future__ import annotations

import uuid

import pytest
from broker_fixture import (
    CREATE_TOPICS,
    INIT_PRODUCER_ID,
    INVALID_CONFIG,
    INVALID_PARTITIONS,
    INVALID_REPLICATION_FACTOR,
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    NONE,
    TOPIC_ALREADY_EXISTS,
    UNKNOWN_TOPIC_OR_PARTITION,
    batch,
    unique_topic,
)

VERSIONS = range(0, 8)  # as Kafka 3.9 (4.0 removed v0-1)
ZERO_UUID = uuid.UUID(int=0)
DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5


def creatable(name, partitions=1, rf=1, configs=None, assignments=None):
    return {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": rf,
        "assignments": assignments or [],
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
    }


def create(client, version, topics, validate_only=False):
    body = client.request(
        CREATE_TOPICS,
        version,
        {"topics": topics, "timeout_ms": 10000, "validate_only": validate_only},
    )
    return body["topics"]


def create_one(client, version, *args, **kw):
    validate_only = kw.pop("validate_only", False)
    (r,) = create(client, version, [creatable(*args, **kw)], validate_only)
    return r


def partitions_of(client, name):
    """Partition count seen through Metadata, or None if the topic does not exist."""
    body = client.metadata([name], version=9, allow_auto_topic_creation=False)
    (t,) = body["topics"]
    if t["error_code"] == UNKNOWN_TOPIC_OR_PARTITION:
        return None
    assert t["error_code"] == NONE
    return len(t["partitions"])


@pytest.mark.parametrize("version", VERSIONS)
def test_create(client, version):
    name = unique_topic()
    r = create_one(client, version, name, partitions=3)
    assert (r["name"], r["error_code"]) == (name, NONE)
    assert partitions_of(client, name) == 3
    if version >= 5:
        assert r["num_partitions"] == 3
        assert r["replication_factor"] == 1
        assert r["configs"]
    if version >= 7:
        assert r["topic_id"] != ZERO_UUID
        meta = client.metadata([name], version=10)
        assert meta["topics"][0]["topic_id"] == r["topic_id"]
    # the new partitions take writes at once
    for p in range(3):
        assert client.produce(name, p, batch([b"x"]))["error_code"] == NONE


@pytest.mark.parametrize("version", VERSIONS)
def test_already_exists(client, version):
    name = unique_topic()
    assert create_one(client, version, name)["error_code"] == NONE
    r = create_one(client, version, name, partitions=5)
    assert r["error_code"] == TOPIC_ALREADY_EXISTS
    assert partitions_of(client, name) == 1
    if version >= 5:
        assert r["num_partitions"] == -1 and r["replication_factor"] == -1


@pytest.mark.parametrize("version", VERSIONS)
def test_zero_partitions(client, version):
    name = unique_topic()
    assert create_one(client, version, name, partitions=0)["error_code"] == INVALID_PARTITIONS
    assert partitions_of(client, name) is None


@pytest.mark.parametrize("version", VERSIONS)
def test_replication_factor_above_the_broker_count(client, version):
    name = unique_topic()
    r = create_one(client, version, name, rf=2)
    assert r["error_code"] == INVALID_REPLICATION_FACTOR
    assert partitions_of(client, name) is None


@pytest.mark.parametrize("version", [2, 7])
@pytest.mark.parametrize("bad", ["bad name", "a/b", ".", "..", "x" * 250, ""])
def test_invalid_topic_name(client, version, bad):
    r = create_one(client, version, bad)
    assert r["error_code"] == INVALID_TOPIC_EXCEPTION
    assert bad not in [t["name"] for t in client.metadata(None, version=1)["topics"]]


def test_colliding_names(client):
    """Kafka refuses a name that differs from an existing one only by '.' vs '_'."""
    base = unique_topic().replace("-", "")
    assert create_one(client, 5, f"{base}.x")["error_code"] == NONE
    r = create_one(client, 5, f"{base}_x")
    assert r["error_code"] == INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize("version", VERSIONS)
def test_unknown_config(client, version):
    name = unique_topic()
    r = create_one(client, version, name, configs={"no.such.config": "1"})
    assert r["error_code"] == INVALID_CONFIG
    assert partitions_of(client, name) is None


@pytest.mark.parametrize(
    "configs",
    [
        {"retention.ms": "not-a-number"},
        {"cleanup.policy": "nonsense"},
        {"segment.bytes": "1"},
        {"retention.ms": None},
    ],
)
def test_invalid_config_values(client, configs):
    name = unique_topic()
    r = create_one(client, 5, name, configs=configs)
    assert r["error_code"] == INVALID_CONFIG
    assert partitions_of(client, name) is None


@pytest.mark.parametrize(
    "configs, message",
    [
        (
            {"file.delete.delay.ms": "-1"},
            "Invalid value -1 for configuration file.delete.delay.ms: Value must be at least 0",
        ),
        (
            {"segment.jitter.ms": "soon"},
            "Invalid value soon for configuration segment.jitter.ms: Not a number of type LONG",
        ),
        (
            {"message.downconversion.enable": "maybe"},
            "Invalid value maybe for configuration message.downconversion.enable: Expected"
            " value to be either true or false",
        ),
        (
            {"cleanup.policy": "compact,keep"},
            "Invalid value keep for configuration cleanup.policy: String must be one of:"
            " compact, delete",
        ),
        (
            {"remote.storage.enable": "true"},
            "Tiered Storage functionality is disabled in the broker. Topic cannot be configured"
            " with remote log storage.",
        ),
        ({"preallocat": "true"}, "Unknown topic config name: preallocat"),
    ],
)
def test_invalid_configs_get_kafkas_messages(client, configs, message):
    """INVALID_CONFIG with the message a Kafka 3.9 broker gives (LogConfig.validate); on
    (Incremental)AlterConfigs a ConfigException names the resource first, as Kafka's does."""
    name = unique_topic()
    r = create_one(client, 5, name, configs=configs)
    assert (r["error_code"], r["error_message"]) == (INVALID_CONFIG, message)
    assert partitions_of(client, name) is None
    assert create_one(client, 5, name)["error_code"] == NONE
    ((k, v),) = configs.items()
    body = client.request(
        44,
        1,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": name,
                    "configs": [{"name": k, "config_operation": 0, "value": v}],
                }
            ],
            "validate_only": False,
        },
    )
    (res,) = body["responses"]
    prefixed = f"Invalid config value for resource ConfigResource(type=TOPIC, name='{name}'): "
    wrapped = message.startswith("Invalid value") or message.startswith("Tiered")
    assert (res["error_code"], res["error_message"]) == (
        INVALID_CONFIG,
        prefixed + message if wrapped else message,
    )


def test_every_kafka_topic_config_is_accepted_and_reported(client):
    """CreateTopics v5+ answers every topic config with its value and source."""
    name = unique_topic()
    configs = {"file.delete.delay.ms": "30000", "preallocate": "true", "local.retention.ms": "5"}
    r = create_one(client, 7, name, configs=configs)
    assert r["error_code"] == NONE, r
    got = {c["name"]: (c["value"], c["config_source"]) for c in r["configs"]}
    assert len(got) == 36  # Kafka 3.9's LogConfig keys
    for k, v in configs.items():
        assert got[k] == (v, DYNAMIC_TOPIC_CONFIG)
    assert got["segment.jitter.ms"] == ("0", DEFAULT_CONFIG)
    assert got["message.format.version"] == ("3.0-IV1", DEFAULT_CONFIG)


@pytest.mark.parametrize("version", VERSIONS[1:])  # v0 has no validate_only
def test_validate_only_creates_nothing(client, version):
    name = unique_topic()
    r = create_one(client, version, name, partitions=4, validate_only=True)
    assert r["error_code"] == NONE
    if version >= 5:
        assert r["num_partitions"] == 4
    assert partitions_of(client, name) is None
    # and it still reports the errors a real creation would
    r = create_one(client, version, name, partitions=0, validate_only=True)
    assert r["error_code"] == INVALID_PARTITIONS
    # the name is still free
    assert create_one(client, version, name, partitions=2)["error_code"] == NONE
    assert partitions_of(client, name) == 2


def test_v0_has_no_validate_only_and_no_error_message(client):
    name = unique_topic()
    body = client.request(
        CREATE_TOPICS,
        0,
        {"topics": [creatable(name, 2)], "timeout_ms": 10000, "validate_only": True},
    )
    (r,) = body["topics"]
    assert r["error_code"] == NONE  # validate_only is not on the wire in v0: created
    assert partitions_of(client, name) == 2
    (r,) = create(client, 0, [creatable(name, 2)])
    assert r["error_code"] == TOPIC_ALREADY_EXISTS and r.get("error_message") is None
    (r,) = create(client, 1, [creatable(name, 2)])
    assert r["error_code"] == TOPIC_ALREADY_EXISTS and "already exists" in r["error_message"]


@pytest.mark.parametrize("version", VERSIONS)
def test_name_twice_in_one_request(client, version):
    dup, other = unique_topic("dup"), unique_topic("other")
    results = create(
        client,
        version,
        [creatable(dup, 1), creatable(other, 2), creatable(dup, 3)],
    )
    by_name: dict[str, list[int]] = {}
    for r in results:
        by_name.setdefault(r["name"], []).append(r["error_code"])
    assert set(by_name) == {dup, other}
    assert set(by_name[dup]) == {INVALID_REQUEST}
    assert by_name[other] == [NONE]
    assert partitions_of(client, dup) is None
    assert partitions_of(client, other) == 2


@pytest.mark.parametrize("version", [5, 6, 7])
def test_v5_returns_configs_partitions_and_replication_factor(client, version):
    name = unique_topic()
    r = create_one(
        client,
        version,
        name,
        partitions=2,
        configs={"retention.ms": "123456", "segment.bytes": "1048576"},
    )
    assert r["error_code"] == NONE
    assert (r["num_partitions"], r["replication_factor"]) == (2, 1)
    configs = {c["name"]: c for c in r["configs"]}
    assert configs["retention.ms"]["value"] == "123456"
    assert configs["retention.ms"]["config_source"] == DYNAMIC_TOPIC_CONFIG
    assert configs["segment.bytes"]["value"] == "1048576"
    assert configs["cleanup.policy"]["value"] == "delete"
    assert configs["cleanup.policy"]["config_source"] == DEFAULT_CONFIG
    for c in r["configs"]:
        assert c["is_sensitive"] is False


@pytest.mark.parametrize("version", [4, 5, 7])
def test_defaults_for_minus_one(start_broker, version):
    """v4+: num_partitions / replication_factor -1 take the broker defaults."""
    broker = start_broker(**{"num.partitions": 3})
    with broker.client() as c:
        name = unique_topic()
        r = create_one(c, version, name, partitions=-1, rf=-1)
        assert r["error_code"] == NONE
        if version >= 5:
            assert (r["num_partitions"], r["replication_factor"]) == (3, 1)
        assert partitions_of(c, name) == 3


def test_explicit_assignment(broker, client):
    name = unique_topic()
    assignments = [{"partition_index": i, "broker_ids": [broker.broker_id]} for i in range(2)]
    r = create_one(client, 5, name, partitions=-1, rf=-1, assignments=assignments)
    assert r["error_code"] == NONE
    assert partitions_of(client, name) == 2


@pytest.mark.parametrize(
    "assignments",
    [
        [{"partition_index": 0, "broker_ids": [42]}],  # not a live broker
        [{"partition_index": 1, "broker_ids": [0]}],  # partitions not 0..n-1
        [{"partition_index": 0, "broker_ids": [0, 0]}],  # a replica twice
    ],
    ids=["unknown-broker", "gap", "duplicate-replica"],
)
def test_invalid_explicit_assignment(broker, assignments):
    with broker.client() as c:
        bad = unique_topic()
        r = create_one(c, 5, bad, partitions=-1, rf=-1, assignments=assignments)
        assert r["error_code"] == 39  # INVALID_REPLICA_ASSIGNMENT
    with broker.client() as c:
        assert partitions_of(c, bad) is None


def test_created_topics_survive_a_restart(start_broker):
    broker = start_broker()
    name = unique_topic()
    with broker.client() as c:
        assert create_one(c, 7, name, partitions=3)["error_code"] == NONE
    broker.restart()
    with broker.client() as c:
        assert partitions_of(c, name) == 3
        assert create_one(c, 7, name)["error_code"] == TOPIC_ALREADY_EXISTS


# -- InitProducerId -------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(0, 5))
def test_init_producer_id_distinct_ids(client, version):
    seen = set()
    for _ in range(5):
        body = client.init_producer_id(version=version)
        assert body["producer_id"] >= 0
        assert body["producer_epoch"] == 0
        seen.add(body["producer_id"])
    assert len(seen) == 5


def test_init_producer_id_distinct_across_connections_and_restarts(start_broker):
    broker = start_broker()
    seen = []
    for _ in range(3):
        for v in range(0, 5):
            with broker.client() as c:
                seen.append(c.init_producer_id(version=v)["producer_id"])
        broker.restart()
    assert len(set(seen)) == len(seen)


def test_init_producer_id_v3_with_current_id_gets_a_usable_id(client):
    first = client.init_producer_id(version=3)
    body = client.request(
        INIT_PRODUCER_ID,
        3,
        {
            "transactional_id": None,
            "transaction_timeout_ms": 60000,
            "producer_id": first["producer_id"],
            "producer_epoch": first["producer_epoch"],
        },
    )
    assert body["error_code"] == NONE
    assert body["producer_id"] >= 0
    assert (body["producer_id"], body["producer_epoch"]) != (
        first["producer_id"],
        first["producer_epoch"],
    )


def test_init_producer_id_transactional_gets_an_id_and_bumps_the_epoch(client):
    """(Refused before the transaction coordinator; tests/test_txn_protocol.py has the rest.)"""
    first = client.request(
        INIT_PRODUCER_ID, 4, {"transactional_id": "txn-cp", "transaction_timeout_ms": 60000}
    )
    assert first["error_code"] == NONE and first["producer_id"] >= 0
    again = client.request(
        INIT_PRODUCER_ID, 4, {"transactional_id": "txn-cp", "transaction_timeout_ms": 60000}
    )
    assert (again["producer_id"], again["producer_epoch"]) == (
        first["producer_id"],
        first["producer_epoch"] + 1,
    )
