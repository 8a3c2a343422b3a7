"""Group commit of the coordinators' appends (pybroker/internal_topics.py, InternalTopic.append):
the appends asked for in one loop step to one partition become one batch, each caller's
records contiguous and in arrival order, each caller answered with its own last offset; an
append error reaches every caller of the batch; a caller cancelled while queued is withdrawn;
transactional appends and other partitions or leader epochs never join."""

from __future__ import annotations

import asyncio

import pytest

from pybroker.coord.metadata.internal_log import CoordinatorWriteError
from pybroker.errors import ErrorCode
from pybroker.internal_topics import InternalTopic
from pybroker.wire.records import decode_records, unpack_header


class _Clock:
    def time_ms(self) -> int:
        return 1_700_000_000_000


class _Replicas:
    """append_as_coordinator over in-memory logs: (partition) -> [(leader epoch, header,
    [(key, value)])]; ``fail`` answers that code instead of appending."""

    def __init__(self) -> None:
        self.logs: dict[int, list[tuple[int, object, list[tuple[bytes, bytes | None]]]]] = {}
        self.ends: dict[int, int] = {}
        self.fail: int | None = None

    async def append_as_coordinator(
        self, topic: str, partition: int, batch: bytes, *, leader_epoch: int, timeout_ms: int
    ) -> tuple[int, int]:
        await asyncio.sleep(0)  # (acks=all: the wait for the in-sync replicas)
        if self.fail is not None:
            return self.fail, -1
        h = unpack_header(batch)
        records = [(r.key, r.value) for r in decode_records(batch)]
        self.logs.setdefault(partition, []).append((leader_epoch, h, records))
        end = self.ends.get(partition, 0) + len(records)
        self.ends[partition] = end
        return ErrorCode.NONE, end - 1


class _Broker:
    def __init__(self) -> None:
        self.clock = _Clock()
        self.replicas = _Replicas()


def _topic() -> InternalTopic:
    return InternalTopic(
        _Broker(),
        "__consumer_offsets",
        partitions=4,
        replication_factor=lambda: 1,
        configs=dict,
        timeout_ms=lambda: 5000,
        owner=None,
    )


def _recs(tag: str, n: int) -> list[tuple[bytes, bytes | None]]:
    return [(f"{tag}-k{i}".encode(), f"{tag}-v{i}".encode()) for i in range(n)]


def test_appends_of_one_step_are_one_batch_in_arrival_order() -> None:
    topic = _topic()

    async def main() -> list[int]:
        calls = [topic.append(0, _recs(f"c{i}", i % 3 + 1), leader_epoch=5) for i in range(6)]
        return list(await asyncio.gather(*calls))

    lasts = asyncio.run(main())
    ((epoch, h, records),) = topic.broker.replicas.logs[0]
    assert epoch == 5 and h.partition_leader_epoch == 5
    assert records == [r for i in range(6) for r in _recs(f"c{i}", i % 3 + 1)]
    # each caller's last offset is the offset of its own last record
    ends = []
    at = -1
    for i in range(6):
        at += i % 3 + 1
        ends.append(at)
    assert lasts == ends
    assert topic.group_commits == [6, 1]


def test_partitions_epochs_and_transactions_do_not_join() -> None:
    topic = _topic()

    async def main() -> None:
        await asyncio.gather(
            topic.append(0, _recs("a", 1), leader_epoch=1),
            topic.append(1, _recs("b", 1), leader_epoch=1),
            topic.append(0, _recs("c", 1), leader_epoch=2),
            topic.append(
                0,
                _recs("t", 2),
                leader_epoch=1,
                producer_id=7,
                producer_epoch=0,
                transactional=True,
            ),
            topic.append(0, _recs("d", 1), leader_epoch=1),
        )

    asyncio.run(main())
    logs = topic.broker.replicas.logs
    assert len(logs[1]) == 1
    batches = {(e, h.producer_id): recs for e, h, recs in logs[0]}
    assert batches[(1, -1)] == _recs("a", 1) + _recs("d", 1)
    assert batches[(2, -1)] == _recs("c", 1)
    assert batches[(1, 7)] == _recs("t", 2)


def test_an_append_error_reaches_every_caller_of_the_batch() -> None:
    topic = _topic()
    topic.broker.replicas.fail = ErrorCode.NOT_LEADER_OR_FOLLOWER

    async def main() -> list[object]:
        calls = [topic.append(2, _recs(f"c{i}", 1), leader_epoch=0) for i in range(3)]
        return list(await asyncio.gather(*calls, return_exceptions=True))

    for outcome in asyncio.run(main()):
        assert isinstance(outcome, CoordinatorWriteError)
        assert outcome.code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_caller_cancelled_while_queued_is_withdrawn() -> None:
    topic = _topic()

    async def main() -> None:
        a = asyncio.ensure_future(topic.append(3, _recs("a", 1), leader_epoch=0))
        b = asyncio.ensure_future(topic.append(3, _recs("b", 1), leader_epoch=0))
        c = asyncio.ensure_future(topic.append(3, _recs("c", 1), leader_epoch=0))
        await asyncio.sleep(0)  # all three queued
        b.cancel()
        assert await a == 0 and await c == 1
        with pytest.raises(asyncio.CancelledError):
            await b

    asyncio.run(main())
    ((_, _, records),) = topic.broker.replicas.logs[3]
    assert records == _recs("a", 1) + _recs("c", 1)


def test_a_large_step_is_cut_into_batches_under_the_size_bound(monkeypatch) -> None:
    monkeypatch.setattr("pybroker.internal_topics.GROUP_COMMIT_BYTES", 100)
    topic = _topic()

    async def main() -> list[int]:
        calls = [topic.append(0, _recs(f"c{i}", 2), leader_epoch=0) for i in range(5)]
        return list(await asyncio.gather(*calls))

    assert asyncio.run(main()) == [1, 3, 5, 7, 9]
    batches = topic.broker.replicas.logs[0]
    assert len(batches) > 1
    assert [r for _, _, recs in batches for r in recs] == [
        r for i in range(5) for r in _recs(f"c{i}", 2)
    ]
    for _, _, recs in batches:
        assert len(recs) % 2 == 0  # a caller's records never split across batches
