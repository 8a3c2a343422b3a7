"""The broker's parts made from its Config: one function per part, given the parts it stands
on and the broker's callbacks by name (keyword-only).  Wiring only (which settings and which parts each constructor takes); the composition root
(pybroker/broker.py) calls them in dependency order and stops the parts in reverse.

``config`` is the broker's one Config object: dynamic broker configs change its attributes in
place (pybroker/dynamic_config.py), so a value read in a lambda below is the current one and a
value read here is the one at start.
"""

from __future__ import annotations

import logging
import resource
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pybroker.clock import Clock
from pybroker.config import Config
from pybroker.coord.controller.controller import Controller
from pybroker.coord.group.classic import GroupConfig
from pybroker.coord.group.consumer_member import ConsumerGroupConfig, TopicMeta
from pybroker.coord.group.coordinator import GroupCoordinator
from pybroker.coord.group.group_configs import Bounds, GroupConfigCache
from pybroker.coord.group.offsets import OffsetStore
from pybroker.coord.group.offsets_drain import OffsetsDrain
from pybroker.coord.group.offsets_log import LogOffsetStore
from pybroker.coord.group.share import ShareGroupConfig
from pybroker.coord.group.share_coordinator import ShareGroupCoordinator
from pybroker.coord.group.share_store import ShareStateStore
from pybroker.coord.metadata.batching import BatchingStore
from pybroker.coord.metadata.cluster import Cluster
from pybroker.coord.metadata.local import LocalStore
from pybroker.coord.metadata.placement import OFFSETS_PARTITIONS, Placement
from pybroker.coord.metadata.store import MetadataStore
from pybroker.coord.txn.coordinator import TransactionCoordinator, TxnConfig
from pybroker.coord.txn.markers import MarkerSender, TxnMarker
from pybroker.coord.txn.state_log import TxnStateLog
from pybroker.coord.txn.store import TxnStateStore, TxnStorage
from pybroker.flusher import Flusher
from pybroker.handlers._topics import log_config
from pybroker.http_server import HttpServer
from pybroker.internal_topics import OFFSETS_TOPIC, TXN_STATE_TOPIC, InternalTopic, LeaderPlacement
from pybroker.log import LogManager, PartitionLog
from pybroker.log.cleaner import CleanerConfig, LogCleaner
from pybroker.log.descriptors import DescriptorCache, descriptor_budget
from pybroker.log.mover import LogDirMover
from pybroker.loop_monitor import LoopMonitor
from pybroker.metrics import BrokerMetrics
from pybroker.purgatory import Purgatory
from pybroker.quotas.manager import QuotaManager
from pybroker.quotas.store import QuotaStore
from pybroker.replica_manager import ReplicaManager
from pybroker.replication.client import BrokerConnection
from pybroker.replication.fetcher import ReplicaFetcher
from pybroker.replication.throttle import ReplicationThrottles
from pybroker.security import listeners as listener_security
from pybroker.security.authorizer import Authorizer
from pybroker.server import KafkaServer
from pybroker.share.manager import ShareDefaults, SharePartitionManager

if TYPE_CHECKING:
    from pybroker.services import BrokerServices

log = logging.getLogger("pybroker.broker")

METADATA_DIR = "__cluster_metadata"


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the RLIMIT_NOFILE soft limit to the hard limit (as Kafka's start scripts expect
    of the operator, done here so a default shell limit of 1024 is not the broker's).  Returns
    (soft, hard) in effect; the log's descriptor cache is sized from the soft one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as e:  # e.g. a hard limit above the kernel's nr_open
            log.warning("could not raise the open files limit from %d to %d: %s", soft, hard, e)
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft, hard


def descriptor_cache(open_files_soft_limit: int) -> DescriptorCache:
    """The log's segment descriptors, bounded whatever the number of partitions."""
    return DescriptorCache(descriptor_budget(open_files_soft_limit))


def log_manager(config: Config, *, clock: Clock, descriptors: DescriptorCache) -> LogManager:
    return LogManager(config.log_dir_list, log_config(config, {}), clock, descriptors=descriptors)


def log_dir_mover(config: Config, *, logs: LogManager, clock: Clock) -> LogDirMover:
    return LogDirMover(
        logs,
        # read at every chunk: a dynamic change applies to moves under way
        rate=lambda: config.replica_alter_log_dirs_io_max_bytes_per_second,
        clock=clock,
    )


def kafka_server(config: Config, *, services: BrokerServices) -> KafkaServer:
    return KafkaServer(
        services,
        config.listeners,
        max_request_bytes=config.socket_request_max_bytes,
        max_connections=config.max_connections,
        ssl_contexts={
            name: listener_security.ssl_context(config, name) for name in config.ssl_listeners
        },
        sasl={
            name: listener_security.listener_sasl(config, name) for name in config.sasl_listeners
        },
        principal_rules=listener_security.principal_mapper(config),
    )


def http_server(config: Config) -> HttpServer | None:
    """The metrics.listener's HTTP server (None: not configured)."""
    if config.metrics_listener is None:
        return None
    return HttpServer(config.metrics_listener.host, config.metrics_listener.port)


def broker_metrics(config: Config) -> BrokerMetrics | None:
    """The counters the request paths move (None: no metrics.listener, nothing counted)."""
    return BrokerMetrics() if config.metrics_listener is not None else None


def make_store(config: Config, *, data_dir: Path, clock: Clock) -> MetadataStore:
    if config.zookeeper_connect:
        from pybroker.coord.metadata.zk import ZooKeeperStore  # kazoo loaded only for ZooKeeper

        return ZooKeeperStore(
            config.zookeeper_connect,
            session_timeout_ms=config.zookeeper_session_timeout_ms,
            connect_timeout_s=(
                config.zookeeper_connection_timeout_ms or config.zookeeper_session_timeout_ms
            )
            / 1000.0,
        )
    return LocalStore(data_dir / METADATA_DIR, clock=clock)


def cluster(
    config: Config, *, store: MetadataStore, clock: Clock, loop_monitor: LoopMonitor
) -> Cluster:
    cfg = config
    return Cluster(
        store,
        cfg.broker_id,
        [(e.listener, e.host, e.port) for e in cfg.advertised],
        clock,
        rack=cfg.broker_rack,
        unclean_leader_election_enable=cfg.unclean_leader_election_enable,
        # a registration left by our previous process goes when its session times out
        registration_wait_ms=2 * cfg.zookeeper_session_timeout_ms if cfg.zookeeper_connect else 0,
        max_broker_partitions=cfg.max_broker_partitions,
        auto_leader_rebalance_enable=cfg.auto_leader_rebalance_enable,
        leader_imbalance_check_interval_s=cfg.leader_imbalance_check_interval_seconds,
        leader_imbalance_per_broker_percentage=cfg.leader_imbalance_per_broker_percentage,
        # the session lease (coord/metadata/cluster.py): a loop held up past a third of
        # the session
        stall_limit_ms=cfg.zookeeper_session_timeout_ms / 3 if cfg.zookeeper_connect else 0,
        loop_blocked_ms=loop_monitor.blocked_ms,
        controller=Controller,
    )


def replica_manager(
    config: Config,
    *,
    cluster: Cluster,
    logs: LogManager,
    purgatory: Purgatory,
    clock: Clock,
    flusher: Flusher,
    metrics: BrokerMetrics | None,
    min_insync_replicas: Callable[[str], int],
    open_log: Callable[[str, int], PartitionLog],
    create_logs: Callable[[list[tuple[str, int]]], Awaitable[None]],
    on_replica_removed: Callable[[str, int, PartitionLog], None],
) -> ReplicaManager:
    """The broker's hooks: the topic's min.insync.replicas, its log opened or created, new
    partitions' logs created off the event loop, a replica reassigned away."""
    cfg = config
    return ReplicaManager(
        cfg.broker_id,
        cluster,
        logs,
        purgatory,
        clock,
        replica_lag_time_max_ms=cfg.replica_lag_time_max_ms,
        replica_fetch_backoff_ms=cfg.replica_fetch_backoff_ms,
        min_insync_replicas=min_insync_replicas,
        open_log=open_log,
        create_logs=create_logs,
        fetcher_factory=ReplicaFetcher,
        inter_broker_listener=cfg.inter_broker_listener,
        inter_broker_ssl=listener_security.inter_broker_ssl_context(cfg),
        inter_broker_sasl=listener_security.inter_broker_sasl(cfg),
        on_replica_removed=on_replica_removed,
        throttles=ReplicationThrottles(lambda: config, cluster, cfg.broker_id, clock),
        config=config,
        flusher=flusher,
        metrics=metrics,
    )


def coordinator_store(*, store: MetadataStore) -> BatchingStore:
    """The coordinators' view of the metadata store: many groups' and transactional ids'
    writes committed together (group commit, coord/metadata/batching.py)."""
    return BatchingStore(store)


def internal_partitions(cluster: Cluster, topic: str, configured: int) -> int:
    """Kafka's partition count of a coordinator topic: the existing topic's, else the
    configured one (which "should not change after deployment")."""
    info = cluster.topics.get(topic)
    return len(info.partitions) if info is not None else configured


@dataclass(frozen=True, slots=True)
class OffsetsStorage:
    """offsets.storage's parts: the group coordinator's offsets and their placement, and the
    internal topic: __consumer_offsets itself (``kafka``), or the one whose offsets, left by
    that storage, are drained into the metadata store (``zookeeper``)."""

    offsets: OffsetStore | LogOffsetStore
    placement: Placement | None  # None: rendezvous placement over the live brokers
    topic: InternalTopic | None  # offsets.storage=kafka
    drain_topic: InternalTopic | None  # offsets.storage=zookeeper
    drain: OffsetsDrain | None  # drain_topic's owner


def offsets_storage(
    config: Config,
    *,
    services: BrokerServices,
    cluster: Cluster,
    coord_store: BatchingStore,
    clock: Clock,
) -> OffsetsStorage:
    cfg = config
    if cfg.offsets_storage == "kafka":
        n = internal_partitions(cluster, OFFSETS_TOPIC, cfg.offsets_topic_num_partitions)
        topic = InternalTopic(
            services,
            OFFSETS_TOPIC,
            partitions=n,
            replication_factor=lambda: config.offsets_topic_replication_factor,
            configs=lambda: {
                "cleanup.policy": "compact",
                "compression.type": "producer",
                "segment.bytes": str(config.offsets_topic_segment_bytes),
            },
            timeout_ms=lambda: config.offsets_commit_timeout_ms,
            owner=None,
        )
        offsets = LogOffsetStore(topic, coord_store, clock, partitions=n)
        topic.owner = offsets
        placement = LeaderPlacement(cluster, OFFSETS_TOPIC, n, offsets)
        return OffsetsStorage(offsets, placement, topic, None, None)
    store = OffsetStore(coord_store, clock)
    drain_topic = InternalTopic(
        services,
        OFFSETS_TOPIC,
        partitions=internal_partitions(cluster, OFFSETS_TOPIC, OFFSETS_PARTITIONS),
        replication_factor=lambda: config.offsets_topic_replication_factor,
        configs=dict,
        timeout_ms=lambda: config.offsets_commit_timeout_ms,
        owner=None,
    )
    drain = OffsetsDrain(drain_topic, store, clock, topic_exists=drain_topic.exists)
    drain_topic.owner = drain
    return OffsetsStorage(store, None, None, drain_topic, drain)


@dataclass(frozen=True, slots=True)
class TxnStateStorage:
    """transaction.state.storage's parts: the transaction coordinator's storage and its
    placement, and __transaction_state (``kafka`` only)."""

    storage: TxnStorage
    placement: Placement | None  # None: rendezvous placement over the live brokers
    topic: InternalTopic | None  # transaction.state.storage=kafka


def txn_state_storage(
    config: Config, *, services: BrokerServices, cluster: Cluster, coord_store: BatchingStore
) -> TxnStateStorage:
    cfg = config
    if cfg.transaction_state_storage != "kafka":
        return TxnStateStorage(TxnStateStore(coord_store), None, None)
    n = internal_partitions(cluster, TXN_STATE_TOPIC, cfg.transaction_state_log_num_partitions)
    topic = InternalTopic(
        services,
        TXN_STATE_TOPIC,
        partitions=n,
        replication_factor=lambda: config.transaction_state_log_replication_factor,
        configs=lambda: {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "min.insync.replicas": str(config.transaction_state_log_min_isr),
            "unclean.leader.election.enable": "false",
            "segment.bytes": str(config.transaction_state_log_segment_bytes),
        },
        timeout_ms=lambda: config.offsets_commit_timeout_ms,
        owner=None,
    )
    storage = TxnStateLog(topic, partitions=n)
    topic.owner = storage
    return TxnStateStorage(storage, LeaderPlacement(cluster, TXN_STATE_TOPIC, n, storage), topic)


def group_coordinator(
    config: Config,
    *,
    offsets: OffsetStore | LogOffsetStore,
    placement: Placement | None,
    drain: OffsetsDrain | None,
    clock: Clock,
    cluster: Cluster,
    topics: Callable[[], TopicMeta],
) -> GroupCoordinator:
    cfg = config
    return GroupCoordinator(
        offsets,
        clock,
        GroupConfig(
            min_session_timeout_ms=cfg.group_min_session_timeout_ms,
            max_session_timeout_ms=cfg.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=cfg.group_initial_rebalance_delay_ms,
        ),
        drain=drain,
        offsets_retention_ms=cfg.offsets_retention_minutes * 60_000,
        offsets_retention_check_interval_ms=cfg.offsets_retention_check_interval_ms,
        offset_metadata_max_bytes=cfg.offset_metadata_max_bytes,
        broker_id=cfg.broker_id,
        membership=lambda: (cluster.membership_epoch, cluster.brokers),
        consumer_config=ConsumerGroupConfig(
            session_timeout_ms=cfg.group_consumer_session_timeout_ms,
            heartbeat_interval_ms=cfg.group_consumer_heartbeat_interval_ms,
            assignors=cfg.group_consumer_assignors,
            max_size=cfg.group_consumer_max_size,
            migration_policy=cfg.group_consumer_migration_policy,
        ),
        topics=topics,
        placement=placement,
    )


def marker_sender(
    config: Config,
    *,
    cluster: Cluster,
    write_local: Callable[[list[TxnMarker]], Any],
    offsets_owner: Callable[[int], int],
) -> MarkerSender:
    """The transaction coordinator's marker sender: markers for partitions led here are
    written in process (``write_local``), the others sent to their leaders; a marker for an
    offsets partition goes to its coordinator (``offsets_owner``)."""
    return MarkerSender(
        cluster,
        config.broker_id,
        write_local=write_local,
        connect=lambda host, port: BrokerConnection(
            host,
            port,
            f"txn-coordinator-{config.broker_id}",
            ssl=listener_security.inter_broker_ssl_context(config),
            sasl=listener_security.inter_broker_sasl(config),
        ),
        listener=lambda: config.inter_broker_listener,
        offsets_owner=offsets_owner,
    )


def transaction_coordinator(
    config: Config,
    *,
    storage: TxnStorage,
    placement: Placement | None,
    clock: Clock,
    cluster: Cluster,
    markers: MarkerSender,
) -> TransactionCoordinator:
    cfg = config
    return TransactionCoordinator(
        storage,
        clock,
        TxnConfig(
            max_timeout_ms=cfg.transaction_max_timeout_ms,
            id_expiration_ms=cfg.transactional_id_expiration_ms,
            abort_interval_ms=cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            expire_interval_ms=cfg.transaction_remove_expired_transaction_cleanup_interval_ms,
        ),
        cluster.allocate_producer_id,
        markers,
        broker_id=cfg.broker_id,
        membership=lambda: (cluster.membership_epoch, cluster.brokers),
        placement=placement,
    )


def quota_manager(config: Config, *, quota_store: QuotaStore, clock: Clock) -> QuotaManager:
    return QuotaManager(
        lambda: quota_store.quotas,
        clock.time_ms,
        samples=config.quota_window_num,
        window_ms=config.quota_window_size_seconds * 1000,
    )


def authorizer(config: Config, *, store: MetadataStore, clock: Clock) -> Authorizer | None:
    """The ACL authorizer (None: authorizer.class.name unset, everything allowed)."""
    if not config.authorizer_class_name:
        return None
    return Authorizer(
        store,
        super_users=config.super_users,
        allow_everyone_if_no_acl_found=config.allow_everyone_if_no_acl_found,
        now_ms=clock.time_ms,
    )


def log_cleaner(
    config: Config,
    *,
    logs: LogManager,
    clock: Clock,
    run_on_owner: Callable[[Callable[[], Any]], Any],
) -> LogCleaner:
    cfg = config
    return LogCleaner(
        logs,
        CleanerConfig(
            enable=cfg.log_cleaner_enable,
            threads=cfg.log_cleaner_threads,
            dedupe_buffer_size=cfg.log_cleaner_dedupe_buffer_size,
            io_buffer_size=cfg.log_cleaner_io_buffer_size,
            dedupe_buffer_load_factor=cfg.log_cleaner_io_buffer_load_factor,
            backoff_ms=cfg.log_cleaner_backoff_ms,
            use_process=True,
        ),
        clock,
        run_on_owner=run_on_owner,
    )


def share_state_store(*, store: MetadataStore) -> ShareStateStore:
    """Share groups' state (KIP-932: share-partition states, group epochs) in the metadata
    store."""
    return ShareStateStore(store)


def group_config_cache(*, store: MetadataStore) -> GroupConfigCache:
    """The groups' own configs (share.* group configs), read from the metadata store."""
    return GroupConfigCache(store)


def share_defaults(config: Config) -> ShareDefaults:
    """The group.share.* broker configs a group's share.* configs override (current values)."""
    cfg = config
    return ShareDefaults(
        record_lock_duration_ms=cfg.group_share_record_lock_duration_ms,
        delivery_count_limit=cfg.group_share_delivery_count_limit,
        partition_max_record_locks=cfg.group_share_partition_max_record_locks,
    )


def share_config_bounds(config: Config) -> Bounds:
    """The group.share.min/max.* configs that group configs are held to."""
    cfg = config
    return Bounds(
        min_session_timeout_ms=cfg.group_share_min_session_timeout_ms,
        max_session_timeout_ms=cfg.group_share_max_session_timeout_ms,
        min_heartbeat_interval_ms=cfg.group_share_min_heartbeat_interval_ms,
        max_heartbeat_interval_ms=cfg.group_share_max_heartbeat_interval_ms,
        min_record_lock_duration_ms=cfg.group_share_min_record_lock_duration_ms,
        max_record_lock_duration_ms=cfg.group_share_max_record_lock_duration_ms,
        min_delivery_count_limit=cfg.group_share_min_delivery_count_limit,
        max_delivery_count_limit=cfg.group_share_max_delivery_count_limit,
        min_partition_max_record_locks=cfg.group_share_min_partition_max_record_locks,
        max_partition_max_record_locks=cfg.group_share_max_partition_max_record_locks,
    )


def share_group_config(
    config: Config, group_configs: GroupConfigCache, gid: str
) -> ShareGroupConfig:
    """A share group's session timeout and heartbeat interval (its share.* group configs
    over the group.share.* broker configs) and group.share.max.size."""
    cfg = config
    own = group_configs.cached(gid) or {}

    def num(key: str, default: int) -> int:
        try:
            return int(own.get(key, default))
        except ValueError:
            return default

    return ShareGroupConfig(
        session_timeout_ms=num("share.session.timeout.ms", cfg.group_share_session_timeout_ms),
        heartbeat_interval_ms=num(
            "share.heartbeat.interval.ms", cfg.group_share_heartbeat_interval_ms
        ),
        max_size=cfg.group_share_max_size,
    )


def share_group_coordinator(
    config: Config,
    *,
    store: ShareStateStore,
    clock: Clock,
    cluster: Cluster,
    groups: GroupCoordinator,
    group_configs: GroupConfigCache,
    topics: Callable[[], TopicMeta],
) -> ShareGroupCoordinator:
    """Share groups' coordinator side (membership, assignment, share-partition state
    initialization); a group id held by a classic or consumer group is refused."""

    def other_group(gid: str) -> bool:
        g = groups.groups.get(gid)
        return g is not None and not getattr(g, "dead", False) and g.state.value != "Dead"

    return ShareGroupCoordinator(
        store,
        clock,
        coordinator_error=groups.coordinator_error,
        other_group=other_group,
        topics=topics,
        config=lambda gid: share_group_config(config, group_configs, gid),
        membership_epoch=lambda: cluster.membership_epoch,
    )


def share_partition_manager(
    config: Config,
    *,
    store: ShareStateStore,
    replicas: ReplicaManager,
    purgatory: Purgatory,
    clock: Clock,
    group_configs: GroupConfigCache,
) -> SharePartitionManager:
    """Share groups' leader side (share-partitions, share sessions)."""
    return SharePartitionManager(
        store,
        replicas,
        purgatory,
        clock,
        group_configs,
        lambda: share_defaults(config),
        max_sessions=config.group_share_max_share_sessions,
    )
