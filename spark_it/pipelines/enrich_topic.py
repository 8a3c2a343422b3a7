"""Kafka topic -> Kafka topic (Structured Streaming, checkpointed, availableNow).

Keeps key and partition, upper-cases the value, and adds headers naming where each record
came from (src-topic, src-partition, src-offset), so the sink topic can be checked for
exactly-once delivery.
"""

from __future__ import annotations

import argparse
import json


def run(
    spark,
    bootstrap: str,
    source: str,
    sink: str,
    checkpoint: str,
    *,
    keep_partition: bool = True,
    extra_options: dict[str, str] | None = None,
    timeout_s: float = 180,
) -> list[dict]:
    from pyspark.sql import functions as F

    from spark_it.session import kafka_options

    opts = kafka_options(bootstrap, subscribe=source, startingOffsets="earliest")
    opts["includeHeaders"] = "true"
    opts.update(extra_options or {})
    df = spark.readStream.format("kafka").options(**opts).load()
    out = df.select(
        F.col("key"),
        F.upper(F.col("value").cast("string")).cast("binary").alias("value"),
        F.array_union(
            F.coalesce(
                F.col("headers"),
                F.array().cast("array<struct<key:string,value:binary>>"),
            ),
            F.array(
                F.struct(
                    F.lit("src-topic").alias("key"), F.col("topic").cast("binary").alias("value")
                ),
                F.struct(
                    F.lit("src-partition").alias("key"),
                    F.col("partition").cast("string").cast("binary").alias("value"),
                ),
                F.struct(
                    F.lit("src-offset").alias("key"),
                    F.col("offset").cast("string").cast("binary").alias("value"),
                ),
            ),
        ).alias("headers"),
        *([F.col("partition")] if keep_partition else []),
    )
    query = (
        out.writeStream.format("kafka")
        .options(**kafka_options(bootstrap, topic=sink))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    try:
        if not query.awaitTermination(timeout_s):
            raise TimeoutError(f"enrich_topic({source}->{sink}) did not finish in {timeout_s}s")
        if query.exception() is not None:
            raise query.exception()
        return [json.loads(p.json) for p in query.recentProgress]
    finally:
        if query.isActive:
            query.stop()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--source", required=True)
    ap.add_argument("--sink", required=True)
    ap.add_argument("--checkpoint", required=True)
    args = ap.parse_args(argv)
    from spark_it.session import build_session

    spark = build_session("enrich_topic")
    progress = run(spark, args.bootstrap, args.source, args.sink, args.checkpoint)
    rows = sum(p["numInputRows"] for p in progress)
    print(f"{len(progress)} micro-batches, {rows} records {args.source} -> {args.sink}")
    spark.stop()


if __name__ == "__main__":
    main()
