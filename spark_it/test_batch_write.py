"""df.write.format("kafka"): Spark's sink is an idempotent Java producer (Metadata,
InitProducerId, Produce). Each topic is read back with kafka-python and with Spark."""

from __future__ import annotations

import pytest

from spark_it.kafkadata import create_topic, read_all, unique_topic
from spark_it.session import kafka_options
from spark_it.sparkio import batch_read

pytestmark = pytest.mark.timeout(240)

N = 60


def _write(df, bootstrap, **options):
    df.write.format("kafka").options(**kafka_options(bootstrap, **options)).save()


def test_write_value_only(spark, spark_broker):
    bs = spark_broker.bootstrap
    t = unique_topic("spark-w-value")
    create_topic(bs, t, 3)
    df = spark.range(N).selectExpr("CAST(concat('v-', id) AS BINARY) AS value")
    _write(df, bs, topic=t)
    got = read_all(bs, t)
    print(
        f"\nvalue only: {len(got)} of {N} read back, partitions {sorted({r.partition for r in got})}"
    )
    assert sorted(r.value for r in got) == sorted(b"v-%d" % i for i in range(N))
    assert all(r.key is None and r.headers == [] for r in got)


def test_write_key_value(spark, spark_broker):
    bs = spark_broker.bootstrap
    t = unique_topic("spark-w-key")
    create_topic(bs, t, 3)
    df = spark.range(N).selectExpr(
        "CAST(concat('k-', id % 10) AS STRING) AS key", "CAST(concat('v-', id) AS STRING) AS value"
    )
    _write(df, bs, topic=t)
    got = read_all(bs, t)
    print(f"\nkey+value (string columns): {len(got)} of {N} read back")
    assert sorted((r.key, r.value) for r in got) == sorted(
        (b"k-%d" % (i % 10), b"v-%d" % i) for i in range(N)
    )
    # the default partitioner puts equal keys in one partition
    part_of_key: dict[bytes, set[int]] = {}
    for r in got:
        part_of_key.setdefault(r.key, set()).add(r.partition)
    assert all(len(p) == 1 for p in part_of_key.values()), part_of_key
    # and Spark reads back what it wrote
    again = batch_read(spark, bs, subscribe=t)
    print(f"spark read back: {len(again)}")
    assert sorted((r.key, r.value) for r in again) == sorted((r.key, r.value) for r in got)


def test_write_headers(spark, spark_broker):
    bs = spark_broker.bootstrap
    t = unique_topic("spark-w-headers")
    create_topic(bs, t, 2)
    df = spark.range(N).selectExpr(
        "CAST(concat('k-', id) AS BINARY) AS key",
        "CAST(concat('v-', id) AS BINARY) AS value",
        "array(named_struct('key', 'id', 'value', CAST(CAST(id AS STRING) AS BINARY)),"
        " named_struct('key', 'id', 'value', CAST('again' AS BINARY)),"
        " named_struct('key', 'nullvalue', 'value', CAST(NULL AS BINARY))) AS headers",
    )
    _write(df, bs, topic=t)
    got = read_all(bs, t)
    print(f"\nwith headers: {len(got)} of {N} read back")
    assert len(got) == N
    for r in got:
        i = int(r.key[2:])
        assert r.value == b"v-%d" % i
        assert r.headers == [("id", str(i).encode()), ("id", b"again"), ("nullvalue", None)]
    again = batch_read(spark, bs, subscribe=t, includeHeaders="true")
    print(f"spark read back with includeHeaders: {len(again)}")
    assert sorted((r.key, tuple(r.headers)) for r in again) == sorted(
        (r.key, tuple(r.headers)) for r in got
    )


def test_write_partition_and_topic_columns(spark, spark_broker):
    bs = spark_broker.bootstrap
    t1, t2 = unique_topic("spark-w-part"), unique_topic("spark-w-part")
    create_topic(bs, t1, 4)
    create_topic(bs, t2, 4)
    df = spark.range(N).selectExpr(
        f"IF(id % 2 = 0, '{t1}', '{t2}') AS topic",
        "CAST(id % 4 AS INT) AS partition",
        "CAST(concat('k-', id) AS BINARY) AS key",
        "CAST(concat('v-', id) AS BINARY) AS value",
    )
    _write(df, bs)  # topic from the column
    got = read_all(bs, t1) + read_all(bs, t2)
    print(f"\ntopic+partition columns: {len(got)} of {N} read back")
    assert len(got) == N
    for r in got:
        i = int(r.key[2:])
        assert r.topic == (t1 if i % 2 == 0 else t2)
        assert r.partition == i % 4, (i, r.partition)
    # the `topic` option overrides the column
    t3 = unique_topic("spark-w-part")
    create_topic(bs, t3, 4)
    _write(df, bs, topic=t3)
    got3 = read_all(bs, t3)
    print(f"topic option over the column: {len(got3)} of {N} in {t3}")
    assert len(got3) == N and all(r.partition == int(r.key[2:]) % 4 for r in got3)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_write_compressed_read_back(spark, spark_broker, codec):
    """The sink's producer compresses (kafka.compression.type); the broker stores the batches
    as sent and Spark's consumers decompress them on read."""
    bs = spark_broker.bootstrap
    t = unique_topic(f"spark-w-{codec}")
    create_topic(bs, t, 2)
    df = spark.range(200).selectExpr(
        "CAST(concat('k-', id) AS BINARY) AS key",
        "CAST(repeat(concat('value-', id, '-'), 20) AS BINARY) AS value",
    )
    _write(df, bs, topic=t, **{"kafka.compression.type": codec, "kafka.linger.ms": "20"})
    again = batch_read(spark, bs, subscribe=t)
    print(f"\n{codec}: {len(again)} of 200 read back by Spark")
    assert sorted((r.key, r.value) for r in again) == sorted(
        (b"k-%d" % i, (b"value-%d-" % i) * 20) for i in range(200)
    )
    assert len(read_all(bs, t)) == 200
