"""ListOffsets v1..v9 against a real broker over TCP (Kafka as the spec)."""

from __future__ import annotations

import pytest
from broker_fixture import (
    LIST_OFFSETS,
    NONE,
    UNKNOWN_TOPIC_OR_PARTITION,
    batch,
    unique_topic,
)

from pybroker.wire.records import COMPRESSION_GZIP, build_batch

EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3
EARLIEST_LOCAL, LATEST_TIERED = -4, -5
DELETE_RECORDS = 21
T0 = 1_700_000_000_000  # distinct, increasing CreateTime timestamps (recent enough for retention)


@pytest.fixture
def topic(client):
    name = unique_topic()
    client.create_topic(name, partitions=1)
    return name


VERSIONS = range(1, 10)


def produce_stamped(client, topic, stamps, **kw):
    b = build_batch([(None, f"ts{t}".encode(), [], t) for t in stamps], **kw)
    p = client.produce(topic, 0, b)
    assert p["error_code"] == NONE
    return p["base_offset"]


@pytest.mark.parametrize("version", VERSIONS)
def test_earliest_and_latest_of_an_empty_log(client, topic, version):
    for ts in (EARLIEST, LATEST):
        p = client.list_offset(topic, 0, ts, version=version)
        assert p["error_code"] == NONE
        assert p["offset"] == 0
        assert p["timestamp"] == -1


@pytest.mark.parametrize("version", VERSIONS)
def test_timestamp_lookup_on_an_empty_log(client, topic, version):
    p = client.list_offset(topic, 0, T0, version=version)
    assert p["error_code"] == NONE
    assert (p["offset"], p["timestamp"]) == (-1, -1)


@pytest.mark.parametrize("version", VERSIONS)
def test_earliest_and_latest(client, topic, version):
    client.produce(topic, 0, batch([b"a", b"b", b"c"]))
    client.produce(topic, 0, batch([b"d"]))
    p = client.list_offset(topic, 0, EARLIEST, version=version)
    assert (p["error_code"], p["offset"], p["timestamp"]) == (NONE, 0, -1)
    p = client.list_offset(topic, 0, LATEST, version=version)
    assert (p["error_code"], p["offset"], p["timestamp"]) == (NONE, 4, -1)
    if version >= 4:
        assert p["leader_epoch"] == 0


@pytest.mark.parametrize("version", VERSIONS)
def test_by_timestamp_across_batches(client, topic, version):
    produce_stamped(client, topic, [T0 + 1000])
    produce_stamped(client, topic, [T0 + 2000])
    produce_stamped(client, topic, [T0 + 3000])

    def lookup(ts):
        p = client.list_offset(topic, 0, ts, version=version)
        assert p["error_code"] == NONE
        return p["offset"], p["timestamp"]

    assert lookup(0) == (0, T0 + 1000)
    assert lookup(T0 + 1000) == (0, T0 + 1000)
    assert lookup(T0 + 1500) == (1, T0 + 2000)
    assert lookup(T0 + 2000) == (1, T0 + 2000)
    assert lookup(T0 + 2999) == (2, T0 + 3000)
    assert lookup(T0 + 3001) == (-1, -1)


@pytest.mark.parametrize("compression", [0, COMPRESSION_GZIP])
def test_by_timestamp_inside_one_batch(client, topic, compression):
    """Kafka finds the first record at or after the timestamp, inside the batch."""
    produce_stamped(client, topic, [T0 + 100])
    produce_stamped(client, topic, [T0 + 1000, T0 + 2000, T0 + 3000], compression=compression)

    def lookup(ts):
        p = client.list_offset(topic, 0, ts, version=5)
        assert p["error_code"] == NONE
        return p["offset"], p["timestamp"]

    assert lookup(T0 + 500) == (1, T0 + 1000)
    assert lookup(T0 + 1500) == (2, T0 + 2000)
    assert lookup(T0 + 2500) == (3, T0 + 3000)
    assert lookup(T0 + 3000) == (3, T0 + 3000)
    assert lookup(T0 + 3500) == (-1, -1)


def test_by_timestamp_with_out_of_order_timestamps(client, topic):
    """The answer is the first offset whose timestamp is >= the target (Kafka's semantics),
    not the record with the closest timestamp."""
    produce_stamped(client, topic, [T0 + 1000])
    produce_stamped(client, topic, [T0 + 5000])
    produce_stamped(client, topic, [T0 + 3000])
    p = client.list_offset(topic, 0, T0 + 2000, version=5)
    assert (p["offset"], p["timestamp"]) == (1, T0 + 5000)
    p = client.list_offset(topic, 0, T0 + 4000, version=5)
    assert (p["offset"], p["timestamp"]) == (1, T0 + 5000)


def test_max_timestamp_v7_across_batches(client, topic):
    produce_stamped(client, topic, [T0 + 1000])
    produce_stamped(client, topic, [T0 + 5000])
    produce_stamped(client, topic, [T0 + 3000])
    p = client.list_offset(topic, 0, MAX_TIMESTAMP, version=7)
    assert p["error_code"] == NONE
    assert (p["offset"], p["timestamp"]) == (1, T0 + 5000)
    assert p["leader_epoch"] == 0


def test_max_timestamp_v7_inside_one_batch(client, topic):
    produce_stamped(client, topic, [T0 + 100])
    produce_stamped(client, topic, [T0 + 1000, T0 + 9000, T0 + 2000])
    produce_stamped(client, topic, [T0 + 3000])
    p = client.list_offset(topic, 0, MAX_TIMESTAMP, version=7)
    assert p["error_code"] == NONE
    assert (p["offset"], p["timestamp"]) == (2, T0 + 9000)


def test_max_timestamp_v7_empty_log(client, topic):
    p = client.list_offset(topic, 0, MAX_TIMESTAMP, version=7)
    assert p["error_code"] == NONE
    assert (p["offset"], p["timestamp"]) == (-1, -1)


@pytest.mark.parametrize("version", [1, 4, 7])
def test_unknown_topic_and_partition(client, topic, version):
    for name, partition in ((unique_topic("missing"), 0), (topic, 3)):
        p = client.list_offset(name, partition, LATEST, version=version)
        assert p["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
        assert p["offset"] == -1


def test_several_partitions_in_one_request(client):
    name = unique_topic()
    client.create_topic(name, partitions=3)
    client.produce(name, 1, batch([b"x", b"y"]))
    body = client.request(
        LIST_OFFSETS,
        5,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": name,
                    "partitions": [
                        {"partition_index": i, "timestamp": LATEST, "current_leader_epoch": -1}
                        for i in range(3)
                    ],
                }
            ],
        },
    )
    got = {p["partition_index"]: p["offset"] for p in body["topics"][0]["partitions"]}
    assert got == {0: 0, 1: 2, 2: 0}


def test_read_committed_latest_is_the_last_stable_offset(client, topic):
    client.produce(topic, 0, batch([b"a", b"b"]))
    body = client.request(
        LIST_OFFSETS,
        5,
        {
            "replica_id": -1,
            "isolation_level": 1,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
    )
    assert body["topics"][0]["partitions"][0]["offset"] == 2


def test_same_partition_twice_is_invalid_request(client, topic):
    body = client.request(
        LIST_OFFSETS,
        5,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": 0, "timestamp": LATEST},
                        {"partition_index": 0, "timestamp": EARLIEST},
                    ],
                }
            ],
        },
    )
    codes = [p["error_code"] for p in body["topics"][0]["partitions"]]
    assert codes == [42, 42]  # INVALID_REQUEST for each occurrence


@pytest.mark.parametrize("version", [8, 9])
def test_earliest_local_is_the_log_start_v8(client, topic, version):
    client.produce(topic, 0, batch([b"a", b"b", b"c", b"d"]))
    r = client.request(
        DELETE_RECORDS,
        1,
        {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 3}]}],
         "timeout_ms": 10000},
    )  # fmt: skip
    assert r["topics"][0]["partitions"][0]["error_code"] == NONE
    p = client.list_offset(topic, 0, EARLIEST_LOCAL, version=version)
    assert (p["error_code"], p["offset"], p["timestamp"]) == (NONE, 3, -1)


def test_latest_tiered_is_none_without_remote_storage_v9(client, topic):
    client.produce(topic, 0, batch([b"a", b"b"]))
    p = client.list_offset(topic, 0, LATEST_TIERED, version=9)
    assert (p["error_code"], p["offset"], p["timestamp"], p["leader_epoch"]) == (NONE, -1, -1, -1)


def test_new_special_timestamps_are_invalid_in_older_versions(client, topic):
    assert client.list_offset(topic, 0, EARLIEST_LOCAL, version=7)["error_code"] == 42
    assert client.list_offset(topic, 0, LATEST_TIERED, version=8)["error_code"] == 42
