"""The old versions Kafka 3.9 still serves (4.0 removed them, KIP-896), at the wire: OffsetCommit
v0-1, OffsetFetch v0, ListOffsets v0, Produce v0-2 with message format v0/v1 (magic 0 and 1,
converted to v2 on append), and Fetch v0-3 (answered by down-conversion to magic 0 / 1).
Kafka 3.9's behaviour is the spec (KafkaApis, LogValidator, LazyDownConversionRecords)."""

from __future__ import annotations

import json
import os
import struct
import time
import uuid

import pytest
from broker_fixture import (
    MESSAGE_TOO_LARGE,
    NONE,
    batch,
    produce_body,
    split_batches,
    unique_topic,
    wait_until,
)

from pybroker.coord.metadata import paths
from pybroker.testing.client import whole_messages
from pybroker.wire.legacy_records import (
    LegacyRecord,
    build_message_set,
    inner_messages,
    parse_message_set,
)
from pybroker.wire.record_walker import decode_records
from pybroker.wire.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    build_batch,
    unpack_header,
)

OFFSET_COMMIT, OFFSET_FETCH = 8, 9
UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION = 25, 22


def _group() -> str:
    return f"g-{uuid.uuid4().hex[:8]}"


def _partitions(offsets: dict[tuple[str, int], int], **extra) -> list[dict]:
    by_topic: dict[str, list[dict]] = {}
    for (topic, p), o in offsets.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": p, "committed_offset": o, "committed_metadata": "md", **extra}
        )
    return [{"name": t, "partitions": ps} for t, ps in by_topic.items()]


def commit(client, version: int, group: str, offsets, **body) -> dict[tuple[str, int], int]:
    extra = body.pop("partition_extra", {})
    req = {"group_id": group, "topics": _partitions(offsets, **extra), **body}
    resp = client.request(OFFSET_COMMIT, version, req)
    return {
        (t["name"], p["partition_index"]): p["error_code"]
        for t in resp["topics"]
        for p in t["partitions"]
    }


def fetch_offsets(client, version: int, group: str, wanted: list[tuple[str, int]]) -> dict:
    by_topic: dict[str, list[int]] = {}
    for t, p in wanted:
        by_topic.setdefault(t, []).append(p)
    resp = client.request(
        OFFSET_FETCH,
        version,
        {
            "group_id": group,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
        },
    )
    return {
        (t["name"], p["partition_index"]): (p["committed_offset"], p["metadata"], p["error_code"])
        for t in resp["topics"]
        for p in t["partitions"]
    }


# -- OffsetCommit v0-1, OffsetFetch v0 -------------------------------------------------------


def test_offset_commit_v0_and_fetch_v0(client):
    topic = unique_topic()
    client.create_topic(topic, partitions=2)
    group = _group()
    tps = [(topic, 0), (topic, 1)]
    assert commit(client, 0, group, {(topic, 0): 5, (topic, 1): 7}) == dict.fromkeys(tps, NONE)
    # v0 answers no metadata (Kafka reads v0 offsets from ZooKeeper, which keeps none)
    assert fetch_offsets(client, 0, group, tps) == {
        (topic, 0): (5, "", NONE),
        (topic, 1): (7, "", NONE),
    }
    # the group's offsets are one set: v1+ sees what v0 committed, and the other way round
    assert fetch_offsets(client, 1, group, tps)[(topic, 0)] == (5, "md", NONE)
    assert commit(client, 2, group, {(topic, 0): 9}, generation_id_or_member_epoch=-1,
                  member_id="", retention_time_ms=-1) == {(topic, 0): NONE}  # fmt: skip
    assert fetch_offsets(client, 0, group, tps)[(topic, 0)] == (9, "", NONE)
    # nothing committed, and a partition that does not exist: -1 with no error
    assert fetch_offsets(client, 0, _group(), [(topic, 0), (topic, 9)]) == {
        (topic, 0): (-1, "", NONE),
        (topic, 9): (-1, "", NONE),
    }
    # an unknown partition in a commit is refused per partition
    assert commit(client, 0, group, {(topic, 9): 1}) == {(topic, 9): 3}


def test_offset_commit_v1_checks_the_generation(client):
    topic = unique_topic()
    client.create_topic(topic)
    group = _group()
    ok = commit(client, 1, group, {(topic, 0): 3}, generation_id_or_member_epoch=-1,
                member_id="")  # fmt: skip
    assert ok == {(topic, 0): NONE}
    stranger = commit(client, 1, group, {(topic, 0): 4}, generation_id_or_member_epoch=3,
                      member_id="nobody")  # fmt: skip
    assert stranger == {(topic, 0): UNKNOWN_MEMBER_ID}
    assert fetch_offsets(client, 1, group, [(topic, 0)]) == {(topic, 0): (3, "md", NONE)}


def _stored_commit_timestamp(broker, group: str, topic: str, partition: int) -> int:
    path = f"{paths.CONSUMERS}/{group}/offsets/{topic}/{partition}"
    data, _ = broker.run(broker.broker.store.get(path))
    return json.loads(data)["commit_timestamp"]


def test_offset_commit_v1_commit_timestamp_is_the_commit_time(broker, client):
    topic = unique_topic()
    client.create_topic(topic, partitions=3)
    group = _group()
    day = 24 * 3600 * 1000
    old = int(time.time() * 1000) - 10 * day
    before = int(time.time() * 1000)
    codes = commit(client, 1, group, {(topic, 0): 1}, generation_id_or_member_epoch=-1,
                   member_id="", partition_extra={"commit_timestamp": old})  # fmt: skip
    assert codes == {(topic, 0): NONE}
    codes = commit(client, 1, group, {(topic, 1): 2}, generation_id_or_member_epoch=-1,
                   member_id="", partition_extra={"commit_timestamp": -1})  # fmt: skip
    assert codes == {(topic, 1): NONE}
    assert commit(client, 0, group, {(topic, 2): 3}) == {(topic, 2): NONE}
    assert _stored_commit_timestamp(broker, group, topic, 0) == old
    assert _stored_commit_timestamp(broker, group, topic, 1) >= before  # -1: now
    assert _stored_commit_timestamp(broker, group, topic, 2) >= before
    # offsets.retention.minutes counts from it: a retention pass (7 days, the default) of
    # the group drops the old commit only
    groups = broker.broker.groups
    dropped = broker.run(groups.offsets.expire(group, int(time.time() * 1000) - 7 * day + 1))
    assert dropped == 1
    left = fetch_offsets(client, 1, group, [(topic, 0), (topic, 1), (topic, 2)])
    assert [left[(topic, p)][0] for p in range(3)] == [-1, 2, 3]


# -- ListOffsets v0 --------------------------------------------------------------------------

LIST_OFFSETS = 2
UNSUPPORTED_VERSION, UNKNOWN_SERVER_ERROR, UNKNOWN_TOPIC_OR_PARTITION = 35, -1, 3


def old_style(client, topic: str, timestamp: int, max_num: int = 10, partition: int = 0,
              replica_id: int = -1) -> tuple[int, list[int]]:  # fmt: skip
    body = client.request(
        LIST_OFFSETS,
        0,
        {
            "replica_id": replica_id,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": partition,
                            "timestamp": timestamp,
                            "max_num_offsets": max_num,
                        }  # fmt: skip
                    ],
                }
            ],
        },
    )
    (t,) = body["topics"]
    (p,) = t["partitions"]
    assert t["name"] == topic and p["partition_index"] == partition
    return p["error_code"], p["old_style_offsets"]


def test_list_offsets_v0_of_one_segment(client):
    topic = unique_topic()
    client.create_topic(topic)
    assert old_style(client, topic, -1) == (NONE, [0])  # an empty log: its one segment
    assert old_style(client, topic, -2) == (NONE, [0])
    for _ in range(3):
        assert client.produce(topic, 0, batch([b"x"]))["error_code"] == NONE
    assert old_style(client, topic, -1) == (NONE, [3, 0])  # the log end, then the segment
    assert old_style(client, topic, -1, max_num=1) == (NONE, [3])
    assert old_style(client, topic, -2) == (NONE, [0])
    future = int(time.time() * 1000) + 3600_000
    assert old_style(client, topic, future) == (NONE, [3, 0])
    assert old_style(client, topic, 0) == (NONE, [])  # nothing written that early
    assert old_style(client, topic, -3)[0] == UNSUPPORTED_VERSION
    assert old_style(client, topic, -1, max_num=-1)[0] == UNKNOWN_SERVER_ERROR
    assert old_style(client, topic, -1, max_num=0) == (NONE, [])
    assert old_style(client, topic, -1, partition=5)[0] == UNKNOWN_TOPIC_OR_PARTITION
    assert old_style(client, "no-such-topic-v0", -1)[0] == UNKNOWN_TOPIC_OR_PARTITION
    assert old_style(client, topic, -1, replica_id=-2) == (NONE, [3, 0])


def test_list_offsets_v0_walks_segments_by_file_time(broker, client):
    topic = unique_topic()
    client.create_topic(topic, configs={"segment.bytes": "1024"})
    for _ in range(4):  # one segment per batch
        assert client.produce(topic, 0, batch([b"v" * 700]))["error_code"] == NONE
    logs = sorted((broker.log_dir / f"{topic}-0").glob("*.log"))
    assert [int(p.name.split(".")[0]) for p in logs] == [0, 1, 2, 3]
    for i, path in enumerate(logs):  # segment i last written at (i + 1) * 1000 s
        os.utime(path, (1000.0 * (i + 1), 1000.0 * (i + 1)))
    # the log end offset (now), then every segment's base offset
    assert old_style(client, topic, -1, max_num=100) == (NONE, [4, 3, 2, 1, 0])
    # at 2,500 s the second segment is the last one written: it and those before it
    assert old_style(client, topic, 2_500_000) == (NONE, [1, 0])
    assert old_style(client, topic, 2_500_000, max_num=1) == (NONE, [1])
    assert old_style(client, topic, 999_999) == (NONE, [])
    assert old_style(client, topic, -2) == (NONE, [0])
    # DeleteRecords moves the log start: the first segment then stands for it
    body = client.request(21, 0, {"topics": [{"name": topic, "partitions": [
        {"partition_index": 0, "offset": 2}]}], "timeout_ms": 10000})  # fmt: skip
    assert body["topics"][0]["partitions"][0]["error_code"] == NONE
    assert old_style(client, topic, -2) == (NONE, [2])


# -- Produce v0-2 with message format v0/v1 --------------------------------------------------

PRODUCE, FETCH = 0, 1
CORRUPT_MESSAGE, INVALID_RECORD, INVALID_TIMESTAMP = 2, 87, 32
UNSUPPORTED_COMPRESSION_TYPE = 76
CODECS = [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4]
TS = 1_700_000_000_000


def legacy(magic: int, codec: int = 0, n: int = 3, **kw) -> bytes:
    """A producer's message set: offsets 0..n-1, as clients write them."""
    recs = [LegacyRecord(i, TS + i, f"k{i}".encode(), f"v{i}".encode()) for i in range(n)]
    return build_message_set(recs, magic=magic, compression=codec, **kw)


def produce(client, topic: str, records: bytes, version: int, partition: int = 0) -> dict:
    body = client.request(PRODUCE, version, produce_body(topic, partition, records))
    (t,) = body["responses"]
    (p,) = t["partition_responses"]
    return p


def stored(client, topic: str, partition: int = 0) -> list[bytes]:
    return split_batches(client.fetch(topic, partition, 0)["records"])


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(("version", "magic"), [(0, 0), (1, 0), (2, 1), (2, 0), (0, 1)])
def test_produce_v0_to_v2_converts_message_sets_to_v2(client, version, magic, codec):
    topic = unique_topic()
    client.create_topic(topic)
    assert produce(client, topic, legacy(magic, codec), version)["error_code"] == NONE
    r = produce(client, topic, legacy(magic, codec, n=2), version)
    assert (r["error_code"], r["base_offset"]) == (NONE, 3)
    if version >= 2:
        assert r["log_append_time_ms"] == -1  # CreateTime topic
    first, second = stored(client, topic)
    h = unpack_header(first)
    assert (h.magic, h.base_offset, h.records_count, h.compression) == (2, 0, 3, codec)
    assert (h.producer_id, h.timestamp_type) == (-1, 0)
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decode_records(first)]
    ts = [TS + i if magic else -1 for i in range(3)]
    assert got == [(i, ts[i], f"k{i}".encode(), f"v{i}".encode(), []) for i in range(3)]
    assert h.max_timestamp == max(ts)
    assert unpack_header(second).base_offset == 3


def test_a_v0_message_whose_bytes_look_transactional_is_not_refused(client):
    """The issue's TRANSACTIONAL_ID_AUTHORIZATION_FAILED: the v2 attributes offset (byte 22)
    of a v0/v1 message is a key byte or a timestamp byte; its transactional bit is not one."""
    topic = unique_topic()
    client.create_topic(topic)
    v0 = build_message_set([LegacyRecord(0, -1, b"p-key", b"v")], magic=0)
    assert v0[22] & 0x10
    v1 = build_message_set([LegacyRecord(0, 0x1_1000_0000, None, b"v")], magic=1)
    assert v1[22] & 0x10
    for records, version in ((v0, 0), (v0, 1), (v1, 2)):
        assert produce(client, topic, records, version)["error_code"] == NONE
    assert [r.key for b in stored(client, topic) for r in decode_records(b)] == [
        b"p-key",
        b"p-key",
        None,
    ]


def test_produce_v3_and_later_refuse_message_format_v0_v1(client):
    topic = unique_topic()
    client.create_topic(topic)
    for version in (3, 8):
        for magic in (0, 1):
            assert produce(client, topic, legacy(magic), version)["error_code"] == INVALID_RECORD
    assert stored(client, topic) == []


def test_produce_of_bad_message_sets_appends_nothing(client):
    topic = unique_topic()
    client.create_topic(topic)
    flipped = bytearray(legacy(1))
    flipped[-1] ^= 1
    assert produce(client, topic, bytes(flipped), 2)["error_code"] == CORRUPT_MESSAGE
    assert produce(client, topic, legacy(1)[:-2], 2)["error_code"] == CORRUPT_MESSAGE
    assert produce(client, topic, legacy(0) + legacy(1), 2)["error_code"] == INVALID_RECORD
    gz = legacy(1, COMPRESSION_GZIP)
    assert produce(client, topic, gz + gz, 2)["error_code"] == INVALID_RECORD
    lat = legacy(1, timestamp_type=1, log_append_time=TS)
    assert produce(client, topic, lat, 2)["error_code"] == NONE  # CreateTime: only bounds
    assert stored(client, topic) != []


def test_produce_of_message_format_v1_to_a_log_append_time_topic(client):
    topic = unique_topic()
    client.create_topic(topic, configs={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    r = produce(client, topic, legacy(1, COMPRESSION_GZIP), 2)
    assert r["error_code"] == NONE and r["log_append_time_ms"] >= before
    (b,) = stored(client, topic)
    h = unpack_header(b)
    assert h.timestamp_type == 1 and h.max_timestamp == r["log_append_time_ms"]
    # a producer may not set LogAppendTime itself
    lat = legacy(1, timestamp_type=1, log_append_time=TS)
    assert produce(client, topic, lat, 2)["error_code"] == INVALID_TIMESTAMP


def test_produce_of_message_format_v0_honours_topic_configs(client):
    compacted = unique_topic()
    client.create_topic(compacted, configs={"cleanup.policy": "compact"})
    keyless = build_message_set([LegacyRecord(0, -1, None, b"v")], magic=0)
    assert produce(client, compacted, keyless, 1)["error_code"] == INVALID_RECORD
    assert produce(client, compacted, legacy(0), 1)["error_code"] == NONE
    gzip_topic = unique_topic()
    client.create_topic(gzip_topic, configs={"compression.type": "gzip"})
    assert produce(client, gzip_topic, legacy(0, COMPRESSION_SNAPPY), 1)["error_code"] == NONE
    (b,) = stored(client, gzip_topic)
    assert unpack_header(b).compression == COMPRESSION_GZIP
    small = unique_topic()
    client.create_topic(small, configs={"max.message.bytes": "100"})
    big = build_message_set([LegacyRecord(0, -1, None, b"x" * 200)], magic=0)
    assert produce(client, small, big, 1)["error_code"] == MESSAGE_TOO_LARGE


# -- Fetch v0-3: down-conversion -------------------------------------------------------------


def messages(data) -> list[tuple[int, int, bytes | None, bytes | None, int]]:
    """(offset, timestamp, key, value, magic) of every whole message of a down-converted
    answer, wrappers opened, as an old client reads them (a trailing partial one skipped)."""
    data = bytes(data or b"")
    out = []
    for m in whole_messages(data):
        inner = [m] if m.compression == 0 else inner_messages(m, 1 << 20)
        out += [(i.offset, i.timestamp, i.key, i.value, i.magic) for i in inner]
    return out


def first_message(data):
    """The first (outer) message of a down-converted answer."""
    data = bytes(data)
    (size,) = struct.unpack_from(">i", data, 8)
    (m,) = parse_message_set(data[: 12 + size])
    return m


def old_fetch(client, topic: str, offset: int, version: int, pmax: int = 1 << 20) -> dict:
    return client.fetch(topic, 0, offset, version=version, partition_max_bytes=pmax)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_fetch_v0_to_v3_down_converts(client, version, codec):
    topic = unique_topic()
    client.create_topic(topic)
    recs = [(b"k0", b"v0", [("h", b"x")], TS), (None, b"v1", [], TS + 5), (b"k2", None, [], TS + 1)]
    assert client.produce(topic, 0, build_batch(recs, compression=codec))["error_code"] == NONE
    assert client.produce(topic, 0, batch([b"last"], timestamp=TS + 9))["error_code"] == NONE
    p = old_fetch(client, topic, 0, version)
    assert (p["error_code"], p["high_watermark"]) == (NONE, 4)
    magic = 0 if version <= 1 else 1
    got = messages(p["records"])
    want = [(0, TS, b"k0", b"v0"), (1, TS + 5, None, b"v1"), (2, TS + 1, b"k2", None),
            (3, TS + 9, None, b"last")]  # fmt: skip
    assert got == [(o, ts if magic else -1, k, v, magic) for o, ts, k, v in want]
    if codec != COMPRESSION_NONE:  # the codec is kept: one wrapper for the first batch
        wrapper = first_message(p["records"])
        assert wrapper.compression == codec and wrapper.offset == 2


def test_fetch_v1_of_what_a_v0_producer_wrote(client):
    topic = unique_topic()
    client.create_topic(topic)
    for codec in CODECS:
        assert produce(client, topic, legacy(0, codec), 1)["error_code"] == NONE
    got = []
    offset = 0
    while offset < 12:
        part = messages(old_fetch(client, topic, offset, 1, pmax=300)["records"])
        assert part, offset
        got += part
        offset = part[-1][0] + 1
    assert [(o, k, v) for o, _, k, v, _ in got] == [
        (i, f"k{i % 3}".encode(), f"v{i % 3}".encode()) for i in range(12)
    ]


def test_fetch_from_inside_an_uncompressed_batch_drops_the_records_before(client):
    topic = unique_topic()
    client.create_topic(topic)
    assert client.produce(topic, 0, batch([b"a", b"b", b"c"]))["error_code"] == NONE
    assert [m[0] for m in messages(old_fetch(client, topic, 1, 2)["records"])] == [1, 2]


def test_fetch_v0_to_v3_skip_transaction_markers(client):
    topic = unique_topic()
    client.create_topic(topic)
    pid = client.init_producer_id()["producer_id"]
    txn = build_batch([(None, b"t", [])], producer_id=pid, producer_epoch=0, base_sequence=0,
                      is_transactional=True)  # fmt: skip
    body = client.request(PRODUCE, 8, {**produce_body(topic, 0, txn), "transactional_id": "tx"})
    assert body["responses"][0]["partition_responses"][0]["error_code"] == NONE
    markers = client.request(27, 1, {"markers": [{"producer_id": pid, "producer_epoch": 0,
        "transaction_result": True, "topics": [{"name": topic, "partition_indexes": [0]}],
        "coordinator_epoch": 0}]})  # fmt: skip
    assert markers["markers"][0]["topics"][0]["partitions"][0]["error_code"] == NONE
    assert client.produce(topic, 0, batch([b"after"]))["error_code"] == NONE
    for version in (1, 3):
        got = messages(old_fetch(client, topic, 0, version)["records"])
        assert [(o, v) for o, _, _, v, _ in got] == [(0, b"t"), (2, b"after")]
        # from the marker's offset: the marker vanishes, the next batch comes
        got = messages(old_fetch(client, topic, 1, version)["records"])
        assert [(o, v) for o, _, _, v, _ in got] == [(2, b"after")]


def test_fetch_v0_to_v2_never_return_a_batch_above_partition_max_bytes(client):
    topic = unique_topic()
    client.create_topic(topic)
    assert client.produce(topic, 0, batch([b"x" * 500]))["error_code"] == NONE
    for version in (0, 1, 2):  # Kafka's hard limit: nothing, the client must fetch larger
        assert old_fetch(client, topic, 0, version, pmax=100)["records"] in (b"", None)
    got = messages(old_fetch(client, topic, 0, 3, pmax=100)["records"])  # KIP-74 from v3
    assert [m[0] for m in got] == [0]


def test_fetch_v0_to_v3_obey_message_downconversion_enable(client):
    topic = unique_topic()
    client.create_topic(topic, configs={"message.downconversion.enable": "false"})
    assert client.produce(topic, 0, batch([b"x"]))["error_code"] == NONE
    for version in (0, 1, 2, 3):
        p = old_fetch(client, topic, 0, version)
        assert (p["error_code"], p["high_watermark"]) == (UNSUPPORTED_VERSION, -1)
    assert old_fetch(client, topic, 0, 4)["error_code"] == NONE


def test_fetch_below_v10_of_zstd(client):
    zstd_topic = unique_topic()
    client.create_topic(zstd_topic, configs={"compression.type": "zstd"})
    assert client.produce(zstd_topic, 0, batch([b"x"]))["error_code"] == NONE
    for version in (0, 3, 4, 9):
        p = old_fetch(client, zstd_topic, 0, version)
        assert p["error_code"] == UNSUPPORTED_COMPRESSION_TYPE, version
    assert old_fetch(client, zstd_topic, 0, 10)["error_code"] == NONE
    # a zstd batch on a producer-compression topic: v0-3 cannot have it down-converted
    topic = unique_topic()
    client.create_topic(topic)
    zstd_batch = batch([b"z"], compression=COMPRESSION_ZSTD)
    assert client.produce(topic, 0, zstd_batch)["error_code"] == NONE
    assert old_fetch(client, topic, 0, 3)["error_code"] == UNSUPPORTED_COMPRESSION_TYPE
    assert old_fetch(client, topic, 0, 4)["error_code"] == NONE


def test_fetch_v0_to_v3_of_a_log_append_time_topic(client):
    topic = unique_topic()
    client.create_topic(topic, configs={"message.timestamp.type": "LogAppendTime"})
    r = client.produce(topic, 0, batch([b"a", b"b"], compression=COMPRESSION_GZIP))
    assert r["error_code"] == NONE
    got = messages(old_fetch(client, topic, 0, 2)["records"])
    assert {ts for _, ts, _, _, _ in got} == {r["log_append_time_ms"]}
    wrapper = first_message(old_fetch(client, topic, 0, 2)["records"])
    assert wrapper.timestamp_type == 1 and wrapper.timestamp == r["log_append_time_ms"]


def test_a_dynamic_broker_default_turns_down_conversion_off(broker, client):
    topic = unique_topic()
    client.create_topic(topic)
    assert client.produce(topic, 0, batch([b"x"]))["error_code"] == NONE

    def set_default(value: str | None) -> None:
        body = client.request(
            44,
            1,
            {
                "resources": [
                    {
                        "resource_type": 4,  # BROKER; "" is the cluster-wide default
                        "resource_name": "",
                        "configs": [
                            {
                                "name": "log.message.downconversion.enable",
                                "config_operation": 0 if value is not None else 1,
                                "value": value,
                            }
                        ],
                    }
                ],
                "validate_only": False,
            },
        )
        assert body["responses"][0]["error_code"] == NONE, body

    set_default("false")
    try:
        wait_until(lambda: old_fetch(client, topic, 0, 1)["error_code"] == UNSUPPORTED_VERSION)
        assert old_fetch(client, topic, 0, 4)["error_code"] == NONE
    finally:
        set_default(None)
    wait_until(lambda: old_fetch(client, topic, 0, 1)["error_code"] == NONE)
