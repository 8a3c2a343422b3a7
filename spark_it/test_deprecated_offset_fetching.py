"""spark.sql.streaming.kafka.useDeprecatedOffsetFetching=true: the driver fetches offsets with
a KafkaConsumer that subscribes through a consumer group (FindCoordinator, JoinGroup,
SyncGroup, Heartbeat, LeaveGroup) instead of the AdminClient."""

from __future__ import annotations

import json
import time

import pytest

from spark_it.kafkadata import Rec, create_topic, produce, unique_topic
from spark_it.pipelines import topic_to_files
from spark_it.sparkio import batch_read, comparable, idents, read_parquet_dir

pytestmark = pytest.mark.timeout(300)

CONF = "spark.sql.streaming.kafka.useDeprecatedOffsetFetching"


@pytest.fixture
def deprecated_fetching(spark):
    before = spark.conf.get(CONF, None)
    spark.conf.set(CONF, "true")
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(CONF)
        else:
            spark.conf.set(CONF, before)


def _recs(start, n, partitions, base):
    return [
        Rec(b"k%d" % i, b"v%d" % i, i % partitions, base + i * 1000)
        for i in range(start, start + n)
    ]


def test_batch_with_consumer_group_offsets(spark, spark_broker, deprecated_fetching):
    bs = spark_broker.bootstrap
    prefix = unique_topic("spark-dep")
    t = f"{prefix}-a"
    create_topic(bs, t, 3)
    base = int(time.time() * 1000) - 3_600_000
    sent = produce(bs, t, _recs(0, 30, 3, base))

    got = batch_read(spark, bs, subscribe=t)
    print(f"\n[{CONF}=true] subscribe: {len(got)} of {len(sent)}")
    assert comparable(got) == comparable(sent)

    got = batch_read(spark, bs, subscribePattern=f"{prefix}-.*")
    print(f"subscribePattern: {len(got)} of {len(sent)}")
    assert comparable(got) == comparable(sent)

    start = {t: {"0": 3, "1": -2, "2": 8}}
    got = batch_read(spark, bs, subscribe=t, startingOffsets=json.dumps(start))
    want = [
        r for r in sent if (r.partition == 0 and r.offset >= 3) or r.partition == 1 or r.offset >= 8
    ]
    print(f"startingOffsets {start}: {len(got)} of {len(want)}")
    assert comparable(got) == comparable(want)

    # record i has timestamp base + i*1000 and sits at offset i // 3 of partition i % 3
    got = batch_read(spark, bs, subscribe=t, startingTimestamp=str(base + 15_000))
    want = [r for r in sent if r.timestamp_ms >= base + 15_000]
    print(f"startingTimestamp: {len(got)} of {len(want)}")
    assert comparable(got) == comparable(want)


def test_stream_with_consumer_group_offsets(spark, spark_broker, deprecated_fetching, tmp_path):
    bs = spark_broker.bootstrap
    t = unique_topic("spark-dep-stream")
    create_topic(bs, t, 2)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    base = int(time.time() * 1000) - 60_000
    sent = produce(bs, t, _recs(0, 20, 2, base))
    p1 = topic_to_files.run(spark, bs, t, out, ckpt, max_offsets_per_trigger=8)
    sent += produce(bs, t, _recs(20, 9, 2, base))
    p2 = topic_to_files.run(spark, bs, t, out, ckpt)
    got = read_parquet_dir(spark, out)
    print(
        f"\n[{CONF}=true] stream: run 1 batches {[p['numInputRows'] for p in p1]}, "
        f"run 2 batches {[p['numInputRows'] for p in p2]}, {len(got)} rows of {len(sent)}"
    )
    assert len(got) == len(set(idents(got)))
    assert comparable(got) == comparable(sent)
