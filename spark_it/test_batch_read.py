"""Batch reads through Spark's Kafka source (driver: AdminClient; executors: assign/seek/poll)."""

from __future__ import annotations

import json
import time

import pytest

from spark_it.kafkadata import Rec, create_topic, produce, unique_topic
from spark_it.sparkio import batch_read, comparable, idents

pytestmark = pytest.mark.timeout(240)


def _fill(bootstrap, topic, partitions, per_partition, base_ts=None, prefix=b"v"):
    base_ts = base_ts or (int(time.time() * 1000) - 3_600_000)
    recs = [
        Rec(
            b"k%d-%d" % (p, i),
            prefix + b"%d-%d" % (p, i),
            partition=p,
            timestamp_ms=base_ts + i * 1000,
        )
        for i in range(per_partition)
        for p in range(partitions)
    ]
    return produce(bootstrap, topic, recs)


def test_subscribe_assign_pattern(spark, spark_broker):
    bs = spark_broker.bootstrap
    prefix = unique_topic("spark-pat")
    a, b, other = f"{prefix}-a", f"{prefix}-b", unique_topic("spark-other")
    create_topic(bs, a, 3)
    create_topic(bs, b, 2)
    create_topic(bs, other, 1)
    sent_a = _fill(bs, a, 3, 10)
    sent_b = _fill(bs, b, 2, 10)
    _fill(bs, other, 1, 5)

    got = batch_read(spark, bs, subscribe=a)
    print(f"\nsubscribe={a}: {len(got)} of {len(sent_a)}")
    assert comparable(got) == comparable(sent_a)

    got = batch_read(spark, bs, subscribe=f"{a},{b}")
    print(f"subscribe=a,b: {len(got)} of {len(sent_a) + len(sent_b)}")
    assert comparable(got) == comparable(sent_a + sent_b)

    got = batch_read(spark, bs, assign=json.dumps({a: [0, 2], b: [1]}))
    want = [r for r in sent_a if r.partition in (0, 2)] + [r for r in sent_b if r.partition == 1]
    print(f"assign a:[0,2] b:[1]: {len(got)} of {len(want)}")
    assert comparable(got) == comparable(want)

    got = batch_read(spark, bs, subscribePattern=f"{prefix}-.*")
    print(f"subscribePattern={prefix}-.*: {len(got)} of {len(sent_a) + len(sent_b)}")
    assert comparable(got) == comparable(sent_a + sent_b)


def test_starting_ending_offsets(spark, spark_broker):
    bs = spark_broker.bootstrap
    t = unique_topic("spark-offsets")
    create_topic(bs, t, 3)
    sent = _fill(bs, t, 3, 10)

    got = batch_read(spark, bs, subscribe=t, startingOffsets="earliest", endingOffsets="latest")
    print(f"\nearliest..latest: {len(got)} of {len(sent)}")
    assert comparable(got) == comparable(sent)

    start = {t: {"0": 2, "1": -2, "2": 7}}  # -2 = earliest
    end = {t: {"0": 5, "1": -1, "2": 9}}  # -1 = latest
    got = batch_read(
        spark, bs, subscribe=t, startingOffsets=json.dumps(start), endingOffsets=json.dumps(end)
    )
    want = [
        r
        for r in sent
        if (r.partition == 0 and 2 <= r.offset < 5)
        or r.partition == 1
        or (r.partition == 2 and 7 <= r.offset < 9)
    ]
    print(f"per-partition JSON {start} .. {end}: {len(got)} of {len(want)}")
    assert comparable(got) == comparable(want)

    # empty range: start == end
    same = json.dumps({t: {"0": 4, "1": 4, "2": 4}})
    got = batch_read(spark, bs, subscribe=t, startingOffsets=same, endingOffsets=same)
    print(f"start == end: {len(got)} records")
    assert got == []


def test_starting_offsets_by_timestamp(spark, spark_broker):
    bs = spark_broker.bootstrap
    t = unique_topic("spark-ts")
    create_topic(bs, t, 2)
    base = int(time.time() * 1000) - 3_600_000
    sent = _fill(bs, t, 2, 10, base_ts=base)  # offset i has timestamp base + i*1000

    start = {t: {"0": base + 3000, "1": base + 7500}}
    got = batch_read(spark, bs, subscribe=t, startingOffsetsByTimestamp=json.dumps(start))
    want = [
        r
        for r in sent
        if (r.partition == 0 and r.offset >= 3) or (r.partition == 1 and r.offset >= 8)
    ]
    print(f"\nstartingOffsetsByTimestamp {start}: {len(got)} of {len(want)}")
    assert comparable(got) == comparable(want)

    end = {t: {"0": base + 6000, "1": base + 8000}}
    got = batch_read(
        spark,
        bs,
        subscribe=t,
        startingOffsetsByTimestamp=json.dumps(start),
        endingOffsetsByTimestamp=json.dumps(end),
    )
    want = [r for r in sent if (r.partition == 0 and 3 <= r.offset < 6)]
    print(f"... endingOffsetsByTimestamp {end}: {len(got)} of {len(want)}")
    assert comparable(got) == comparable(want)

    got = batch_read(spark, bs, subscribe=t, startingTimestamp=str(base + 5000))
    want = [r for r in sent if r.offset >= 5]
    print(f"startingTimestamp=base+5000: {len(got)} of {len(want)}")
    assert comparable(got) == comparable(want)


def _varied_records(n_partitions: int, n: int) -> list[Rec]:
    base = int(time.time() * 1000) - 600_000
    out = []
    for i in range(n):
        key = None if i % 7 == 0 else b"key-%d" % i
        value = {0: b"", 1: None}.get(i % 11, b"value-%d-" % i + bytes(range(i % 256)))
        if key is None and value is None:
            value = b"tombstones need a key"
        headers = [
            [],
            [("h1", b"one")],
            [("h1", b"a"), ("h2", b"b"), ("h1", b"dup")],
            [("empty", b""), ("binary", bytes(range(256)))],
        ][i % 4]
        out.append(Rec(key, value, i % n_partitions, base + i * 37, headers))
    return out


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_every_record_exactly_once_all_columns(spark, spark_broker, isolation):
    bs = spark_broker.bootstrap
    t = unique_topic("spark-cols")
    create_topic(bs, t, 3)
    sent = produce(bs, t, _varied_records(3, 90))

    got = batch_read(
        spark, bs, subscribe=t, includeHeaders="true", **{"kafka.isolation.level": isolation}
    )
    print(
        f"\nisolation={isolation}: {len(got)} rows, {len(set(idents(got)))} distinct "
        f"(topic, partition, offset), {len(sent)} sent"
    )
    assert len(got) == len(set(idents(got))), "duplicates"
    assert comparable(got) == comparable(sent)
    assert {r.timestamp_type for r in got} == {0}  # CreateTime
    by_partition = {}
    for r in got:
        by_partition.setdefault(r.partition, []).append(r.offset)
    for p, offs in by_partition.items():
        assert offs == list(range(len(offs))), f"partition {p}: offsets not dense from 0"
    print(f"per partition: { {p: len(o) for p, o in sorted(by_partition.items())} }")


def test_small_fetches_many_rounds(spark, spark_broker):
    """kafka.max.partition.fetch.bytes far below the data: executors need many Fetch rounds
    per partition, each continuing where the last one stopped."""
    bs = spark_broker.bootstrap
    t = unique_topic("spark-small-fetch")
    create_topic(bs, t, 2)
    sent = produce(bs, t, [Rec(b"k%d" % i, bytes([i % 251]) * 1000, i % 2) for i in range(400)])
    got = batch_read(
        spark,
        bs,
        subscribe=t,
        **{"kafka.max.partition.fetch.bytes": "4096", "kafka.fetch.max.bytes": "8192"},
    )
    print(f"\nmax.partition.fetch.bytes=4096: {len(got)} of {len(sent)} (400 KB)")
    assert len(got) == len(set(idents(got)))
    assert comparable(got) == comparable(sent)
