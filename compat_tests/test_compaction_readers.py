"""Apache Kafka's Java consumer (kafka-console-consumer 3.9, ConsoleConsumer) reads a
compacted, cleaned topic from offset 0 (issue 11): exactly the latest value of each live key,
in offset order, with the gaps the cleaner left and the empty batches it kept for producer
state, with normal and one-batch fetches (Spark's batch read of the same kind of topic
is spark_it/test_compaction.py)."""

from __future__ import annotations

from itertools import pairwise

import pytest

from compat_tests.compacted import build_cleaned_topic
from pybroker.testing import java
from pybroker.testing.client_helpers import unique_topic

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(not java.java_available(), reason="java not found (OpenJDK 17 expected)"),
]

CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"


@pytest.mark.broker_overrides({"log.cleaner.backoff.ms": 100})
def test_java_console_consumer_reads_cleaned_topic(broker):
    with java.deps_or_fail():
        java.classpath()
    topic = build_cleaned_topic(broker.bootstrap, unique_topic("compact-java"))
    args = ["--bootstrap-server", broker.bootstrap, "--topic", topic.name, "--partition", "0"]
    args += ["--offset", "earliest", "--timeout-ms", "5000"]
    for prop in ("print.key=true", "print.offset=true", "print.value=true"):
        args += ["--property", prop]
    assert console_consume(args, len(topic.records)) == topic.records
    # one batch a fetch (the first batch is returned whatever the limit): every fetch starts
    # at an offset the cleaner removed or at an empty batch a producer's state kept
    tiny = ["--consumer-property", "max.partition.fetch.bytes=1"]
    tiny += ["--consumer-property", "fetch.max.bytes=1"]
    assert console_consume(args + tiny, len(topic.records)) == topic.records

    # from an offset the cleaner removed: the next live record on
    offsets = [o for o, _, _ in topic.records]
    gap = next(o + 1 for o, nxt in pairwise(offsets[5:]) if nxt > o + 1)
    args[args.index("earliest")] = str(gap)
    want = [rec for rec in topic.records if rec[0] > gap]
    assert console_consume(args, len(want)) == want


def console_consume(args: list[str], expected: int) -> list[tuple[int, bytes, bytes]]:
    """Reads until `expected` records came (then exits at once) or none came for 5 s (then
    the comparison fails).  Stopping at the count hides no extra record: the expected records
    end at the log's last offset (topic.end - 1), so a record served in a gap would take the
    place of the last expected one, and the Java consumer drops any record below its
    position."""
    args = [*args, "--max-messages", str(expected)]
    r = java.run_main(CONSOLE_CONSUMER, args, timeout=120)
    # the tool ends at --max-messages, or on --timeout-ms (logged as a TimeoutException), exit 0
    assert r.returncode == 0 and not r.timed_out, r.describe()
    got = []
    for line in r.stdout.splitlines():
        offset, key, value = line.split("\t")
        assert offset.startswith("Offset:"), line
        got.append((int(offset[len("Offset:") :]), key.encode(), value.encode()))
    assert f"Processed a total of {len(got)} messages" in r.stderr, r.describe()
    return got
