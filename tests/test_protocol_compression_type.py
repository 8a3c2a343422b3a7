"""compression.type at the topic level (issue 14): producer keeps the batch's codec; any other
value makes the leader store batches in that codec, rebuilt with records, timestamps and
producer fields kept, as Kafka's LogValidator.  An in-process broker, Kafka as the spec."""

from __future__ import annotations

import pytest
from broker_fixture import NONE, header, split_batches, unique_topic
from test_protocol_compaction import create

from pybroker.wire.record_walker import decode_records
from pybroker.wire.records import build_batch, parse_batches

CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@pytest.mark.parametrize("topic_codec", ["producer", *CODECS])
@pytest.mark.parametrize("batch_codec", [0, 1, 3, 4])
def test_stored_codec_follows_compression_type(client, topic_codec, batch_codec):
    topic = unique_topic("codec")
    assert create(client, topic, {"compression.type": topic_codec})["error_code"] == NONE
    records = [(b"k%d" % i, b"v%d" % i * 20, [("h", b"x")]) for i in range(5)]
    sent = build_batch(
        records,
        timestamp=1_700_000_000_000,
        compression=batch_codec,
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
    )
    p = client.produce(topic, 0, sent)
    assert (p["error_code"], p["base_offset"]) == (NONE, 0)
    (b,) = split_batches(client.fetch(topic, 0, 0)["records"])
    parse_batches(bytearray(b))  # CRC and layout valid
    h = header(b)
    want = batch_codec if topic_codec == "producer" else CODECS[topic_codec]
    assert h.compression == want
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 0, 0)
    assert (h.base_offset, h.last_offset_delta) == (0, 4)
    got = decode_records(b)
    assert [(r.key, r.value) for r in got] == [(k, v) for k, v, _ in records]
    assert {r.timestamp for r in got} == {1_700_000_000_000}
    # the next batch of the idempotent producer still appends in sequence
    nxt = build_batch(
        [(b"k", b"v", [])],
        compression=batch_codec,
        producer_id=7,
        producer_epoch=0,
        base_sequence=5,
    )
    assert client.produce(topic, 0, nxt)["base_offset"] == 5


def test_unknown_compression_type_is_refused(client):
    r = create(client, unique_topic("codec"), {"compression.type": "brotli"})
    assert r["error_code"] == 40


def _stored(client, topic_configs):
    topic = unique_topic("level")
    assert create(client, topic, topic_configs)["error_code"] == NONE
    records = [(b"k%d" % i, b"value %d " % i * 40, []) for i in range(50)]
    p = client.produce(topic, 0, build_batch(records, timestamp=1_700_000_000_000))
    assert p["error_code"] == NONE
    (b,) = split_batches(client.fetch(topic, 0, 0)["records"])
    assert [(r.key, r.value) for r in decode_records(b)] == [(k, v) for k, v, _ in records]
    return b


RECORDS_AT = 61  # a v2 batch's header ends here


@pytest.mark.parametrize("level, xfl", [("1", 4), ("9", 2), ("-1", 0)])
def test_recompression_uses_the_topics_gzip_level(client, level, xfl):
    """compression.gzip.level: a batch rebuilt in gzip is deflated at the topic's level (the
    gzip header's XFL byte says 4 for the fastest, 2 for the best; Kafka's -1 is zlib's
    default, 6)."""
    b = _stored(client, {"compression.type": "gzip", "compression.gzip.level": level})
    assert b[RECORDS_AT : RECORDS_AT + 2] == b"\x1f\x8b" and b[RECORDS_AT + 8] == xfl


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_recompression_uses_the_topics_lz4_and_zstd_levels(client, codec):
    """compression.lz4.level / compression.zstd.level: a higher level packs the same records
    tighter (deterministic codecs, the same input)."""
    low, high = {"lz4": ("9", "17"), "zstd": ("-50", "19")}[codec]  # lz4 9: its fast mode
    fast = _stored(client, {"compression.type": codec, f"compression.{codec}.level": low})
    best = _stored(client, {"compression.type": codec, f"compression.{codec}.level": high})
    assert len(best) < len(fast)
