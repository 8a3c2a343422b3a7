"""Record validation at append (issue 10, defects 4 and 5): poison batches and decompression
bombs.  Kafka's LogValidator walks every record of a batch a client produces (decompressing
compressed batches) and refuses a malformed one; pybroker must do the same, with bounded
memory and without stalling the event loop, and ListOffsets must never fail with a traceback
even when a bad batch is already on disk.

Unit tests drive pybroker.log.validator on bytes; the others use a real broker
(tests/broker_fixture.py) and raw frames."""

from __future__ import annotations

import gzip
import struct
import tracemalloc

import lz4.frame
import pytest
import zstandard
from broker_fixture import CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, NONE, fetched_values, unique_topic
from crc32c import crc32c

from pybroker.wire.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    build_batch,
    compress,
    parse_batches,
)

INVALID_RECORD = 87
CODECS = [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD]
TS = 1_700_000_000_000

# The reproducer of issue 10, defect 4 (client id "bars"): Produce v7 to "t"/0 (acks=1) whose gzip batch has a
# correct CRC-32C but a corrupt gzip payload, then ListOffsets v7 for timestamp -3.
ISSUE_PRODUCE = bytes.fromhex(
    "000000920000000700000001000462617273ffff0001000013880000000100017400000001000000000000"
    "006900000000000000000000005d0000000002d6f742c6000100000000000003bb2cc3d800000003bb2cc3"
    "d800ffffffffffffffffffffffffffff000000011f8b0800000102030405060708090a0b0c0d0e0f101112"
    "131415161718191a1b1c1d1e1f2021222324252627"
)
ISSUE_LIST_OFFSETS = bytes.fromhex(
    "0000002b000200070000000200046261727300ffffffff000202740200000000fffffffffffffffffffffffd000000"
)


def varint(value: int) -> bytes:
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def record(delta: int, value: bytes | None = b"v", *, ts_delta: int = 0) -> bytes:
    body = b"\x00" + varint(ts_delta) + varint(delta) + varint(-1)
    body += varint(-1) if value is None else varint(len(value)) + value
    body += varint(0)
    return varint(len(body)) + body


def raw_batch(payload: bytes, count: int, codec: int = COMPRESSION_NONE) -> bytes:
    """A v2 batch around ``payload`` (the records section as sent) with a correct CRC-32C."""
    buf = bytearray(HEADER_SIZE) + payload
    HEADER.pack_into(
        buf,
        0,
        0,
        len(buf) - LOG_OVERHEAD,
        -1,
        MAGIC,
        0,
        codec,
        count - 1,
        TS,
        TS,
        -1,
        -1,
        -1,
        count,
    )
    struct.pack_into(">I", buf, CRC_OFFSET, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)


def good_batch(codec: int = COMPRESSION_NONE, n: int = 5) -> bytes:
    return build_batch(
        [(None, f"value-{i}".encode(), [], TS + i) for i in range(n)], compression=codec
    )


def poison_batches() -> dict[str, tuple[bytes, int | tuple[int, ...]]]:
    """name -> (batch, the error code(s) to answer with)."""
    three = record(0) + record(1) + record(2)
    bad = {
        # record structure (Kafka: InvalidRecordException -> INVALID_RECORD)
        "overlong varint": (raw_batch(b"\xff" * 11 + three, 3), INVALID_RECORD),
        "record length too long": (
            raw_batch(record(0) + b"\x10" + record(1)[1:] + record(2), 3),
            INVALID_RECORD,
        ),
        "record length too short": (
            raw_batch(record(0) + b"\x0c" + record(1)[1:] + record(2), 3),
            INVALID_RECORD,
        ),
        "truncated record": (raw_batch(three[:-3], 3), INVALID_RECORD),
        "fewer records than declared": (raw_batch(three, 4), INVALID_RECORD),
        "more records than declared": (raw_batch(three + record(3), 3), INVALID_RECORD),
        "offset deltas out of order": (
            raw_batch(record(0) + record(2) + record(1), 3),
            INVALID_RECORD,
        ),
        "negative key length": (
            raw_batch(record(0)[:4] + varint(-5) + record(0)[5:], 1),
            INVALID_RECORD,
        ),
        "negative header count": (
            raw_batch(record(0)[:-1] + varint(-3), 1),
            INVALID_RECORD,
        ),
        "compressed records malformed": (
            raw_batch(compress(COMPRESSION_ZSTD, three[:-2]), 3, COMPRESSION_ZSTD),
            INVALID_RECORD,
        ),
    }
    for codec, name in [
        (COMPRESSION_GZIP, "gzip"),
        (COMPRESSION_SNAPPY, "snappy"),
        (COMPRESSION_LZ4, "lz4"),
        (COMPRESSION_ZSTD, "zstd"),
    ]:
        payload = bytearray(compress(codec, three * 50))
        for i in range(len(payload) // 3, len(payload) - 4):
            payload[i] ^= 0x5A  # garbage after the codec's header
        bad[f"corrupt {name} payload"] = (raw_batch(bytes(payload), 3, codec), CORRUPT_MESSAGE)
        cut = compress(codec, three * 50)
        bad[f"truncated {name} payload"] = (
            raw_batch(cut[: len(cut) // 2], 150, codec),
            # the zstd library ends a truncated frame's output silently: too few records
            (CORRUPT_MESSAGE, INVALID_RECORD),
        )
    return bad


POISON = poison_batches()


def zstd_bomb(inflated: int) -> bytes:
    """A zstd payload of ``inflated`` zero bytes, built in a streaming way."""
    c = zstandard.ZstdCompressor(level=1).compressobj()
    zeros = bytes(1 << 20)
    out = bytearray()
    for _ in range(inflated >> 20):
        out += c.compress(zeros)
    out += c.flush()
    return bytes(out)


def valid_records_bomb(records: int, value_size: int, codec: int) -> bytes:
    """A well-formed batch of ``records`` records, each with ``value_size`` zero bytes."""
    value = bytes(value_size)
    body = b"".join(record(i, value, ts_delta=i) for i in range(records))
    return raw_batch(compress(codec, body), records, codec)


# -- the validator on bytes -------------------------------------------------------------------


def _validate(batch: bytes, **limits):
    from pybroker.log.validator import validate_batch

    (h,) = parse_batches(batch)
    limits.setdefault("max_record_bytes", 1 << 20)
    limits.setdefault("max_uncompressed_bytes", 100 << 20)
    return validate_batch(batch, h, **limits)


@pytest.mark.parametrize("codec", CODECS)
def test_validator_accepts_what_clients_write(codec):
    result = _validate(good_batch(codec, 7))
    assert result.max_timestamp == TS + 6
    assert result.records == 7


@pytest.mark.parametrize("name", sorted(POISON))
def test_validator_refuses_poison(name):
    from pybroker.wire.records import InvalidRecordError

    batch, code = POISON[name]
    with pytest.raises(InvalidRecordError) as e:
        _validate(batch)
    assert e.value.code in (code if isinstance(code, tuple) else (code,)), e.value


def test_validator_refuses_a_record_above_the_size_limit():
    from pybroker.wire.records import InvalidRecordError

    batch = build_batch([(None, bytes(5000), [])], compression=COMPRESSION_ZSTD)
    with pytest.raises(InvalidRecordError) as e:
        _validate(batch, max_record_bytes=4096)
    assert e.value.code == MESSAGE_TOO_LARGE


@pytest.mark.parametrize(
    "codec", [COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD]
)
def test_validator_stops_a_bomb_of_valid_records_with_bounded_memory(codec):
    from pybroker.wire.records import InvalidRecordError

    batch = valid_records_bomb(40_000, 1000, codec)  # 40 MB of records in a small batch
    assert len(batch) < 4 << 20
    tracemalloc.start()
    try:
        with pytest.raises(InvalidRecordError) as e:
            _validate(batch, max_uncompressed_bytes=4 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert e.value.code == MESSAGE_TOO_LARGE
    assert peak < 8 << 20, f"peak {peak} bytes"


def test_validator_refuses_a_raw_snappy_block_declaring_too_much_before_inflating_it():
    """librdkafka sends one raw snappy block: its declared length is checked first."""
    import cramjam

    from pybroker.wire.records import InvalidRecordError

    body = b"".join(record(i, bytes(1000), ts_delta=i) for i in range(20_000))  # 20 MB
    batch = raw_batch(bytes(cramjam.snappy.compress_raw(body)), 20_000, COMPRESSION_SNAPPY)
    tracemalloc.start()
    try:
        with pytest.raises(InvalidRecordError) as e:
            _validate(batch, max_uncompressed_bytes=4 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert e.value.code == MESSAGE_TOO_LARGE
    assert peak < 8 << 20, f"peak {peak} bytes"


def test_validator_stops_a_zstd_bomb_of_zeros_at_once():
    from pybroker.wire.records import InvalidRecordError

    batch = raw_batch(zstd_bomb(256 << 20), 1, COMPRESSION_ZSTD)
    tracemalloc.start()
    try:
        with pytest.raises(InvalidRecordError):
            _validate(batch)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"peak {peak} bytes"


# -- a real broker ------------------------------------------------------------------------------


@pytest.fixture
def topic(client):
    name = unique_topic("rv")
    client.create_topic(name, partitions=2)
    return name


def _list_offsets_all_kinds(client, topic, partition=0) -> list[dict]:
    return [client.list_offset(topic, partition, ts, version=7) for ts in (-3, -2, -1, 0, TS)]


def test_issue_reproducer_is_refused_and_list_offsets_answers(client):
    client.create_topic("t", partitions=1)
    client.send_raw(ISSUE_PRODUCE)
    from pybroker.wire import codec

    produce = codec.decode_response(0, 7, client.recv_frame())[1]
    p = produce["responses"][0]["partition_responses"][0]
    assert p["error_code"] == CORRUPT_MESSAGE, p
    client.send_raw(ISSUE_LIST_OFFSETS)
    lo = codec.decode_response(2, 7, client.recv_frame())[1]
    got = lo["topics"][0]["partitions"][0]
    assert got["error_code"] == NONE and got["offset"] == -1, got
    assert client.list_offset("t", 0, -1, version=7)["offset"] == 0


@pytest.mark.parametrize("name", sorted(POISON))
def test_broker_refuses_poison_and_keeps_serving(client, topic, name):
    batch, code = POISON[name]
    assert (
        client.produce(topic, 0, good_batch(COMPRESSION_ZSTD, 3), version=9)["error_code"] == NONE
    )
    p = client.produce(topic, 0, batch, version=9)
    assert p["error_code"] in (code if isinstance(code, tuple) else (code,)), p
    assert p["error_message"]
    for lo in _list_offsets_all_kinds(client, topic):
        assert lo["error_code"] == NONE, lo
    assert client.list_offset(topic, 0, -1)["offset"] == 3
    assert client.list_offset(topic, 0, -3, version=7)["offset"] == 2
    assert [v for _, v in fetched_values(client.fetch(topic, 0, 0)["records"])] == [
        b"value-0",
        b"value-1",
        b"value-2",
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_broker_accepts_every_codec_and_list_offsets_finds_timestamps(client, topic, codec):
    assert client.produce(topic, 1, good_batch(codec, 4))["error_code"] == NONE
    assert client.produce(topic, 1, good_batch(codec, 4))["error_code"] == NONE
    mx = client.list_offset(topic, 1, -3, version=7)
    assert (mx["error_code"], mx["offset"], mx["timestamp"]) == (NONE, 3, TS + 3)
    by_ts = client.list_offset(topic, 1, TS + 2, version=7)
    assert (by_ts["error_code"], by_ts["offset"], by_ts["timestamp"]) == (NONE, 2, TS + 2)


def test_max_timestamp_is_set_from_the_records(client, topic):
    """As Kafka's LogValidator: a CreateTime batch's maxTimestamp becomes its records' largest
    timestamp, so ListOffsets -3 and by timestamp find the real record."""
    body = record(0, b"a", ts_delta=0) + record(1, b"b", ts_delta=50) + record(2, b"c", ts_delta=7)
    lying = raw_batch(body, 3)  # header says maxTimestamp == baseTimestamp
    assert client.produce(topic, 0, lying, version=9)["error_code"] == NONE
    mx = client.list_offset(topic, 0, -3, version=7)
    assert (mx["offset"], mx["timestamp"]) == (1, TS + 50)
    by_ts = client.list_offset(topic, 0, TS + 10, version=7)
    assert (by_ts["offset"], by_ts["timestamp"]) == (1, TS + 50)
    stored = client.fetch(topic, 0, 0)["records"]
    (h,) = parse_batches(bytes(stored))  # CRC still right after the rewrite
    assert h.max_timestamp == TS + 50


def _vm_hwm_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.mark.parametrize("kind", ["zeros", "valid records"])
def test_zstd_bomb_is_refused_without_inflating_it(client, topic, kind):
    if kind == "zeros":
        bomb = raw_batch(zstd_bomb(1 << 30), 1, COMPRESSION_ZSTD)  # ~32 KB -> 1 GiB
    else:
        bomb = valid_records_bomb(150_000, 1000, COMPRESSION_ZSTD)  # 150 MB of records
    assert len(bomb) < 1 << 20
    before = _vm_hwm_kib()
    p = client.produce(topic, 0, bomb, version=9)
    assert p["error_code"] in (INVALID_RECORD, MESSAGE_TOO_LARGE), p
    for lo in _list_offsets_all_kinds(client, topic):
        assert lo["error_code"] == NONE, lo
    assert client.list_offset(topic, 0, -1)["offset"] == 0
    grown_mib = (_vm_hwm_kib() - before) / 1024
    assert grown_mib < 100, f"peak RSS grew {grown_mib:.0f} MiB"


def test_list_offsets_answers_an_error_for_a_bad_batch_already_on_disk(broker, client, topic):
    """A log written before validation existed (or by a follower) may hold a poison batch:
    ListOffsets answers CORRUPT_MESSAGE for that partition and keeps the connection."""
    bad, _ = POISON["corrupt gzip payload"]

    async def append_unvalidated() -> None:
        log = broker.broker.hosted.partition_log(topic, 0)
        log.append(bytearray(bad), parse_batches(bad))
        log.high_watermark = log.log_end_offset

    broker.run(append_unvalidated())
    for ts in (-3, 0):
        lo = client.list_offset(topic, 0, ts, version=7)
        assert lo["error_code"] == CORRUPT_MESSAGE, lo
    latest = client.list_offset(topic, 0, -1, version=7)
    assert (latest["error_code"], latest["offset"]) == (NONE, 3)
    assert client.list_offset(topic, 1, -3, version=7)["error_code"] == NONE


def test_gzip_with_several_members_is_accepted():
    """Java's GZIPInputStream reads concatenated members; so does the validator."""
    body = record(0) + record(1) + record(2)
    payload = gzip.compress(body[:10]) + gzip.compress(body[10:])
    _validate(raw_batch(payload, 3, COMPRESSION_GZIP))


def test_lz4_block_checksums_are_accepted():
    body = record(0) + record(1)
    payload = lz4.frame.compress(body, block_checksum=True, content_checksum=True)
    _validate(raw_batch(payload, 2, COMPRESSION_LZ4))


def test_large_batches_are_walked_off_the_event_loop(broker, client, topic, monkeypatch):
    """Walking a large (or compressed and inflating) batch runs in a worker thread, for
    Produce and for ListOffsets, so the loop keeps serving other clients meanwhile; small
    uncompressed batches are walked on the loop."""
    import threading

    from pybroker import replica_manager

    walks: list[tuple[str, int, bool]] = []  # (what, batch size, on the loop thread?)

    def spy(name, fn):
        def wrapper(batch, h, *args, **kw):
            for one in h if isinstance(h, list) else [h]:  # validate_records: all the batches
                walks.append((name, one.size, threading.current_thread() is broker.thread))
            return fn(batch, h, *args, **kw)

        return wrapper

    validate = replica_manager.validate_records
    monkeypatch.setattr(replica_manager, "validate_records", spy("produce", validate))
    find = replica_manager.find_record
    monkeypatch.setattr(replica_manager, "find_record", spy("list_offsets", find))
    big = valid_records_bomb(30_000, 200, COMPRESSION_GZIP)  # 6 MB of records
    assert client.produce(topic, 0, big, version=9)["error_code"] == NONE
    assert client.list_offset(topic, 0, -3, version=7)["offset"] == 29_999
    assert client.list_offset(topic, 0, TS, version=7)["offset"] == 0
    small = good_batch(COMPRESSION_NONE, 3)
    assert client.produce(topic, 1, small, version=9)["error_code"] == NONE
    assert client.list_offset(topic, 1, -3, version=7)["offset"] == 2
    off_loop = [(what, on_loop) for what, size, on_loop in walks if size == len(big)]
    assert ("produce", False) in off_loop, walks
    assert [w for w in off_loop if w[0] == "list_offsets"] == [("list_offsets", False)] * 2
    assert ("produce", len(small), True) in walks  # small: inline, no thread hand-off
    assert ("list_offsets", len(small), True) in walks
