"""Transactions as real clients use them (librdkafka through confluent-kafka): interleaved
committed and aborted transactions across partitions, read_committed against read_uncommitted
consumers, offsets sent in a transaction, and on a 3-broker ZooKeeper cluster (RF 3) a kill -9
of the transaction coordinator in the middle of a transaction."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaException,
    Producer,
    TopicPartition,
)

from pybroker.testing.client_helpers import (
    ALL_STORAGES,
    create_topic,
    poll_to_end,
    storage_overrides,
    unique_topic,
)
from pybroker.testing.cluster_harness import running_cluster, wait_until

pytestmark = pytest.mark.timeout(300)


def _producer(bootstrap: str, tid: str, **extra) -> Producer:
    conf = {
        "bootstrap.servers": bootstrap,
        "transactional.id": tid,
        "linger.ms": 5,
        "transaction.timeout.ms": 60000,
    }
    conf.update(extra)
    p = Producer(conf)
    p.init_transactions(60)
    return p


def _read(bootstrap: str, topic: str, partitions: int, isolation: str, quiet_s: float = 3.0):
    """Every value a fresh consumer reads from the beginning, up to the end of every
    partition (or until nothing new for quiet_s: client_helpers.poll_to_end)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_topic("reader"),
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        return [msg.value() for msg in poll_to_end(c, quiet_s)]
    finally:
        c.close()


@pytest.mark.multicore
def test_interleaved_commits_and_aborts_across_partitions(broker):
    topic = unique_topic("eos")
    create_topic(broker.bootstrap, topic, 3)
    p = _producer(broker.bootstrap, unique_topic("tid"))
    committed, aborted = [], []
    for t in range(12):
        p.begin_transaction()
        values = [f"t{t}-r{i}".encode() for i in range(30)]
        for i, v in enumerate(values):
            p.produce(topic, value=v, partition=i % 3)
        if t % 3 == 2:
            p.flush(30)  # sent, then aborted: in the log, never shown to read_committed
            p.abort_transaction(30)
            aborted += values
        else:
            p.commit_transaction(30)
            committed += values
    read_committed = _read(broker.bootstrap, topic, 3, "read_committed")
    read_uncommitted = _read(broker.bootstrap, topic, 3, "read_uncommitted")
    print(
        f"[{broker.backend}] {len(committed)} committed, {len(aborted)} aborted; read_committed "
        f"saw {len(read_committed)}, read_uncommitted {len(read_uncommitted)}"
    )
    assert sorted(read_committed) == sorted(committed)
    assert sorted(read_uncommitted) == sorted(committed + aborted)


def test_send_offsets_to_transaction_moves_a_groups_offsets_with_the_output(broker, storage):
    src, dst = unique_topic("src"), unique_topic("dst")
    create_topic(broker.bootstrap, src, 1)
    create_topic(broker.bootstrap, dst, 1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(20):
        plain.produce(src, value=f"in{i}".encode())
    assert plain.flush(30) == 0
    group = unique_topic("copier")
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([src])
    p = _producer(broker.bootstrap, unique_topic("tid"))

    def copy(n: int, commit: bool) -> None:
        msgs = []
        while len(msgs) < n:
            m = consumer.poll(1.0)
            if m is not None and not m.error():
                msgs.append(m)
        p.begin_transaction()
        for m in msgs:
            p.produce(dst, value=m.value().replace(b"in", b"out"))
        offsets = [TopicPartition(src, 0, msgs[-1].offset() + 1)]
        p.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)

    def group_offset() -> int:
        return consumer.committed([TopicPartition(src, 0)], timeout=10)[0].offset

    try:
        copy(10, commit=True)
        wait_until(lambda: group_offset() == 10, 15, what="offset 10 committed")
        copy(5, commit=False)
        time.sleep(1)
        assert group_offset() == 10  # the aborted transaction's offsets never show
    finally:
        consumer.close()
    out = _read(broker.bootstrap, dst, 1, "read_committed")
    assert out == [f"out{i}".encode() for i in range(10)]


@pytest.mark.parametrize("storage", ALL_STORAGES)
def test_kill_of_the_transaction_coordinator_mid_transaction(tmp_path, storage):
    """3 brokers on ZooKeeper, RF 3: the coordinator of the transactional id is killed -9
    with a transaction open and another one committing; a new producer instance fences the
    zombie, the open transaction is aborted, the committed one completes, and a
    read_committed consumer sees exactly the committed records."""
    overrides = {"min.insync.replicas": 2, **storage_overrides(storage, 3)}
    with running_cluster(tmp_path, 3, overrides) as cluster:
        topic = unique_topic("eos")
        cluster.create_topic(topic, partitions=3, rf=3)
        cluster.wait_isr_full(topic)
        tid = unique_topic("tid")
        err, coordinator = cluster.find_coordinator(tid, key_type=1)
        assert err == 0
        bootstrap = cluster.bootstrap
        p = _producer(bootstrap, tid, **{"transaction.timeout.ms": 20000})
        committed = []
        p.begin_transaction()
        first = [f"c{i}".encode() for i in range(60)]
        for i, v in enumerate(first):
            p.produce(topic, value=v, partition=i % 3)
        p.commit_transaction(30)
        committed += first
        p.begin_transaction()
        for i in range(60):
            p.produce(topic, value=f"open{i}".encode(), partition=i % 3)
        p.flush(30)
        cluster.kill9(coordinator)
        # the zombie instance goes on; a new instance with the same id takes over
        p2 = _producer(bootstrap, tid)
        p2.begin_transaction()
        second = [f"n{i}".encode() for i in range(60)]
        for i, v in enumerate(second):
            p2.produce(topic, value=v, partition=i % 3)
        p2.commit_transaction(60)
        committed += second
        with pytest.raises(KafkaException) as fenced:
            p.produce(topic, value=b"zombie", partition=0)
            p.commit_transaction(30)
        print(f"zombie producer: {fenced.value}")
        cluster.restart(coordinator)
        seen = _read(bootstrap, topic, 3, "read_committed")
        assert sorted(seen) == sorted(committed)
