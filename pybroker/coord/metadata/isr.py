"""The leader's ISR write (Kafka ZooKeeper mode's AlterIsr without the controller hop).

A partition's leader shrinks or expands its ISR by compare-and-setting the state znode,
keeping leader and leader_epoch; it gives up (None) when it no longer leads at that epoch, so a
deposed leader never overwrites its successor's state.  Every broker, controller included,
learns of the change through the state znode's watch; the writer's own cache is updated at
once (``MetadataCache.put_partition_state``, which never goes back to an older znode version).
"""

from __future__ import annotations

import dataclasses
import logging

from pybroker.coord.metadata import paths
from pybroker.coord.metadata.cache import MetadataCache
from pybroker.coord.metadata.model import PartitionState
from pybroker.coord.metadata.store import BadVersionError, NoNodeError

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
