"""Kafka topic -> Parquet files (Structured Streaming, checkpointed, availableNow).

Every Kafka column is kept (key, value, topic, partition, offset, timestamp, timestampType,
headers), so a reader can check exactly-once delivery by (topic, partition, offset).
"""

from __future__ import annotations

import argparse
import json


def start(
    spark,
    bootstrap: str,
    topic: str,
    out_dir: str,
    checkpoint: str,
    *,
    max_offsets_per_trigger: int | None = None,
    starting_offsets: str = "earliest",
    fail_on_data_loss: bool = True,
    extra_options: dict[str, str] | None = None,
    trigger: dict | None = None,
):
    """Start the query and return its StreamingQuery (trigger: DataStreamWriter.trigger
    keywords, default availableNow=True; e.g. {"processingTime": "1 second"})."""
    from spark_it.session import kafka_options

    opts = kafka_options(
        bootstrap,
        subscribe=topic,
        startingOffsets=starting_offsets,
        includeHeaders="true",
        failOnDataLoss=str(fail_on_data_loss).lower(),
    )
    if max_offsets_per_trigger is not None:
        opts["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
    opts.update(extra_options or {})
    df = spark.readStream.format("kafka").options(**opts).load()
    return (
        df.writeStream.format("parquet")
        .option("path", out_dir)
        .option("checkpointLocation", checkpoint)
        .trigger(**(trigger or {"availableNow": True}))
        .start()
    )


def run(
    spark,
    bootstrap: str,
    topic: str,
    out_dir: str,
    checkpoint: str,
    *,
    timeout_s: float = 180,
    **kwargs,
) -> list[dict]:
    """One availableNow pass; returns the query's progress reports (one per micro-batch).
    kwargs: start()'s options (max_offsets_per_trigger, starting_offsets, ...)."""
    query = start(spark, bootstrap, topic, out_dir, checkpoint, **kwargs)
    try:
        if not query.awaitTermination(timeout_s):
            raise TimeoutError(f"topic_to_files({topic}) did not finish within {timeout_s}s")
        if query.exception() is not None:
            raise query.exception()
        return [json.loads(p.json) for p in query.recentProgress]
    finally:
        if query.isActive:
            query.stop()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--topic", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--max-offsets-per-trigger", type=int)
    args = ap.parse_args(argv)
    from spark_it.session import build_session

    spark = build_session("topic_to_files")
    progress = run(
        spark,
        args.bootstrap,
        args.topic,
        args.out,
        args.checkpoint,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
    )
    rows = sum(p["numInputRows"] for p in progress)
    print(f"{len(progress)} micro-batches, {rows} records -> {args.out}")
    spark.stop()


if __name__ == "__main__":
    main()
