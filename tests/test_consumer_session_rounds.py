"""A consumer's incremental fetch session round by round (issue 27): a round looks only at the
partitions the leader's change feed noted since the session's last answer
(handlers/_follower_rounds.py, replication/changes.py), and must answer exactly the partitions
Kafka would (FetchSession's CachedPartition.maybeUpdateResponseData: records, an error, a
new high watermark or log start).  The expected answer of each round comes from a sessionless
full fetch at the session's positions just before it; the operations move every input of a
consumer's idle stamp (appends, the high watermark, transactions' markers and the last stable
offset for read_committed, DeleteRecords' log start, topic configs) and the fetch positions
(a fetch beyond the log end is an error, answered every round).  The sessions are kept by
topic names (Fetch v12) and by topic ids (v13), read_uncommitted and read_committed; the
audit must find no missed change."""

from __future__ import annotations

import random

import pytest
from broker_fixture import FETCH, NONE, batch, fetch_body, split_batches, unique_topic

from pybroker.handlers._follower_rounds import FollowerRound
from pybroker.wire.records import build_batch, unpack_header

PRODUCE, DELETE_RECORDS, WRITE_TXN_MARKERS, INCREMENTAL_ALTER_CONFIGS = 0, 21, 27, 44
PARTITIONS = 8


class Session:
    """A consumer's view of its session: positions, and what each partition was last sent."""

    def __init__(self, client, topic, topic_id, version, isolation):
        self.client, self.topic, self.topic_id = client, topic, topic_id
        self.version, self.isolation = version, isolation
        self.offsets = dict.fromkeys(range(PARTITIONS), 0)
        self.sent: dict[int, tuple[int, int]] = {}
        self.moved: set[int] = set()  # positions to send in the next request
        body = self._request(range(PARTITIONS), session_id=0, epoch=0)
        self.id, self.epoch = body["session_id"], 1
        assert self.id != 0
        self._take(self._entries(body))

    def _request(self, parts, session_id, epoch):
        req = fetch_body(
            [(self.topic, p, self.offsets[p], 1 << 20) for p in sorted(parts)],
            session_id=session_id,
            session_epoch=epoch,
            isolation_level=self.isolation,
        )
        if self.version >= 13:
            for t in req["topics"]:
                t["topic_id"] = self.topic_id
        body = self.client.request(FETCH, self.version, req)
        assert body["error_code"] == NONE
        return body

    @staticmethod
    def _entries(body) -> dict[int, dict]:
        return {p["partition_index"]: p for t in body["responses"] for p in t["partitions"]}

    def _take(self, entries: dict[int, dict]) -> None:
        for p, e in entries.items():
            ok = e["error_code"] == NONE
            self.sent[p] = (e["high_watermark"] if ok else -1, e["log_start_offset"])
            batches = split_batches(e["records"] or b"")
            if batches:
                self.offsets[p] = unpack_header(batches[-1]).next_offset
                self.moved.add(p)

    def expected(self) -> set[int]:
        """What Kafka answers now: a full sessionless fetch at the session's positions,
        filtered by maybeUpdateResponseData against what each partition was last sent."""
        entries = self._entries(self._request(range(PARTITIONS), session_id=0, epoch=-1))
        return {
            p
            for p, e in entries.items()
            if e["records"]
            or e["error_code"] != NONE
            or self.sent[p] != (e["high_watermark"], e["log_start_offset"])
        }

    def round(self) -> None:
        want = self.expected()
        body = self._request(self.moved, session_id=self.id, epoch=self.epoch)
        self.moved = set()
        self.epoch += 1
        got = self._entries(body)
        assert set(got) == want, (self.version, self.isolation, sorted(got), sorted(want))
        self._take(got)

    def seek(self, p: int, offset: int) -> None:
        self.offsets[p] = offset
        self.moved.add(p)


def _produce(client, topic, p, records, transactional_id=None):
    body = client.request(
        PRODUCE,
        8,
        {
            "transactional_id": transactional_id,
            "acks": -1,
            "timeout_ms": 10000,
            "topic_data": [{"name": topic, "partition_data": [{"index": p, "records": records}]}],
        },
    )
    assert body["responses"][0]["partition_responses"][0]["error_code"] == NONE


def _marker(client, topic, pid, parts, committed):
    body = client.request(
        WRITE_TXN_MARKERS,
        1,
        {
            "markers": [
                {
                    "producer_id": pid,
                    "producer_epoch": 0,
                    "transaction_result": committed,
                    "topics": [{"name": topic, "partition_indexes": sorted(parts)}],
                    "coordinator_epoch": 0,
                }
            ]
        },
    )
    assert all(p["error_code"] == NONE for p in body["markers"][0]["topics"][0]["partitions"])


def _delete_records(client, topic, p, offset):
    body = client.request(
        DELETE_RECORDS,
        1,
        {
            "topics": [{"name": topic, "partitions": [{"partition_index": p, "offset": offset}]}],
            "timeout_ms": 10000,
        },
    )
    assert body["topics"][0]["partitions"][0]["error_code"] == NONE


def _alter_config(client, topic, value):
    body = client.request(
        INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": topic,
                    "configs": [{"name": "retention.ms", "config_operation": 0, "value": value}],
                }
            ],
            "validate_only": False,
        },
    )
    assert body["responses"][0]["error_code"] == NONE


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_each_round_answers_exactly_the_partitions_kafka_would(client, seed):
    rnd = random.Random(seed)
    topic = unique_topic("rounds")
    client.create_topic(topic, partitions=PARTITIONS)
    topic_id = client.metadata([topic], version=12)["topics"][0]["topic_id"]
    for p in range(PARTITIONS):
        _produce(client, topic, p, batch([b"x"]))
    missed = FollowerRound.missed
    sessions = [
        Session(client, topic, topic_id, version, isolation)
        for version in (12, 13)
        for isolation in (0, 1)
    ]
    ends = dict.fromkeys(range(PARTITIONS), 1)  # each partition's log end
    starts = dict.fromkeys(range(PARTITIONS), 0)
    txns: dict[int, tuple[int, set[int]]] = {}  # producer id -> (next sequence, partitions)
    for _ in range(40):
        op = rnd.choice(
            ["produce", "produce", "txn", "end_txn", "delete", "seek", "config", "idle"]
        )
        p = rnd.randrange(PARTITIONS)
        if op == "produce":
            n = rnd.randint(1, 3)
            _produce(client, topic, p, batch([b"v"] * n))
            ends[p] += n
        elif op == "txn":
            if not txns or rnd.random() < 0.5:
                pid = client.init_producer_id()["producer_id"]
                txns[pid] = (0, set())
            pid = rnd.choice(list(txns))
            seq, parts = txns[pid]
            records = build_batch(
                [(None, b"t", [])],
                producer_id=pid,
                producer_epoch=0,
                base_sequence=seq,
                is_transactional=True,
            )
            _produce(client, topic, p, records, transactional_id="tx")
            ends[p] += 1
            txns[pid] = (seq + 1, parts | {p})
        elif op == "end_txn" and txns:
            pid = rnd.choice(list(txns))
            _, parts = txns.pop(pid)
            if parts:
                _marker(client, topic, pid, parts, rnd.random() < 0.5)
                for q in parts:
                    ends[q] += 1
        elif op == "delete" and ends[p] > starts[p]:
            starts[p] = rnd.randint(starts[p] + 1, ends[p])
            _delete_records(client, topic, p, starts[p])
        elif op == "seek":
            s = rnd.choice(sessions)
            if rnd.random() < 0.5:
                s.seek(p, ends[p] + 5)  # beyond the log end: an error every round
            else:
                s.seek(p, max(starts[p], min(s.offsets[p], ends[p])))
        elif op == "config":
            _alter_config(client, topic, str(rnd.randint(10**8, 10**9)))
        for s in sessions:
            s.round()
        for s in sessions:  # a second round right after: only what is still news
            s.round()
    assert FollowerRound.missed == missed


def test_a_session_that_changes_its_isolation_level_sees_what_the_new_level_reads(client):
    """Records of an open transaction, held back from a read_committed session, are news to
    the same session fetching read_uncommitted (its idle stamps held the last stable offset)."""
    topic = unique_topic("rounds")
    client.create_topic(topic, partitions=PARTITIONS)
    topic_id = client.metadata([topic], version=12)["topics"][0]["topic_id"]
    s = Session(client, topic, topic_id, 12, 1)
    pid = client.init_producer_id()["producer_id"]
    records = build_batch(
        [(None, b"t", [])],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    _produce(client, topic, 3, records, transactional_id="tx")
    s.round()  # the new high watermark; no records (above the last stable offset)
    s.round()
    assert s.offsets[3] == 0
    s.isolation = 0
    s.round()
    assert s.offsets[3] == 1
    s.round()
