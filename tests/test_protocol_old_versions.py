"""The old versions Kafka 3.9 still serves (4.0 removed them, KIP-896), at the wire: OffsetCommit
v0-1, OffsetFetch v0, ListOffsets v0, Produce v0-2 with message format v0/v1 (magic 0 and 1,
converted to v2 on append), and Fetch v0-3 (answered by down-conversion to magic 0 / 1).
Kafka 3.9's behaviour is the spec (KafkaApis, LogValidator, LazyDownConversionRecords)."""

from __future__ import annotations

import json
import os
import time
import uuid

from broker_fixture import NONE, batch, unique_topic

from pybroker.coord import paths

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
