"""The broker keys, each declared once: a field of :class:`Config` built by :func:`define`
(Kafka's name, ConfigDef type, default, validator, converter); :data:`KEYS`, :data:`FIELDS`
and :data:`BROKER_CONFIG` are derived from the fields."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pybroker import topic_config
from pybroker.config import values as conv
from pybroker.config.values import ConfigError, Endpoint, render
from pybroker.configdef import (
    BOOLEAN,
    DOUBLE,
    INT,
    LIST,
    LONG,
    LONG_MAX,
    SHORT,
    STRING,
    Check,
    ConfigDef,
    ConfigException,
    ConfigKey,
    Type,
    Validator,
    ValidList,
    ValidString,
    at_least,
    between,
)
from pybroker.kafka_broker_configs import DEFINITIONS, DYNAMIC_MODES, QUOTA_CONFIGS


@dataclass(frozen=True)
class BrokerConfigKey(ConfigKey):
    """A broker key: a ConfigKey, the attribute's converter, and where it may be set."""

    convert: Callable[[Any], Any] | None = None  # Kafka-typed value -> the attribute
    dynamic_only: bool = False  # Kafka's DynamicConfig.Broker: never read from the file

    @property
    def dynamic(self) -> str | None:
        """Kafka's dynamic update mode ("per-broker" / "cluster-wide"), None: read-only."""
        if self.dynamic_only:
            return "cluster-wide"
        return DYNAMIC_MODES.get(self.name)

    def attribute(self, value: Any) -> Any:
        """The Config attribute for a Kafka-typed value (None stays None)."""
        if value is None or self.convert is None:
            return value
        return self.convert(value)

    def parse_attribute(self, raw: str) -> Any:
        """Parse, validate and convert a string: ConfigException worded as Kafka's."""
        value = self.parse(raw)
        try:
            return self.attribute(value)
        except (ValueError, TypeError) as e:
            raise ConfigException(self.name, raw, str(e)) from None


def define(
    name: str,
    type_: Type,
    default: Any,
    validator: Validator | None = None,
    *,
    convert: Callable[[Any], Any] | None = None,
    doc: str | None = None,
    dynamic_only: bool = False,
) -> Any:
    """A Config field that is broker key ``name``: ``default`` is Kafka-typed (None: no
    value); the documentation is Kafka's unless ``doc`` gives pybroker's own."""
    if doc is None:
        doc = DEFINITIONS[name][3] if name in DEFINITIONS else ""
    key = BrokerConfigKey(name, type_, default, validator, doc, convert, dynamic_only)
    return field(default=key.attribute(default), metadata={"key": key})


@dataclass(frozen=True)
class Config:
    broker_id: int = define("broker.id", INT, 0, at_least(0))
    listeners: tuple[Endpoint, ...] = define(
        "listeners", STRING, "PLAINTEXT://127.0.0.1:9092", convert=conv.listeners
    )
    advertised_listeners: tuple[Endpoint, ...] | None = define(
        "advertised.listeners", STRING, None, convert=conv.listeners
    )
    listener_security_protocol_map: tuple[tuple[str, str], ...] = define(
        "listener.security.protocol.map",
        STRING,
        conv.DEFAULT_PROTOCOL_MAP,
        convert=conv.protocol_map,
    )
    security_inter_broker_protocol: str = define(
        "security.inter.broker.protocol", STRING, "PLAINTEXT", ValidString(*conv.SECURITY_PROTOCOLS)
    )
    inter_broker_listener_name: str | None = define("inter.broker.listener.name", STRING, None)
    log_dirs: str | None = define("log.dirs", STRING, None)
    log_dir: str | None = define("log.dir", STRING, None)
    zookeeper_connect: str | None = define("zookeeper.connect", STRING, None)
    zookeeper_session_timeout_ms: int = define("zookeeper.session.timeout.ms", INT, 18000)
    zookeeper_connection_timeout_ms: int | None = define(
        "zookeeper.connection.timeout.ms", INT, None
    )
    broker_rack: str | None = define("broker.rack", STRING, None)
    num_partitions: int = define("num.partitions", INT, 1, at_least(1))
    default_replication_factor: int = define("default.replication.factor", INT, 1, at_least(1))
    auto_create_topics_enable: bool = define("auto.create.topics.enable", BOOLEAN, True)
    # -- logs (the broker defaults of topic configs: pybroker/topic_config.py's synonyms)
    log_segment_bytes: int = define("log.segment.bytes", INT, 1024 * 1024 * 1024, at_least(14))
    log_roll_ms: int | None = define("log.roll.ms", LONG, None)
    log_roll_hours: int = define("log.roll.hours", INT, 168, at_least(1))
    log_roll_jitter_ms: int | None = define("log.roll.jitter.ms", LONG, None)
    log_roll_jitter_hours: int = define("log.roll.jitter.hours", INT, 0, at_least(0))
    log_retention_ms: int | None = define("log.retention.ms", LONG, None)
    log_retention_minutes: int | None = define("log.retention.minutes", INT, None)
    log_retention_hours: int = define("log.retention.hours", INT, 168)
    log_retention_bytes: int = define("log.retention.bytes", LONG, -1)
    log_retention_check_interval_ms: int = define(
        "log.retention.check.interval.ms", LONG, 300000, at_least(1)
    )
    log_index_interval_bytes: int = define("log.index.interval.bytes", INT, 4096, at_least(0))
    log_index_size_max_bytes: int = define(
        "log.index.size.max.bytes", INT, 10 * 1024 * 1024, at_least(4)
    )
    log_flush_interval_messages: int = define(
        "log.flush.interval.messages", LONG, LONG_MAX, at_least(1)
    )
    log_flush_interval_ms: int | None = define("log.flush.interval.ms", LONG, None)
    log_flush_scheduler_interval_ms: int = define("log.flush.scheduler.interval.ms", LONG, LONG_MAX)
    log_segment_delete_delay_ms: int = define(
        "log.segment.delete.delay.ms", LONG, 60000, at_least(0)
    )
    log_preallocate: bool = define("log.preallocate", BOOLEAN, False)
    log_message_format_version: str = define(
        "log.message.format.version",
        STRING,
        "3.0-IV1",
        topic_config.KEYS["message.format.version"].validator,
    )
    log_message_downconversion_enable: bool = define(
        "log.message.downconversion.enable", BOOLEAN, True
    )
    log_local_retention_ms: int = define("log.local.retention.ms", LONG, -2, at_least(-2))
    log_local_retention_bytes: int = define("log.local.retention.bytes", LONG, -2, at_least(-2))
    log_message_timestamp_type: str = define(
        "log.message.timestamp.type",
        STRING,
        "CreateTime",
        ValidString("CreateTime", "LogAppendTime"),
    )
    log_message_timestamp_difference_max_ms: int = define(
        "log.message.timestamp.difference.max.ms", LONG, LONG_MAX, at_least(0)
    )
    log_message_timestamp_before_max_ms: int = define(
        "log.message.timestamp.before.max.ms", LONG, LONG_MAX, at_least(0)
    )
    log_message_timestamp_after_max_ms: int = define(
        "log.message.timestamp.after.max.ms", LONG, LONG_MAX, at_least(0)
    )
    message_max_bytes: int = define("message.max.bytes", INT, 1048588, at_least(0))
    compression_type: str = define(
        "compression.type",
        STRING,
        "producer",
        ValidString("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    )
    compression_gzip_level: int = define(
        "compression.gzip.level",
        INT,
        -1,
        topic_config.KEYS["compression.gzip.level"].validator,
    )
    compression_lz4_level: int = define("compression.lz4.level", INT, 9, between(1, 17))
    compression_zstd_level: int = define("compression.zstd.level", INT, 3, between(-131072, 22))
    socket_request_max_bytes: int = define("socket.request.max.bytes", INT, 104857600, at_least(1))
    min_insync_replicas: int = define("min.insync.replicas", INT, 1, at_least(1))
    # -- groups and offsets
    group_initial_rebalance_delay_ms: int = define(
        "group.initial.rebalance.delay.ms", INT, 3000, at_least(0)
    )
    # KIP-848 (Kafka 4.0's names and defaults)
    group_coordinator_rebalance_protocols: tuple[str, ...] = define(
        "group.coordinator.rebalance.protocols",
        LIST,
        ["classic", "consumer"],
        convert=conv.protocols,
    )
    group_consumer_session_timeout_ms: int = define(
        "group.consumer.session.timeout.ms", INT, 45000, at_least(1)
    )
    group_consumer_heartbeat_interval_ms: int = define(
        "group.consumer.heartbeat.interval.ms", INT, 5000, at_least(1)
    )
    group_consumer_assignors: tuple[str, ...] = define(
        "group.consumer.assignors", LIST, ["uniform", "range"], convert=conv.assignors
    )
    group_consumer_max_size: int = define("group.consumer.max.size", INT, 2**31 - 1, at_least(1))
    group_consumer_migration_policy: str = define(
        "group.consumer.migration.policy",
        STRING,
        "bidirectional",
        convert=conv.migration_policy,
    )
    # KIP-932 share groups (Kafka 4.4's names, defaults and ranges; group.share.enable is
    # Kafka 3.9/4.0's switch, on by default as share groups are in Kafka 4.2+: share.version
    # is finalized at 1 while it is on)
    group_share_enable: bool = define("group.share.enable", BOOLEAN, True)
    group_share_session_timeout_ms: int = define(
        "group.share.session.timeout.ms", INT, 45000, at_least(1)
    )
    group_share_min_session_timeout_ms: int = define(
        "group.share.min.session.timeout.ms", INT, 45000, at_least(1)
    )
    group_share_max_session_timeout_ms: int = define(
        "group.share.max.session.timeout.ms", INT, 60000, at_least(1)
    )
    group_share_heartbeat_interval_ms: int = define(
        "group.share.heartbeat.interval.ms", INT, 5000, at_least(1)
    )
    group_share_min_heartbeat_interval_ms: int = define(
        "group.share.min.heartbeat.interval.ms", INT, 5000, at_least(1)
    )
    group_share_max_heartbeat_interval_ms: int = define(
        "group.share.max.heartbeat.interval.ms", INT, 15000, at_least(1)
    )
    group_share_max_size: int = define("group.share.max.size", INT, 200, between(1, 1000))
    group_share_record_lock_duration_ms: int = define(
        "group.share.record.lock.duration.ms", INT, 30000, between(1000, 3600000)
    )
    group_share_min_record_lock_duration_ms: int = define(
        "group.share.min.record.lock.duration.ms", INT, 15000, between(1000, 30000)
    )
    group_share_max_record_lock_duration_ms: int = define(
        "group.share.max.record.lock.duration.ms", INT, 60000, between(30000, 3600000)
    )
    group_share_delivery_count_limit: int = define(
        "group.share.delivery.count.limit", INT, 5, between(2, 10)
    )
    group_share_min_delivery_count_limit: int = define(
        "group.share.min.delivery.count.limit",
        INT,
        2,
        between(2, 5),
        doc="The minimum value of a group configuration for the maximum number of delivery "
        "attempts for a record delivered to a share group.",
    )
    group_share_max_delivery_count_limit: int = define(
        "group.share.max.delivery.count.limit",
        INT,
        10,
        between(5, 25),
        doc="The maximum value of a group configuration for the maximum number of delivery "
        "attempts for a record delivered to a share group.",
    )
    group_share_partition_max_record_locks: int = define(
        "group.share.partition.max.record.locks", INT, 2000, between(100, 10000)
    )
    group_share_min_partition_max_record_locks: int = define(
        "group.share.min.partition.max.record.locks",
        INT,
        100,
        between(100, 2000),
        doc="The minimum value of a group configuration for the record lock limit per "
        "share-partition.",
    )
    group_share_max_partition_max_record_locks: int = define(
        "group.share.max.partition.max.record.locks",
        INT,
        4000,
        between(2000, 10000),
        doc="The maximum value of a group configuration for the record lock limit per "
        "share-partition.",
    )
    group_share_max_share_sessions: int = define(
        "group.share.max.share.sessions",
        INT,
        2000,
        at_least(1),
        doc="The maximum number of share sessions per broker.",
    )
    offsets_retention_minutes: int = define("offsets.retention.minutes", INT, 10080, at_least(1))
    offsets_retention_check_interval_ms: int = define(
        "offsets.retention.check.interval.ms", LONG, 600000, at_least(1)
    )
    offset_metadata_max_bytes: int = define("offset.metadata.max.bytes", INT, 4096)
    # where committed offsets and transaction state live (docs/operations.md, "Where offsets
    # and transaction state are stored"); the __consumer_offsets / __transaction_state keys
    # apply to the "kafka" storage
    offsets_storage: str = define(
        "offsets.storage",
        STRING,
        "zookeeper",
        ValidString("zookeeper", "kafka"),
        doc="Where the group coordinator keeps committed offsets and group metadata:"
        " 'zookeeper' (pybroker's default: the metadata store, /consumers/<group>/offsets in"
        " ZooKeeper or the embedded store) or 'kafka' (Kafka's design: the internal compacted"
        " topic __consumer_offsets, coordinators placed on its partition leaders). The name"
        " of the setting Kafka 0.8.2 introduced.",
    )
    transaction_state_storage: str = define(
        "transaction.state.storage",
        STRING,
        "zookeeper",
        ValidString("zookeeper", "kafka"),
        doc="Where the transaction coordinator keeps transaction state: 'zookeeper' (the"
        " metadata store, /transactions/<id>) or 'kafka' (the internal compacted topic"
        " __transaction_state, coordinators placed on its partition leaders).",
    )
    offsets_topic_num_partitions: int = define("offsets.topic.num.partitions", INT, 50, at_least(1))
    offsets_topic_replication_factor: int = define(
        "offsets.topic.replication.factor", SHORT, 3, at_least(1)
    )
    offsets_topic_segment_bytes: int = define(
        "offsets.topic.segment.bytes", INT, 104857600, at_least(1)
    )
    offsets_commit_timeout_ms: int = define("offsets.commit.timeout.ms", INT, 5000, at_least(1))
    transaction_state_log_num_partitions: int = define(
        "transaction.state.log.num.partitions", INT, 50, at_least(1)
    )
    transaction_state_log_replication_factor: int = define(
        "transaction.state.log.replication.factor", SHORT, 3, at_least(1)
    )
    transaction_state_log_min_isr: int = define(
        "transaction.state.log.min.isr", INT, 2, at_least(1)
    )
    transaction_state_log_segment_bytes: int = define(
        "transaction.state.log.segment.bytes", INT, 104857600, at_least(1)
    )
    group_min_session_timeout_ms: int = define("group.min.session.timeout.ms", INT, 6000)
    group_max_session_timeout_ms: int = define("group.max.session.timeout.ms", INT, 1800000)
    # -- connections
    max_connections: int = define("max.connections", INT, 2**31 - 1, at_least(0))
    max_connections_per_ip: int = define("max.connections.per.ip", INT, 2**31 - 1, at_least(0))
    # (host or IP as given, limit), Kafka's "hostName:100,127.0.0.1:200"
    max_connections_per_ip_overrides: tuple[tuple[str, int], ...] = define(
        "max.connections.per.ip.overrides", STRING, "", convert=conv.ip_overrides
    )
    # -- replication
    unclean_leader_election_enable: bool = define("unclean.leader.election.enable", BOOLEAN, False)
    replica_lag_time_max_ms: int = define("replica.lag.time.max.ms", LONG, 30000)
    # how long a follower leaves a partition out of its fetches after the leader answered it
    # an error (replication/fetcher.py)
    replica_fetch_backoff_ms: int = define("replica.fetch.backoff.ms", INT, 1000, at_least(0))
    # recovery point (and the other) checkpoints of every log dir: also when a failed dir is
    # noticed at the latest if nothing else writes there
    log_flush_offset_checkpoint_interval_ms: int = define(
        "log.flush.offset.checkpoint.interval.ms", INT, 60000, at_least(1)
    )
    # the threads per log dir closing the logs at a clean shutdown (a flush and an fsynced
    # producer-state snapshot each; the dirs in parallel).  pybroker's own default (Kafka's is
    # 1): the closes wait on fsync, not on the interpreter.  Not used by recovery at start.
    num_recovery_threads_per_data_dir: int = define(
        "num.recovery.threads.per.data.dir", INT, 8, at_least(1)
    )
    controlled_shutdown_enable: bool = define("controlled.shutdown.enable", BOOLEAN, True)
    controlled_shutdown_max_retries: int = define(
        "controlled.shutdown.max.retries", INT, 3, at_least(0)
    )
    controlled_shutdown_retry_backoff_ms: int = define(
        "controlled.shutdown.retry.backoff.ms", LONG, 5000, at_least(0)
    )
    auto_leader_rebalance_enable: bool = define("auto.leader.rebalance.enable", BOOLEAN, True)
    leader_imbalance_check_interval_seconds: int = define(
        "leader.imbalance.check.interval.seconds", LONG, 300, at_least(1)
    )
    leader_imbalance_per_broker_percentage: int = define(
        "leader.imbalance.per.broker.percentage", INT, 10, at_least(0)
    )
    max_broker_partitions: int = define(
        "max.broker.partitions",
        INT,
        100_000,
        at_least(1),
        doc="The largest number of partition replicas one broker may host (KIP-578's name;"
        " pybroker's own default): CreateTopics, CreatePartitions and auto-creation beyond it"
        " answer POLICY_VIOLATION.",
    )
    quota_window_num: int = define("quota.window.num", INT, 11, at_least(1))
    quota_window_size_seconds: int = define("quota.window.size.seconds", INT, 1, at_least(1))
    max_request_partition_size_limit: int = define(
        "max.request.partition.size.limit", INT, 2000, at_least(1)
    )
    max_incremental_fetch_session_cache_slots: int = define(
        "max.incremental.fetch.session.cache.slots", INT, 1000, at_least(0)
    )
    # -- log compaction (Kafka's LogConfig / CleanerConfig names and defaults)
    log_cleanup_policy: str = define(
        "log.cleanup.policy", LIST, ["delete"], ValidList("compact", "delete"), convert=conv.policy
    )
    log_cleaner_enable: bool = define("log.cleaner.enable", BOOLEAN, True)
    log_cleaner_threads: int = define("log.cleaner.threads", INT, 1, at_least(0))
    log_cleaner_dedupe_buffer_size: int = define(
        "log.cleaner.dedupe.buffer.size", LONG, 128 * 1024 * 1024
    )
    log_cleaner_io_buffer_size: int = define(
        "log.cleaner.io.buffer.size", INT, 512 * 1024, at_least(0)
    )
    log_cleaner_io_buffer_load_factor: float = define(
        "log.cleaner.io.buffer.load.factor", DOUBLE, 0.9
    )
    log_cleaner_backoff_ms: int = define("log.cleaner.backoff.ms", LONG, 15000, at_least(0))
    log_cleaner_min_cleanable_ratio: float = define(
        "log.cleaner.min.cleanable.ratio", DOUBLE, 0.5, between(0, 1)
    )
    log_cleaner_delete_retention_ms: int = define(
        "log.cleaner.delete.retention.ms", LONG, 86400000, at_least(0)
    )
    log_cleaner_min_compaction_lag_ms: int = define(
        "log.cleaner.min.compaction.lag.ms", LONG, 0, at_least(0)
    )
    log_cleaner_max_compaction_lag_ms: int = define(
        "log.cleaner.max.compaction.lag.ms", LONG, LONG_MAX, at_least(1)
    )
    # -- pybroker's own (no Kafka equivalent)
    loop_stall_warn_ms: int = define(
        "loop.stall.warn.ms",
        LONG,
        100,
        at_least(0),
        doc="pybroker's own: log 'event loop stalled N ms' when the event loop was blocked"
        " longer than this (0: no warnings).",
    )
    event_loop: str = define(
        "event.loop",
        STRING,
        "uvloop",
        ValidString("asyncio", "uvloop"),
        doc="pybroker's own: the event loop the broker runs on: 'uvloop' (libuv's, the uvloop"
        " package; where it cannot be imported the default falls back to asyncio's with a"
        " warning) or 'asyncio' (the standard library's); docs/performance.md, uvloop.",
    )
    metrics_listener: conv.HttpEndpoint | None = define(
        "metrics.listener",
        STRING,
        None,
        convert=conv.http_listener,
        doc="pybroker's own: http://host:port serving Prometheus metrics at /metrics and the"
        " web console at / (unset: off).",
    )
    console_enable: bool = define(
        "console.enable",
        BOOLEAN,
        True,
        doc="pybroker's own: serve the web console on metrics.listener.",
    )
    node_cores: int = define(
        "node.cores",
        INT,
        1,
        at_least(0),
        doc="pybroker's own: the cores this node uses, one broker process each (0: every core"
        " the process may run on). Above 1, the node runs broker.id, broker.id+1, ... on the"
        " listeners' ports, ports+1, ... (docs/multicore.md).",
    )
    console_lag_sample_interval_ms: int = define(
        "console.lag.sample.interval.ms",
        LONG,
        10000,
        at_least(100),
        doc="pybroker's own: how often the web console samples each group's lag.",
    )
    # -- authorization (Kafka's AclAuthorizer keys)
    authorizer_class_name: str = define(
        "authorizer.class.name",
        STRING,
        "",
        Check(
            lambda v: (
                None
                if v in ("", *conv.AUTHORIZERS)
                else f"{v} is not an authorizer this broker has (one of: {', '.join(conv.AUTHORIZERS)})"
            ),
            "empty, or one of " + ", ".join(conv.AUTHORIZERS),
        ),
    )
    super_users: tuple[str, ...] = define(
        "super.users",
        STRING,
        "",
        convert=conv.super_users,
        doc="A list of principals (Type:name, separated by semicolons) that every operation is"
        " allowed to (AclAuthorizer's key).",
    )
    allow_everyone_if_no_acl_found: bool = define(
        "allow.everyone.if.no.acl.found",
        BOOLEAN,
        False,
        doc="When a resource has no ACL, allow every principal (true) or only super users"
        " (false) (AclAuthorizer's key).",
    )
    # -- transactions
    transaction_max_timeout_ms: int = define("transaction.max.timeout.ms", INT, 900000, at_least(1))
    transactional_id_expiration_ms: int = define(
        "transactional.id.expiration.ms", INT, 604800000, at_least(1)
    )
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = define(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms", INT, 10000, at_least(1)
    )
    transaction_remove_expired_transaction_cleanup_interval_ms: int = define(
        "transaction.remove.expired.transaction.cleanup.interval.ms", INT, 3600000, at_least(1)
    )
    # the replication quotas (Kafka's DynamicConfig.Broker): set only dynamically
    # (pybroker/dynamic_config.py), Long.MAX = unthrottled; read at use time
    leader_replication_throttled_rate: int = define(
        "leader.replication.throttled.rate",
        LONG,
        LONG_MAX,
        at_least(0),
        dynamic_only=True,
        doc="A long representing the upper bound (bytes/sec) on replication traffic for leaders"
        " enumerated in the property leader.replication.throttled.replicas (for each topic).",
    )
    follower_replication_throttled_rate: int = define(
        "follower.replication.throttled.rate",
        LONG,
        LONG_MAX,
        at_least(0),
        dynamic_only=True,
        doc="A long representing the upper bound (bytes/sec) on replication traffic for"
        " followers enumerated in the property follower.replication.throttled.replicas (for"
        " each topic).",
    )
    replica_alter_log_dirs_io_max_bytes_per_second: int = define(
        "replica.alter.log.dirs.io.max.bytes.per.second",
        LONG,
        LONG_MAX,
        at_least(0),
        dynamic_only=True,
        doc="A long representing the upper bound (bytes/sec) on disk IO used for moving"
        " replica between log directories on the same broker.",
    )
    # -- not keys
    revision: int = 0  # bumped by each dynamic change (DynamicBrokerConfig.update)
    warnings: tuple[str, ...] = ()
    explicit_keys: frozenset[str] = frozenset()  # keys set in the file or by --override
    # ssl.*, sasl.* and listener.name.* settings as given (pybroker/security/listeners.py)
    security_settings: tuple[tuple[str, str], ...] = ()

    # -- by Kafka key ------------------------------------------------------------------------
    def value(self, key: str) -> Any:
        """The attribute of Kafka key ``key``."""
        return getattr(self, FIELDS[key])

    def value_string(self, key: str) -> str | None:
        """A key's value as Kafka prints it (None: unset)."""
        return render(self.value(key))

    def setting(self, key: str) -> str | None:
        """A broker key's current value as a string; None when unset or not a pybroker key
        (the lookup topic configs take their broker defaults through)."""
        return render(getattr(self, FIELDS[key])) if key in FIELDS else None

    def topic_defaults(self) -> Mapping[str, str]:
        """The broker defaults of topic configs (KafkaConfig.extractLogConfigMap), as strings,
        from the current values (dynamic ones included); computed again after each
        ``revision`` (read-only: shared)."""
        cached = self.__dict__.get("_topic_defaults")
        if cached is None or cached[0] != self.revision:
            cached = (self.revision, topic_config.broker_defaults(self.setting))
            self.__dict__["_topic_defaults"] = cached  # a cache, not a field: Config stays frozen
        return cached[1]

    # -- derived values, with Kafka's precedence (ms > minutes > hours) ---------------------
    @property
    def data_dir(self) -> Path:
        d = self.log_dirs or self.log_dir
        if d is None:
            raise ConfigError("log.dirs is not set")
        first = d.split(",")[0].strip()
        return Path(first)

    @property
    def log_dir_list(self) -> list[Path]:
        """Every entry of log.dirs (else log.dir), in order, duplicates dropped (JBOD: each
        one holds partitions; the first also the embedded metadata store)."""
        d = self.log_dirs or self.log_dir
        if d is None:
            raise ConfigError("log.dirs is not set")
        out: list[Path] = []
        for entry in d.split(","):
            if entry.strip() and Path(entry.strip()) not in out:
                out.append(Path(entry.strip()))
        return out

    @property
    def roll_ms(self) -> int:
        return self.log_roll_ms if self.log_roll_ms is not None else self.log_roll_hours * 3600_000

    @property
    def retention_ms(self) -> int:
        if self.log_retention_ms is not None:
            return self.log_retention_ms
        if self.log_retention_minutes is not None:
            return self.log_retention_minutes * 60_000
        return self.log_retention_hours * 3600_000

    @property
    def advertised(self) -> tuple[Endpoint, ...]:
        return self.advertised_listeners or self.listeners

    @property
    def inter_broker_listener(self) -> str:
        """The listener other brokers reach this one on (Kafka's interBrokerListenerName:
        inter.broker.listener.name, else the listener named after
        security.inter.broker.protocol)."""
        name = self.inter_broker_listener_name or self.security_inter_broker_protocol
        return name.strip().upper()

    def security_protocol(self, listener: str) -> str | None:
        """The security protocol of a listener name (listener.security.protocol.map)."""
        return dict(self.listener_security_protocol_map).get(listener.upper())

    @property
    def ssl_listeners(self) -> list[str]:
        """Listeners with TLS: SSL and SASL_SSL."""
        return [
            e.listener
            for e in self.listeners
            if self.security_protocol(e.listener) in ("SSL", "SASL_SSL")
        ]

    @property
    def sasl_listeners(self) -> list[str]:
        return [
            e.listener
            for e in self.listeners
            if self.security_protocol(e.listener) in ("SASL_PLAINTEXT", "SASL_SSL")
        ]


# -- derived from the declarations ----------------------------------------------------------

KEYS: dict[str, BrokerConfigKey] = {
    f.metadata["key"].name: f.metadata["key"]
    for f in dataclasses.fields(Config)
    if "key" in f.metadata
}
FIELDS: dict[str, str] = {
    f.metadata["key"].name: f.name for f in dataclasses.fields(Config) if "key" in f.metadata
}
BROKER_CONFIG = ConfigDef(KEYS.values())
assert set(QUOTA_CONFIGS) == {k for k, v in KEYS.items() if v.dynamic_only}
