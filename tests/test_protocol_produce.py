"""Produce against a real broker over TCP: what a client sees (Kafka as the spec)."""

from __future__ import annotations

import pytest
from broker_fixture import (
    API_VERSIONS,
    CORRUPT_MESSAGE,
    INVALID_PRODUCER_EPOCH,
    MESSAGE_TOO_LARGE,
    NONE,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    PRODUCE,
    UNKNOWN_TOPIC_OR_PARTITION,
    UNSUPPORTED_COMPRESSION_TYPE,
    batch,
    fetched_values,
    header,
    produce_body,
    split_batches,
    unique_topic,
)

from pybroker.wire.record_walker import decode_records
from pybroker.wire.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    build_batch,
)


@pytest.fixture
def topic(client):
    name = unique_topic()
    client.create_topic(name, partitions=2)
    return name


def log_end(client, topic, partition=0) -> int:
    p = client.list_offset(topic, partition, -1)
    assert p["error_code"] == NONE
    return p["offset"]


def all_values(client, topic, partition=0):
    p = client.fetch(topic, partition, 0)
    assert p["error_code"] == NONE
    return fetched_values(p["records"])


@pytest.mark.parametrize("acks", [1, -1])
@pytest.mark.parametrize("version", [3, 5, 8, 9, 12])
def test_offsets_are_dense_across_requests(client, topic, acks, version):
    sizes = [3, 1, 4, 2]
    bases = []
    for i, n in enumerate(sizes):
        values = [f"{i}-{j}".encode() for j in range(n)]
        p = client.produce(topic, 0, batch(values), acks=acks, version=version)
        assert p["error_code"] == NONE, p
        bases.append(p["base_offset"])
        if version >= 5:
            assert p["log_start_offset"] == 0
        if version >= 2:
            assert p["log_append_time_ms"] == -1  # CreateTime topic
    assert bases == [0, 3, 4, 8]
    assert log_end(client, topic) == 10
    got = all_values(client, topic)
    assert [o for o, _ in got] == list(range(10))
    assert [v for _, v in got] == [
        f"{i}-{j}".encode() for i, n in enumerate(sizes) for j in range(n)
    ]
    # the other partition is untouched
    assert log_end(client, topic, 1) == 0


def test_several_batches_in_one_partition_is_invalid_record(client, topic):
    records = batch([b"a", b"b"]) + batch([b"c"])
    p = client.produce(topic, 0, records)
    assert log_end(client, topic) == 0
    assert p["error_code"] == 87  # INVALID_RECORD


def test_several_partitions_and_topics_in_one_request(client, topic):
    other = unique_topic()
    client.create_topic(other)
    req = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [
                    {"index": 0, "records": batch([b"t0"])},
                    {"index": 1, "records": batch([b"t1a", b"t1b"])},
                ],
            },
            {"name": other, "partition_data": [{"index": 0, "records": batch([b"o"])}]},
        ],
    }
    body = client.request(PRODUCE, 8, req)
    got = {
        (t["name"], p["index"]): (p["error_code"], p["base_offset"])
        for t in body["responses"]
        for p in t["partition_responses"]
    }
    assert got == {(topic, 0): (0, 0), (topic, 1): (0, 0), (other, 0): (0, 0)}
    assert all_values(client, topic, 1) == [(0, b"t1a"), (1, b"t1b")]
    assert all_values(client, other) == [(0, b"o")]


def test_acks_0_gets_no_response_but_the_data_is_there(client, topic):
    for i in range(3):
        client.send(PRODUCE, 8, produce_body(topic, 0, batch([f"v{i}".encode()]), acks=0))
    # The next answer on this connection is for the next request: no produce response came.
    corr = client.send(API_VERSIONS, 0, {})
    assert client.receive(API_VERSIONS, 0, corr)["error_code"] == NONE
    assert all_values(client, topic) == [(0, b"v0"), (1, b"v1"), (2, b"v2")]


def test_acks_0_error_closes_the_connection(broker, client):
    """Kafka has no response to carry an acks=0 error, so it closes the connection."""
    client.send(PRODUCE, 8, produce_body("no-such-topic-acks0", 0, batch([b"x"]), acks=0))
    assert client.closed_by_peer()
    with broker.client() as c:
        assert c.request(API_VERSIONS, 0, {})["error_code"] == NONE


def test_invalid_acks(client, topic):
    body = client.request(PRODUCE, 8, produce_body(topic, 0, batch([b"x"]), acks=2))
    p = body["responses"][0]["partition_responses"][0]
    assert p["error_code"] == 21  # INVALID_REQUIRED_ACKS
    assert log_end(client, topic) == 0


def test_stored_bytes_equal_sent_bytes_except_offset_and_leader_epoch(client, topic):
    meta = client.metadata([topic], version=9)
    epoch = meta["topics"][0]["partitions"][0]["leader_epoch"]
    pid = client.init_producer_id()["producer_id"]
    sent = [
        build_batch(
            [(b"k1", b"v1", [("h", b"1")]), (None, b"v2", []), (b"k3", None, [("x", None)])],
            timestamp=1_700_000_000_000,
        ),
        build_batch(
            [(b"k", b"gz" * 50, []), (b"k", b"gz2" * 50, [])],
            compression=COMPRESSION_GZIP,
            timestamp=1_700_000_000_100,
        ),
        build_batch(
            [(None, b"idem", [])],
            producer_id=pid,
            producer_epoch=0,
            base_sequence=0,
            timestamp=1_700_000_000_200,
        ),
    ]
    client.produce(topic, 0, batch([b"pad"]))  # so the base offsets are not 0
    for b in sent:
        assert client.produce(topic, 0, b)["error_code"] == NONE
    stored = split_batches(client.fetch(topic, 0, 1)["records"])
    assert len(stored) == 3
    expected_base = 1
    for s, b in zip(stored, sent, strict=True):
        assert len(s) == len(b)
        h = header(s)
        assert h.base_offset == expected_base
        assert h.partition_leader_epoch == epoch
        # everything but base offset (bytes 0-8) and partition leader epoch (12-16)
        assert s[8:12] == b[8:12]
        assert s[16:] == b[16:]
        expected_base += h.last_offset_delta + 1
    assert [r.value for r in decode_records(stored[0])] == [b"v1", b"v2", None]


@pytest.mark.parametrize(
    "codec", [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4]
)
def test_compressed_batches_round_trip(client, topic, codec):
    values = [f"value-{i}".encode() * 10 for i in range(20)]
    p = client.produce(topic, 0, batch(values, compression=codec), version=3)
    assert p["error_code"] == NONE
    assert all_values(client, topic) == list(enumerate(values))


def test_zstd_refused_before_v7_and_accepted_from_v7(client, topic):
    z = batch([b"zstd-1", b"zstd-2"], compression=COMPRESSION_ZSTD)
    p = client.produce(topic, 0, z, version=6)
    assert p["error_code"] == UNSUPPORTED_COMPRESSION_TYPE
    assert p["base_offset"] == -1
    assert log_end(client, topic) == 0
    p = client.produce(topic, 0, z, version=7)
    assert p["error_code"] == NONE and p["base_offset"] == 0
    assert all_values(client, topic) == [(0, b"zstd-1"), (1, b"zstd-2")]


@pytest.mark.parametrize("position", [25, 40, 61, -1])
def test_flipped_byte_is_corrupt_and_nothing_is_appended(client, topic, position):
    client.produce(topic, 0, batch([b"before"]))
    good = batch([b"one", b"two", b"three"])
    bad = bytearray(good)
    bad[position] ^= 0x01
    p = client.produce(topic, 0, bytes(bad))
    assert p["error_code"] == CORRUPT_MESSAGE, p
    assert p["base_offset"] == -1
    # a good batch followed by a corrupt one in the same request: nothing of it is appended
    # (Kafka refuses two batches in one partition with INVALID_RECORD before the CRC check)
    p = client.produce(topic, 0, good + bytes(bad))
    assert p["error_code"] in (CORRUPT_MESSAGE, 87)
    assert log_end(client, topic) == 1
    assert client.produce(topic, 0, good)["base_offset"] == 1
    assert [v for _, v in all_values(client, topic)] == [b"before", b"one", b"two", b"three"]


def test_truncated_batch_is_corrupt(client, topic):
    good = batch([b"one", b"two"])
    p = client.produce(topic, 0, good[:-3])
    assert p["error_code"] == CORRUPT_MESSAGE
    assert log_end(client, topic) == 0


def test_batch_above_message_max_bytes(start_broker):
    broker = start_broker(**{"message.max.bytes": 2000})
    with broker.client() as c:
        topic = unique_topic()
        c.create_topic(topic)
        big = batch([b"x" * 3000])
        assert len(big) > 2000
        p = c.produce(topic, 0, big)
        assert p["error_code"] == MESSAGE_TOO_LARGE
        assert log_end(c, topic) == 0
        small = batch([b"x" * 1000])
        assert c.produce(topic, 0, small)["error_code"] == NONE
        # the topic-level max.message.bytes overrides the broker's message.max.bytes
        loose = unique_topic()
        c.create_topic(loose, configs={"max.message.bytes": "10000"})
        assert c.produce(loose, 0, big)["error_code"] == NONE
        strict = unique_topic()
        c.create_topic(strict, configs={"max.message.bytes": "500"})
        assert c.produce(strict, 0, small)["error_code"] == MESSAGE_TOO_LARGE


def test_unknown_topic_with_auto_create_off(start_broker):
    broker = start_broker(**{"auto.create.topics.enable": False})
    with broker.client() as c:
        name = unique_topic()
        p = c.produce(name, 0, batch([b"x"]))
        assert p["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
        assert p["base_offset"] == -1
        meta = c.metadata(None, version=1)
        assert name not in [t["name"] for t in meta["topics"]]


@pytest.mark.parametrize("partition", [2, 100, -1])
def test_partition_out_of_range(client, topic, partition):
    p = client.produce(topic, partition, batch([b"x"]))
    assert p["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
    assert log_end(client, topic, 0) == 0


def test_null_records_is_refused(client, topic):
    p = client.produce(topic, 0, None)
    assert p["error_code"] != NONE
    assert log_end(client, topic) == 0


# -- idempotent producers -------------------------------------------------------------------


def idem(pid, epoch, seq, values):
    return batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_idempotent_retry_is_acknowledged_with_the_same_offset_and_stored_once(client, topic):
    pid = client.init_producer_id()["producer_id"]
    client.produce(topic, 0, batch([b"other"]))
    b0 = idem(pid, 0, 0, [b"a", b"b", b"c"])
    first = client.produce(topic, 0, b0)
    assert first["error_code"] == NONE and first["base_offset"] == 1
    retry = client.produce(topic, 0, b0)
    assert retry["error_code"] == NONE
    assert retry["base_offset"] == first["base_offset"]
    nxt = client.produce(topic, 0, idem(pid, 0, 3, [b"d"]))
    assert nxt["error_code"] == NONE and nxt["base_offset"] == 4
    # a retry of an older (still retained) batch too
    assert client.produce(topic, 0, b0)["base_offset"] == 1
    assert all_values(client, topic) == list(enumerate([b"other", b"a", b"b", b"c", b"d"]))


def test_idempotent_retry_on_another_connection(broker, client, topic):
    pid = client.init_producer_id()["producer_id"]
    b0 = idem(pid, 0, 0, [b"a"])
    assert client.produce(topic, 0, b0)["base_offset"] == 0
    with broker.client() as c2:
        assert c2.produce(topic, 0, b0)["base_offset"] == 0
    assert log_end(client, topic) == 1


def test_sequence_gap_is_out_of_order_and_nothing_is_appended(client, topic):
    pid = client.init_producer_id()["producer_id"]
    assert client.produce(topic, 0, idem(pid, 0, 0, [b"a", b"b"]))["error_code"] == NONE
    p = client.produce(topic, 0, idem(pid, 0, 5, [b"gap"]))
    assert p["error_code"] == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert p["base_offset"] == -1
    assert log_end(client, topic) == 2
    # the expected sequence is still accepted afterwards
    assert client.produce(topic, 0, idem(pid, 0, 2, [b"c"]))["base_offset"] == 2
    assert [v for _, v in all_values(client, topic)] == [b"a", b"b", b"c"]


def test_unknown_producer_may_start_at_any_sequence(client, topic):
    """Kafka accepts any first sequence from a producer the partition has no state for (its
    earlier batches may have been removed by retention)."""
    pid = client.init_producer_id()["producer_id"]
    assert client.produce(topic, 0, idem(pid, 0, 7, [b"a"]))["error_code"] == NONE
    assert client.produce(topic, 0, idem(pid, 0, 8, [b"b"]))["base_offset"] == 1
    p = client.produce(topic, 0, idem(pid, 0, 10, [b"c"]))
    assert p["error_code"] == OUT_OF_ORDER_SEQUENCE_NUMBER


def test_sequences_are_per_partition(client, topic):
    pid = client.init_producer_id()["producer_id"]
    assert client.produce(topic, 0, idem(pid, 0, 0, [b"a", b"b"]))["error_code"] == NONE
    assert client.produce(topic, 1, idem(pid, 0, 0, [b"x"]))["error_code"] == NONE
    assert client.produce(topic, 1, idem(pid, 0, 1, [b"y"]))["base_offset"] == 1


def test_older_epoch_is_invalid_producer_epoch(client, topic):
    pid = client.init_producer_id()["producer_id"]
    assert client.produce(topic, 0, idem(pid, 0, 0, [b"a"]))["error_code"] == NONE
    # an epoch bump restarts the sequence at 0
    assert client.produce(topic, 0, idem(pid, 1, 0, [b"b"]))["error_code"] == NONE
    p = client.produce(topic, 0, idem(pid, 0, 1, [b"zombie"]))
    assert p["error_code"] == INVALID_PRODUCER_EPOCH
    assert p["base_offset"] == -1
    assert [v for _, v in all_values(client, topic)] == [b"a", b"b"]


def test_transactional_batch_without_transactional_id_is_refused(client, topic):
    """Kafka: TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53) when a request carries transactional
    records but no transactional_id (tests/test_protocol_transactions.py: with one)."""
    pid = client.init_producer_id()["producer_id"]
    tb = build_batch(
        [(None, b"t", [])],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    p = client.produce(topic, 0, tb)
    assert p["error_code"] == 53
    assert log_end(client, topic) == 0


def test_new_epoch_must_start_at_sequence_zero(client, topic):
    pid = client.init_producer_id()["producer_id"]
    assert client.produce(topic, 0, idem(pid, 0, 0, [b"a"]))["error_code"] == NONE
    p = client.produce(topic, 0, idem(pid, 1, 3, [b"b"]))
    assert p["error_code"] == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log_end(client, topic) == 1


def test_retry_of_a_batch_older_than_the_last_five_is_out_of_order(client, topic):
    """Kafka keeps the metadata of a producer's last 5 batches per partition; an older
    sequence is neither a known duplicate nor in sequence."""
    pid = client.init_producer_id()["producer_id"]
    first = idem(pid, 0, 0, [b"s0"])
    assert client.produce(topic, 0, first)["base_offset"] == 0
    for seq in range(1, 7):
        assert client.produce(topic, 0, idem(pid, 0, seq, [b"s"]))["base_offset"] == seq
    p = client.produce(topic, 0, first)
    assert p["error_code"] == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log_end(client, topic) == 7


def test_batch_above_segment_bytes_is_record_list_too_large(client):
    name = unique_topic()
    client.create_topic(name, configs={"segment.bytes": "1024", "max.message.bytes": "100000"})
    p = client.produce(name, 0, batch([b"x" * 2000]))
    assert p["error_code"] == 18  # RECORD_LIST_TOO_LARGE
    assert log_end(client, name) == 0


def test_produce_pipelined_right_after_delete_topics_answers_unknown_topic(broker, client):
    """Found by the protocol fuzzer (tests/fuzz, a pipeline of valid requests): a Produce
    queued behind the DeleteTopics of its topic on the same connection met the replica of the
    deleted topic but no topic in the metadata cache, raised KeyError and lost the
    connection.  It must be answered UNKNOWN_TOPIC_OR_PARTITION, as Kafka does."""
    from pybroker.wire import codec

    t = unique_topic()
    client.create_topic(t, partitions=1)
    assert client.produce(t, 0, batch([b"before"]))["error_code"] == NONE
    client.send_raw(
        codec.encode_request(20, 4, 900, "x", {"topic_names": [t], "timeout_ms": 1000})
        + codec.encode_request(PRODUCE, 8, 901, "x", produce_body(t, 0, batch([b"after"])))
    )
    corr, deleted = codec.decode_response(20, 4, client.recv_frame())
    assert corr == 900 and deleted["responses"][0]["error_code"] == NONE
    corr, produced = codec.decode_response(PRODUCE, 8, client.recv_frame())
    assert corr == 901
    (p,) = produced["responses"][0]["partition_responses"]
    assert p["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
