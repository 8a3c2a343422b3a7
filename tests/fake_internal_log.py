"""An in-memory InternalLog (coord/metadata/internal_log.py) for the coordinators' unit tests:
partitions of batches with offsets, a leader epoch per partition (an append or replay naming
another epoch fails NOT_LEADER_OR_FOLLOWER, as the replica manager's does), the producer
epoch check of transactional appends (INVALID_PRODUCER_EPOCH), transaction markers, and
``elect(store)``, which makes a store lead every partition at the next epoch."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from pybroker.coord.metadata.internal_log import CoordinatorWriteError, LogBatch, Record
from pybroker.errors import ErrorCode


class FakeLog:
    def __init__(self, partitions: int = 50) -> None:
        self.partitions = partitions
        self.batches: dict[int, list[LogBatch]] = {p: [] for p in range(partitions)}
        self.epochs: dict[int, int] = dict.fromkeys(range(partitions), 0)
        self.producer_epochs: dict[tuple[int, int], int] = {}
        self.fail_with: int | None = None  # every append fails with this code
        self.appends = 0

    def _end(self, p: int) -> int:
        b = self.batches[p]
        return b[-1].last_offset + 1 if b else 0

    def elect(self, *stores) -> None:
        """Every partition gets a new leader epoch, led by ``stores`` (each elected)."""
        for p in range(self.partitions):
            self.epochs[p] += 1
            for s in stores:
                s.on_election(p, self.epochs[p])

    async def append(
        self,
        partition: int,
        records: Sequence[Record],
        *,
        leader_epoch: int,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> int:
        await asyncio.sleep(0)
        self.appends += 1
        if self.fail_with is not None:
            raise CoordinatorWriteError(self.fail_with)
        if leader_epoch != self.epochs[partition]:
            raise CoordinatorWriteError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if producer_id >= 0:
            known = self.producer_epochs.get((partition, producer_id), -1)
            if producer_epoch < known:
                raise CoordinatorWriteError(ErrorCode.INVALID_PRODUCER_EPOCH)
            self.producer_epochs[(partition, producer_id)] = producer_epoch
        base = self._end(partition)
        recs = [(base + i, k, v) for i, (k, v) in enumerate(records)]
        self.batches[partition].append(
            LogBatch(
                base,
                base + len(recs) - 1,
                producer_id,
                producer_epoch,
                transactional,
                None,
                recs,
            )
        )
        return base + len(recs) - 1

    def append_now(self, partition: int, records: Sequence[Record], *, leader_epoch: int):
        """Always an awaitable here (the append yields once, as the real one may wait)."""
        return self.append(partition, records, leader_epoch=leader_epoch)

    def marker(self, partition: int, producer_id: int, committed: bool) -> None:
        base = self._end(partition)
        self.batches[partition].append(LogBatch(base, base, producer_id, 0, True, committed, []))

    async def replay(self, partition: int, leader_epoch: int) -> AsyncIterator[LogBatch]:
        i = 0
        while True:
            await asyncio.sleep(0)
            if leader_epoch != self.epochs[partition]:
                raise CoordinatorWriteError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            if i >= len(self.batches[partition]):
                return
            yield self.batches[partition][i]
            i += 1
