"""message.timestamp.type=LogAppendTime (issue 14): the leader stamps each batch's
maxTimestamp and timestamp-type bit with the append time (CRC recomputed), the Produce
response carries log_append_time_ms, fetched records carry that time, and ListOffsets by
timestamp follows it.  An in-process broker (tests/broker_fixture.py), Kafka as the spec."""

from __future__ import annotations

import time

import pytest
from broker_fixture import NONE, batch, header, split_batches, unique_topic
from test_protocol_compaction import create

from pybroker.wire.record_walker import decode_records
from pybroker.wire.records import LOG_APPEND_TIME, parse_batches

OLD = 1_000_000  # a CreateTime far in the past


@pytest.mark.parametrize("compression", [0, 1, 3])
def test_log_append_time_topic_stamps_batches(client, compression):
    topic = unique_topic("lat")
    r = create(client, topic, {"message.timestamp.type": "LogAppendTime"})
    assert r["error_code"] == NONE
    before = int(time.time() * 1000)
    p = client.produce(topic, 0, batch([b"a", b"b"], timestamp=OLD, compression=compression))
    after = int(time.time() * 1000)
    assert p["error_code"] == NONE
    stamped = p["log_append_time_ms"]
    assert before - 1000 <= stamped <= after + 1000
    (b,) = split_batches(client.fetch(topic, 0, 0)["records"])
    parse_batches(bytearray(b))  # the CRC the broker recomputed is right
    h = header(b)
    assert (h.timestamp_type, h.max_timestamp, h.compression) == (
        LOG_APPEND_TIME,
        stamped,
        compression,
    )
    assert [r.timestamp for r in decode_records(b)] == [stamped, stamped]
    # ListOffsets by timestamp follows the append time, not the producer's
    lo = client.list_offset(topic, 0, OLD)
    assert (lo["offset"], lo["timestamp"]) == (0, stamped)
    assert client.list_offset(topic, 0, stamped + 1)["offset"] == -1


def test_create_time_topic_keeps_producer_timestamps(client):
    topic = unique_topic("ct")
    assert create(client, topic, {"message.timestamp.type": "CreateTime"})["error_code"] == NONE
    p = client.produce(topic, 0, batch([b"a"], timestamp=OLD))
    assert (p["error_code"], p["log_append_time_ms"]) == (NONE, -1)
    (b,) = split_batches(client.fetch(topic, 0, 0)["records"])
    assert [r.timestamp for r in decode_records(b)] == [OLD]


def test_broker_default_log_append_time(start_broker):
    b = start_broker(**{"log.message.timestamp.type": "LogAppendTime"})
    topic = unique_topic("latdefault")
    with b.client() as c:
        assert create(c, topic)["error_code"] == NONE
        p = c.produce(topic, 0, batch([b"a"], timestamp=OLD))
        assert p["error_code"] == NONE and p["log_append_time_ms"] > OLD
        (raw,) = split_batches(c.fetch(topic, 0, 0)["records"])
        assert [r.timestamp for r in decode_records(raw)] == [p["log_append_time_ms"]]
