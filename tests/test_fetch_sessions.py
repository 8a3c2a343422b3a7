"""Incremental fetch sessions (KIP-227) and topic ids in Fetch (v13+), over TCP.

What a fetcher sees: a full fetch with epoch 0 opens a session; incremental fetches answer only
partitions with news; epochs, forgotten topics, closing, cache slots and topic-id rules as in
Kafka's FetchManager.
"""

from __future__ import annotations

import uuid

import pytest
from broker_fixture import (
    FETCH,
    FETCH_SESSION_ID_NOT_FOUND,
    NONE,
    batch,
    fetch_body,
    fetched_values,
    unique_topic,
)

INVALID_FETCH_SESSION_EPOCH = 71
UNKNOWN_TOPIC_ID = 100
FETCH_SESSION_TOPIC_ID_ERROR = 106
V = 12  # by names
VID = 13  # by topic ids


@pytest.fixture
def topic(client):
    name = unique_topic()
    client.create_topic(name, partitions=3)
    for p in range(3):
        assert client.produce(name, p, batch([b"a", b"b"]))["error_code"] == NONE
    return name


def answered(body):
    """{(topic or topic id, partition): partition entry} of a Fetch answer."""
    out = {}
    for t in body["responses"]:
        key = t.get("topic") or t.get("topic_id")
        for p in t["partitions"]:
            out[(key, p["partition_index"])] = p
    return out


def open_session(client, topic, offsets=(2, 2, 2), version=V):
    body = client.request(
        FETCH,
        version,
        fetch_body([(topic, p, o, 1 << 20) for p, o in enumerate(offsets)], session_epoch=0),
    )
    assert body["error_code"] == NONE
    assert body["session_id"] != 0
    return body


def incremental(client, session_id, epoch, parts=(), forgotten=(), version=V, **kw):
    req = fetch_body(list(parts), session_id=session_id, session_epoch=epoch, **kw)
    req["forgotten_topics_data"] = [{"topic": t, "partitions": ps} for t, ps in forgotten]
    return client.request(FETCH, version, req)


def test_a_full_fetch_with_epoch_zero_opens_a_session_and_answers_every_partition(client, topic):
    body = open_session(client, topic)
    assert set(answered(body)) == {(topic, 0), (topic, 1), (topic, 2)}
    assert all(p["high_watermark"] == 2 for p in answered(body).values())


def test_incremental_fetches_answer_only_partitions_with_news(client, topic):
    sid = open_session(client, topic)["session_id"]
    # nothing changed: an empty answer, same session
    body = incremental(client, sid, 1)
    assert body["error_code"] == NONE and body["session_id"] == sid
    assert answered(body) == {}
    # a record lands on partition 1: only partition 1 comes back, with it
    assert client.produce(topic, 1, batch([b"new"]))["error_code"] == NONE
    body = incremental(client, sid, 2)
    got = answered(body)
    assert list(got) == [(topic, 1)]
    assert fetched_values(got[(topic, 1)]["records"]) == [(2, b"new")]
    assert got[(topic, 1)]["high_watermark"] == 3
    # the fetcher moves its offset on: sends only the changed partition; no news again
    body = incremental(client, sid, 3, [(topic, 1, 3, 1 << 20)])
    assert answered(body) == {}


def test_a_partition_sent_with_a_new_offset_is_read_from_there(client, topic):
    sid = open_session(client, topic)["session_id"]
    body = incremental(client, sid, 1, [(topic, 0, 0, 1 << 20)])  # re-read partition 0
    got = answered(body)
    assert list(got) == [(topic, 0)]
    assert fetched_values(got[(topic, 0)]["records"]) == [(0, b"a"), (1, b"b")]


def test_wrong_epoch_and_unknown_session_are_errors(client, topic):
    sid = open_session(client, topic)["session_id"]
    body = incremental(client, sid, 5)
    assert body["error_code"] == INVALID_FETCH_SESSION_EPOCH and body["responses"] == []
    assert incremental(client, sid, 1)["error_code"] == NONE  # the session is still there
    body = incremental(client, sid ^ 0x5A5A5A, 1)
    assert body["error_code"] == FETCH_SESSION_ID_NOT_FOUND


def test_forgotten_partitions_are_no_longer_read_and_forgetting_all_closes(client, topic):
    sid = open_session(client, topic)["session_id"]
    body = incremental(client, sid, 1, forgotten=[(topic, [0])])
    assert body["error_code"] == NONE and body["session_id"] == sid
    assert client.produce(topic, 0, batch([b"unseen"]))["error_code"] == NONE
    assert answered(incremental(client, sid, 2)) == {}  # partition 0 is out of the session
    body = incremental(client, sid, 3, forgotten=[(topic, [1, 2])])
    assert body["error_code"] == NONE and body["session_id"] == 0  # closed: sessionless
    assert incremental(client, sid, 4)["error_code"] == FETCH_SESSION_ID_NOT_FOUND


def test_final_epoch_closes_the_session_and_fetches_sessionless(client, topic):
    sid = open_session(client, topic)["session_id"]
    body = client.request(
        FETCH, V, fetch_body([(topic, 0, 0, 1 << 20)], session_id=sid, session_epoch=-1)
    )
    assert body["error_code"] == NONE and body["session_id"] == 0
    assert fetched_values(answered(body)[(topic, 0)]["records"]) == [(0, b"a"), (1, b"b")]
    assert incremental(client, sid, 1)["error_code"] == FETCH_SESSION_ID_NOT_FOUND


def test_a_full_cache_answers_full_fetches_without_a_session(start_broker):
    broker = start_broker(**{"max.incremental.fetch.session.cache.slots": "1"})
    name = unique_topic()
    with broker.client() as c:
        c.create_topic(name)
        first = open_session(c, name, offsets=(0,))
        body = c.request(FETCH, V, fetch_body([(name, 0, 0, 1 << 20)], session_epoch=0))
        assert body["error_code"] == NONE and body["session_id"] == 0  # no room, not evicted
        assert incremental(c, first["session_id"], 1)["error_code"] == NONE


def test_fetch_by_topic_id_and_unknown_topic_id(client, topic):
    topic_id = client.metadata([topic], version=12)["topics"][0]["topic_id"]
    assert topic_id != uuid.UUID(int=0)
    req = fetch_body([(topic, 0, 0, 1 << 20)], session_epoch=-1)
    req["topics"][0]["topic_id"] = topic_id
    unknown = uuid.uuid4()
    req["topics"].append(
        {"topic_id": unknown, "partitions": [dict(req["topics"][0]["partitions"][0])]}
    )
    body = client.request(FETCH, VID, req)
    assert body["error_code"] == NONE
    got = answered(body)
    assert fetched_values(got[(topic_id, 0)]["records"]) == [(0, b"a"), (1, b"b")]
    assert got[(unknown, 0)]["error_code"] == UNKNOWN_TOPIC_ID


def test_a_session_opened_by_topic_ids_continues_by_topic_ids_only(client, topic):
    topic_id = client.metadata([topic], version=12)["topics"][0]["topic_id"]
    req = fetch_body([(topic, p, 2, 1 << 20) for p in range(3)], session_epoch=0)
    req["topics"][0]["topic_id"] = topic_id
    body = client.request(FETCH, VID, req)
    sid = body["session_id"]
    assert sid != 0 and set(answered(body)) == {(topic_id, p) for p in range(3)}
    assert client.produce(topic, 2, batch([b"id"]))["error_code"] == NONE
    req = fetch_body([], session_id=sid, session_epoch=1)
    got = answered(client.request(FETCH, VID, req))
    assert list(got) == [(topic_id, 2)]
    assert fetched_values(got[(topic_id, 2)]["records"]) == [(2, b"id")]
    # the same session by names: Kafka's FETCH_SESSION_TOPIC_ID_ERROR
    body = incremental(client, sid, 2)
    assert body["error_code"] == FETCH_SESSION_TOPIC_ID_ERROR


def test_replica_state_carries_the_replica_id_from_v15(client, topic):
    # a consumer at v15+ (replica_state absent, replica id -1) reads only up to the high
    # watermark; the answer's shape is v15's
    req = fetch_body([(topic, 0, 0, 1 << 20)], session_epoch=-1)
    topic_id = client.metadata([topic], version=12)["topics"][0]["topic_id"]
    req["topics"][0]["topic_id"] = topic_id
    for version in (15, 16, 17):
        body = client.request(FETCH, version, req)
        got = answered(body)[(topic_id, 0)]
        assert got["error_code"] == NONE and got["high_watermark"] == 2
        assert fetched_values(got["records"]) == [(0, b"a"), (1, b"b")]


def test_idle_partitions_skipped_by_a_session_still_report_every_change(client, topic):
    """Idle partitions are skipped while nothing about them changes; any change shows."""
    sid = open_session(client, topic)["session_id"]
    for epoch in (1, 2, 3):
        assert answered(incremental(client, sid, epoch)) == {}
    r = client.request(
        21,
        1,
        {
            "topics": [{"name": topic, "partitions": [{"partition_index": 2, "offset": 1}]}],
            "timeout_ms": 10000,
        },
    )
    assert r["topics"][0]["partitions"][0]["error_code"] == NONE
    got = answered(incremental(client, sid, 4))
    assert list(got) == [(topic, 2)] and got[(topic, 2)]["log_start_offset"] == 1
    assert answered(incremental(client, sid, 5)) == {}
    assert client.produce(topic, 0, batch([b"c"]))["error_code"] == NONE
    got = answered(incremental(client, sid, 6))
    assert list(got) == [(topic, 0)] and fetched_values(got[(topic, 0)]["records"]) == [(2, b"c")]
    # the fetcher moves on past it; then a fetch from an offset beyond the log end errors
    assert answered(incremental(client, sid, 7, [(topic, 0, 3, 1 << 20)])) == {}
    got = answered(incremental(client, sid, 8, [(topic, 1, 50, 1 << 20)]))
    assert got[(topic, 1)]["error_code"] == 1  # OFFSET_OUT_OF_RANGE
    got = answered(incremental(client, sid, 9))
    assert got[(topic, 1)]["error_code"] == 1  # errors are answered every time


def test_a_partition_left_out_by_max_bytes_is_not_taken_for_idle(client):
    """Regression (kafka-python's test_kafka_consumer_max_bytes_simple): with max_bytes room
    for one batch, a partition whose records did not fit was remembered as idle and skipped by
    every later incremental fetch, so the consumer never saw it."""
    topic = unique_topic()
    client.create_topic(topic, partitions=2)
    for p in (0, 1):
        for _ in range(5):
            assert client.produce(topic, p, batch([b"x" * 50]))["error_code"] == NONE
    offsets = {0: 0, 1: 0}
    body = client.request(
        FETCH, V, fetch_body([(topic, p, 0, 1 << 20) for p in (0, 1)], session_epoch=0, max_bytes=1)
    )
    sid = body["session_id"]
    seen = set()
    for epoch in range(1, 12):
        moved = []
        for (_, p), entry in answered(body).items():
            got = fetched_values(entry["records"])
            if got:
                seen.add(p)
                offsets[p] = got[-1][0] + 1
                moved.append(p)
        # as kafka-python: only partitions whose position moved are sent again
        changed = [(topic, p, offsets[p], 1 << 20) for p in moved]
        body = incremental(client, sid, epoch, changed, max_bytes=1)
        assert body["error_code"] == NONE
        if seen == {0, 1}:
            break
    assert seen == {0, 1}
