"""Spark's format("kafka") batch read of a compacted, cleaned topic (issue 11): exactly the
latest value of each live key, in offset order, with the cleaner's offset gaps, under the
default failOnDataLoss=true (a gap is not data loss: the offsets are still in the log's
range); a read whose starting and ending offsets fall inside gaps returns what lies between."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest

from compat_tests.compacted import build_cleaned_topic
from spark_it.kafkadata import unique_topic
from spark_it.sparkio import batch_read

pytestmark = pytest.mark.timeout(300)


def test_batch_read_of_cleaned_topic(spark, start_broker):
    broker = start_broker(**{"log.cleaner.backoff.ms": 100})
    topic = build_cleaned_topic(broker.bootstrap, unique_topic("spark-compact"))

    got = batch_read(spark, broker.bootstrap, subscribe=topic.name)
    assert [(r.offset, r.key, r.value) for r in got] == topic.records
    assert {r.partition for r in got} == {0}

    # start and end inside gaps (offsets the cleaner removed)
    offsets = [o for o, _, _ in topic.records]
    gaps = [o + 1 for o, nxt in pairwise(offsets) if nxt > o + 1]
    start, end = gaps[2], gaps[-3]
    assert start not in offsets and end not in offsets
    got = batch_read(
        spark,
        broker.bootstrap,
        subscribe=topic.name,
        startingOffsets=json.dumps({topic.name: {"0": start}}),
        endingOffsets=json.dumps({topic.name: {"0": end}}),
    )
    want = [rec for rec in topic.records if start <= rec[0] < end]
    assert len(want) >= 3
    assert [(r.offset, r.key, r.value) for r in got] == want
