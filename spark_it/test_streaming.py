"""Structured Streaming: readStream with a checkpoint and trigger(availableNow=True) into a
file sink (stop, produce more, restart: nothing lost, nothing twice), maxOffsetsPerTrigger,
and writeStream.format("kafka")."""

from __future__ import annotations

import time

import pytest

from spark_it.kafkadata import Rec, create_topic, produce, read_all, unique_topic
from spark_it.pipelines import enrich_topic, topic_to_files
from spark_it.sparkio import comparable, idents, read_parquet_dir

pytestmark = pytest.mark.timeout(300)


def _records(n: int, partitions: int, start: int = 0) -> list[Rec]:
    base = int(time.time() * 1000) - 60_000
    return [
        Rec(b"k%d" % i, b"v%d" % i, i % partitions, base + i, [("n", str(i).encode())])
        for i in range(start, start + n)
    ]


def _rows(progress) -> list[int]:
    return [p["numInputRows"] for p in progress]


def test_available_now_restart_no_loss_no_duplicates(spark, spark_broker, tmp_path):
    bs = spark_broker.bootstrap
    t = unique_topic("spark-stream")
    create_topic(bs, t, 2)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

    sent = produce(bs, t, _records(40, 2))
    p1 = topic_to_files.run(spark, bs, t, out, ckpt)
    got = read_parquet_dir(spark, out)
    print(f"\nrun 1: batches {_rows(p1)}, {len(got)} rows in the sink of {len(sent)} sent")
    assert comparable(got) == comparable(sent)

    sent += produce(bs, t, _records(25, 2, start=40))
    p2 = topic_to_files.run(spark, bs, t, out, ckpt)
    got = read_parquet_dir(spark, out)
    print(f"run 2 (restart): batches {_rows(p2)}, {len(got)} rows of {len(sent)} sent")
    assert sum(_rows(p2)) == 25
    assert len(got) == len(set(idents(got))), "duplicates after restart"
    assert comparable(got) == comparable(sent)

    p3 = topic_to_files.run(spark, bs, t, out, ckpt)
    got = read_parquet_dir(spark, out)
    print(f"run 3 (no new data): batches {_rows(p3)}, {len(got)} rows")
    assert sum(_rows(p3)) == 0 and len(got) == len(sent)


def test_starting_offsets_latest_stream(spark, spark_broker, tmp_path):
    bs = spark_broker.bootstrap
    t = unique_topic("spark-stream-latest")
    create_topic(bs, t, 2)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    produce(bs, t, _records(10, 2))
    p1 = topic_to_files.run(spark, bs, t, out, ckpt, starting_offsets="latest")
    print(f"\nstartingOffsets=latest, first run: batches {_rows(p1)}")
    assert sum(_rows(p1)) == 0
    later = produce(bs, t, _records(7, 2, start=10))
    p2 = topic_to_files.run(spark, bs, t, out, ckpt, starting_offsets="latest")
    got = read_parquet_dir(spark, out)
    print(f"second run: batches {_rows(p2)}, {len(got)} rows (want the 7 produced after run 1)")
    assert comparable(got) == comparable(later)


def test_max_offsets_per_trigger(spark, spark_broker, tmp_path):
    bs = spark_broker.bootstrap
    t = unique_topic("spark-stream-max")
    create_topic(bs, t, 2)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    sent = produce(bs, t, _records(50, 2))
    progress = topic_to_files.run(spark, bs, t, out, ckpt, max_offsets_per_trigger=12)
    rows = [n for n in _rows(progress) if n]
    got = read_parquet_dir(spark, out)
    print(f"\nmaxOffsetsPerTrigger=12: batches {rows}, {len(got)} rows of {len(sent)}")
    assert all(n <= 12 for n in rows), rows
    assert len(rows) >= 5, rows  # ceil(50 / 12)
    assert comparable(got) == comparable(sent)


def test_write_stream_to_kafka(spark, spark_broker, tmp_path):
    bs = spark_broker.bootstrap
    src, dst = unique_topic("spark-src"), unique_topic("spark-dst")
    create_topic(bs, src, 3)
    create_topic(bs, dst, 3)
    ckpt = str(tmp_path / "ckpt")

    sent = produce(bs, src, _records(30, 3))
    p1 = enrich_topic.run(spark, bs, src, dst, ckpt)
    got = read_all(bs, dst)
    print(f"\nkafka -> kafka run 1: batches {_rows(p1)}, {len(got)} in the sink of {len(sent)}")

    sent += produce(bs, src, _records(12, 3, start=30))
    p2 = enrich_topic.run(spark, bs, src, dst, ckpt)
    got = read_all(bs, dst)
    print(f"run 2 (restart): batches {_rows(p2)}, {len(got)} in the sink of {len(sent)}")

    def origin(r):
        h = dict(r.headers)
        return (h["src-topic"].decode(), int(h["src-partition"]), int(h["src-offset"]))

    origins = [origin(r) for r in got]
    assert len(origins) == len(set(origins)), "duplicates in the sink"
    assert sorted(origins) == sorted(idents(sent))
    by_origin = {origin(r): r for r in got}
    for s in sent:
        r = by_origin[s.ident()]
        assert (r.key, r.value, r.partition) == (s.key, s.value.upper(), s.partition)
        assert r.headers[0] == ("n", s.headers[0][1])
