"""The same Spark paths against a broker whose metadata lives in ZooKeeper."""

from __future__ import annotations

import pytest

from spark_it.kafkadata import Rec, create_topic, produce, read_all, unique_topic
from spark_it.pipelines import topic_to_files
from spark_it.session import kafka_options
from spark_it.sparkio import batch_read, comparable, read_parquet_dir

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("backend", ["zookeeper"])
def test_read_write_stream_on_zookeeper(spark, start_broker, backend, tmp_path):
    broker = start_broker()
    assert broker.backend == "zookeeper"
    bs = broker.bootstrap
    src, dst = unique_topic("spark-zk"), unique_topic("spark-zk-out")
    create_topic(bs, src, 3)
    create_topic(bs, dst, 2)
    sent = produce(
        bs, src, [Rec(b"k%d" % i, b"v%d" % i, i % 3, headers=[("i", b"%d" % i)]) for i in range(30)]
    )

    got = batch_read(spark, bs, subscribe=src, includeHeaders="true")
    print(f"\n[zookeeper] batch read: {len(got)} of {len(sent)}")
    assert comparable(got) == comparable(sent)

    df = spark.read.format("kafka").options(**kafka_options(bs, subscribe=src)).load()
    df.selectExpr("key", "value", "CAST(partition % 2 AS INT) AS partition").write.format(
        "kafka"
    ).options(**kafka_options(bs, topic=dst)).save()
    written = read_all(bs, dst)
    print(f"[zookeeper] batch write: {len(written)} of {len(sent)} in {dst}")
    assert sorted((r.key, r.value) for r in written) == sorted((r.key, r.value) for r in sent)

    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    topic_to_files.run(spark, bs, src, out, ckpt)
    more = produce(bs, src, [Rec(b"k%d" % i, b"v%d" % i, i % 3) for i in range(30, 40)])
    topic_to_files.run(spark, bs, src, out, ckpt)
    streamed = read_parquet_dir(spark, out)
    print(f"[zookeeper] stream with restart: {len(streamed)} of {len(sent) + len(more)}")
    assert comparable(streamed) == comparable(sent + more)
