"""Producer ids (Kafka's ZkProducerIdManager): each broker claims blocks of
:data:`PRODUCER_ID_BLOCK_SIZE` ids from /latest_producer_id_block with compare-and-set and hands
them out one by one, so ids are unique across the cluster and never reused after a restart."""

from __future__ import annotations

import asyncio

from pybroker.coord.metadata import paths
from pybroker.coord.metadata.store import BadVersionError, MetadataStore, NoNodeError
from pybroker.errors import ErrorCode, KafkaError

PRODUCER_ID_BLOCK_SIZE = (
    1000  # kafka.server.ProducerIdManager / ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
)


class ProducerIdManager:
    def __init__(self, store: MetadataStore, broker_id: int) -> None:
        self.store = store
        self.broker_id = broker_id
        self._pid_next = 0
        self._pid_end = -1  # inclusive end of the block in hand
        self._pid_claim: asyncio.Future[None] | None = None

    async def allocate(self) -> int:
        """The next producer id: from the block in hand, claiming a new block of 1000 from
        /latest_producer_id_block with compare-and-set when it is used up (Kafka's
        ZkProducerIdManager)."""
        while self._pid_next > self._pid_end:
            if self._pid_claim is None:
                self._pid_claim = asyncio.ensure_future(self._claim_block())
            claim = self._pid_claim
            try:
                await asyncio.shield(claim)
            finally:
                if self._pid_claim is claim and claim.done():
                    self._pid_claim = None
        pid = self._pid_next
        self._pid_next += 1
        return pid

    async def _claim_block(self) -> None:
        while True:
            try:
                data, stat = await self.store.get(paths.PRODUCER_ID_BLOCK)
            except NoNodeError:
                await self.store.ensure_path(paths.PRODUCER_ID_BLOCK)
                continue
            current = paths.decode_producer_id_block(data)
            start = 0 if current is None else current[2] + 1
            if start > 2**63 - 1 - PRODUCER_ID_BLOCK_SIZE:
                raise KafkaError(
                    ErrorCode.UNKNOWN,
                    "Exhausted all producerIds as the next block's end "
                    "producerId has exceeded the int64 type limit",
                )
            end = start + PRODUCER_ID_BLOCK_SIZE - 1
            try:
                await self.store.set(
                    paths.PRODUCER_ID_BLOCK,
                    paths.encode_producer_id_block(self.broker_id, start, end),
                    version=stat.version,
                )
            except BadVersionError:
                continue  # another broker claimed a block meanwhile: retry on its result
            self._pid_next, self._pid_end = start, end
            return
