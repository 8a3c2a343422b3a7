"""Spark-side helpers for the tests: batch reads/writes through the Kafka connector."""

from __future__ import annotations

import glob
import os

from spark_it.kafkadata import Rec
from spark_it.session import kafka_options


def _hdrs(headers) -> list[tuple[str, bytes | None]]:
    return [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in headers or []]


def _b(v) -> bytes | None:
    return None if v is None else bytes(v)


def rows_to_recs(rows) -> list[Rec]:
    out = []
    for r in rows:
        d = r.asDict(recursive=True)
        rec = Rec(
            _b(d["key"]),
            _b(d["value"]),
            d["partition"],
            d["ts"],
            _hdrs(d.get("headers")),
            d["offset"],
            d["topic"],
            d["timestampType"],
        )
        out.append(rec)
    return sorted(out, key=lambda r: (r.topic, r.partition, r.offset))


SELECT = [
    "key",
    "value",
    "topic",
    "partition",
    "offset",
    "unix_millis(timestamp) AS ts",
    "timestampType",
]


def batch_read(spark, bootstrap: str, **options) -> list[Rec]:
    """spark.read.format("kafka") with these options; records sorted by (topic, partition, offset)."""
    opts = kafka_options(bootstrap, **options)
    df = spark.read.format("kafka").options(**opts).load()
    cols = SELECT + (["headers"] if opts.get("includeHeaders") == "true" else [])
    return rows_to_recs(df.selectExpr(*cols).collect())


def read_parquet_dir(spark, path: str) -> list[Rec]:
    """What topic_to_files wrote (only committed files: the sink's _spark_metadata log)."""
    if not glob.glob(os.path.join(path, "*.parquet")):
        return []
    meta = os.path.join(path, "_spark_metadata")
    if os.path.isdir(meta) and not glob.glob(os.path.join(meta, "[0-9]*")):
        return []  # a running query's first batch is being written, none committed yet
    df = spark.read.parquet(path)
    cols = SELECT + (["headers"] if "headers" in df.columns else [])
    return rows_to_recs(df.selectExpr(*cols).collect())


def idents(recs) -> list[tuple]:
    return [(r.topic, r.partition, r.offset) for r in recs]


def comparable(recs) -> list[tuple]:
    """Everything a record carries, for exact comparisons."""
    return sorted(
        (r.topic, r.partition, r.offset, r.key, r.value, r.timestamp_ms, tuple(r.headers))
        for r in recs
    )
