"""failOnDataLoss: retention deletes records a checkpointed query has not read yet.

A broker of its own with tiny segments and byte-based retention (whole segments go, as in
Kafka). failOnDataLoss=true must fail the restarted query; failOnDataLoss=false must skip the
lost range and deliver everything still in the log, exactly once.
"""

from __future__ import annotations

import re
import time

import pytest

from spark_it.kafkadata import Rec, create_topic, end_offsets, produce, unique_topic
from spark_it.pipelines import topic_to_files
from spark_it.sparkio import comparable, idents, read_parquet_dir

pytestmark = pytest.mark.timeout(300)

RETENTION = {
    "log.segment.bytes": 2048,
    "log.retention.bytes": 4096,
    "log.retention.check.interval.ms": 300,
}


def _recs(start: int, n: int) -> list[Rec]:
    return [Rec(b"k%d" % i, b"v%d-" % i + b"x" * 300, 0) for i in range(start, start + n)]


def _stable_log_start(bs: str, topic: str, timeout: float = 30.0) -> tuple[int, int]:
    """Wait until retention has run and the log start offset stops moving."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        now = end_offsets(bs, topic, 1)[0]
        if now == last:
            return now
        last = now
        time.sleep(1.0)
    raise TimeoutError(f"log start of {topic} still moving: {last}")


def test_fail_on_data_loss(spark, start_broker, tmp_path):
    broker = start_broker(**RETENTION)
    bs = broker.bootstrap
    t = unique_topic("spark-loss")
    create_topic(bs, t, 1)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

    first = produce(bs, t, _recs(0, 5), batch_per_record=True)
    p1 = topic_to_files.run(spark, bs, t, out, ckpt)
    print(
        f"\nrun 1: {sum(p['numInputRows'] for p in p1)} records read, log {end_offsets(bs, t, 1)}"
    )
    assert comparable(read_parquet_dir(spark, out)) == comparable(first)

    rest = produce(bs, t, _recs(5, 40), batch_per_record=True)
    log_start, log_end = _stable_log_start(bs, t)
    print(f"after 40 more records and retention: log start {log_start}, end {log_end}")
    assert log_start > 5, "retention did not delete the unread records; the test needs it"

    with pytest.raises(Exception) as info:  # noqa: B017 (StreamingQueryException or Py4J)
        topic_to_files.run(spark, bs, t, out, ckpt, fail_on_data_loss=True)
    text = str(info.value)
    print(f"failOnDataLoss=true: {type(info.value).__name__}: {text[:400]}")
    assert re.search(r"data may have been lost|failOnDataLoss|data loss", text, re.I), text

    p3 = topic_to_files.run(spark, bs, t, out, ckpt, fail_on_data_loss=False)
    got = read_parquet_dir(spark, out)
    want = first + [r for r in rest if r.offset >= log_start]
    print(
        f"failOnDataLoss=false: {sum(p['numInputRows'] for p in p3)} records read now, "
        f"{len(got)} in the sink, want {len(want)} (offsets 0-4 and {log_start}-{log_end - 1})"
    )
    assert len(got) == len(set(idents(got))), "duplicates"
    assert comparable(got) == comparable(want)
