"""Apache Kafka Streams 3.9 (kafka-streams from Maven Central, fetched by
scripts/fetch-java-deps) against pybroker (issues 11, 12): an at_least_once word count, the
topology of Kafka's own WordCountDemo (java/apps/src/WordCount.java, compiled here with javac
because kafka-streams-examples is not on this machine's Maven Central).

The application creates its repartition topic and its compacted changelog topic; its output
counts are exact; the changelog is compacted by the broker while it runs (small segments);
stopped, its local state deleted and restarted, it restores its store from the compacted
changelog and the counts carry on from where they were."""

from __future__ import annotations

import random
import shutil
import struct
import time
from collections import Counter

import pytest
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from pybroker.testing import java
from pybroker.testing.client_helpers import assign_consumer, read_to_end, unique_topic

pytestmark = [
    pytest.mark.timeout(420),
    pytest.mark.skipif(not java.java_available(), reason="java not found (OpenJDK 17 expected)"),
]

WORDS = [f"w{i:02d}" for i in range(12)]


def read_topic(
    bootstrap: str, topic: str, settle_s: float = 1.0, partitions=(0,), **config
) -> list:
    """Every record of `partitions` from the beginning, by partition, in offset order: read
    until each position reached the end offset (client_helpers.read_to_end; with
    isolation_level=read_committed the last stable offset), not until a quiet second."""
    consumer = assign_consumer(
        bootstrap, topic, list(partitions), auto_offset_reset="earliest", **config
    )
    try:
        consumer.seek_to_beginning()
        got = read_to_end(consumer, settle_s=settle_s)
        return sorted(got, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def counts_by_word(records) -> dict[str, list[int]]:
    """word -> the counts the application emitted for it, in offset order."""
    out: dict[str, list[int]] = {}
    for r in records:
        out.setdefault(r.key.decode(), []).append(struct.unpack(">q", r.value)[0])
    return out


def wait_for_counts(
    apps: java.JavaProcess | list[java.JavaProcess],
    bootstrap: str,
    topic: str,
    want: Counter,
    partitions=(0,),
    **config,
) -> dict:
    deadline = time.monotonic() + 180
    while True:
        emitted = counts_by_word(read_topic(bootstrap, topic, partitions=partitions, **config))
        latest = {w: c[-1] for w, c in emitted.items()}
        if latest == dict(want) or time.monotonic() > deadline:
            return emitted
        for app in apps if isinstance(apps, list) else [apps]:
            assert app.is_running(), app.result().describe()
        time.sleep(1)


def produce_lines(
    bootstrap: str, topic: str, rng: random.Random, lines: int, partition: int | None = 0
) -> Counter:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    words: Counter = Counter()
    try:
        for _ in range(lines):
            line = [rng.choice(WORDS) for _ in range(rng.randint(1, 6))]
            words.update(line)
            # the application lower-cases: mixed case counts as one word
            text = " ".join(w.upper() if rng.random() < 0.3 else w for w in line)
            producer.send(topic, value=text.encode(), partition=partition)
        producer.flush()
    finally:
        producer.close()
    return words


# one backend (CI time): Streams is a client of groups, compacted topics and the cleaner,
# which test_groups_*, test_compaction and test_kafka_connect run on ZooKeeper
@pytest.mark.parametrize("backend", ["embedded"], indirect=True)
@pytest.mark.broker_overrides({"log.cleaner.backoff.ms": 100})
def test_streams_word_count_restores_from_compacted_changelog(broker, tmp_path):
    with java.deps_or_fail():
        cp = java.compile_app("WordCount.java", tmp_path / "classes")
    app_id = unique_topic("wordcount")
    source, sink = f"{app_id}-input", f"{app_id}-output"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="compat-admin")
    try:
        admin.create_topics([NewTopic(source, 1, 1), NewTopic(sink, 1, 1)])
    finally:
        admin.close()

    rng = random.Random(11)
    first = produce_lines(broker.bootstrap, source, rng, 400)

    def start(n: int) -> java.JavaProcess:
        return java.start_main(
            "WordCount",
            [
                broker.bootstrap,
                app_id,
                tmp_path / f"state{n}",  # a fresh state dir: a restart must restore
                source,
                sink,
                # internal topics (changelog, repartition) with small segments, cleaned early
                "topic.segment.bytes=2048",
                "topic.min.cleanable.dirty.ratio=0.01",
                "producer.batch.size=1024",
                # the first instance does not leave the group (Streams' consumers never do):
                # a short session lets the restarted one take over sooner
                "consumer.session.timeout.ms=6000",
                "consumer.heartbeat.interval.ms=1000",
                # records of the repartition topic the app has consumed are deleted
                # (DeleteRecords) every half second
                "repartition.purge.interval.ms=500",
            ],
            workdir=tmp_path,
            name=f"wordcount{n}",
            cp=cp,
        )

    app = start(0)
    try:
        emitted = wait_for_counts(app, broker.bootstrap, sink, first)
    finally:
        stopped = app.stop(timeout=40)
    # cache.max.bytes 0: one output record per word seen, counting 1, 2, ... n
    assert emitted == {w: list(range(1, n + 1)) for w, n in first.items()}, stopped.describe()
    assert "STATE RUNNING" in stopped.stdout
    assert " ERROR " not in stopped.stderr, stopped.describe()

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="compat-admin")
    try:
        internal = sorted(t for t in admin.list_topics() if t.startswith(app_id + "-"))
        changelogs = [t for t in internal if t.endswith("-changelog")]
        repartitions = [t for t in internal if t.endswith("-repartition")]
        assert len(changelogs) == 1 and len(repartitions) == 1, internal
        described = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, t) for t in changelogs + repartitions]
        )
    finally:
        admin.close()
    changelog = changelogs[0]
    assert described["topic"][changelog]["cleanup.policy"]["value"] == "compact", described
    assert described["topic"][repartitions[0]]["cleanup.policy"]["value"] == "delete"
    # Streams purged what it had consumed of the repartition topic: one record a word seen
    consumer = assign_consumer(broker.bootstrap, repartitions[0], [0])
    try:
        tp = TopicPartition(repartitions[0], 0)
        log_start = consumer.beginning_offsets([tp])[tp]
        log_end = consumer.end_offsets([tp])[tp]
    finally:
        consumer.close()
    assert log_end == sum(first.values()) and 0 < log_start <= log_end, (log_start, log_end)

    # the changelog holds one record per count update; the cleaner leaves the latest per word
    total = sum(first.values())
    deadline = time.monotonic() + 60
    while True:
        log = read_topic(broker.bootstrap, changelog)
        if len(log) < total // 2 or time.monotonic() > deadline:
            break
        time.sleep(1)
    offsets = [r.offset for r in log]
    assert offsets == sorted(set(offsets)) and offsets[-1] == total - 1
    assert len(log) < total // 2, f"changelog not compacted: {len(log)} of {total} records"
    assert {w: c[-1] for w, c in counts_by_word(log).items()} == dict(first)

    second = produce_lines(broker.bootstrap, source, rng, 150)
    shutil.rmtree(tmp_path / "state0")
    app = start(1)
    try:
        emitted = wait_for_counts(app, broker.bootstrap, sink, first + second)
    finally:
        stopped = app.stop(timeout=40)
    # the restarted instance continued each count from the restored store
    resumed = {w: c[first[w] :] for w, c in emitted.items() if c[first[w] :]}
    assert resumed == {w: list(range(first[w] + 1, first[w] + n + 1)) for w, n in second.items()}, (
        stopped.describe()
    )
    assert " ERROR " not in stopped.stderr, stopped.describe()


def wait_for_output(app: java.JavaProcess, text: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in app.stdout_text():
        assert app.is_running() and time.monotonic() < deadline, app.result().describe()
        time.sleep(0.5)


# one backend (CI time): a rebalance between two instances, which the group tests
# (test_groups_clients, test_groups_failover) run on ZooKeeper
@pytest.mark.parametrize("backend", ["embedded"], indirect=True)
@pytest.mark.broker_overrides({"log.cleaner.backoff.ms": 100})
def test_streams_two_instances_standby_takes_over(broker, tmp_path):
    """Two instances of the word count over 2 partitions with a standby replica each (standby
    tasks follow the other instance's compacted changelog while the cleaner works on it): one
    instance stops, the other takes its tasks over from its standby state and the counts go
    on exactly; the stopped one comes back with no local state and takes its share again."""
    with java.deps_or_fail():
        cp = java.compile_app("WordCount.java", tmp_path / "classes")
    app_id = unique_topic("wordcount2")
    source, sink = f"{app_id}-input", f"{app_id}-output"
    parts = (0, 1)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="compat-admin")
    try:
        admin.create_topics([NewTopic(source, 2, 1), NewTopic(sink, 2, 1)])
    finally:
        admin.close()

    def start(name: str) -> java.JavaProcess:
        return java.start_main(
            "WordCount",
            [
                broker.bootstrap,
                app_id,
                tmp_path / f"state-{name}",
                source,
                sink,
                "num.standby.replicas=1",
                "topic.segment.bytes=2048",
                "topic.min.cleanable.dirty.ratio=0.01",
                "producer.batch.size=1024",
                "consumer.session.timeout.ms=6000",
                "consumer.heartbeat.interval.ms=1000",
            ],
            workdir=tmp_path,
            name=f"wordcount-{name}",
            cp=cp,
        )

    rng = random.Random(7)
    a, b = start("a"), start("b")
    running = [a, b]
    try:
        for app in running:
            wait_for_output(app, "STATE RUNNING")
        want = produce_lines(broker.bootstrap, source, rng, 300, partition=None)
        emitted = wait_for_counts(running, broker.bootstrap, sink, want, parts)
        assert emitted == {w: list(range(1, n + 1)) for w, n in want.items()}

        stopped = a.stop(timeout=40)
        running.remove(a)
        assert " ERROR " not in stopped.stderr, stopped.describe()
        more = produce_lines(broker.bootstrap, source, rng, 150, partition=None)
        emitted = wait_for_counts(running, broker.bootstrap, sink, want + more, parts)
        assert emitted == {w: list(range(1, n + 1)) for w, n in (want + more).items()}
        want += more

        shutil.rmtree(tmp_path / "state-a")
        a = start("a2")
        running.append(a)
        wait_for_output(a, "STATE RUNNING")
        more = produce_lines(broker.bootstrap, source, rng, 150, partition=None)
        emitted = wait_for_counts(running, broker.bootstrap, sink, want + more, parts)
        assert emitted == {w: list(range(1, n + 1)) for w, n in (want + more).items()}
    finally:
        results = [app.stop(timeout=40) for app in running]
    for r in results:
        assert " ERROR " not in r.stderr, r.describe()


# one backend (CI time), ZooKeeper: transactions with sendOffsetsToTransaction run on the
# embedded store in test_transactions_clients and test_java_transactions
@pytest.mark.parametrize("backend", ["zookeeper"], indirect=True)
def test_streams_exactly_once_v2_counts_are_exact_after_a_kill(broker, tmp_path):
    """processing.guarantee=exactly_once_v2 (issue 12): the application is killed -9 in the
    middle of its work and started again; a read_committed reader of the output sees every
    word's counts exactly 1, 2, ... n: no count repeated (what at_least_once shows after a
    crash) and none missing."""
    import signal

    with java.deps_or_fail():
        cp = java.compile_app("WordCount.java", tmp_path / "classes")
    app_id = unique_topic("eoscount")
    source, sink = f"{app_id}-input", f"{app_id}-output"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="compat-admin")
    try:
        admin.create_topics([NewTopic(source, 1, 1), NewTopic(sink, 1, 1)])
    finally:
        admin.close()
    rng = random.Random(12)
    first = produce_lines(broker.bootstrap, source, rng, 3000)

    def start(n: int) -> java.JavaProcess:
        return java.start_main(
            "WordCount",
            [broker.bootstrap, app_id, tmp_path / "state", source, sink,
             "processing.guarantee=exactly_once_v2", "commit.interval.ms=100",
             "consumer.session.timeout.ms=6000", "consumer.heartbeat.interval.ms=1000",
             "producer.transaction.timeout.ms=10000"],
            workdir=tmp_path,
            name=f"eoscount{n}",
            cp=cp,
        )  # fmt: skip

    app = start(0)
    try:
        deadline = time.monotonic() + 120
        while len(read_topic(broker.bootstrap, sink, isolation_level="read_committed")) < 300:
            assert app.is_running() and time.monotonic() < deadline, app.result().describe()
            time.sleep(0.2)
    finally:
        java.kill_group(app.proc, signal.SIGKILL)  # mid-work: a transaction is open
        app.proc.wait(10)
    second = produce_lines(broker.bootstrap, source, rng, 300)
    total = first + second
    app = start(1)
    try:
        emitted = wait_for_counts(
            app, broker.bootstrap, sink, total, isolation_level="read_committed"
        )
    finally:
        stopped = app.stop(timeout=40)
    assert emitted == {w: list(range(1, n + 1)) for w, n in total.items()}, stopped.describe()
    assert " ERROR " not in stopped.stderr, stopped.describe()
