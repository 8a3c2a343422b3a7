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
from pybroker.replica_manager import APPEND_SLICE

FETCH = 1
PARTITIONS = APPEND_SLICE + 20  # per topic: two topics make three slices


@pytest.fixture(scope="module")
def topics(shared_broker):
    names = [unique_topic("many"), unique_topic("many")]
    with shared_broker.client() as c:
        for name in names:
            c.create_topic(name, partitions=PARTITIONS)
    replicas = shared_broker.broker.replicas

    async def led() -> bool:
        try:
            for t in names:
                for p in range(PARTITIONS):
                    replicas.leader_replica(t, p)
        except KafkaError:
            return False
        return True

    wait_until(lambda: shared_broker.run(led()))  # (CreateTopics answers before the elections)
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
