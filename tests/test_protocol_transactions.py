"""Transactions, log side, over TCP (KIP-98): transactional Produce, WriteTxnMarkers, the last
stable offset, read_committed Fetch and ListOffsets, restarts.  Kafka is the spec."""

from __future__ import annotations

import threading

import pytest
from broker_fixture import (
    FETCH,
    INVALID_PRODUCER_EPOCH,
    LIST_OFFSETS,
    NONE,
    PRODUCE,
    UNKNOWN_TOPIC_OR_PARTITION,
    fetch_body,
    split_batches,
    unique_topic,
)

from pybroker.wire.record_walker import decode_records
from pybroker.wire.records import build_batch, unpack_header

WRITE_TXN_MARKERS = 27
INVALID_TXN_STATE = 48
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
INVALID_RECORD = 87
READ_COMMITTED = 1


@pytest.fixture
def topic(client):
    name = unique_topic("txn")
    client.create_topic(name, partitions=2)
    return name


def txn_batch(pid: int, seq: int, values: list[bytes], epoch: int = 0, txn: bool = True):
    return build_batch(
        [(None, v, []) for v in values],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )


def produce(client, topic, partition, records, transactional_id="tx", version=8) -> dict:
    body = client.request(
        PRODUCE,
        version,
        {
            "transactional_id": transactional_id,
            "acks": -1,
            "timeout_ms": 10000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": records}]}
            ],
        },
    )
    return body["responses"][0]["partition_responses"][0]


def write_markers(
    client, markers: list[tuple[int, int, bool, list[tuple[str, int]]]], coord=0, version=1
):
    """markers: (producer id, epoch, committed, partitions); {(pid, topic, partition): error}."""
    req = {
        "markers": [
            {
                "producer_id": pid,
                "producer_epoch": epoch,
                "transaction_result": committed,
                "topics": [
                    {"name": t, "partition_indexes": [p for tt, p in parts if tt == t]}
                    for t in dict.fromkeys(t for t, _ in parts)
                ],
                "coordinator_epoch": coord,
            }
            for pid, epoch, committed, parts in markers
        ]
    }
    body = client.request(WRITE_TXN_MARKERS, version, req)
    return {
        (m["producer_id"], t["name"], p["partition_index"]): p["error_code"]
        for m in body["markers"]
        for t in m["topics"]
        for p in t["partitions"]
    }


def fetch(client, topic, partition, offset, isolation, **kw) -> dict:
    body = client.request(
        FETCH,
        kw.pop("version", 11),
        fetch_body([(topic, partition, offset, 1 << 20)], isolation_level=isolation, **kw),
    )
    return body["responses"][0]["partitions"][0]


def committed_values(p: dict) -> list[bytes]:
    """What a read_committed consumer delivers (Kafka's Fetcher): control batches skipped,
    batches of an aborted transaction (its producer, from its first offset until its marker)
    dropped."""
    aborted = sorted((a["first_offset"], a["producer_id"]) for a in p["aborted_transactions"] or [])
    active: set[int] = set()
    out = []
    for raw in split_batches(p["records"]):
        h = unpack_header(raw)
        while aborted and aborted[0][0] <= h.base_offset:
            active.add(aborted.pop(0)[1])
        if h.is_control:
            active.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in active:
            continue
        out += [r.value for r in decode_records(raw)]
    return out


def all_values(p: dict) -> list[bytes]:
    return [
        r.value
        for raw in split_batches(p["records"])
        if not unpack_header(raw).is_control
        for r in decode_records(raw)
    ]


def list_offset(client, topic, partition, isolation) -> int:
    body = client.request(
        LIST_OFFSETS,
        5,
        {
            "replica_id": -1,
            "isolation_level": isolation,
            "topics": [
                {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}
            ],
        },
    )
    p = body["topics"][0]["partitions"][0]
    assert p["error_code"] == NONE
    return p["offset"]


def test_commit_and_abort_as_read_committed_and_uncommitted_consumers_see_them(client, topic):
    a = client.init_producer_id()["producer_id"]
    b = client.init_producer_id()["producer_id"]
    assert produce(client, topic, 0, txn_batch(a, 0, [b"a1", b"a2"]))["base_offset"] == 0
    assert produce(client, topic, 0, txn_batch(b, 0, [b"b1"]))["base_offset"] == 2
    assert produce(client, topic, 0, txn_batch(a, 2, [b"a3"]))["base_offset"] == 3
    # both open: the LSO is the first offset of the earliest transaction
    p = fetch(client, topic, 0, 0, READ_COMMITTED)
    assert (p["high_watermark"], p["last_stable_offset"]) == (4, 0)
    assert p["records"] in (b"", None) and p["aborted_transactions"] == []
    assert list_offset(client, topic, 0, READ_COMMITTED) == 0
    assert list_offset(client, topic, 0, 0) == 4
    errors = write_markers(client, [(a, 0, False, [(topic, 0)])])
    assert errors == {(a, topic, 0): NONE}  # offset 4: ABORT of a
    p = fetch(client, topic, 0, 0, READ_COMMITTED)
    assert p["last_stable_offset"] == 2  # b is still open
    assert committed_values(p) == []
    assert p["aborted_transactions"] == [{"producer_id": a, "first_offset": 0}]
    assert write_markers(client, [(b, 0, True, [(topic, 0)])]) == {(b, topic, 0): NONE}  # 5
    p = fetch(client, topic, 0, 0, READ_COMMITTED)
    assert (p["high_watermark"], p["last_stable_offset"]) == (6, 6)
    assert committed_values(p) == [b"b1"]
    assert p["aborted_transactions"] == [{"producer_id": a, "first_offset": 0}]
    assert list_offset(client, topic, 0, READ_COMMITTED) == 6
    # read_uncommitted: everything, no aborted list
    p = fetch(client, topic, 0, 0, 0)
    assert all_values(p) == [b"a1", b"a2", b"b1", b"a3"]
    assert p["aborted_transactions"] is None and p["last_stable_offset"] == 6
    # the markers are control batches of the producers, base sequence -1
    markers = [unpack_header(r) for r in split_batches(p["records"]) if unpack_header(r).is_control]
    assert [(h.base_offset, h.producer_id, h.base_sequence) for h in markers] == [
        (4, a, -1),
        (5, b, -1),
    ]
    # a fetch starting after the aborted transaction ended does not list it
    p = fetch(client, topic, 0, 5, READ_COMMITTED)
    assert p["aborted_transactions"] == []


def test_marker_errors(client, topic):
    a = client.init_producer_id()["producer_id"]
    assert produce(client, topic, 0, txn_batch(a, 0, [b"x"], epoch=2))["error_code"] == NONE
    got = write_markers(
        client,
        [(a, 1, True, [(topic, 0), (topic, 7), ("no-such-topic-txn", 0)])],
    )
    assert got == {
        (a, topic, 0): INVALID_PRODUCER_EPOCH,
        (a, topic, 7): UNKNOWN_TOPIC_OR_PARTITION,
        (a, "no-such-topic-txn", 0): UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert fetch(client, topic, 0, 0, READ_COMMITTED)["last_stable_offset"] == 0
    # an abort with a bumped epoch (the coordinator fencing the producer) ends it
    assert write_markers(client, [(a, 3, False, [(topic, 0)])]) == {(a, topic, 0): NONE}
    p = produce(client, topic, 0, txn_batch(a, 1, [b"zombie"], epoch=2))
    assert p["error_code"] == INVALID_PRODUCER_EPOCH
    p = fetch(client, topic, 0, 0, READ_COMMITTED)
    assert p["last_stable_offset"] == p["high_watermark"] == 2
    assert committed_values(p) == []


def test_produce_refusals(client, topic):
    a = client.init_producer_id()["producer_id"]
    # transactional records without a transactional id: the whole request is refused
    p = produce(client, topic, 0, txn_batch(a, 0, [b"x"]), transactional_id=None)
    assert p["error_code"] == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # clients may not write control batches
    ctrl = build_batch(
        [(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [])],
        producer_id=a,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
        is_control=True,
    )
    assert produce(client, topic, 0, ctrl)["error_code"] == INVALID_RECORD
    # a non-transactional write inside a transaction
    assert produce(client, topic, 0, txn_batch(a, 0, [b"t"]))["error_code"] == NONE
    p = produce(client, topic, 0, txn_batch(a, 1, [b"i"], txn=False), transactional_id=None)
    assert p["error_code"] == INVALID_TXN_STATE
    assert list_offset(client, topic, 0, 0) == 1


def test_read_committed_long_poll_wakes_when_the_transaction_commits(client, broker, topic):
    a = client.init_producer_id()["producer_id"]
    assert produce(client, topic, 1, txn_batch(a, 0, [b"v"]))["error_code"] == NONE
    result = {}

    def poll():
        with broker.client() as c2:
            result["p"] = fetch(c2, topic, 1, 0, READ_COMMITTED, max_wait_ms=8000, min_bytes=1)

    t = threading.Thread(target=poll)
    t.start()
    t.join(0.5)
    assert t.is_alive()  # nothing committed yet: the fetch waits
    assert write_markers(client, [(a, 0, True, [(topic, 1)])]) == {(a, topic, 1): NONE}
    t.join(10)
    assert not t.is_alive()
    assert committed_values(result["p"]) == [b"v"]
    assert result["p"]["last_stable_offset"] == 2


def test_write_txn_markers_v0_and_v1(client, topic):
    body = client.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
    assert keys[WRITE_TXN_MARKERS] == (0, 1)  # as Kafka 3.9 (v0: coordinators before 2.8)
    a = client.init_producer_id()["producer_id"]
    b = client.init_producer_id()["producer_id"]
    assert produce(client, topic, 0, txn_batch(a, 0, [b"a"]))["error_code"] == NONE
    assert produce(client, topic, 0, txn_batch(b, 0, [b"b"]))["error_code"] == NONE
    assert write_markers(client, [(a, 0, False, [(topic, 0)])], version=0) == {(a, topic, 0): NONE}
    assert write_markers(client, [(b, 0, True, [(topic, 0)])], version=0) == {(b, topic, 0): NONE}
    p = fetch(client, topic, 0, 0, READ_COMMITTED)
    assert p["last_stable_offset"] == 4
    assert committed_values(p) == [b"b"]


def test_restart_keeps_the_open_transaction_and_the_aborted_index(start_broker):
    broker = start_broker()
    name = unique_topic("txn")
    with broker.client() as c:
        c.create_topic(name, partitions=1)
        a = c.init_producer_id()["producer_id"]
        b = c.init_producer_id()["producer_id"]
        assert produce(c, name, 0, txn_batch(a, 0, [b"a1"]))["error_code"] == NONE
        assert write_markers(c, [(a, 0, False, [(name, 0)])]) == {(a, name, 0): NONE}
        assert produce(c, name, 0, txn_batch(b, 0, [b"b1"]))["error_code"] == NONE  # 2, open
        assert produce(c, name, 0, txn_batch(a, 1, [b"a2"]))["error_code"] == NONE  # 3, open
    broker.stop()
    broker.start()
    with broker.client() as c:
        p = fetch(c, name, 0, 0, READ_COMMITTED)
        assert (p["high_watermark"], p["last_stable_offset"]) == (4, 2)
        assert p["aborted_transactions"] == [{"producer_id": a, "first_offset": 0}]
        assert write_markers(c, [(b, 0, True, [(name, 0)]), (a, 0, False, [(name, 0)])]) == {
            (b, name, 0): NONE,
            (a, name, 0): NONE,
        }
        p = fetch(c, name, 0, 0, READ_COMMITTED)
        assert p["last_stable_offset"] == 6
        assert committed_values(p) == [b"b1"]
        assert sorted(x["first_offset"] for x in p["aborted_transactions"]) == [0, 3]


def test_describe_producers_shows_the_ongoing_transaction(client, topic):
    a = client.init_producer_id()["producer_id"]
    assert produce(client, topic, 0, txn_batch(a, 0, [b"x"]))["error_code"] == NONE
    assert produce(client, topic, 0, txn_batch(a, 1, [b"y"]))["error_code"] == NONE

    def producer() -> dict:
        body = client.request(61, 0, {"topics": [{"name": topic, "partition_indexes": [0]}]})
        (p,) = body["topics"][0]["partitions"]
        (entry,) = [e for e in p["active_producers"] if e["producer_id"] == a]
        return entry

    assert (producer()["current_txn_start_offset"], producer()["coordinator_epoch"]) == (0, -1)
    assert write_markers(client, [(a, 0, True, [(topic, 0)])], coord=4) == {(a, topic, 0): NONE}
    assert (producer()["current_txn_start_offset"], producer()["coordinator_epoch"]) == (-1, 4)
