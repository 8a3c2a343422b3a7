"""message.timestamp.before.max.ms / after.max.ms (KIP-937) and the deprecated
message.timestamp.difference.max.ms on a CreateTime topic (issue 14): records out of range are
refused with INVALID_TIMESTAMP and, from Produce v8, one record error per record, as Kafka
3.9's LogValidator.validateTimestamp.  An in-process broker (tests/broker_fixture.py)."""

from __future__ import annotations

import time

import pytest
from broker_fixture import NONE, unique_topic
from test_protocol_compaction import create, produce

from pybroker.wire.records import build_batch

INVALID_TIMESTAMP = 32
HOUR = 3600 * 1000


@pytest.mark.parametrize("version", [3, 8, 9])
@pytest.mark.parametrize(
    "configs,offset_ms",
    [
        ({"message.timestamp.before.max.ms": "60000"}, -HOUR),
        ({"message.timestamp.after.max.ms": "60000"}, HOUR),
        ({"message.timestamp.difference.max.ms": "60000"}, -HOUR),
        ({"message.timestamp.difference.max.ms": "60000"}, HOUR),
    ],
)
@pytest.mark.parametrize("compression", [0, 1])
def test_out_of_range_timestamps_are_refused(client, version, configs, offset_ms, compression):
    topic = unique_topic("tsbound")
    assert create(client, topic, configs)["error_code"] == NONE
    ts = int(time.time() * 1000) + offset_ms
    records = build_batch(
        [(b"k", b"a", []), (b"k", b"b", [])], timestamp=ts, compression=compression
    )
    p = produce(client, topic, records, version)
    assert (p["error_code"], p["base_offset"]) == (INVALID_TIMESTAMP, -1)
    if version >= 8:
        assert [e["batch_index"] for e in p["record_errors"]] == [0, 1]
        assert p["error_message"] == (
            "One or more records have been rejected due to invalid timestamp"
        )
        msg = p["record_errors"][0]["batch_index_error_message"]
        assert msg.startswith(f"Timestamp {ts} of message with offset 0 is out of range.")
    # records stamped now are taken; nothing was appended before
    ok = build_batch([(b"k", b"c", [])], timestamp=int(time.time() * 1000))
    assert (lambda r: (r["error_code"], r["base_offset"]))(produce(client, topic, ok, version)) == (
        NONE,
        0,
    )


def test_in_range_and_default_topics_take_old_and_future_timestamps(client):
    now = int(time.time() * 1000)
    # before.max.ms only bounds the past: a future record passes; the default bounds nothing
    bounded = unique_topic("tsbound")
    assert create(client, bounded, {"message.timestamp.before.max.ms": "60000"})["error_code"] == 0
    future = produce(client, bounded, build_batch([(b"k", b"v", [])], timestamp=now + HOUR), 9)
    assert future["error_code"] == NONE
    plain = unique_topic("tsplain")
    assert create(client, plain)["error_code"] == NONE
    for ts in (0, now - 100 * HOUR, now + 100 * HOUR):
        p = produce(client, plain, build_batch([(b"k", b"v", [])], timestamp=ts), 9)
        assert p["error_code"] == NONE


@pytest.mark.parametrize("topic_type", ["CreateTime", "LogAppendTime"])
def test_producer_log_append_time_batches_are_refused(client, topic_type):
    """Kafka refuses a batch the producer marked LogAppendTime, on any topic."""
    from pybroker.wire.records import LOG_APPEND_TIME

    topic = unique_topic("tslat")
    assert create(client, topic, {"message.timestamp.type": topic_type})["error_code"] == NONE
    records = build_batch([(b"k", b"a", []), (b"k", b"b", [])], timestamp_type=LOG_APPEND_TIME)
    p = produce(client, topic, records, 9)
    assert (p["error_code"], p["base_offset"]) == (INVALID_TIMESTAMP, -1)
    assert [e["batch_index"] for e in p["record_errors"]] == [0, 1]
    assert all(
        "Producer should not set timestamp type to LogAppendTime" in e["batch_index_error_message"]
        for e in p["record_errors"]
    )
