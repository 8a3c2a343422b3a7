"""CSV / JSON-lines files -> Kafka topic (a batch `df.write.format("kafka")`).

A stand-in for Kafka Connect's file source: every row of the input becomes one record whose
value is the row as a JSON object (all columns, `to_json`) and whose key is one column of the
row (`--key-column`, cast to a string) or null. Equal keys land in the same partition
(Spark's sink uses the Java producer's default partitioner).

    python -m spark_it.pipelines.files_to_topic --bootstrap 127.0.0.1:9092 --topic orders \
        --input /data/orders.csv [--format csv|json] [--key-column id] [--infer-schema]

Unlike Connect's FileStreamSource this is one pass over what the files hold now (no tailing,
no stored file offsets): running it twice writes every row twice.
"""

from __future__ import annotations

import argparse

FORMATS = {".csv": "csv", ".json": "json", ".jsonl": "json", ".ndjson": "json"}


def detect_format(path: str) -> str:
    for ext, fmt in FORMATS.items():
        if path.lower().endswith(ext):
            return fmt
    raise ValueError(f"cannot tell the format of {path!r}: pass fmt='csv' or 'json'")


def read_files(
    spark,
    path: str,
    fmt: str | None = None,
    *,
    header: bool = True,
    infer_schema: bool = False,
    delimiter: str = ",",
):
    """The input as a DataFrame: CSV (RFC 4180 quoting, header row, strings unless
    infer_schema; an empty field is null) or JSON lines (one object per line, schema
    inferred)."""
    fmt = fmt or detect_format(path)
    if fmt == "csv":
        return (
            spark.read.option("header", str(header).lower())
            .option("inferSchema", str(infer_schema).lower())
            .option("sep", delimiter)
            .option("escape", '"')  # RFC 4180 "" inside quotes (Python's csv, spreadsheets)
            .option("mode", "FAILFAST")
            .csv(path)
        )
    if fmt == "json":
        return spark.read.option("mode", "FAILFAST").json(path)
    raise ValueError(f"unknown format {fmt!r} (csv or json)")


def to_records(df, key_column: str | None = None):
    """key (string or null) + value (the row as a JSON object)."""
    from pyspark.sql import functions as F

    if key_column is not None and key_column not in df.columns:
        raise ValueError(f"key column {key_column!r} not in {df.columns}")
    key = F.col(key_column).cast("string") if key_column else F.lit(None).cast("string")
    value = F.to_json(F.struct(*[F.col(c) for c in df.columns]))
    return df.select(key.alias("key"), value.alias("value"))


def run(
    spark,
    bootstrap: str,
    path: str,
    topic: str,
    *,
    fmt: str | None = None,
    key_column: str | None = None,
    header: bool = True,
    infer_schema: bool = False,
    delimiter: str = ",",
    extra_options: dict[str, str] | None = None,
) -> int:
    """Write every row of `path` (a file, directory or glob) to `topic`; returns the row count."""
    from spark_it.session import kafka_options

    df = read_files(
        spark, path, fmt, header=header, infer_schema=infer_schema, delimiter=delimiter
    ).cache()
    try:
        rows = df.count()
        opts = kafka_options(bootstrap, topic=topic)
        opts.update(extra_options or {})
        to_records(df, key_column).write.format("kafka").options(**opts).save()
        return rows
    finally:
        df.unpersist()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--topic", required=True)
    ap.add_argument("--input", required=True, help="a file, directory or glob")
    ap.add_argument("--format", choices=["csv", "json"], help="default: from the file name")
    ap.add_argument("--key-column", help="the column that becomes the record key")
    ap.add_argument("--no-header", action="store_true", help="CSV without a header row")
    ap.add_argument("--infer-schema", action="store_true", help="CSV: typed columns")
    ap.add_argument("--delimiter", default=",")
    args = ap.parse_args(argv)
    from spark_it.session import build_session

    spark = build_session("files_to_topic")
    rows = run(
        spark,
        args.bootstrap,
        args.input,
        args.topic,
        fmt=args.format,
        key_column=args.key_column,
        header=not args.no_header,
        infer_schema=args.infer_schema,
        delimiter=args.delimiter,
    )
    print(f"{rows} rows {args.input} -> {args.topic}")
    spark.stop()


if __name__ == "__main__":
    main()
