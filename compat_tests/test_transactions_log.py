"""Transactions, log side, on real broker processes: kill -9 keeps ongoing transactions and the
aborted-transaction index; on a 3-broker cluster the followers replicate the markers, so a
new leader answers the same last stable offset and aborted transactions, and every replica's
.txnindex is byte for byte the leader's.  Raw requests through pybroker's codec
(tests/broker_fixture.Client); WriteTxnMarkers is sent as a transaction coordinator would."""

from __future__ import annotations

import time

import pytest

from pybroker.testing.client_helpers import unique_topic
from pybroker.testing.cluster_harness import running_cluster, wait_until
from pybroker.wire.record_walker import decode_records
from pybroker.wire.records import build_batch, unpack_header
from tests.broker_fixture import Client, fetch_body, split_batches

pytestmark = pytest.mark.timeout(300)
READ_COMMITTED = 1


def _txn(pid: int, seq: int, values: list[bytes]) -> bytes:
    return build_batch(
        [(None, v, []) for v in values],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
        is_transactional=True,
    )


def _produce(c: Client, topic: str, records: bytes) -> int:
    body = c.request(
        0,
        8,
        {
            "transactional_id": "tx",
            "acks": -1,
            "timeout_ms": 15000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
        },
    )
    p = body["responses"][0]["partition_responses"][0]
    assert p["error_code"] == 0, p
    return p["base_offset"]


def _markers(c: Client, topic: str, markers: list[tuple[int, bool]]) -> None:
    body = c.request(
        27,
        1,
        {
            "markers": [
                {
                    "producer_id": pid,
                    "producer_epoch": 0,
                    "transaction_result": committed,
                    "topics": [{"name": topic, "partition_indexes": [0]}],
                    "coordinator_epoch": 0,
                }
                for pid, committed in markers
            ]
        },
    )
    codes = [p["error_code"] for m in body["markers"] for t in m["topics"] for p in t["partitions"]]
    assert codes == [0] * len(markers), body


def _fetch(c: Client, topic: str) -> dict:
    body = c.request(1, 11, fetch_body([(topic, 0, 0, 1 << 20)], isolation_level=READ_COMMITTED))
    p = body["responses"][0]["partitions"][0]
    assert p["error_code"] == 0, p
    return p


def _committed(p: dict) -> list[bytes]:
    aborted = sorted((a["first_offset"], a["producer_id"]) for a in p["aborted_transactions"])
    active: set[int] = set()
    out = []
    for raw in split_batches(p["records"]):
        h = unpack_header(raw)
        while aborted and aborted[0][0] <= h.base_offset:
            active.add(aborted.pop(0)[1])
        if h.is_control:
            active.discard(h.producer_id)
        elif not (h.is_transactional and h.producer_id in active):
            out += [r.value for r in decode_records(raw)]
    return out


def _workload(c: Client, topic: str) -> tuple[int, int]:
    a = c.init_producer_id()["producer_id"]
    b = c.init_producer_id()["producer_id"]
    _produce(c, topic, _txn(a, 0, [b"a1", b"a2"]))  # 0-1
    _markers(c, topic, [(a, False)])  # 2: aborted
    _produce(c, topic, _txn(b, 0, [b"b1"]))  # 3: open
    _produce(c, topic, _txn(a, 2, [b"a3"]))  # 4: open
    return a, b


def _check_open(c: Client, topic: str, a: int) -> None:
    p = _fetch(c, topic)
    assert (p["high_watermark"], p["last_stable_offset"]) == (5, 3)
    assert p["aborted_transactions"] == [{"producer_id": a, "first_offset": 0}]
    assert _committed(p) == []


def _finish(c: Client, topic: str, a: int, b: int) -> None:
    _markers(c, topic, [(b, True), (a, False)])  # 5, 6
    p = _fetch(c, topic)
    assert p["last_stable_offset"] == p["high_watermark"] == 7
    assert _committed(p) == [b"b1"]
    assert sorted(x["first_offset"] for x in p["aborted_transactions"]) == [0, 4]


def test_kill9_keeps_ongoing_transactions_and_aborted_index(broker):
    topic = unique_topic("txn")
    with Client(broker.host, broker.port) as c:
        c.create_topic(topic, partitions=1)
        a, b = _workload(c, topic)
        _check_open(c, topic, a)
    broker.kill9()
    broker.restart()
    with Client(broker.host, broker.port) as c:
        _check_open(c, topic, a)
        _finish(c, topic, a, b)
    broker.stop()
    broker.restart()  # and once more after a clean shutdown
    with Client(broker.host, broker.port) as c:
        p = _fetch(c, topic)
        assert p["last_stable_offset"] == 7 and _committed(p) == [b"b1"]


def test_followers_replicate_markers_and_a_new_leader_answers_the_same(tmp_path):
    with running_cluster(tmp_path) as cluster:
        topic = unique_topic("txn")
        cluster.create_topic(topic, partitions=1, rf=3, configs={"min.insync.replicas": "2"})
        leader = cluster.leader_of(topic, 0).leader
        lb = cluster.brokers[leader]
        with Client(lb.host, lb.port) as c:
            a, b = _workload(c, topic)
            _check_open(c, topic, a)
        cluster.wait_isr_full(topic)

        def txnindexes() -> dict[int, bytes]:
            out = {}
            for i, bp in cluster.brokers.items():
                files = sorted((bp.log_dir / f"{topic}-0").glob("*.txnindex"))
                out[i] = b"".join(f.read_bytes() for f in files)
            return out

        # every replica holds the leader's index (34-byte entries) once it has the marker
        wait_until(lambda: len(set(txnindexes().values())) == 1, 30, what="same .txnindex")
        assert len(txnindexes()[leader]) == 34
        cluster.kill9(leader)
        new = cluster.wait_new_leader(topic, 0, leader).leader
        nb = cluster.brokers[new]

        def open_state_served() -> bool:
            with Client(nb.host, nb.port) as c:
                try:
                    _check_open(c, topic, a)
                except AssertionError:
                    return False
                return True

        wait_until(open_state_served, 60, 0.5, "the new leader's LSO and aborted list")
        with Client(nb.host, nb.port) as c:
            _finish(c, topic, a, b)
        cluster.restart(leader)
        cluster.wait_isr_full(topic)
        wait_until(lambda: len(set(txnindexes().values())) == 1, 30, what="same .txnindex")
        assert len(txnindexes()[leader]) == 68


def _confluent_read(bootstrap: str, topic: str, isolation: str, end: int) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "txn-unused-group",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        position = 0
        while position < end and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                (tp,) = consumer.position([TopicPartition(topic, 0)])
                position = max(position, tp.offset)
                continue
            if msg.error():
                raise KafkaException(msg.error())
            got.append(msg.value())
            position = msg.offset() + 1
    finally:
        consumer.close()
    return got


def _kafka_python_read(bootstrap: str, topic: str, isolation: str, end: int) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False
    )
    got: list[bytes] = []
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + 30
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for records in consumer.poll(500).values():
                got += [r.value for r in records]
    finally:
        consumer.close()
    return got


def test_real_consumers_read_committed(broker):
    """librdkafka (confluent-kafka) and kafka-python consumers with isolation.level
    read_committed skip the aborted records (from aborted_transactions) and the markers;
    read_uncommitted ones see every data record."""
    topic = unique_topic("txn")
    with Client(broker.host, broker.port) as c:
        c.create_topic(topic, partitions=1)
        a, b = _workload(c, topic)
        _finish(c, topic, a, b)
        for i in range(3):
            _produce(c, topic, _txn(b, 1 + i, [b"b-%d" % i]))
            _markers(c, topic, [(b, i != 1)])
    end = 13
    committed = [b"b1", b"b-0", b"b-2"]
    everything = [b"a1", b"a2", b"b1", b"a3", b"b-0", b"b-1", b"b-2"]
    assert _confluent_read(broker.bootstrap, topic, "read_committed", end) == committed
    assert _confluent_read(broker.bootstrap, topic, "read_uncommitted", end) == everything
    assert _kafka_python_read(broker.bootstrap, topic, "read_committed", end) == committed
    assert _kafka_python_read(broker.bootstrap, topic, "read_uncommitted", end) == everything
