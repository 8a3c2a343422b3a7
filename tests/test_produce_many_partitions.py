"""A Produce naming more partitions than the replica manager applies in one slice
(pybroker/replica_manager.py APPEND_SLICE): one answer with every partition's own outcome in
request order, every record in its partition, and the loop's other work served between two
slices (W22 at 100,000 replicas: a Produce to the 16,700 partitions a broker leads)."""

from __future__ import annotations

import asyncio

import pytest
from broker_fixture import (
    CORRUPT_MESSAGE,
    NONE,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    PRODUCE,
    UNKNOWN_TOPIC_OR_PARTITION,
    batch,
    fetch_body,
    fetched_values,
    unique_topic,
    wait_until,
)

from pybroker.errors import KafkaError
from pybroker.replica_manager import APPEND_SLICE, READ_SLICE, FetchParams, ReadPartition

FETCH = 1
PARTITIONS = APPEND_SLICE + 20  # per topic: two topics make three slices


@pytest.fixture(scope="module")
def topics(shared_broker):
    return _created(shared_broker, 2)


def _created(broker, n: int) -> list[str]:
    """``n`` topics of PARTITIONS partitions, each led here."""
    names = [unique_topic("many") for _ in range(n)]
    with broker.client() as c:
        for name in names:
            c.create_topic(name, partitions=PARTITIONS)
    replicas = broker.broker.replicas

    async def led() -> bool:
        try:
            for t in names:
                for p in range(PARTITIONS):
                    replicas.leader_replica(t, p)
        except KafkaError:
            return False
        return True

    wait_until(lambda: broker.run(led()))  # (CreateTopics answers before the elections)
    return names


def _values(topic: str, p: int, round_: int) -> list[bytes]:
    return [f"{topic}/{p}/{round_}/{i}".encode() for i in range(1 + p % 3)]


def _fetch_all(client, names: list[str]) -> dict[tuple[str, int], list[bytes]]:
    body = client.request(
        FETCH,
        11,
        fetch_body([(t, p, 0, 1 << 20) for t in names for p in range(PARTITIONS)]),
    )
    got = {}
    for t in body["responses"]:
        for p in t["partitions"]:
            assert p["error_code"] == NONE, (t["topic"], p)
            got[(t["topic"], p["partition_index"])] = [v for _, v in fetched_values(p["records"])]
    return got


@pytest.mark.parametrize("acks", [1, -1])
def test_every_partition_answered_in_order_and_every_record_lands(broker, topics, acks):
    a, b = topics
    with broker.client() as c:
        pid = c.init_producer_id()["producer_id"]
        # what was there before: partition p of topic a holds p % 4 records
        for p in range(PARTITIONS):
            if p % 4:
                r = c.produce(a, p, batch([b"before"] * (p % 4)), acks=acks)
                assert r["error_code"] == NONE
        gap = (b, 5)  # an idempotent batch out of sequence below (its sequence 0 is here)
        first = batch(_values(*gap, acks), producer_id=pid, producer_epoch=0, base_sequence=0)
        assert c.produce(*gap, first, acks=acks)["error_code"] == NONE
        before = _fetch_all(c, topics)
        bad = {(a, 3), (b, APPEND_SLICE + 1)}  # a corrupt batch in the first and third slice
        order = [(a, p) for p in range(PARTITIONS)] + [(b, p) for p in range(PARTITIONS)]
        order += [(b, PARTITIONS)]  # no such partition, last
        data: dict[str, list[dict]] = {}
        for t, p in order:
            rec = batch(_values(t, p, acks))
            if (t, p) in bad:
                rec = rec[:-1] + bytes([rec[-1] ^ 0xFF])
            elif (t, p) == gap:
                rec = batch(_values(t, p, acks), producer_id=pid, producer_epoch=0, base_sequence=7)
            data.setdefault(t, []).append({"index": p, "records": rec})
        req = {
            "transactional_id": None,
            "acks": acks,
            "timeout_ms": 10000,
            "topic_data": [{"name": t, "partition_data": ps} for t, ps in data.items()],
        }
        body = c.request(PRODUCE, 9, req)
        answered = [
            (t["name"], p["index"], p["error_code"], p["base_offset"])
            for t in body["responses"]
            for p in t["partition_responses"]
        ]
        after = _fetch_all(c, topics)
    assert [(t, p) for t, p, _, _ in answered] == order
    for t, p, code, base in answered:
        if (t, p) in bad:
            assert (code, base) == (CORRUPT_MESSAGE, -1)
        elif (t, p) == gap:
            assert (code, base) == (OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
        elif p == PARTITIONS:
            assert (code, base) == (UNKNOWN_TOPIC_OR_PARTITION, -1)
        else:
            assert (code, base) == (NONE, len(before[(t, p)])), (t, p)
    for key, values in after.items():
        added = [] if key in bad or key == gap else _values(*key, acks)
        assert values == before[key] + added, key


def test_the_loop_serves_other_work_between_two_slices(broker, topics):
    """A step of another task runs while one Produce's partitions are appended, between two
    slices: some partitions hold their record by then, not all."""
    a, b = topics
    entries = [(t, p, bytearray(batch([b"x"]))) for t in (a, b) for p in range(PARTITIONS)]
    replicas = broker.broker.replicas

    def appended() -> int:
        return sum(
            1
            for t, p, _ in entries
            if replicas.leader_replica(t, p).log.log_end_offset > ends[(t, p)]
        )

    async def produce() -> tuple[int, list]:
        seen = []

        async def other() -> None:
            seen.append(appended())

        task = asyncio.get_running_loop().create_task(other())
        answers = await replicas.append_records(
            entries, acks=1, timeout_ms=10000, produce_version=9
        )
        await task
        return seen[0], answers

    async def log_ends() -> dict:
        return {(t, p): replicas.leader_replica(t, p).log.log_end_offset for t, p, _ in entries}

    ends = broker.run(log_ends())
    seen, answers = broker.run(produce())
    assert [r.error for r in answers] == [NONE] * len(entries)
    assert 0 < seen < len(entries)
    assert broker.run(log_ends()) == {key: end + 1 for key, end in ends.items()}


def _content(r) -> tuple:
    records = r.records
    if records is not None and not isinstance(records, bytes | bytearray):
        records = records.read_bytes()  # a log region: its bytes
    return (*r._replace(records=None), bytes(records) if records is not None else None)


@pytest.mark.parametrize("cut", [None, 0, 50, 70])
def test_a_fetch_read_in_slices_answers_as_one_read(broker, topics, cut):
    """The read of a Fetch naming more partitions than READ_SLICE goes in slices: the answer
    is one read's (KIP-74: max_bytes shared across the slices, the first batch of the first
    partition with records whole), and another task's step runs between two slices.  ``cut``:
    max_bytes runs out at that written partition (0: only the first batch; None: no bound)."""
    (c,) = _created(broker, 1)
    replicas = broker.broker.replicas
    written = list(range(READ_SLICE - 50, PARTITIONS))  # on both sides of the first slice's end
    entries = [(c, p, bytearray(batch([b"y" * 1000] * (1 + p % 3)))) for p in written]
    asks = [ReadPartition(c, p, 0, 1 << 20) for p in range(PARTITIONS)]
    asks += [ReadPartition(t, p, 0, 1 << 20) for t in topics for p in range(PARTITIONS)]

    async def read() -> tuple:
        await replicas.append_records(entries, acks=1, timeout_ms=10000, produce_version=9)
        sizes = [len(e[2]) for e in entries]
        max_bytes = 50 << 20 if cut is None else sum(sizes[:cut]) + 100
        params = FetchParams(-1, max_bytes)
        whole, whole_total = replicas.read_from_log(params, asks)
        ran = []

        async def other() -> None:
            ran.append(True)

        task = asyncio.get_running_loop().create_task(other())
        sliced, sliced_total = await replicas.read_from_log_in_slices(params, asks)
        ran_during = bool(ran)
        await task
        return (
            [_content(r) for r in whole],
            whole_total,
            [_content(r) for r in sliced],
            sliced_total,
            ran_during,
        )

    whole, whole_total, sliced, sliced_total, ran_during = broker.run(read())
    assert sliced_total == whole_total
    assert sliced == whole
    assert ran_during
    read_from = [p for p in written if whole[p][-1]]
    if cut == 0:  # the first batch alone, whole though beyond max_bytes
        assert read_from == [written[0]]
    elif cut is not None:  # the budget, shared, ran out at the cut
        assert read_from[:cut] == written[:cut] and len(read_from) <= cut + 1
