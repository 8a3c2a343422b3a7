"""The file -> topic loader (spark_it/pipelines/files_to_topic.py): a generated CSV file and
a JSON-lines file go into one topic, keyed by their `id` column; the topic is read back with
Spark and with kafka-python and must hold every row exactly once (key, JSON value)."""

from __future__ import annotations

import csv
import json

import pytest

from spark_it.kafkadata import create_topic, read_all, unique_topic
from spark_it.pipelines import files_to_topic
from spark_it.sparkio import batch_read

pytestmark = pytest.mark.timeout(240)

N_CSV = 45
N_JSON = 35


def _write_csv(path) -> list[dict]:
    """Rows with a quoted comma, a quote, an empty field (-> null, left out of the JSON)."""
    rows = []
    for i in range(N_CSV):
        rows.append(
            {
                "id": f"c-{i}",
                "name": f'item {i}, "{chr(97 + i % 26)}"',
                "amount": i * 0.25,
                "note": "" if i % 7 == 0 else f"n{i}",
            }
        )
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["id", "name", "amount", "note"])
        w.writeheader()
        w.writerows(rows)
    return [{k: v for k, v in r.items() if v != ""} for r in rows]


def _write_json(path) -> list[dict]:
    rows = []
    for i in range(N_JSON):
        r = {"id": f"j-{i}", "qty": i, "tags": [f"t{i % 3}", "x"], "geo": {"lat": i, "lon": -i}}
        if i % 5 == 0:
            del r["tags"]  # a missing field is null in Spark's row, left out by to_json
        rows.append(r)
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return rows


def _canon(key: bytes | None, value: bytes) -> tuple:
    return (
        key.decode() if key is not None else None,
        json.dumps(json.loads(value), sort_keys=True),
    )


def test_load_csv_and_json_files_into_topic(spark, spark_broker, tmp_path):
    bs = spark_broker.bootstrap
    t = unique_topic("spark-files")
    create_topic(bs, t, 3)
    csv_path, json_path = tmp_path / "orders.csv", tmp_path / "events.jsonl"
    want_csv, want_json = _write_csv(csv_path), _write_json(json_path)

    n_csv = files_to_topic.run(spark, bs, str(csv_path), t, key_column="id", infer_schema=True)
    n_json = files_to_topic.run(spark, bs, str(json_path), t, key_column="id")
    print(f"\nloaded: csv {n_csv} rows, json {n_json} rows -> {t}")
    assert (n_csv, n_json) == (N_CSV, N_JSON)

    want = sorted(_canon(r["id"].encode(), json.dumps(r).encode()) for r in want_csv + want_json)

    got = batch_read(spark, bs, subscribe=t)
    got_keys = sorted(_canon(r.key, r.value) for r in got)
    print(f"spark read back: {len(got)} records of {len(want)} rows")
    assert got_keys == want  # every row exactly once, value = the row as JSON

    again = read_all(bs, t)
    print(
        f"kafka-python read back: {len(again)} records, per partition "
        f"{[sum(1 for r in again if r.partition == p) for p in range(3)]}"
    )
    assert sorted(_canon(r.key, r.value) for r in again) == want
    part_of_key: dict[bytes, set[int]] = {}
    for r in again:
        part_of_key.setdefault(r.key, set()).add(r.partition)
    assert all(len(p) == 1 for p in part_of_key.values())
    assert len({r.partition for r in again}) > 1  # keyed records spread over the partitions


def test_no_key_column_and_errors(spark, spark_broker, tmp_path):
    bs = spark_broker.bootstrap
    t = unique_topic("spark-files-nokey")
    create_topic(bs, t, 1)
    path = tmp_path / "plain.csv"
    path.write_text("a,b\n1,x\n2,y\n")
    assert files_to_topic.run(spark, bs, str(path), t) == 2
    got = read_all(bs, t)
    print(f"\nno key column: {[(r.key, r.value) for r in got]}")
    assert [(r.key, json.loads(r.value)) for r in got] == [
        (None, {"a": "1", "b": "x"}),
        (None, {"a": "2", "b": "y"}),
    ]
    with pytest.raises(ValueError, match="key column"):
        files_to_topic.run(spark, bs, str(path), t, key_column="nope")
    with pytest.raises(ValueError, match="format"):
        files_to_topic.run(spark, bs, str(tmp_path / "data.txt"), t)
