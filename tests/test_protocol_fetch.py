"""Fetch against a real broker over TCP: what a consumer sees (Kafka as the spec)."""

from __future__ import annotations

import threading

import pytest
from broker_fixture import (
    FENCED_LEADER_EPOCH,
    FETCH,
    FETCH_SESSION_ID_NOT_FOUND,
    NONE,
    OFFSET_OUT_OF_RANGE,
    UNKNOWN_LEADER_EPOCH,
    UNKNOWN_TOPIC_OR_PARTITION,
    batch,
    fetch_body,
    fetched_values,
    header,
    split_batches,
    unique_topic,
    wait_until,
)


@pytest.fixture
def topic(client):
    name = unique_topic()
    client.create_topic(name, partitions=2)
    return name


def fill(client, topic, partition, n_batches, size=100):
    """n_batches batches of 2 records of ``size`` bytes each; returns the sent batches."""
    sent = []
    for i in range(n_batches):
        b = batch([bytes([65 + i % 26]) * size, bytes([97 + i % 26]) * size])
        assert client.produce(topic, partition, b)["error_code"] == NONE
        sent.append(b)
    return sent


def test_long_poll_returns_when_a_produce_lands_on_another_connection(broker, client, topic):
    fill(client, topic, 0, 1)
    result = {}

    def poll():
        with broker.client() as c:
            try:
                result["p"] = c.fetch(topic, 0, 2, max_wait_ms=10000, min_bytes=1)
            except BaseException as e:  # reported below
                result["error"] = e

    t = threading.Thread(target=poll)
    t.start()
    try:
        # Let the fetch park first (bounded); the produce must then wake it up.
        wait_until(lambda: broker.broker.purgatory.waiting() > 0 or not t.is_alive())
        p = client.produce(topic, 0, batch([b"wake", b"up"]))
        assert p["error_code"] == NONE and p["base_offset"] == 2
    finally:
        t.join(30)
    assert not t.is_alive()
    assert "error" not in result, result.get("error")
    got = result["p"]
    assert got["error_code"] == NONE
    assert fetched_values(got["records"]) == [(2, b"wake"), (3, b"up")]
    assert got["high_watermark"] == 4


def test_long_poll_woken_by_any_of_its_partitions(broker, client, topic):
    result = {}

    def poll():
        with broker.client() as c:
            body = c.request(
                FETCH,
                11,
                fetch_body(
                    [(topic, 0, 0, 1 << 20), (topic, 1, 0, 1 << 20)],
                    max_wait_ms=10000,
                    min_bytes=1,
                ),
            )
            result["body"] = body

    t = threading.Thread(target=poll)
    t.start()
    try:
        wait_until(lambda: broker.broker.purgatory.waiting() > 0 or not t.is_alive())
        assert client.produce(topic, 1, batch([b"p1"]))["error_code"] == NONE
    finally:
        t.join(30)
    assert not t.is_alive() and "body" in result
    parts = {p["partition_index"]: p for p in result["body"]["responses"][0]["partitions"]}
    assert fetched_values(parts[1]["records"]) == [(0, b"p1")]
    assert fetched_values(parts[0]["records"]) == []


def test_min_bytes_not_reached_returns_what_is_there_after_max_wait(client, topic):
    fill(client, topic, 0, 2)
    p = client.fetch(topic, 0, 0, max_wait_ms=200, min_bytes=10 * 1024 * 1024)
    assert p["error_code"] == NONE
    assert [o for o, _ in fetched_values(p["records"])] == [0, 1, 2, 3]


def test_empty_partition_with_min_bytes_returns_empty_after_max_wait(client, topic):
    p = client.fetch(topic, 0, 0, max_wait_ms=100, min_bytes=1)
    assert p["error_code"] == NONE
    assert p["high_watermark"] == 0
    assert fetched_values(p["records"]) == []


def test_fetch_at_log_end_is_empty_not_an_error(client, topic):
    fill(client, topic, 0, 1)
    p = client.fetch(topic, 0, 2)
    assert p["error_code"] == NONE and p["high_watermark"] == 2
    assert bytes(p["records"] or b"") == b""


def test_fetch_from_the_middle_of_a_batch_returns_the_whole_batch(client, topic):
    client.produce(topic, 0, batch([b"a", b"b", b"c"]))
    client.produce(topic, 0, batch([b"d"]))
    p = client.fetch(topic, 0, 1)
    batches = split_batches(p["records"])
    assert header(batches[0]).base_offset == 0  # Kafka serves whole batches
    assert [o for o, _ in fetched_values(p["records"])] == [0, 1, 2, 3]


def test_max_bytes_smaller_than_the_first_batch_returns_that_whole_batch(client, topic):
    sent = fill(client, topic, 0, 3, size=500)
    for pmax in (10, 1 << 20):
        p = client.fetch(topic, 0, 0, max_bytes=10, partition_max_bytes=pmax)
        assert p["error_code"] == NONE
        got = split_batches(p["records"])
        assert len(got) == 1
        assert got[0][16:] == sent[0][16:]
    # partition_max_bytes alone smaller than the first batch: still one whole batch
    p = client.fetch(topic, 0, 0, partition_max_bytes=10)
    assert len(split_batches(p["records"])) == 1


def test_max_bytes_bounds_the_response_to_whole_batches(client, topic):
    sent = fill(client, topic, 0, 10, size=200)
    size = len(sent[0])
    p = client.fetch(topic, 0, 0, max_bytes=3 * size + size // 2)
    got = split_batches(p["records"])
    assert len(got) == 3
    assert all(g[16:] == s[16:] for g, s in zip(got, sent, strict=False))


def test_partition_max_bytes_per_partition(client, topic):
    sent0 = fill(client, topic, 0, 6, size=300)
    sent1 = fill(client, topic, 1, 6, size=300)
    size = len(sent0[0])
    body = client.request(
        FETCH,
        11,
        fetch_body(
            [(topic, 0, 0, 2 * size + 10), (topic, 1, 0, 4 * size + 10)],
            max_bytes=1 << 20,
        ),
    )
    parts = {p["partition_index"]: p for p in body["responses"][0]["partitions"]}
    got0 = split_batches(parts[0]["records"])
    got1 = split_batches(parts[1]["records"])
    assert [g[16:] for g in got0] == [s[16:] for s in sent0[:2]]
    assert [g[16:] for g in got1] == [s[16:] for s in sent1[:4]]


def test_partition_max_bytes_smaller_than_a_later_partitions_first_batch(client, topic):
    """KIP-74: only the first batch of the first non-empty partition may exceed the limits."""
    fill(client, topic, 0, 2, size=300)
    fill(client, topic, 1, 2, size=300)
    body = client.request(
        FETCH, 11, fetch_body([(topic, 0, 0, 10), (topic, 1, 0, 10)], max_bytes=1 << 20)
    )
    parts = {p["partition_index"]: p for p in body["responses"][0]["partitions"]}
    assert len(split_batches(parts[0]["records"])) == 1
    assert split_batches(parts[1]["records"]) == []
    assert parts[1]["error_code"] == NONE and parts[1]["high_watermark"] == 4


def test_max_bytes_is_shared_across_partitions(client, topic):
    sent0 = fill(client, topic, 0, 3, size=300)
    fill(client, topic, 1, 3, size=300)
    size = len(sent0[0])
    body = client.request(
        FETCH,
        11,
        fetch_body([(topic, 0, 0, 1 << 20), (topic, 1, 0, 1 << 20)], max_bytes=4 * size + 10),
    )
    parts = {p["partition_index"]: p for p in body["responses"][0]["partitions"]}
    assert len(split_batches(parts[0]["records"])) == 3
    assert len(split_batches(parts[1]["records"])) == 1


@pytest.mark.parametrize("version", [4, 9, 12])
def test_offset_beyond_log_end_is_out_of_range(client, topic, version):
    fill(client, topic, 0, 1)
    p = client.fetch(topic, 0, 3, version=version)
    assert p["error_code"] == OFFSET_OUT_OF_RANGE
    assert bytes(p["records"] or b"") == b""
    p = client.fetch(topic, 0, -5, version=version)
    assert p["error_code"] == OFFSET_OUT_OF_RANGE


def test_every_requested_partition_appears_with_its_error(client, topic):
    fill(client, topic, 0, 1)
    missing = unique_topic("missing")
    body = client.request(
        FETCH,
        11,
        fetch_body(
            [
                (topic, 0, 0, 1 << 20),
                (topic, 7, 0, 1 << 20),
                (missing, 0, 0, 1 << 20),
                (missing, 3, 0, 1 << 20),
                (topic, 1, 0, 1 << 20),
            ],
            max_wait_ms=5000,
            min_bytes=1,
        ),
    )
    assert body["error_code"] == NONE
    got = {
        (t["topic"], p["partition_index"]): p["error_code"]
        for t in body["responses"]
        for p in t["partitions"]
    }
    assert got == {
        (topic, 0): NONE,
        (topic, 7): UNKNOWN_TOPIC_OR_PARTITION,
        (missing, 0): UNKNOWN_TOPIC_OR_PARTITION,
        (missing, 3): UNKNOWN_TOPIC_OR_PARTITION,
        (topic, 1): NONE,
    }
    n = sum(len(t["partitions"]) for t in body["responses"])
    assert n == 5
    for t in body["responses"]:
        for p in t["partitions"]:
            if p["error_code"] != NONE:
                assert p["high_watermark"] == -1
                assert bytes(p["records"] or b"") == b""


@pytest.mark.parametrize("version", range(4, 13))
def test_watermarks_in_every_version(client, topic, version):
    fill(client, topic, 0, 2)
    p = client.fetch(topic, 0, 1, version=version)
    assert p["error_code"] == NONE
    assert p["high_watermark"] == 4
    assert p["last_stable_offset"] == 4
    if version >= 5:
        assert p["log_start_offset"] == 0
    if version >= 11:
        assert p["preferred_read_replica"] == -1
    assert [o for o, _ in fetched_values(p["records"])] == [0, 1, 2, 3]


def test_read_committed_has_empty_aborted_transactions(client, topic):
    fill(client, topic, 0, 1)
    p = client.fetch(topic, 0, 0, isolation_level=1)
    assert p["error_code"] == NONE
    assert p["aborted_transactions"] == []
    assert p["last_stable_offset"] == 2
    assert len(fetched_values(p["records"])) == 2


def test_nonzero_session_id_is_fetch_session_id_not_found(client, topic):
    body = client.request(
        FETCH, 11, fetch_body([(topic, 0, 0, 1 << 20)], session_id=12345, session_epoch=1)
    )
    assert body["error_code"] == FETCH_SESSION_ID_NOT_FOUND
    assert body["responses"] == []


def test_sessionless_fetch_gets_session_id_zero(client, topic):
    body = client.request(FETCH, 11, fetch_body([(topic, 0, 0, 1 << 20)], session_epoch=-1))
    assert body["error_code"] == NONE
    assert body["session_id"] == 0


def test_current_leader_epoch_fenced_and_unknown(start_broker):
    broker = start_broker()
    topic = unique_topic()
    with broker.client() as c:
        c.create_topic(topic)
        fill(c, topic, 0, 1)
    # A restart loads the topic from the store, so the broker watches its partition state
    # (see test_protocol_metadata.py::test_leader_epoch_change_of_a_topic_created_here).
    broker.restart()
    client = broker.client()
    broker.set_leader_epoch(topic, 0, 5)

    def epoch_seen():
        meta = client.metadata([topic], version=9)
        parts = {p["partition_index"]: p for p in meta["topics"][0]["partitions"]}
        return parts[0]["leader_epoch"] == 5

    wait_until(epoch_seen)
    assert client.fetch(topic, 0, 0, version=9, current_leader_epoch=4)["error_code"] == (
        FENCED_LEADER_EPOCH
    )
    assert client.fetch(topic, 0, 0, version=12, current_leader_epoch=6)["error_code"] == (
        UNKNOWN_LEADER_EPOCH
    )
    p = client.fetch(topic, 0, 0, version=12, current_leader_epoch=5)
    assert p["error_code"] == NONE and len(fetched_values(p["records"])) == 2
    p = client.fetch(topic, 0, 0, version=12, current_leader_epoch=-1)
    assert p["error_code"] == NONE
    # before v9 there is no current_leader_epoch: no check
    assert client.fetch(topic, 0, 0, version=8)["error_code"] == NONE
    # batches appended now carry the new epoch
    client.produce(topic, 0, batch([b"new"]))
    last = split_batches(client.fetch(topic, 0, 2)["records"])[0]
    assert header(last).partition_leader_epoch == 5
    client.close()


def test_fetched_batches_carry_the_leader_epoch(client, topic):
    fill(client, topic, 0, 2)
    for b in split_batches(client.fetch(topic, 0, 0)["records"]):
        assert header(b).partition_leader_epoch == 0


def test_first_non_empty_partition_gets_its_first_batch_whole(client, topic):
    """KIP-74: the exception is for the first partition that has data, not the first listed."""
    sent = fill(client, topic, 1, 2, size=300)
    body = client.request(
        FETCH, 11, fetch_body([(topic, 0, 0, 10), (topic, 1, 0, 10)], max_bytes=10)
    )
    parts = {p["partition_index"]: p for p in body["responses"][0]["partitions"]}
    assert split_batches(parts[0]["records"]) == []
    got = split_batches(parts[1]["records"])
    assert [g[16:] for g in got] == [sent[0][16:]]
