"""Admin writes to the metadata store (Kafka's AdminZkClient / ZkAdminManager): topic creation,
new partitions, deletion, and the config overrides of topics and brokers, with Kafka's checks,
order and error codes.  Each write is one store multi (or a compare-and-set); what it wrote goes
into the cache at once through the cache's writer interface (``put_topic``, ``drop_topic``,
``put_topic_configs``, ``put_broker_configs``) and the watches confirm it later.  New topics'
partition states are written here too (leader = first replica, ISR = replicas, stamped with the
controller epoch this broker knows), as Kafka's ZooKeeper-mode admin path does.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Callable, Iterable

from pybroker.coord.metadata import config_changes, paths
from pybroker.coord.metadata.cache import MetadataCache
from pybroker.coord.metadata.model import PartitionState, TopicInfo
from pybroker.coord.metadata.store import (
    BadVersionError,
    ConnectionLossError,
    Create,
    Delete,
    NodeExistsError,
    NoNodeError,
    Op,
    SetData,
    StoreError,
)
from pybroker.coord.metadata.topic_rules import (
    assign_replicas,
    has_collision_chars,
    unify_collision_chars,
    validate_topic_configs,
    validate_topic_name,
)
from pybroker.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


class ClusterAdmin:
    def __init__(
        self, cache: MetadataCache, rng: random.Random, *, max_broker_partitions: int
    ) -> None:
        """``max_broker_partitions``: partition replicas one broker may host (KIP-578), checked
        on topic creation and new partitions."""
        self.cache = cache
        self.rng = rng
        self.max_broker_partitions = max_broker_partitions

    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: dict[str, str | None] | None = None,
        *,
        validate_only: bool = False,
        assignments: dict[int, list[int]] | None = None,
    ) -> TopicInfo:
        """Create a topic the way Kafka's ZkAdminManager.createTopics does (same checks, same
        order, same error codes and messages), in one store multi.  Raises KafkaError.

        ``assignments`` (partition -> replica broker ids, already validated by the caller)
        replaces the computed replica assignment."""
        configs = dict(configs or {})
        if name in self.cache.topics:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        nulls = [k for k, v in configs.items() if v is None]
        if nulls:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                f"Null value not supported for topic configs: {','.join(nulls)}",
            )
        if assignments is not None:
            assignment = {p: list(r) for p, r in sorted(assignments.items())}
        else:
            self._check_partition_capacity(num_partitions, replication_factor)
            assignment = assign_replicas(
                self._racks(), num_partitions, replication_factor, self.rng
            )
        self._check_broker_partitions(assignment.values())
        validate_topic_name(name)
        try:
            if await self.cache.store.exists(paths.delete_topic(name)) is not None:
                raise KafkaError(
                    ErrorCode.TOPIC_ALREADY_EXISTS, f'Topic "{name}" is already marked for deletion'
                )
            existing = await self.cache.store.get_children(paths.TOPICS)
        except ConnectionLossError as e:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, str(e)) from e
        if has_collision_chars(name):
            unified = unify_collision_chars(name)
            colliding = [t for t in existing if t != name and unify_collision_chars(t) == unified]
            if colliding:
                raise KafkaError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"Topic '{name}' collides with existing topics: {', '.join(colliding)}",
                )
        if name in existing:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        clean_configs = validate_topic_configs(configs)

        topic_id = paths.random_kafka_uuid()
        epoch = self.cache.controller_epoch
        partitions = {
            p: PartitionState(replicas[0], 0, list(replicas), list(replicas), epoch, 0)
            for p, replicas in assignment.items()
        }
        info = TopicInfo(name, topic_id, partitions, clean_configs, 0)
        if validate_only:
            return info

        ops: list[Op] = [
            Create(paths.topic(name), paths.encode_topic(topic_id, assignment)),
            Create(paths.partitions(name)),
        ]
        for p, st in partitions.items():
            ops.append(Create(paths.partition(name, p)))
            ops.append(
                Create(
                    paths.partition_state(name, p),
                    paths.encode_partition_state(st.leader, st.leader_epoch, st.isr, epoch),
                )
            )
        config_data = paths.encode_topic_config(clean_configs)
        try:
            config_exists = await self.cache.store.exists(paths.topic_config(name)) is not None
            if config_exists:  # left over from an earlier attempt: Kafka overwrites it
                ops.append(SetData(paths.topic_config(name), config_data))
            else:
                ops.append(Create(paths.topic_config(name), config_data))
            await self.cache.store.multi(ops)
        except NodeExistsError as e:
            if e.path == paths.topic(name):
                raise KafkaError(
                    ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
                ) from e
            raise KafkaError(ErrorCode.UNKNOWN, f"could not create topic {name}: {e}") from e
        except ConnectionLossError as e:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"creating {name}: {e}") from e
        except StoreError as e:
            raise KafkaError(ErrorCode.UNKNOWN, f"could not create topic {name}: {e}") from e
        self.cache.put_topic(info)
        return info

    def _racks(self) -> dict[int, str | None]:
        """The live brokers and their racks (broker.rack), for rack-aware placement."""
        return {b: info.rack for b, info in self.cache.brokers.items()}

    def _replica_counts(self) -> dict[int, int]:
        """Partition replicas per broker: the cache's tally (kept per topic change), never a
        scan of every partition per created topic."""
        return self.cache.replica_counts

    def _limit_error(self, detail: str) -> KafkaError:
        return KafkaError(
            ErrorCode.POLICY_VIOLATION,
            f"{detail}, over max.broker.partitions={self.max_broker_partitions}.",
        )

    def _check_partition_capacity(self, new_partitions: int, replication_factor: int) -> None:
        """Refuse before computing an assignment when the live brokers together cannot host
        the new replicas (a count of 2**31 - 1 must not be assigned one by one first)."""
        if new_partitions <= 0 or replication_factor <= 0:
            return  # assign_replicas_to_brokers answers these
        capacity = self.max_broker_partitions * max(1, len(self.cache.brokers))
        total = sum(self._replica_counts().values()) + new_partitions * replication_factor
        if total > capacity:
            raise self._limit_error(
                f"{new_partitions} new partitions (replication factor {replication_factor}) "
                f"would make {total} partition replicas on {len(self.cache.brokers)} broker(s)"
            )

    def _check_broker_partitions(self, new_replicas: Iterable[list[int]]) -> None:
        """POLICY_VIOLATION when the new replicas would put any broker over
        max.broker.partitions (KIP-578's broker limit)."""
        added: dict[int, int] = {}
        for replicas in new_replicas:
            for b in replicas:
                added[b] = added.get(b, 0) + 1
        counts = self._replica_counts()
        for b in sorted(added):
            total = counts.get(b, 0) + added[b]
            if total > self.max_broker_partitions:
                raise self._limit_error(
                    f"{added[b]} new partition replicas would make {total} on broker {b}"
                )

    async def alter_topic_configs(
        self,
        name: str,
        new_configs: dict[str, str] | Callable[[dict[str, str]], dict[str, str]],
        *,
        validate_only: bool = False,
    ) -> dict[str, str]:
        """Replace a topic's config overrides in /config/topics/<t>, with a change notification
        (Kafka's AdminZkClient.changeTopicConfig; config_changes.py): ``new_configs`` is the
        new set, or a function from the stored set to the new one (incremental changes; it may raise KafkaError).  The result
        goes through Kafka's checks (:func:`validate_topic_configs`, INVALID_CONFIG) and is
        written with compare-and-set on the znode version, re-reading and re-applying the
        function when another writer got in first.  validate_only: everything but the write.
        Returns the configs written (or that would be).  Raises KafkaError:
        UNKNOWN_TOPIC_OR_PARTITION for an unknown topic, INVALID_CONFIG, REQUEST_TIMED_OUT when
        the store cannot be reached."""
        if name not in self.cache.topics:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
            )

        def update(current: dict[str, str]) -> dict[str, str]:
            wanted = new_configs(current) if callable(new_configs) else new_configs
            return validate_topic_configs(dict(wanted))

        try:
            current, clean = await config_changes.write_entity_config(
                self.cache.store, f"topics/{name}", update, validate_only=validate_only
            )
        except BadVersionError:
            raise KafkaError(
                ErrorCode.UNKNOWN, f"configs of {name} keep changing concurrently; try again"
            ) from None
        except ConnectionLossError as e:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"altering configs of {name}: {e}") from e
        except StoreError as e:
            raise KafkaError(ErrorCode.UNKNOWN, f"could not alter configs of {name}: {e}") from e
        if validate_only:
            return clean
        log.info("topic %s: configs %s -> %s", name, current, clean)
        self.cache.put_topic_configs(name, clean)
        return clean

    async def alter_broker_configs(
        self,
        entity: str,
        update: Callable[[dict[str, str]], dict[str, str]],
        *,
        validate_only: bool = False,
    ) -> dict[str, str]:
        """Compare-and-set the dynamic configs of ``entity`` ("<default>" or a broker id) at
        /config/brokers/<entity>, with a change notification (AdminZkClient.changeBrokerConfig).
        ``update(stored) -> new`` may raise KafkaError.  Returns the new set.  Store trouble:
        KafkaError REQUEST_TIMED_OUT (connection) or UNKNOWN."""
        try:
            old, new = await config_changes.write_entity_config(
                self.cache.store, f"brokers/{entity}", update, validate_only=validate_only
            )
        except ConnectionLossError as e:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"altering broker configs: {e}") from e
        except StoreError as e:
            raise KafkaError(ErrorCode.UNKNOWN, f"could not alter broker configs: {e}") from e
        if not validate_only:
            log.info("broker configs of %s: %s -> %s", entity, old, new)
            self.cache.put_broker_configs(entity, new)
        return new

    async def delete_topic(self, name: str) -> None:
        """Delete a topic's znodes (assignment, partition states, config) in one multi.  Kafka's
        ZooKeeper controller does this after /admin/delete_topics/<t> appears; pybroker's
        controller deletes at once.  Brokers drop the partition logs on the TOPIC_DELETED event."""
        if name not in self.cache.topics:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name}")
        try:
            ops: list[Op] = []
            try:
                partitions = await self.cache.store.get_children(paths.partitions(name))
            except NoNodeError:
                partitions = []
            for child in partitions:
                p = int(child)
                for leaf in await self.cache.store.get_children(paths.partition(name, p)):
                    ops.append(Delete(paths.partition(name, p) + "/" + leaf))
                ops.append(Delete(paths.partition(name, p)))
            if partitions or await self.cache.store.exists(paths.partitions(name)) is not None:
                ops.append(Delete(paths.partitions(name)))
            ops.append(Delete(paths.topic(name)))
            if await self.cache.store.exists(paths.topic_config(name)) is not None:
                ops.append(Delete(paths.topic_config(name)))
            await self.cache.store.multi(ops)
        except NoNodeError as e:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name} vanished") from e
        except ConnectionLossError as e:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"deleting {name}: {e}") from e
        except StoreError as e:
            raise KafkaError(ErrorCode.UNKNOWN, f"could not delete topic {name}: {e}") from e
        self.cache.drop_topic(name)

    async def create_partitions(
        self,
        name: str,
        count: int,
        assignments: list[list[int]] | None = None,
        *,
        validate_only: bool = False,
    ) -> TopicInfo:
        """Grow a topic to ``count`` partitions (Kafka's AdminZkClient.addPartitions): new
        replicas spread over live brokers unless ``assignments`` names them; the topic znode is
        rewritten with compare-and-set and the new partition states created in one multi."""
        info = self.cache.topics.get(name)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name}")
        if any(st.being_reassigned for st in info.partitions.values()):
            # Kafka's ZkAdminManager.createPartitions (the topic znode holds the reassignment)
            raise KafkaError(
                ErrorCode.REASSIGNMENT_IN_PROGRESS, "A partition reassignment is in progress."
            )
        current = len(info.partitions)
        if count <= current:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {current} partitions, {count} is not enough to increase it.",
            )
        rf = len(next(iter(info.partitions.values())).replicas)
        if assignments is not None:
            if len(assignments) != count - current:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Increasing the number of partitions by {count - current} but "
                    f"{len(assignments)} assignments provided.",
                )
            for replicas in assignments:
                if len(replicas) != rf or len(set(replicas)) != rf:
                    raise KafkaError(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"Inconsistent replication factor between partitions, expected {rf}.",
                    )
                unknown = set(replicas) - set(self.cache.brokers)
                if unknown:
                    raise KafkaError(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"Unknown broker(s) in replica assignment: {sorted(unknown)}.",
                    )
            added = {current + i: list(r) for i, r in enumerate(assignments)}
        else:
            self._check_partition_capacity(count - current, rf)
            added = assign_replicas(
                self._racks(),
                count - current,
                rf,
                self.rng,
                start_partition_id=current,
            )
            added = {current + i: r for i, (_, r) in enumerate(sorted(added.items()))}
        self._check_broker_partitions(added.values())
        epoch = self.cache.controller_epoch
        partitions = dict(info.partitions)
        for p, replicas in added.items():
            partitions[p] = PartitionState(replicas[0], 0, list(replicas), list(replicas), epoch, 0)
        new_info = dataclasses.replace(info, partitions=partitions)
        if validate_only:
            return new_info
        try:
            _, stat = await self.cache.store.get(paths.topic(name))
            assignment = {p: list(st.replicas) for p, st in partitions.items()}
            ops: list[Op] = [
                SetData(
                    paths.topic(name), paths.encode_topic(info.topic_id, assignment), stat.version
                )
            ]
            for p, replicas in added.items():
                ops.append(Create(paths.partition(name, p)))
                ops.append(
                    Create(
                        paths.partition_state(name, p),
                        paths.encode_partition_state(replicas[0], 0, list(replicas), epoch),
                    )
                )
            await self.cache.store.multi(ops)
        except (BadVersionError, NodeExistsError) as e:
            raise KafkaError(
                ErrorCode.REASSIGNMENT_IN_PROGRESS, f"topic {name} changed concurrently: {e}"
            ) from e
        except NoNodeError as e:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name} vanished") from e
        except ConnectionLossError as e:
            raise KafkaError(
                ErrorCode.REQUEST_TIMED_OUT, f"adding partitions to {name}: {e}"
            ) from e
        new_info = dataclasses.replace(new_info, assignment_version=stat.version + 1)
        self.cache.put_topic(new_info)
        return new_info
