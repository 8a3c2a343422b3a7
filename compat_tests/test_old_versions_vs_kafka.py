"""The old versions side by side with Apache Kafka 3.9 (pybroker/testing/kafka_reference.py: one KRaft
node): the same requests to both, the same answers.

Produce v0-2 with message sets of format v0/v1 (every codec, magic 0's LZ4 framing) and their
error codes for bad input; Fetch v0-3 of what was stored, from the start, from inside a batch
and with a small partition_max_bytes: the same size and the same messages (offsets, magic,
codec, timestamp type, timestamps, keys, values), byte for byte where nothing is compressed
(Java's and Python's compressors differ); ListOffsets v0 (-1, -2); CreateTopics v0-1;
message.downconversion.enable and zstd topics below Fetch v10.  Offsets of v0/v1 commits are
not compared: Kafka 3.9 on KRaft refuses OffsetCommit v0 / OffsetFetch v0 (ZooKeeper only).
"""

from __future__ import annotations

import itertools
import socket
import struct
import time
import uuid

import pytest

from pybroker.testing import java
from pybroker.testing.client import create_topics_body, whole_messages
from pybroker.testing.debug_process import BrokerProcess
from pybroker.wire import codec
from pybroker.wire.legacy_records import (
    LegacyRecord,
    _entry,
    _message,
    build_message_set,
    compress_legacy,
    inner_messages,
)
from pybroker.wire.records import build_batch

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not java.java_available(), reason="java not found"),
]

PRODUCE, FETCH, LIST_OFFSETS, CREATE_TOPICS = 0, 1, 2, 19
TS = 1_700_000_000_000


class Client:
    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.corr = itertools.count(1)

    def request(self, key: int, version: int, body: dict) -> dict:
        corr = next(self.corr)
        self.sock.sendall(codec.encode_request(key, version, corr, "side-by-side", body))
        (size,) = struct.unpack(">i", self._read(4))
        got, resp = codec.decode_response(key, version, self._read(size))
        assert got == corr
        return resp

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "connection closed"
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    from pybroker.testing.kafka_reference import start_kafka

    with java.deps_or_fail():
        java.classpath()
    ref = start_kafka(tmp_path_factory.mktemp("kafka"))
    try:
        yield ref.bootstrap
    finally:
        ref.stop(check=False)


@pytest.fixture(scope="module")
def pybroker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("pybroker"))
    b.start()
    try:
        yield b.bootstrap
        assert not b.traceback_excerpt(), b.traceback_excerpt()
    finally:
        try:
            b.stop()
        finally:
            b.cleanup()


@pytest.fixture(scope="module")
def both(kafka, pybroker):
    clients = {"kafka": Client(kafka), "pybroker": Client(pybroker)}
    yield clients
    for c in clients.values():
        c.close()


def on_both(both, fn):
    """fn(client) on each; both answers, Kafka's first."""
    return fn(both["kafka"]), fn(both["pybroker"])


def create(c: Client, name: str, configs: dict | None = None, version: int = 0) -> int:
    body = create_topics_body(name, configs=configs)
    return c.request(CREATE_TOPICS, version, body)["topics"][0]["error_code"]


def produce(c: Client, topic: str, records: bytes, version: int) -> tuple[int, int]:
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }
    deadline = time.monotonic() + 30
    while True:  # a topic KRaft created a moment ago may not be led yet
        p = c.request(PRODUCE, version, body)["responses"][0]["partition_responses"][0]
        if p["error_code"] not in (3, 5, 6) or time.monotonic() > deadline:
            return p["error_code"], p["base_offset"]
        time.sleep(0.2)


def fetch(c: Client, topic: str, offset: int, version: int, pmax: int = 1 << 20) -> dict:
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 24,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": 0, "fetch_offset": offset, "partition_max_bytes": pmax}
                ],
            }
        ],
    }
    p = c.request(FETCH, version, body)["responses"][0]["partitions"][0]
    return {
        "error": p["error_code"],
        "hw": p["high_watermark"],
        "records": bytes(p["records"] or b""),
    }


def messages(data: bytes) -> list[tuple]:
    """What an old client sees: whole messages (wrappers opened), a partial tail skipped."""
    out = []
    for m in whole_messages(data):
        if m.compression:
            inner = inner_messages(m, 1 << 24)
            out.append(("wrapper", m.offset, m.magic, m.attributes, m.timestamp))
        else:
            inner = [m]
        out += [(i.offset, i.magic, i.attributes, i.timestamp, i.key, i.value) for i in inner]
    return out


def legacy(magic: int, codec_id: int, n: int, tag: str) -> bytes:
    recs = [LegacyRecord(i, TS + i, f"{tag}k{i}".encode(), f"{tag}v{i}".encode() * (i + 1))
            for i in range(n)]  # fmt: skip
    return build_message_set(recs, magic=magic, compression=codec_id)


def topic_name() -> str:
    return f"old-{uuid.uuid4().hex[:8]}"


def test_produce_then_fetch_every_old_version(both):
    topic = topic_name()
    assert on_both(both, lambda c: create(c, topic)) == (0, 0)
    inputs = [
        (legacy(0, 0, 3, "a"), 0),
        (legacy(0, 1, 3, "b"), 1),
        (legacy(0, 3, 2, "c"), 0),  # magic 0 LZ4 with Kafka's broken header checksum
        (legacy(1, 0, 3, "d"), 2),
        (legacy(1, 2, 3, "e"), 2),
        (legacy(1, 3, 2, "f"), 2),
        (build_batch([(b"g", b"with header", [("h", b"x")], TS)]), 3),
        (build_batch([(b"h", b"gz", [], TS + 1), (None, b"gz2", [], TS + 2)], compression=1), 2),
    ]
    for records, version in inputs:
        k, p = on_both(both, lambda c, r=records, v=version: produce(c, topic, r, v))
        assert k == p and k[0] == 0, (version, k, p)
    for version in (0, 1, 2, 3):
        for offset, pmax in ((0, 1 << 20), (1, 1 << 20), (4, 1 << 20), (0, 120), (9, 150),
                             (0, 30), (5, 60), (12, 200)):  # fmt: skip
            k, p = on_both(both, lambda c, o=offset, m=pmax, v=version: fetch(c, topic, o, v, m))
            where = f"Fetch v{version} from {offset}, partition_max_bytes {pmax}"
            assert (k["error"], k["hw"], len(k["records"])) == (
                p["error"],
                p["hw"],
                len(p["records"]),
            ), where
            assert messages(k["records"]) == messages(p["records"]), where


def test_uncompressed_down_conversion_is_byte_for_byte_kafkas(both):
    topic = topic_name()
    assert on_both(both, lambda c: create(c, topic)) == (0, 0)
    for records, version in ((legacy(0, 0, 4, "x"), 1), (legacy(1, 0, 4, "y"), 2),
                             (build_batch([(None, b"z", [("h", b"1")], TS)]), 5)):  # fmt: skip
        k, p = on_both(both, lambda c, r=records, v=version: produce(c, topic, r, v))
        assert k == p
    for version in (0, 1, 2, 3):
        for offset, pmax in itertools.product((0, 2, 8), (1 << 20, 100, 300)):
            k, p = on_both(both, lambda c, o=offset, m=pmax, v=version: fetch(c, topic, o, v, m))
            assert k == p, (version, offset, pmax)


def test_bad_message_sets_get_kafkas_error_codes(both):
    topic = topic_name()
    assert on_both(both, lambda c: create(c, topic)) == (0, 0)
    flipped = bytearray(legacy(1, 0, 2, "q"))
    flipped[-1] ^= 1
    gz = legacy(1, 1, 2, "w")
    nested = _entry(1, _message(1, 1, TS, None, compress_legacy(1, gz, 1)))  # gzip in gzip
    cases = {
        "crc": (bytes(flipped), 2),
        "mixed magics": (legacy(0, 0, 1, "m") + legacy(1, 0, 1, "n"), 2),
        "two wrappers": (gz + gz, 2),
        "magic 1 on v3": (legacy(1, 0, 1, "o"), 3),
        "magic 0 on v7": (legacy(0, 0, 1, "p"), 7),
        "wrapper of a wrapper": (nested, 2),
    }
    inner = legacy(1, 0, 3, "i")  # relative offsets 0, 1, 2
    below = _entry(1, _message(1, 1, TS, None, compress_legacy(1, inner, 1)))
    zero = _entry(0, _message(1, 1, TS, None, compress_legacy(1, inner, 1)))
    cases.update(
        {
            "v1 wrapper offset below its last inner offset": (below, 2),
            "empty wrapper": (_entry(0, _message(1, 1, TS, None, compress_legacy(1, b"", 1))), 2),
            "null wrapper value": (_entry(0, _message(1, 1, TS, None, None)), 2),
            "inner magic 0 in a v1 wrapper": (
                _entry(2, _message(1, 1, TS, None, compress_legacy(1, legacy(0, 0, 3, "j"), 1))),
                2,
            ),
        }
    )
    for name, (records, version) in cases.items():
        k, p = on_both(both, lambda c, r=records, v=version: produce(c, topic, r, v)[0])
        assert k == p and k != 0, (name, k, p)
    # accepted as Kafka accepts them
    lat = build_message_set([LegacyRecord(0, TS, None, b"x")], magic=1, timestamp_type=1,
                            log_append_time=TS)  # fmt: skip
    for name, records in (("wrapper offset 0", zero), ("producer LogAppendTime", lat)):
        k, p = on_both(both, lambda c, r=records: produce(c, topic, r, 2)[0])
        assert k == p == 0, (name, k, p)


def test_topic_configs_apply_to_converted_message_sets(both):
    lat, compacted, small = topic_name(), topic_name(), topic_name()
    for name, configs in ((lat, {"message.timestamp.type": "LogAppendTime"}),
                          (compacted, {"cleanup.policy": "compact"}),
                          (small, {"max.message.bytes": "100"})):  # fmt: skip
        assert on_both(both, lambda c, n=name, cf=configs: create(c, n, cf, version=1)) == (0, 0)
    lat_msg = build_message_set([LegacyRecord(0, TS, None, b"x")], magic=1, timestamp_type=1,
                                log_append_time=TS)  # fmt: skip
    keyless = build_message_set([LegacyRecord(0, -1, None, b"v")], magic=0)
    big = build_message_set([LegacyRecord(0, -1, None, b"x" * 200)], magic=0)
    many = build_message_set([LegacyRecord(i, -1, None, b"x" * 30) for i in range(5)], magic=0)
    cases = [(lat, lat_msg, 2), (lat, legacy(1, 1, 2, "t"), 2), (compacted, keyless, 1),
             (compacted, legacy(0, 2, 2, "u"), 1), (small, big, 1), (small, many, 1)]  # fmt: skip
    for topic, records, version in cases:
        k, p = on_both(both, lambda c, t=topic, r=records, v=version: produce(c, t, r, v)[0])
        assert k == p, (topic, k, p)


def test_list_offsets_v0_and_create_topics_v0_v1(both):
    topic = topic_name()
    assert on_both(both, lambda c: create(c, topic, version=1)) == (0, 0)
    assert on_both(both, lambda c: create(c, topic, version=0)) == (36, 36)
    for records, version in ((legacy(0, 0, 3, "l"), 0), (legacy(1, 1, 2, "m"), 2)):
        k, p = on_both(both, lambda c, r=records, v=version: produce(c, topic, r, v))
        assert k == p

    def old_style(c: Client, ts: int, n: int) -> tuple:
        body = {"replica_id": -1, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "timestamp": ts, "max_num_offsets": n}]}]}  # fmt: skip
        p = c.request(LIST_OFFSETS, 0, body)["topics"][0]["partitions"][0]
        return p["error_code"], p["old_style_offsets"]

    for ts, n in ((-1, 10), (-1, 1), (-2, 10), (-3, 1), (-1, 0)):
        k, p = on_both(both, lambda c, t=ts, m=n: old_style(c, t, m))
        assert k == p, (ts, n, k, p)


def test_down_conversion_switch_and_zstd_topics(both):
    off, zstd = topic_name(), topic_name()
    for name, configs in ((off, {"message.downconversion.enable": "false"}),
                          (zstd, {"compression.type": "zstd"})):  # fmt: skip
        assert on_both(both, lambda c, n=name, cf=configs: create(c, n, cf, version=1)) == (0, 0)
        k, p = on_both(both, lambda c, n=name: produce(c, n, legacy(0, 0, 2, "s"), 1))
        assert k == p
    for name in (off, zstd):
        for version in (1, 3, 4, 9, 10):
            k, p = on_both(both, lambda c, n=name, v=version: fetch(c, n, 0, v))
            assert (k["error"], k["hw"]) == (p["error"], p["hw"]), (name, version)
