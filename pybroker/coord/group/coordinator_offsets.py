"""Committed offsets in the group coordinator (Kafka's OffsetMetadataManager): OffsetCommit,
OffsetFetch, TxnOffsetCommit and its markers, OffsetDelete and retention."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterator

from pybroker.coord.group.classic import Group
from pybroker.coord.group.consumer import ConsumerGroup
from pybroker.coord.group.coordinator_core import (
    GroupCoordinatorCore,
    group_dead,
    group_empty,
    store_error_code,
)
from pybroker.coord.group.offsets import CommittedOffset
from pybroker.coord.group.offsets_log import LogOffsetStore
from pybroker.coord.metadata.model import TopicPartition
from pybroker.coord.metadata.store import StoreError
from pybroker.errors import ErrorCode, KafkaError
from pybroker.wire.consumer_protocol import PROTOCOL_TYPE, subscription_topics

log = logging.getLogger(__name__)
_NONE = ErrorCode.NONE  # (read once: an Enum member's class attribute is slow on 3.11)


def _subscribed_topics(g: Group) -> set[str] | None:
    """The topics the members of a "consumer" group subscribe to (Kafka's
    GroupMetadata.computeSubscribedTopics), read from each member's metadata for the group's
    protocol; None (unknown) before the group has chosen a protocol or when a member's
    metadata does not follow the consumer protocol."""
    if g.protocol_name is None or not g.members:
        return None
    topics: set[str] = set()
    for m in g.members.values():
        try:
            topics.update(subscription_topics(m.metadata(g.protocol_name)))
        except ValueError:  # UnicodeDecodeError included
            return None
    return topics


def _commit_failed(
    group_id: str,
    e: StoreError,
    to_write: dict[TopicPartition, CommittedOffset],
    results: dict[TopicPartition, int],
) -> dict[TopicPartition, int]:
    log.warning("offset commit for group %s failed: %s", group_id, e)
    results.update(dict.fromkeys(to_write, store_error_code(e)))
    return results


async def _committed_later(
    group_id: str,
    waiting: Awaitable[None],
    to_write: dict[TopicPartition, CommittedOffset],
    results: dict[TopicPartition, int],
) -> dict[TopicPartition, int]:
    """The rest of a commit whose append waits (for the in-sync replicas, or the store)."""
    try:
        await waiting
    except StoreError as e:
        return _commit_failed(group_id, e, to_write, results)
    results.update(dict.fromkeys(to_write, _NONE))
    return results


class GroupOffsets(GroupCoordinatorCore):
    def commit_now(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        offsets: dict[TopicPartition, tuple[int, int, str | None]],
        *,
        retention_ms: int | None = None,
        commit_timestamps: dict[TopicPartition, int] | None = None,
        api_version: int = 9,
    ) -> dict[TopicPartition, int] | Awaitable[dict[TopicPartition, int]]:
        """``commit`` without a coroutine when nothing waits (the group's state loaded, the
        store's append durable at once): the error per partition, else an awaitable of it."""
        if group_id not in self._checked:  # its durable state is read first
            return self.commit(
                group_id,
                member_id,
                instance_id,
                generation_id,
                offsets,
                retention_ms=retention_ms,
                commit_timestamps=commit_timestamps,
                api_version=api_version,
            )
        return self._commit_loaded(
            group_id,
            member_id,
            instance_id,
            generation_id,
            offsets,
            retention_ms,
            commit_timestamps,
            api_version,
        )

    async def commit(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        offsets: dict[TopicPartition, tuple[int, int, str | None]],
        *,
        retention_ms: int | None = None,
        commit_timestamps: dict[TopicPartition, int] | None = None,
        api_version: int = 9,
    ) -> dict[TopicPartition, int]:
        """Commit (offset, leader epoch, metadata) per partition; an error code per partition.
        ``retention_ms`` (OffsetCommit v2-4) gives these commits an explicit expiry time, and
        ``commit_timestamps`` (v1) their commit time instead of now.  In a KIP-848 group the
        generation is the member epoch (ConsumerGroup.validate_offset_commit)."""
        load_error = await self.load_group(group_id)
        if load_error is not None:
            return dict.fromkeys(offsets, load_error)
        got = self._commit_loaded(
            group_id,
            member_id,
            instance_id,
            generation_id,
            offsets,
            retention_ms,
            commit_timestamps,
            api_version,
        )
        return got if type(got) is dict else await got

    def _commit_loaded(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        offsets: dict[TopicPartition, tuple[int, int, str | None]],
        retention_ms: int | None,
        commit_timestamps: dict[TopicPartition, int] | None,
        api_version: int,
    ) -> dict[TopicPartition, int] | Awaitable[dict[TopicPartition, int]]:
        now = self.clock.time_ms()
        cg = self.groups.get(group_id)
        if isinstance(cg, ConsumerGroup):
            code = cg.validate_offset_commit(member_id, generation_id, api_version)
        else:
            g = self._get(group_id, create=True)
            assert g is not None
            code = g.validate_commit(member_id, instance_id, generation_id, now)
        self._schedule(group_id)
        if code != _NONE:
            return dict.fromkeys(offsets, code)
        results: dict[TopicPartition, int] = {}
        to_write: dict[TopicPartition, CommittedOffset] = {}
        for tp, offset, epoch, metadata in self._metadata_checked(offsets, results):
            expire = now + retention_ms if retention_ms is not None else None
            stamp = now if commit_timestamps is None else commit_timestamps.get(tp, now)
            to_write[tp] = CommittedOffset(offset, epoch, metadata, stamp, expire)
        if to_write:
            try:
                waiting = self.offsets.commit_now(group_id, to_write)
            except StoreError as e:
                return _commit_failed(group_id, e, to_write, results)
            if waiting is not None:
                return _committed_later(group_id, waiting, to_write, results)
            for tp in to_write:
                results[tp] = _NONE
        return results

    def _metadata_checked(
        self,
        offsets: dict[TopicPartition, tuple[int, int, str | None]],
        results: dict[TopicPartition, int],
    ) -> Iterator[tuple[TopicPartition, int, int, str]]:
        """The commits whose metadata fits offset.metadata.max.bytes (None read as ""); the
        others answer OFFSET_METADATA_TOO_LARGE in ``results``."""
        for tp, (offset, epoch, metadata) in offsets.items():
            metadata = metadata or ""
            if len(metadata.encode()) > self.offset_metadata_max_bytes:
                results[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                yield tp, offset, epoch, metadata

    async def fetch(
        self, group_id: str, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, CommittedOffset | None]:
        """The group's committed offsets (of ``partitions``, or all); KafkaError(
        COORDINATOR_NOT_AVAILABLE) when the store cannot be reached (retriable, as the
        commit's answer)."""
        try:
            committed = await self.offsets.load(group_id)
        except StoreError as e:
            log.warning("offset fetch for group %s failed: %s", group_id, e)
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e)) from e
        if partitions is None:
            return dict(committed)
        return {tp: committed.get(tp) for tp in partitions}

    async def unstable_partitions(self, group_id: str) -> set[TopicPartition]:
        """Partitions with an offset pending in an open transaction (require_stable);
        KafkaError(COORDINATOR_NOT_AVAILABLE) when the store cannot be reached."""
        try:
            return await self.txn_offsets.pending_partitions(group_id)
        except StoreError as e:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e)) from e

    async def txn_commit(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        offsets: dict[TopicPartition, tuple[int, int, str | None]],
    ) -> dict[TopicPartition, int]:
        """TxnOffsetCommit: keep the offsets pending until the transaction's marker."""
        load_error = await self.load_group(group_id)
        if load_error is not None:
            return dict.fromkeys(offsets, load_error)
        g: Group | ConsumerGroup | None = self.groups.get(group_id)
        if not isinstance(g, ConsumerGroup):
            g = self._get(group_id, create=True)
        assert g is not None
        code = g.validate_txn_commit(member_id, instance_id, generation_id)
        if code != ErrorCode.NONE:
            return dict.fromkeys(offsets, code)
        now = self.clock.time_ms()
        results: dict[TopicPartition, int] = {}
        pending: dict[TopicPartition, CommittedOffset] = {}
        for tp, offset, epoch, metadata in self._metadata_checked(offsets, results):
            pending[tp] = CommittedOffset(offset, epoch, metadata, now)
        if pending:
            try:
                ok = await self.txn_offsets.add(group_id, producer_id, producer_epoch, pending)
                code = ErrorCode.NONE if ok else ErrorCode.INVALID_PRODUCER_EPOCH
            except StoreError as e:
                log.warning("transactional offset commit for group %s failed: %s", group_id, e)
                self.txn_offsets.invalidate()
                code = store_error_code(e)
            results.update(dict.fromkeys(pending, code))
        return results

    async def complete_txn(self, producer_id: int, committed: bool, partition: int) -> int:
        """The marker of a transaction for offsets partition ``partition``: the pending
        offsets of its groups become committed (or are dropped).  An error code."""
        if isinstance(self.offsets, LogOffsetStore):
            # the marker is in the partition's log already (the replay of a partition being
            # loaded reads it there); NOT_COORDINATOR once another broker leads it
            if not self.offsets.owns(partition):
                return ErrorCode.NOT_COORDINATOR
            await self.offsets.complete(producer_id, committed, partition)
            return ErrorCode.NONE
        code = self.partition_error(partition)
        if code is not None:
            return code

        async def commit(group_id: str, offsets: dict[TopicPartition, CommittedOffset]) -> None:
            await self.offsets.commit(group_id, offsets)

        try:
            await self.txn_offsets.complete(producer_id, committed, partition, commit)
        except StoreError as e:
            log.warning("completing transactional offsets of producer %d: %s", producer_id, e)
            self.txn_offsets.invalidate()
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE

    async def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[int, dict[TopicPartition, int]]:
        """OffsetDelete (Kafka's GroupCoordinator.handleDeleteOffsets): (group error, error per
        partition).  An empty group loses the offsets of every partition asked for; a non-empty
        "consumer" group only those of topics no member subscribes to (the others answer
        GROUP_SUBSCRIBED_TO_TOPIC; when the subscriptions cannot be read, every topic counts
        as subscribed); any other non-empty group is NON_EMPTY_GROUP.  An unknown (or dead)
        group is GROUP_ID_NOT_FOUND.  A partition without a committed offset answers NONE.
        An empty group left without offsets is removed (it becomes Dead), as in Kafka."""
        g = self.groups.get(group_id)
        if g is None or group_dead(g):
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        results: dict[TopicPartition, int] = {}
        if group_empty(g):
            eligible = list(dict.fromkeys(partitions))
        elif g.protocol_type == PROTOCOL_TYPE:
            subscribed = (
                g.subscribed_topics(self._topics())
                if isinstance(g, ConsumerGroup)
                else _subscribed_topics(g)
            )
            eligible = []
            for tp in dict.fromkeys(partitions):
                if subscribed is None or tp[0] in subscribed:
                    results[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    eligible.append(tp)
        else:
            return ErrorCode.NON_EMPTY_GROUP, {}
        if eligible:
            try:
                await self.offsets.delete_offsets(group_id, eligible)
            except StoreError as e:
                log.warning("deleting offsets of group %s failed: %s", group_id, e)
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, {}
            results.update(dict.fromkeys(eligible, ErrorCode.NONE))
            log.info("deleted the offsets of group %s for %s", group_id, eligible)
            try:
                none_left = not await self.offsets.load(group_id)
            except StoreError:
                none_left = False
            if none_left and self.groups.get(group_id) is g and group_empty(g):
                g.mark_dead(self.clock.time_ms())
                del self.groups[group_id]
                self._schedule(group_id)
                self.classic_store.save(group_id, None)
        return ErrorCode.NONE, results

    async def expire_offsets(self) -> int:
        """Drop the offsets of groups that have been empty for offsets.retention.minutes, and
        offsets whose explicit expiry time (OffsetCommit v2-4) has passed."""
        now = self.clock.time_ms()
        dropped = 0
        for gid, g in list(self.groups.items()):
            empty_long_enough = (
                group_empty(g) and now - g.state_timestamp_ms >= self.offsets_retention_ms
            )
            cached = self.offsets.cached(gid) or {}
            explicit = any(co.expire_timestamp is not None for co in cached.values())
            if not empty_long_enough and not explicit:
                continue
            older_than = now - self.offsets_retention_ms + 1 if empty_long_enough else -(2**63)
            try:
                dropped += await self.offsets.expire(gid, older_than)
                if not await self.offsets.load(gid) and group_empty(g):
                    g.mark_dead(now)
                    self.groups.pop(gid, None)
                    self.classic_store.save(gid, None)
            except StoreError as e:
                log.warning("offset expiry for group %s failed: %s", gid, e)
        return dropped

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(self.offsets_retention_check_interval_ms / 1000.0)
            try:
                n = await self.expire_offsets()
                if n:
                    log.info("expired %d committed offsets of empty groups", n)
            except Exception:
                log.exception("offset expiry failed")
