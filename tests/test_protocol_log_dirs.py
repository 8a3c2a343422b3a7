"""DescribeLogDirs and AlterReplicaLogDirs over TCP against a broker with two log dirs, and
what clients see when one of them fails (replaced by a file: fails for root too)."""

from __future__ import annotations

import shutil

import pytest
from broker_fixture import NONE, batch, fetched_values, unique_topic, wait_until

from pybroker.log import meta_properties

ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS, INCREMENTAL_ALTER_CONFIGS = 34, 35, 44
BROKER = 4  # the BROKER config resource type
MOVE_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
UNKNOWN_TOPIC_OR_PARTITION, KAFKA_STORAGE_ERROR, LOG_DIR_NOT_FOUND = 3, 56, 57


@pytest.fixture
def two_dirs(start_broker, tmp_path):
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    b = start_broker(**{"log.dirs": f"{d1},{d2}", "log.flush.offset.checkpoint.interval.ms": 200})
    return b, d1.absolute(), d2.absolute()


def fail(path):
    """Replace a log dir by a regular file: every open below it fails (root too)."""
    shutil.rmtree(path)
    path.write_text("the disk is gone")


def describe(client, version=4, topics=None):
    body = client.request(DESCRIBE_LOG_DIRS, version, {"topics": topics})
    return {
        r["log_dir"]: (
            r["error_code"],
            {
                (t["name"], p["partition_index"], p["is_future_key"]): p
                for t in r["topics"]
                for p in t["partitions"]
            },
        )
        for r in body["results"]
    }


def alter(client, moves, version=2):
    """moves: {(topic, partition): path} -> {(topic, partition): error code}"""
    by_dir: dict[str, dict[str, list[int]]] = {}
    for (topic, p), path in moves.items():
        by_dir.setdefault(str(path), {}).setdefault(topic, []).append(p)
    body = client.request(
        ALTER_REPLICA_LOG_DIRS,
        version,
        {
            "dirs": [
                {"path": d, "topics": [{"name": t, "partitions": ps} for t, ps in ts.items()]}
                for d, ts in by_dir.items()
            ]
        },
    )
    return {
        (t["topic_name"], p["partition_index"]): p["error_code"]
        for t in body["results"]
        for p in t["partitions"]
    }


def where(client, topic, partition):
    """The dirs holding the partition (current logs only)."""
    return [
        d
        for d, (code, parts) in describe(client).items()
        if code == NONE and (topic, partition, False) in parts
    ]


@pytest.mark.parametrize("version", range(0, 5))
def test_describe_log_dirs_reports_both_dirs_and_spreads_partitions(two_dirs, version):
    b, d1, d2 = two_dirs
    topic = unique_topic("spread")
    with b.client() as c:
        c.create_topic(topic, partitions=4)
        wait_until(lambda: all(b.broker.logs.get(topic, p) for p in range(4)))
        assert c.produce(topic, 1, batch([b"x"] * 3))["error_code"] == NONE
        got = describe(c, version)
    assert set(got) == {str(d1), str(d2)}
    placed = {d: sorted(p for (t, p, _) in parts if t == topic) for d, (_, parts) in got.items()}
    assert sorted(map(len, placed.values())) == [2, 2]
    (code1, parts1), (code2, parts2) = got[str(d1)], got[str(d2)]
    assert code1 == code2 == NONE
    sizes = {p: e["partition_size"] for (t, p, _), e in {**parts1, **parts2}.items() if t == topic}
    assert sizes[1] == b.broker.logs.get(topic, 1).size > 0 and sizes[0] == 0


@pytest.mark.parametrize("version", range(0, 3))
def test_alter_replica_log_dirs_moves_a_replica_with_its_data(two_dirs, version):
    b, d1, d2 = two_dirs
    topic = unique_topic("move")
    with b.client() as c:
        c.create_topic(topic, partitions=1)
        for i in range(50):
            assert c.produce(topic, 0, batch([b"%d" % i]))["error_code"] == NONE
        (home,) = where(c, topic, 0)
        other = str(d2) if home == str(d1) else str(d1)
        assert alter(c, {(topic, 0): home}, version) == {(topic, 0): NONE}  # no-op
        assert alter(c, {(topic, 0): other}, version) == {(topic, 0): NONE}
        wait_until(lambda: where(c, topic, 0) == [other])
        assert (topic, 0, True) not in describe(c)[other][1]
        assert c.produce(topic, 0, batch([b"after"]))["error_code"] == NONE
        data = c.fetch(topic, 0, 0)["records"]
    assert [v for _, v in fetched_values(data)] == [b"%d" % i for i in range(50)] + [b"after"]
    assert str(b.broker.logs.dir_of(b.broker.logs.get(topic, 0))) == other


def set_move_rate(broker, client, rate):
    """replica.alter.log.dirs.io.max.bytes.per.second as a dynamic broker config
    (IncrementalAlterConfigs on the BROKER resource, as kafka-configs sends it)."""
    body = client.request(
        INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [
                {
                    "resource_type": BROKER,
                    "resource_name": str(broker.broker_id),
                    "configs": [{"name": MOVE_RATE, "config_operation": 0, "value": str(rate)}],
                }
            ],
            "validate_only": False,
        },
    )
    assert [r["error_code"] for r in body["responses"]] == [NONE], body
    config = broker.broker.config
    wait_until(lambda: config.replica_alter_log_dirs_io_max_bytes_per_second == rate)


def test_a_throttled_move_shows_the_future_replica_until_it_is_done(two_dirs):
    b, d1, d2 = two_dirs
    topic = unique_topic("slow")
    with b.client() as c:
        set_move_rate(b, c, 100)
        c.create_topic(topic, partitions=1)
        for i in range(30):
            assert c.produce(topic, 0, batch([b"%d" % i]))["error_code"] == NONE
        (home,) = where(c, topic, 0)
        other = str(d2) if home == str(d1) else str(d1)
        assert alter(c, {(topic, 0): other}) == {(topic, 0): NONE}
        future = describe(c)[other][1][(topic, 0, True)]
        assert 0 < future["offset_lag"] <= 30
        assert describe(c)[home][1][(topic, 0, False)]["offset_lag"] == 0
        for i in range(30, 40):  # the current replica serves meanwhile
            assert c.produce(topic, 0, batch([b"%d" % i]))["error_code"] == NONE
        set_move_rate(b, c, (1 << 63) - 1)
        wait_until(lambda: where(c, topic, 0) == [other])
        data = c.fetch(topic, 0, 0)["records"]
    assert [v for _, v in fetched_values(data)] == [b"%d" % i for i in range(40)]


def test_alter_replica_log_dirs_errors(two_dirs, tmp_path):
    b, d1, _ = two_dirs
    topic = unique_topic("errs")
    with b.client() as c:
        c.create_topic(topic, partitions=1)
        wait_until(lambda: b.broker.logs.get(topic, 0))
        got = alter(
            c,
            {
                (topic, 0): tmp_path / "not-a-log-dir",
                (unique_topic("absent"), 0): d1,
                (topic, 7): d1,
            },
        )
    assert got == {
        (topic, 0): LOG_DIR_NOT_FOUND,
        (next(t for t, _ in got if t != topic), 0): UNKNOWN_TOPIC_OR_PARTITION,
        (topic, 7): UNKNOWN_TOPIC_OR_PARTITION,
    }


def test_a_failed_dir_takes_only_its_partitions_offline(two_dirs):
    b, d1, d2 = two_dirs
    topic = unique_topic("fail")
    with b.client() as c:
        c.create_topic(topic, partitions=4)
        wait_until(lambda: all(b.broker.logs.get(topic, p) for p in range(4)))
        for p in range(4):
            assert c.produce(topic, p, batch([b"before"]))["error_code"] == NONE
        lost = [p for p in range(4) if where(c, topic, p) == [str(d2)]]
        kept = [p for p in range(4) if p not in lost]
        assert len(lost) == 2
        shutil.rmtree(d2)
        d2.write_text("the disk is gone")  # the next checkpoint there fails
        wait_until(lambda: describe(c)[str(d2)][0] == KAFKA_STORAGE_ERROR)
        assert describe(c)[str(d2)][1] == {}
        for p in lost:
            assert c.produce(topic, p, batch([b"x"]))["error_code"] == KAFKA_STORAGE_ERROR
            assert c.fetch(topic, p, 0)["error_code"] == KAFKA_STORAGE_ERROR
            assert alter(c, {(topic, p): d1}) == {(topic, p): KAFKA_STORAGE_ERROR}
        for p in kept:
            assert c.produce(topic, p, batch([b"after"]))["error_code"] == NONE
            data = c.fetch(topic, p, 0)["records"]
            assert [v for _, v in fetched_values(data)] == [b"before", b"after"]
        assert alter(c, {(topic, kept[0]): d2}) == {(topic, kept[0]): KAFKA_STORAGE_ERROR}
        # a new topic goes to the dir still online
        other = unique_topic("new")
        c.create_topic(other, partitions=2)
        wait_until(lambda: all(b.broker.logs.get(other, p) for p in range(2)))
        assert where(c, other, 0) == where(c, other, 1) == [str(d1)]


def test_a_dir_named_before_the_partition_exists_is_where_it_is_created(two_dirs):
    """As Kafka's maybeUpdatePreferredLogDir: the dir is remembered even though the answer
    is an error, and the replica created later goes there (what kafka-reassign-partitions
    relies on when it names log dirs for replicas it is adding)."""
    b, d1, d2 = two_dirs
    topic = unique_topic("later")
    with b.client() as c:
        assert alter(c, {(topic, 0): d2}) == {(topic, 0): UNKNOWN_TOPIC_OR_PARTITION}
        c.create_topic(topic, partitions=2)
        wait_until(lambda: all(b.broker.logs.get(topic, p) for p in range(2)))
        assert where(c, topic, 0) == [str(d2)]  # (both dirs were empty: d1 otherwise)
        assert where(c, topic, 1) == [str(d1)]


def test_meta_properties_name_the_broker_and_cluster_in_every_dir(two_dirs):
    """Kafka's meta.properties in each log dir; a dir of another broker stops the start."""
    b, d1, d2 = two_dirs
    cluster_id = b.broker.cluster.cluster_id
    for d in (d1, d2):
        assert meta_properties.read(d) == {
            "cluster.id": cluster_id,
            "version": "0",
            "broker.id": "0",
        }
    b.stop()
    b.settings["broker.id"] = "7"
    with pytest.raises(meta_properties.MetaPropertiesError, match="broker.id 7 doesn't match"):
        b.start()
    b.settings["broker.id"] = "0"
    b.start()  # the right broker starts again


def test_a_dir_failed_while_the_broker_was_down_is_not_replaced_by_empty_logs(two_dirs):
    """Kafka's getOrCreateLog(isNew = false) with an offline dir: a replica this broker held
    at start whose log is in no online dir stays offline (an empty log in its place could
    lead and lose its records); partitions created afterwards are placed as usual."""
    b, d1, d2 = two_dirs
    topic = unique_topic("down")
    with b.client() as c:
        c.create_topic(topic, partitions=2)
        wait_until(lambda: all(b.broker.logs.get(topic, p) for p in range(2)))
        for p in range(2):
            assert c.produce(topic, p, batch([b"kept"]))["error_code"] == NONE
        (lost,) = [p for p in range(2) if where(c, topic, p) == [str(d2)]]
    b.stop()
    fail(d2)
    b.start()
    with b.client() as c:
        assert describe(c)[str(d2)][0] == KAFKA_STORAGE_ERROR
        assert c.produce(topic, lost, batch([b"x"]))["error_code"] == KAFKA_STORAGE_ERROR
        assert b.broker.logs.get(topic, lost) is None
        assert not (d1 / f"{topic}-{lost}").exists()
        kept = 1 - lost
        assert [v for _, v in fetched_values(c.fetch(topic, kept, 0)["records"])] == [b"kept"]
        other = unique_topic("after")
        c.create_topic(other, partitions=1)
        wait_until(lambda: b.broker.logs.get(other, 0))
        assert c.produce(other, 0, batch([b"new"]))["error_code"] == NONE


@pytest.fixture
def full_disk_dirs(start_broker, tmp_path):
    """Two log dirs, the second on a 4 MiB tmpfs the test fills; checkpoints far apart, so
    only the failed write itself can take the dir offline."""
    from small_disk import SmallDisk, can_mount

    why = can_mount()
    if why:
        pytest.skip(why)
    d1 = tmp_path / "d1"
    disk = SmallDisk(tmp_path / "d2", size_mb=4).mount()
    try:
        b = start_broker(
            **{"log.dirs": f"{d1},{disk.path}", "log.flush.offset.checkpoint.interval.ms": 600000}
        )
        yield b, d1.absolute(), disk
    finally:
        disk.unmount()


def test_a_write_that_hits_a_full_disk_takes_its_dir_offline_at_once(full_disk_dirs):
    """Kafka's LogDirFailureChannel: the produce whose append gets ENOSPC answers
    KAFKA_STORAGE_ERROR and its dir is offline from that moment (not at the next checkpoint):
    the broker no longer leads the dir's partitions.  The failed append leaves no byte in the
    segment; after a restart with space freed, the partition has exactly what was
    acknowledged."""
    b, d1, disk = full_disk_dirs
    d2 = disk.path.absolute()
    topic = unique_topic("full")
    with b.client() as c:
        c.create_topic(topic, partitions=2)
        wait_until(lambda: all(b.broker.logs.get(topic, p) for p in range(2)))
        (lost,) = [p for p in range(2) if where(c, topic, p) == [str(d2)]]
        kept = 1 - lost
        for p in range(2):
            assert c.produce(topic, p, batch([b"before"]))["error_code"] == NONE
        segment = next((d2 / f"{topic}-{lost}").glob("*.log"))
        size_before = segment.stat().st_size
        disk.fill()
        big = batch([b"x" * 65536])  # more than the rest of a page: the write needs space
        assert c.produce(topic, lost, big)["error_code"] == KAFKA_STORAGE_ERROR
        assert describe(c)[str(d2)][0] == KAFKA_STORAGE_ERROR  # at once
        assert segment.stat().st_size == size_before  # nothing torn left behind
        assert c.produce(topic, lost, batch([b"y"]))["error_code"] == KAFKA_STORAGE_ERROR
        assert c.fetch(topic, lost, 0)["error_code"] == KAFKA_STORAGE_ERROR
        assert c.produce(topic, kept, batch([b"after"]))["error_code"] == NONE
    disk.free()
    b.stop()
    b.start()
    with b.client() as c:
        assert describe(c)[str(d2)][0] == NONE
        wait_until(lambda: c.fetch(topic, lost, 0)["error_code"] == NONE)
        assert [v for _, v in fetched_values(c.fetch(topic, lost, 0)["records"])] == [b"before"]
        assert c.produce(topic, lost, batch([b"again"]))["error_code"] == NONE
        got = [v for _, v in fetched_values(c.fetch(topic, kept, 0)["records"])]
        assert got == [b"before", b"after"]
