"""The transaction coordinator over TCP (KIP-98, KIP-447): what a transactional producer and an
exactly-once consumer see, request by request, on one in-process broker.  Kafka is the spec:
the error codes and state names are the ones Apache Kafka answers."""

from __future__ import annotations

import time

import pytest
from broker_fixture import FETCH, INVALID_PRODUCER_EPOCH, INVALID_REQUEST, NONE, unique_topic

from pybroker.coord.metadata.placement import partition_for
from pybroker.wire.records import build_batch

FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN = 10, 22, 24, 25, 26
OFFSET_FETCH, TXN_OFFSET_COMMIT, DESCRIBE_TXNS, LIST_TXNS, PRODUCE = 9, 28, 65, 66, 0
JOIN_GROUP, SYNC_GROUP = 11, 14
INVALID_TXN_STATE, CONCURRENT_TRANSACTIONS, INVALID_PRODUCER_ID_MAPPING = 48, 51, 49
INVALID_TRANSACTION_TIMEOUT, TRANSACTIONAL_ID_NOT_FOUND = 50, 105
UNKNOWN_TOPIC_OR_PARTITION, OPERATION_NOT_ATTEMPTED = 3, 55
UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, UNSTABLE_OFFSET_COMMIT, PRODUCER_FENCED = 25, 22, 88, 90
READ_COMMITTED = 1


def _wait(cond, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def init(c, tid, timeout_ms=60000, version=4, pid=-1, epoch=-1) -> dict:
    def attempt():
        r = c.request(
            INIT_PRODUCER_ID,
            version,
            {
                "transactional_id": tid,
                "transaction_timeout_ms": timeout_ms,
                "producer_id": pid,
                "producer_epoch": epoch,
            },
        )
        return r if r["error_code"] != CONCURRENT_TRANSACTIONS else None

    return _wait(attempt)


def add_partitions(c, tid, pid, epoch, topic, partitions, version=3) -> dict[int, int]:
    r = c.request(
        ADD_PARTITIONS,
        version,
        {
            "v3_and_below_transactional_id": tid,
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": topic, "partitions": partitions}],
        },
    )
    return {
        p["partition_index"]: p["partition_error_code"]
        for t in r["results_by_topic_v3_and_below"]
        for p in t["results_by_partition"]
    }


def end(c, tid, pid, epoch, commit, version=3) -> int:
    return c.request(
        END_TXN,
        version,
        {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": commit},
    )["error_code"]


def produce_txn(c, tid, topic, partition, pid, epoch, seq, values) -> int:
    batch = build_batch(
        [(None, v, []) for v in values],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )
    r = c.request(
        PRODUCE,
        8,
        {
            "transactional_id": tid,
            "acks": -1,
            "timeout_ms": 10000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": batch}]}
            ],
        },
    )
    return r["responses"][0]["partition_responses"][0]["error_code"]


def committed_values(c, topic, partition) -> list[bytes]:
    body = c.request(
        FETCH,
        11,
        {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": READ_COMMITTED,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": partition,
                            "current_leader_epoch": -1,
                            "fetch_offset": 0,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )
    from broker_fixture import split_batches

    from pybroker.wire.record_walker import decode_records
    from pybroker.wire.records import unpack_header

    p = body["responses"][0]["partitions"][0]
    # Kafka's consumer: an aborted transaction of a producer starts at its first_offset and
    # ends at the producer's next control batch
    pending = sorted((a["first_offset"], a["producer_id"]) for a in p["aborted_transactions"] or [])
    aborting: set[int] = set()
    lso = p["last_stable_offset"]
    out = []
    for raw in split_batches(p["records"]):
        h = unpack_header(raw)
        if h.base_offset >= lso:
            break
        while pending and pending[0][0] <= h.base_offset:
            aborting.add(pending.pop(0)[1])
        if h.is_control:
            aborting.discard(h.producer_id)
            continue
        if h.producer_id not in aborting:
            out += [r.value for r in decode_records(raw)]
    return out


def describe(c, tid) -> dict:
    return c.request(DESCRIBE_TXNS, 0, {"transactional_ids": [tid]})["transaction_states"][0]


def offset_fetch(c, group, topic, partition, require_stable) -> dict:
    r = c.request(
        OFFSET_FETCH,
        7,
        {
            "group_id": group,
            "topics": [{"name": topic, "partition_indexes": [partition]}],
            "require_stable": require_stable,
        },
    )
    return r["topics"][0]["partitions"][0]


def txn_offset_commit(c, tid, group, pid, epoch, topic, offset, **member) -> int:
    r = c.request(
        TXN_OFFSET_COMMIT,
        3,
        {
            "transactional_id": tid,
            "group_id": group,
            "producer_id": pid,
            "producer_epoch": epoch,
            "generation_id": member.get("generation_id", -1),
            "member_id": member.get("member_id", ""),
            "group_instance_id": None,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": offset,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        },
    )
    return r["topics"][0]["partitions"][0]["error_code"]


@pytest.fixture
def topic(client):
    name = unique_topic("tx")
    client.create_topic(name, partitions=3)
    return name


def test_find_coordinator_for_a_transactional_id_answers_a_live_broker(client, broker):
    r = client.request(FIND_COORDINATOR, 3, {"key": "my-txn", "key_type": 1})
    assert r["error_code"] == NONE and r["node_id"] == broker.broker_id
    r = client.request(FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["a", ""]})
    assert [k["error_code"] for k in r["coordinators"]] == [NONE, INVALID_REQUEST]


def test_init_bumps_the_epoch_and_fences_the_older_instance(client, topic):
    tid = unique_topic("tid")
    first = init(client, tid)
    assert first["error_code"] == NONE and first["producer_epoch"] == 0
    second = init(client, tid)
    assert (second["producer_id"], second["producer_epoch"]) == (first["producer_id"], 1)
    # the zombie (epoch 0): fenced, with the code its request version knows
    assert add_partitions(client, tid, first["producer_id"], 0, topic, [0]) == {0: PRODUCER_FENCED}
    old = add_partitions(client, tid, first["producer_id"], 0, topic, [0], version=1)
    assert old == {0: INVALID_PRODUCER_EPOCH}
    assert end(client, tid, first["producer_id"], 0, True) == PRODUCER_FENCED
    # KIP-360: a producer that gives its current id and epoch gets the next epoch
    third = init(client, tid, pid=second["producer_id"], epoch=1)
    assert third["producer_epoch"] == 2


def test_bad_requests_get_kafka_errors(client, topic):
    assert init(client, "")["error_code"] == INVALID_REQUEST
    too_long = init(client, unique_topic("tid"), timeout_ms=900_001)
    assert too_long["error_code"] == INVALID_TRANSACTION_TIMEOUT
    tid = unique_topic("tid")
    got = init(client, tid)
    pid = got["producer_id"]
    assert add_partitions(client, tid, pid + 1000, 0, topic, [0]) == {
        0: INVALID_PRODUCER_ID_MAPPING
    }
    codes = add_partitions(client, tid, pid, 0, "no-such-topic-tx", [0])
    assert codes == {0: UNKNOWN_TOPIC_OR_PARTITION}
    r = client.request(
        ADD_PARTITIONS,
        3,
        {
            "v3_and_below_transactional_id": tid,
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [
                {"name": topic, "partitions": [0]},
                {"name": "no-such-topic-tx", "partitions": [0]},
            ],
        },
    )
    codes = {
        t["name"]: t["results_by_partition"][0]["partition_error_code"]
        for t in r["results_by_topic_v3_and_below"]
    }
    assert codes == {topic: OPERATION_NOT_ATTEMPTED, "no-such-topic-tx": UNKNOWN_TOPIC_OR_PARTITION}
    # EndTxn with no transaction open
    assert end(client, tid, pid, 0, True) == INVALID_TXN_STATE
    assert describe(client, "never-used-tid")["error_code"] == TRANSACTIONAL_ID_NOT_FOUND


def test_commit_and_abort_are_what_a_read_committed_consumer_sees(client, topic):
    tid = unique_topic("tid")
    got = init(client, tid)
    pid, epoch = got["producer_id"], got["producer_epoch"]
    assert add_partitions(client, tid, pid, epoch, topic, [0, 1]) == {0: NONE, 1: NONE}
    d = describe(client, tid)
    assert d["transaction_state"] == "Ongoing" and d["transaction_start_time_ms"] > 0
    assert d["topics"] == [{"topic": topic, "partitions": [0, 1]}]
    listed = client.request(LIST_TXNS, 1, {"state_filters": ["Ongoing"], "producer_id_filters": []})
    assert tid in [t["transactional_id"] for t in listed["transaction_states"]]
    assert produce_txn(client, tid, topic, 0, pid, epoch, 0, [b"a", b"b"]) == NONE
    assert produce_txn(client, tid, topic, 1, pid, epoch, 0, [b"c"]) == NONE
    assert committed_values(client, topic, 0) == []  # open: below the LSO there is nothing
    assert end(client, tid, pid, epoch, True) == NONE
    _wait(lambda: committed_values(client, topic, 0) == [b"a", b"b"])
    _wait(lambda: describe(client, tid)["transaction_state"] == "CompleteCommit")
    assert committed_values(client, topic, 1) == [b"c"]
    # the next transaction aborts
    _wait(lambda: add_partitions(client, tid, pid, epoch, topic, [0]) == {0: NONE})
    assert produce_txn(client, tid, topic, 0, pid, epoch, 2, [b"x"]) == NONE
    assert end(client, tid, pid, epoch, False) == NONE
    _wait(lambda: describe(client, tid)["transaction_state"] == "CompleteAbort")
    assert committed_values(client, topic, 0) == [b"a", b"b"]
    # a retried EndTxn of the finished transaction: same outcome NONE, the other one refused
    assert end(client, tid, pid, epoch, False) == NONE
    assert end(client, tid, pid, epoch, True) == INVALID_TXN_STATE


def test_offsets_sent_in_a_transaction_show_only_when_it_commits(client, topic):
    group, tid = unique_topic("grp"), unique_topic("tid")
    got = init(client, tid)
    pid, epoch = got["producer_id"], got["producer_epoch"]

    def add_offsets() -> int:
        return client.request(
            ADD_OFFSETS,
            3,
            {
                "transactional_id": tid,
                "producer_id": pid,
                "producer_epoch": epoch,
                "group_id": group,
            },
        )["error_code"]

    assert _wait(lambda: add_offsets() == NONE)
    d = describe(client, tid)
    assert {"topic": "__consumer_offsets", "partitions": [partition_for(group)]} in d["topics"]
    assert txn_offset_commit(client, tid, group, pid, epoch, topic, 42) == NONE
    assert offset_fetch(client, group, topic, 0, False)["committed_offset"] == -1
    assert offset_fetch(client, group, topic, 0, True)["error_code"] == UNSTABLE_OFFSET_COMMIT
    assert end(client, tid, pid, epoch, True) == NONE
    _wait(lambda: offset_fetch(client, group, topic, 0, True)["error_code"] == NONE)
    assert offset_fetch(client, group, topic, 0, True)["committed_offset"] == 42
    # aborted: never shown
    assert _wait(lambda: add_offsets() == NONE)
    assert txn_offset_commit(client, tid, group, pid, epoch, topic, 99) == NONE
    assert end(client, tid, pid, epoch, False) == NONE
    _wait(lambda: offset_fetch(client, group, topic, 0, True)["error_code"] == NONE)
    assert offset_fetch(client, group, topic, 0, True)["committed_offset"] == 42


def test_txn_offset_commit_checks_the_consumer_generation(client, topic):
    """KIP-447: a producer that passes the consumer's group metadata is checked against it."""
    group, tid = unique_topic("grp"), unique_topic("tid")
    join = client.request(
        JOIN_GROUP,
        5,
        {
            "group_id": group,
            "session_timeout_ms": 30000,
            "rebalance_timeout_ms": 30000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
        },
    )
    if join["error_code"] == 79:  # MEMBER_ID_REQUIRED: join again with the id
        join = client.request(
            JOIN_GROUP,
            5,
            {
                "group_id": group,
                "session_timeout_ms": 30000,
                "rebalance_timeout_ms": 30000,
                "member_id": join["member_id"],
                "group_instance_id": None,
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}],
            },
        )
    assert join["error_code"] == NONE
    member, generation = join["member_id"], join["generation_id"]
    client.request(
        SYNC_GROUP,
        3,
        {
            "group_id": group,
            "generation_id": generation,
            "member_id": member,
            "group_instance_id": None,
            "assignments": [{"member_id": member, "assignment": b""}],
        },
    )
    got = init(client, tid)
    pid, epoch = got["producer_id"], got["producer_epoch"]
    args = (client, tid, group, pid, epoch, topic, 5)
    assert txn_offset_commit(*args, member_id="nobody", generation_id=generation) == (
        UNKNOWN_MEMBER_ID
    )
    assert txn_offset_commit(*args, member_id=member, generation_id=generation + 1) == (
        ILLEGAL_GENERATION
    )
    assert txn_offset_commit(*args, member_id=member, generation_id=generation) == NONE


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(start_broker):
    b = start_broker(**{"transaction.abort.timed.out.transaction.cleanup.interval.ms": "100"})
    with b.client() as c:
        topic = unique_topic("tx")
        c.create_topic(topic, partitions=1)
        tid = unique_topic("tid")
        got = init(c, tid, timeout_ms=500)
        pid, epoch = got["producer_id"], got["producer_epoch"]
        assert add_partitions(c, tid, pid, epoch, topic, [0]) == {0: NONE}
        assert produce_txn(c, tid, topic, 0, pid, epoch, 0, [b"lost"]) == NONE
        _wait(lambda: describe(c, tid)["transaction_state"] == "CompleteAbort")
        assert describe(c, tid)["producer_epoch"] == epoch + 1
        assert end(c, tid, pid, epoch, True) == PRODUCER_FENCED
        # the partition's last stable offset moved past the aborted data: later data shows
        assert committed_values(c, topic, 0) == []
        again = init(c, tid)
        assert again["producer_epoch"] == epoch + 2


def test_transactions_survive_a_restart_of_the_coordinator(start_broker):
    b = start_broker()
    with b.client() as c:
        topic = unique_topic("tx")
        c.create_topic(topic, partitions=1)
        tid = unique_topic("tid")
        got = init(c, tid)
        pid, epoch = got["producer_id"], got["producer_epoch"]
        assert add_partitions(c, tid, pid, epoch, topic, [0]) == {0: NONE}
        assert produce_txn(c, tid, topic, 0, pid, epoch, 0, [b"kept"]) == NONE
    b.restart()
    with b.client() as c:
        d = describe(c, tid)
        assert (d["transaction_state"], d["producer_id"]) == ("Ongoing", pid)
        assert end(c, tid, pid, epoch, True) == NONE
        _wait(lambda: committed_values(c, topic, 0) == [b"kept"])
        # a new instance after the restart fences the old epoch
        assert _wait(lambda: init(c, tid))["producer_epoch"] == epoch + 1


def test_odd_transactional_ids_get_kafka_errors_not_a_crash(client, topic):
    """Found by the short protocol fuzz: AddPartitionsToTxn with transactional id "" made the
    coordinator build the znode path "/transactions/" (ValueError in the handler).  Every id
    maps to one valid znode name now."""
    for tid in ("", ".", "..", "a/b", "x\x00y"):
        assert add_partitions(client, tid, 1, 0, topic, [0]) == {0: INVALID_PRODUCER_ID_MAPPING}
        assert end(client, tid, 1, 0, True) == INVALID_PRODUCER_ID_MAPPING
        assert describe(client, tid)["error_code"] == TRANSACTIONAL_ID_NOT_FOUND
    for tid in (".", "a/b"):
        got = init(client, tid)
        assert got["error_code"] == NONE
        assert describe(client, tid)["producer_id"] == got["producer_id"]
