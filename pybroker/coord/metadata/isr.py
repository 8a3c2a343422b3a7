"""The leader's ISR write (Kafka ZooKeeper mode's AlterIsr without the controller hop).

A partition's leader shrinks or expands its ISR by compare-and-setting the state znode,
keeping leader and leader_epoch; it gives up (None) when it no longer leads at that epoch, so a
deposed leader never overwrites its successor's state.  Every broker, controller included,
learns of the change through the state znode's watch; the writer's own cache is updated at
once (``MetadataCache.put_partition_state``, which never goes back to an older znode version).

Many partitions' changes go together (``update_isrs``, as Kafka's controller writes
AlterPartition's ISRs with KafkaZkClient.updateLeaderAndIsr: pipelined setData requests, each
with the partition's own zkVersion): each is compare-and-set at the version the cache holds,
without a read; only a partition whose version conflicts (or whose cached state is not the
caller's leadership) takes update_isr's read and retry, alone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import NamedTuple

from pybroker.coord.metadata import paths
from pybroker.coord.metadata.cache import MetadataCache
from pybroker.coord.metadata.model import PartitionState
from pybroker.coord.metadata.store import BadVersionError, NoNodeError, StoreError

log = logging.getLogger(__name__)


async def update_isr(
    cache: MetadataCache,
    topic: str,
    partition: int,
    new_isr: list[int],
    *,
    leader: int,
    leader_epoch: int,
) -> PartitionState | None:
    """The leader's ISR write (Kafka ZK mode's AlterIsr without the controller hop): read
    the state znode with its version; if its leader or leader_epoch is not the caller's
    (the caller was deposed) return None; else compare-and-set the new ISR (same leader,
    same leader_epoch, controller_epoch kept), re-reading and retrying when another writer
    got in first.  Updates ``cache`` at once and returns the new state (with its
    ``zk_version``).  None also when the partition does not exist (any more).

    Raises ValueError when new_isr is empty, lacks the leader, or names a non-replica;
    ConnectionLossError when the store cannot be reached (the outcome of the last write is
    then unknown: the caller re-reads through the cache or retries)."""
    isr = list(dict.fromkeys(new_isr))
    if leader not in isr:
        raise ValueError(f"the ISR {new_isr} must contain the leader {leader}")
    path = paths.partition_state(topic, partition)
    while True:
        replicas = await _replicas_of(cache, topic, partition)
        if replicas is None:
            return None
        unknown = [b for b in isr if b not in replicas]
        if unknown:
            raise ValueError(f"{unknown} are not replicas of {topic}-{partition}: {replicas}")
        try:
            data, stat = await cache.store.get(path)
        except NoNodeError:
            return None
        st = paths.decode_partition_state(data)
        current = PartitionState(
            st["leader"],
            st["leader_epoch"],
            replicas,
            st["isr"],
            st["controller_epoch"],
            stat.version,
        )
        if current.leader != leader or current.leader_epoch != leader_epoch:
            cache.put_partition_state(topic, partition, current)
            log.info(
                "broker %d: ISR update of %s-%d refused: leader %d epoch %d now, not %d/%d",
                cache.broker_id,
                topic,
                partition,
                current.leader,
                current.leader_epoch,
                leader,
                leader_epoch,
            )
            return None
        if current.isr == isr:
            cache.put_partition_state(topic, partition, current)
            return current
        data = paths.encode_partition_state(leader, leader_epoch, isr, current.controller_epoch)
        try:
            new_stat = await cache.store.set(path, data, version=stat.version)
        except BadVersionError:
            continue  # someone wrote meanwhile: re-read, check we still lead, retry
        except NoNodeError:
            return None
        state = dataclasses.replace(current, isr=isr, zk_version=new_stat.version)
        log.info(
            "broker %d: %s-%d ISR %s -> %s (leader %d, leader_epoch %d, zk version %d)",
            cache.broker_id,
            topic,
            partition,
            current.isr,
            isr,
            leader,
            leader_epoch,
            new_stat.version,
        )
        cache.put_partition_state(topic, partition, state)
        return state


class IsrChange(NamedTuple):
    """One partition's ISR change for update_isrs: the arguments of update_isr."""

    topic: str
    partition: int
    isr: list[int]
    leader: int
    leader_epoch: int


async def update_isrs(
    cache: MetadataCache, changes: list[IsrChange]
) -> list[PartitionState | None | Exception]:
    """update_isr of every change, together (module docstring): change i's outcome at i, its
    new state, None (deposed, or no such partition) or the exception update_isr would raise
    (ValueError, ConnectionLossError...).  One failing change fails only itself."""
    out: list[PartitionState | None | Exception] = [None] * len(changes)
    writes: list[tuple[str, bytes, int]] = []
    written: list[tuple[int, PartitionState, list[int]]] = []
    slow: list[int] = []
    for i, c in enumerate(changes):
        info = cache.topics.get(c.topic)
        st = None if info is None else info.partitions.get(c.partition)
        isr = list(dict.fromkeys(c.isr))
        if (
            st is None
            or st.zk_version < 0
            or st.leader != c.leader
            or st.leader_epoch != c.leader_epoch
            or c.leader not in isr
            or any(b not in st.replicas for b in isr)
        ):
            slow.append(i)  # (update_isr reads, decides, raises what it must)
            continue
        if st.isr == isr:
            out[i] = st
            continue
        data = paths.encode_partition_state(c.leader, c.leader_epoch, isr, st.controller_epoch)
        writes.append((paths.partition_state(c.topic, c.partition), data, st.zk_version))
        written.append((i, st, isr))
    results = await cache.store.set_many(writes) if writes else []
    by_topic: dict[str, dict[int, PartitionState]] = {}
    for (i, st, isr), res in zip(written, results, strict=True):
        c = changes[i]
        if isinstance(res, BadVersionError):
            slow.append(i)  # someone wrote meanwhile: this one re-reads and retries
        elif isinstance(res, NoNodeError):
            out[i] = None
        elif isinstance(res, StoreError):
            out[i] = res
        else:
            state = dataclasses.replace(st, isr=isr, zk_version=res.version)
            by_topic.setdefault(c.topic, {})[c.partition] = state
            out[i] = state
    for topic, states in by_topic.items():
        cache.put_partition_states(topic, states)
    if by_topic:
        log.info(
            "broker %d: %d ISRs written together (%d of %d changes re-read after a conflict "
            "or taken one by one)",
            cache.broker_id,
            sum(len(s) for s in by_topic.values()),
            len(slow),
            len(changes),
        )
    if slow:
        done = await asyncio.gather(
            *(
                update_isr(
                    cache,
                    changes[i].topic,
                    changes[i].partition,
                    changes[i].isr,
                    leader=changes[i].leader,
                    leader_epoch=changes[i].leader_epoch,
                )
                for i in slow
            ),
            return_exceptions=True,
        )
        for i, res in zip(slow, done, strict=True):
            if isinstance(res, BaseException) and not isinstance(res, Exception):
                raise res
            out[i] = res
    return out


async def _replicas_of(cache: MetadataCache, topic: str, partition: int) -> list[int] | None:
    info = cache.topics.get(topic)
    if info is not None and partition in info.partitions:
        return list(info.partitions[partition].replicas)
    try:
        data, _ = await cache.store.get(paths.topic(topic))
    except NoNodeError:
        return None
    _, assignment = paths.decode_topic(data)
    r = assignment.get(partition)
    return None if r is None else list(r)
