"""Spark reads of a topic written by transactional producers (confluent-kafka).

The topic holds interleaved committed and aborted transactions (the aborted ones flushed
before the abort, so their records are in the log), then one transaction left open while
Spark reads. What a Spark user sees on Apache Kafka:

- Batch reads: the driver asks ListOffsets for "latest" with the consumer's isolation level,
  so with kafka.isolation.level=read_committed the end offset is the last stable offset (the
  open transaction's first offset); the executors' read_committed fetches drop aborted
  records and control records, and KafkaDataConsumer skips the offsets it never sees
  (SPARK-25005) without reporting data loss even with failOnDataLoss=true. So the result is
  exactly the committed records before the open transaction. read_uncommitted returns the
  aborted records too, and the open transaction's records (high watermark as end offset).
- Structured Streaming (availableNow, checkpointed): the same committed records; after the
  open transaction commits, the next run reads the rest (the formerly open transaction and a
  transaction committed after it) and nothing twice.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from spark_it.kafkadata import create_topic, unique_topic
from spark_it.pipelines import topic_to_files
from spark_it.sparkio import batch_read, read_parquet_dir

pytestmark = pytest.mark.timeout(400)

PARTITIONS = 2


class TxnProducer:
    """A confluent-kafka transactional producer that remembers where each record landed."""

    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": f"spark-txn-{uuid.uuid4().hex[:8]}",
                "transaction.timeout.ms": 600_000,
                "linger.ms": 5,
            }
        )
        self.p.init_transactions(30)
        self._acked: list[tuple[int, int, bytes, bytes]] = []

    def _on_delivery(self, err, msg) -> None:
        assert err is None, err
        self._acked.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    def txn(self, tag: str, n: int) -> list[tuple[int, int, bytes, bytes]]:
        """Begin a transaction, send n records over the partitions, flush (records in the
        log); returns [(partition, offset, key, value)]. The caller commits or aborts."""
        self._acked = []
        self.p.begin_transaction()
        for i in range(n):
            self.p.produce(
                self.topic,
                key=f"{tag}-k{i}".encode(),
                value=f"{tag}-v{i}".encode(),
                partition=i % PARTITIONS,
                on_delivery=self._on_delivery,
            )
        assert self.p.flush(30) == 0
        assert len(self._acked) == n, self._acked
        return list(self._acked)

    def commit(self) -> None:
        self.p.commit_transaction(30)

    def abort(self) -> None:
        self.p.abort_transaction(30)


def _fill(bootstrap: str, topic: str):
    """Interleaved committed/aborted transactions; returns (committed, aborted)."""
    prod = TxnProducer(bootstrap, topic)
    committed, aborted = [], []
    for i, (n, commit) in enumerate([(4, True), (3, False), (5, True), (4, False), (3, True)]):
        recs = prod.txn(f"t{i}", n)
        if commit:
            prod.commit()
            committed += recs
        else:
            prod.abort()
            aborted += recs
    return prod, committed, aborted


def _seen(recs) -> list[tuple]:
    return sorted((r.partition, r.offset, r.key, r.value) for r in recs)


def _rows(progress) -> int:
    return sum(p["numInputRows"] for p in progress)


def test_batch_read_committed_vs_uncommitted(spark, spark_broker):
    bs = spark_broker.bootstrap
    t = unique_topic("spark-txn-batch")
    create_topic(bs, t, PARTITIONS)
    prod, committed, aborted = _fill(bs, t)
    open_prod = TxnProducer(bs, t)
    pending = open_prod.txn("open", 4)  # left open while Spark reads
    try:
        got = batch_read(spark, bs, subscribe=t, **{"kafka.isolation.level": "read_committed"})
        print(
            f"\nread_committed: {len(got)} rows; committed {len(committed)}, "
            f"aborted {len(aborted)}, open {len(pending)}"
        )
        assert _seen(got) == sorted(committed)

        got = batch_read(spark, bs, subscribe=t, **{"kafka.isolation.level": "read_uncommitted"})
        print(f"read_uncommitted: {len(got)} rows")
        assert _seen(got) == sorted(committed + aborted + pending)

        open_prod.commit()
        got = batch_read(spark, bs, subscribe=t, **{"kafka.isolation.level": "read_committed"})
        print(f"read_committed after the open transaction commits: {len(got)} rows")
        assert _seen(got) == sorted(committed + pending)
    finally:
        prod.p.flush(5)
        open_prod.p.flush(5)


def test_stream_read_committed(spark, spark_broker, tmp_path):
    bs = spark_broker.bootstrap
    t = unique_topic("spark-txn-stream")
    create_topic(bs, t, PARTITIONS)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    opts = {"kafka.isolation.level": "read_committed"}

    prod, committed, aborted = _fill(bs, t)
    open_prod = TxnProducer(bs, t)
    pending = open_prod.txn("open", 4)
    # committed after the open transaction began: beyond the last stable offset until the
    # open one ends, so not visible to read_committed yet
    later = prod.txn("later", 4)
    prod.commit()

    p1 = topic_to_files.run(spark, bs, t, out, ckpt, extra_options=opts)
    got = read_parquet_dir(spark, out)
    print(
        f"\nrun 1 (one transaction open): {_rows(p1)} input rows, {len(got)} in the sink; "
        f"committed {len(committed)}, aborted {len(aborted)}, open {len(pending)}, "
        f"committed behind the open one {len(later)}"
    )
    assert _seen(got) == sorted(committed)

    open_prod.commit()
    p2 = topic_to_files.run(spark, bs, t, out, ckpt, extra_options=opts)
    got = read_parquet_dir(spark, out)
    print(f"run 2 (after the commit): {_rows(p2)} input rows, {len(got)} in the sink")
    assert _rows(p2) == len(pending) + len(later)
    assert _seen(got) == sorted(committed + pending + later)

    more_aborted = prod.txn("late-abort", 3)
    prod.abort()
    p3 = topic_to_files.run(spark, bs, t, out, ckpt, extra_options=opts)
    got = read_parquet_dir(spark, out)
    print(f"run 3 (one more aborted transaction): {_rows(p3)} input rows, {len(got)} in the sink")
    assert _rows(p3) == 0, more_aborted
    assert _seen(got) == sorted(committed + pending + later)
