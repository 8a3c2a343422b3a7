"""Creating many partitions at once (issue 27): the logs of partitions a sync pass leaves over
are created in a worker thread (HostedLogs.create_new_logs), never on the event loop, and each
ends up the partition's log exactly once, with its topic id and first leader epoch."""

from __future__ import annotations

import threading

import pytest
from broker_fixture import (
    LIST_OFFSETS,
    NONE,
    batch,
    unique_topic,
    wait_until,
)

from pybroker.log import partition_metadata
from pybroker.log.leader_epoch import LEADER_EPOCH_CHECKPOINT, read_leader_epoch_checkpoint

PARTITIONS = 600  # more than a 10 ms pass opens on the loop, on any machine
DELETE_TOPICS = 20


@pytest.fixture
def spied(start_broker):
    """A broker whose create_new_logs records the partitions it was handed."""
    b = start_broker()
    handed: list[tuple[str, int]] = []
    original = b.broker.hosted.create_new_logs

    async def spy(keys):
        handed.extend(keys)
        await original(keys)

    b.broker.replicas.create_logs = spy
    return b, handed


def answering(client, topic: str, partitions: int) -> set[int]:
    body = client.request(
        LIST_OFFSETS,
        5,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": p, "timestamp": -1} for p in range(partitions)
                    ],
                }
            ],
        },
    )
    (t,) = body["topics"]
    return {p["partition_index"] for p in t["partitions"] if p["error_code"] == NONE}


def test_many_new_partitions_get_their_logs_off_the_loop(spied):
    b, handed = spied
    topic = unique_topic()
    with b.client() as c:
        c.create_topic(topic, partitions=PARTITIONS)
        wait_until(lambda: len(answering(c, topic, PARTITIONS)) == PARTITIONS, timeout=120)
        assert handed, "no partition was created off the loop"
        assert len(set(handed)) == len(handed)  # each handed over once
        info = b.broker.cluster.topics[topic]
        for p in range(PARTITIONS):
            plog = b.broker.logs.get(topic, p)
            assert plog is not None and plog.topic_id == info.topic_id
            assert partition_metadata.read(plog.directory) == info.topic_id
            assert read_leader_epoch_checkpoint(plog.directory / LEADER_EPOCH_CHECKPOINT) == [
                (0, 0)
            ]
        dirs = [d.name for d in b.log_dir.iterdir() if d.name.startswith(topic)]
        assert sorted(dirs) == sorted(f"{topic}-{p}" for p in range(PARTITIONS))
        last = handed[-1][1]
        assert c.produce(topic, last, batch([b"x"]))["error_code"] == NONE


def test_a_topic_deleted_while_its_logs_are_made_keeps_no_log(spied):
    """The deletion reaches the broker (its logs deleted) while a worker thread is making the
    topic's logs: the logs it makes after that are discarded, none is kept."""
    b, handed = spied
    topic = unique_topic()
    gate, deleted = threading.Event(), threading.Event()
    open_new, topic_deleted = b.broker.logs.open_new, b.broker.hosted.topic_deleted

    def held_open_new(*args, **kwargs):  # in the worker thread: waits for the deletion
        gate.wait(60)
        return open_new(*args, **kwargs)

    def noted_topic_deleted(name: str) -> None:
        topic_deleted(name)
        if name == topic:
            deleted.set()

    b.broker.logs.open_new = held_open_new
    b.broker.hosted.topic_deleted = noted_topic_deleted
    with b.client() as c:
        c.create_topic(topic, partitions=PARTITIONS)
        replicas = b.broker.replicas
        wait_until(lambda: replicas._opening, timeout=60)  # a worker is making logs
        body = c.request(DELETE_TOPICS, 4, {"topic_names": [topic], "timeout_ms": 10000})
        assert [r["error_code"] for r in body["responses"]] == [NONE]
        assert deleted.wait(60), "the deletion never reached the broker's logs"
        gate.set()
        wait_until(lambda: not replicas._opening and not replicas._deferred, timeout=120)
        assert handed, "no partition was created off the loop"
        # the deleted logs go over several loop iterations (delete_logs' budget); a log made
        # for the deleted topic and kept would never go
        wait_until(lambda: not [k for k in list(b.broker.logs.logs) if k[0] == topic], timeout=60)
        wait_until(
            lambda: (
                not [
                    d
                    for d in b.log_dir.iterdir()
                    if d.name.startswith(topic) and not d.name.endswith("-delete")
                ]
            )
        )
        c.create_topic(topic, partitions=3)  # the name is free, a new incarnation
        wait_until(lambda: len(answering(c, topic, 3)) == 3)
        new_id = b.broker.cluster.topics[topic].topic_id
        assert all(b.broker.logs.get(topic, p).topic_id == new_id for p in range(3))
