"""Spark's Kafka source with kafka.isolation.level=read_committed: a topic written by a
transactional producer (confluent-kafka) with committed and aborted transactions interleaved,
and one left open, is read by a batch query and a streaming query (availableNow into files);
both see exactly the committed records, and the streaming query sees the open transaction's
records once it commits.  A read_uncommitted batch read sees the aborted records too, so the
difference is real."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from spark_it.kafkadata import create_topic, unique_topic
from spark_it.pipelines import topic_to_files
from spark_it.sparkio import batch_read, read_parquet_dir

pytestmark = pytest.mark.timeout(300)


def _txn_producer(bootstrap: str) -> Producer:
    p = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": unique_topic("spark-tid"),
         "linger.ms": 5}
    )  # fmt: skip
    p.init_transactions(30)
    return p


def _values(recs) -> list[bytes]:
    return sorted(r.value for r in recs)


def test_read_committed_batch_and_stream(spark, spark_broker, tmp_path):
    bs = spark_broker.bootstrap
    topic = unique_topic("spark-eos")
    create_topic(bs, topic, 2)
    p = _txn_producer(bs)
    committed, aborted = [], []
    for t in range(6):
        p.begin_transaction()
        values = [f"t{t}-{i}".encode() for i in range(10)]
        for i, v in enumerate(values):
            p.produce(topic, value=v, partition=i % 2)
        if t % 2:
            p.flush(30)  # in the log, then aborted
            p.abort_transaction(30)
            aborted += values
        else:
            p.commit_transaction(30)
            committed += values
    # a transaction left open while Spark reads
    p.begin_transaction()
    pending = [f"open-{i}".encode() for i in range(10)]
    for i, v in enumerate(pending):
        p.produce(topic, value=v, partition=i % 2)
    p.flush(30)

    rc = {"kafka.isolation.level": "read_committed"}
    got = batch_read(spark, bs, subscribe=topic, **rc)
    print(f"\nbatch read_committed: {len(got)} of {len(committed)} committed")
    assert _values(got) == sorted(committed)
    everything = batch_read(spark, bs, subscribe=topic)
    print(f"batch read_uncommitted: {len(everything)}")
    assert _values(everything) == sorted(committed + aborted + pending)

    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    topic_to_files.run(spark, bs, topic, out, ckpt, extra_options=rc)
    streamed = read_parquet_dir(spark, out)
    print(f"stream read_committed, transaction open: {len(streamed)}")
    assert _values(streamed) == sorted(committed)

    p.commit_transaction(30)
    topic_to_files.run(spark, bs, topic, out, ckpt, extra_options=rc)
    streamed = read_parquet_dir(spark, out)
    print(f"stream read_committed, after the commit: {len(streamed)}")
    assert _values(streamed) == sorted(committed + pending)
