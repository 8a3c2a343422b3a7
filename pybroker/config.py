"""Broker configuration under Kafka's own names (server.properties + --override key=value).

Every key below is honoured with Kafka's meaning and default.  Unknown keys are reported as
warnings (Kafka logs them as unused); a value that does not parse fails start-up with a
message naming the key.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pybroker import tls
from pybroker.security import sasl


class ConfigError(ValueError):
    pass


def _bool(s: str) -> bool:
    v = s.strip().lower()
    if v in ("true", "false"):
        return v == "true"
    raise ValueError("expected true or false")


def _int(s: str) -> int:
    return int(s.strip())


def _double(s: str) -> float:
    return float(s.strip())


def _policy(s: str) -> str:
    """log.cleanup.policy: a list of ``compact`` and ``delete`` (either order)."""
    items = [i.strip() for i in s.split(",") if i.strip()]
    wrong = [i for i in items if i not in ("compact", "delete")]
    if wrong:
        raise ValueError(f"[{', '.join(wrong)}] are not in [compact, delete]")
    return ",".join(items)


# group.consumer.assignors: Kafka's class names or the assignors' names
_ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def _assignor_name(s: str) -> str:
    name = _ASSIGNOR_CLASSES.get(s.strip(), s.strip().lower())
    if name not in ("uniform", "range"):
        raise ValueError(f"{s.strip()} is not a known assignor (uniform, range)")
    return name


def _protocols(s: str) -> tuple[str, ...]:
    items = tuple(p.strip().lower() for p in s.split(",") if p.strip())
    wrong = [p for p in items if p not in ("classic", "consumer")]
    if wrong or "classic" not in items:
        raise ValueError("must list classic, and may list consumer")
    return items


def _migration_policy(s: str) -> str:
    """group.consumer.migration.policy (Kafka's ConsumerGroupMigrationPolicy, any case)."""
    v = s.strip().lower()
    if v not in ("disabled", "upgrade", "downgrade", "bidirectional"):
        raise ValueError("must be one of disabled, upgrade, downgrade, bidirectional")
    return v


LONG_MAX = 2**63 - 1


def _ip_overrides(s: str) -> tuple[tuple[str, int], ...]:
    """max.connections.per.ip.overrides: ``host:limit`` pairs, comma-separated (an IPv6
    address's last colon separates the limit)."""
    out = []
    for item in s.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, limit = item.rpartition(":")
        if not sep or not host.strip():
            raise ValueError(f"expected host:limit, got {item!r}")
        out.append((host.strip().strip("[]"), int(limit)))
    return tuple(out)


@dataclass(frozen=True)
class HttpEndpoint:
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def _http_listener(s: str) -> HttpEndpoint | None:
    """metrics.listener: ``http://host:port`` (port 0: any free port); empty: off."""
    s = s.strip()
    if not s:
        return None
    m = re.fullmatch(r"http://(\[[^\]]*\]|[^:/\[\]]*):(\d+)/?", s)
    if not m:
        raise ValueError("expected http://host:port (e.g. http://127.0.0.1:9308)")
    port = int(m.group(2))
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} out of range")
    return HttpEndpoint(m.group(1).strip("[]"), port)


@dataclass(frozen=True)
class Endpoint:
    listener: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.listener}://{self.host}:{self.port}"


def _listeners(s: str) -> tuple[Endpoint, ...]:
    out = []
    for item in s.split(","):
        item = item.strip()
        if not item:
            continue
        m = re.fullmatch(r"([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:]*):(\d+)", item)
        if not m:
            raise ValueError(f"expected LISTENER://host:port, got {item!r}")
        host = m.group(2).strip("[]")
        port = int(m.group(3))
        if not 0 <= port <= 65535:
            raise ValueError(f"port {port} out of range")
        out.append(Endpoint(m.group(1).upper(), host, port))
    if not out:
        raise ValueError("no listener given")
    return tuple(out)


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"


def _protocol_map(s: str) -> tuple[tuple[str, str], ...]:
    """listener.security.protocol.map: NAME:PROTOCOL,... (Kafka's: a given map replaces the
    default one whole)."""
    out = []
    for item in s.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, proto = item.partition(":")
        proto = proto.strip().upper()
        if not sep or not name.strip():
            raise ValueError(f"expected LISTENER:PROTOCOL, got {item!r}")
        if proto not in SECURITY_PROTOCOLS:
            raise ValueError(f"unknown security protocol {proto!r} (one of {SECURITY_PROTOCOLS})")
        out.append((name.strip().upper(), proto))
    return tuple(out)


# Keys of Kafka's security settings that only act on an SSL or SASL listener: accepted (and
# said to be inert) while every listener is PLAINTEXT.  Keys that ask for security whatever the
# listeners (an authorizer, secure replication) are refused in _validate.
_INERT_WITHOUT_SECURE_LISTENER = ("ssl.", "sasl.", "listener.name.", "principal.builder.class")
AUTHORIZERS = (
    "kafka.security.authorizer.AclAuthorizer",  # Kafka's ZooKeeper ACL authorizer
    "kafka.security.auth.SimpleAclAuthorizer",  # its name before Kafka 2.4
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",  # KRaft's, same model
)

# key -> (field name, parser, default)
_KEYS: dict[str, tuple[str, Any, Any]] = {
    "broker.id": ("broker_id", _int, 0),
    "listeners": ("listeners", _listeners, _listeners("PLAINTEXT://127.0.0.1:9092")),
    "advertised.listeners": ("advertised_listeners", _listeners, None),
    "listener.security.protocol.map": (
        "listener_security_protocol_map",
        _protocol_map,
        _protocol_map(DEFAULT_PROTOCOL_MAP),
    ),
    "security.inter.broker.protocol": ("security_inter_broker_protocol", str, "PLAINTEXT"),
    "inter.broker.listener.name": ("inter_broker_listener_name", str, None),
    "log.dirs": ("log_dirs", str, None),
    "log.dir": ("log_dir", str, None),
    "zookeeper.connect": ("zookeeper_connect", str, None),
    "zookeeper.session.timeout.ms": ("zookeeper_session_timeout_ms", _int, 18000),
    "zookeeper.connection.timeout.ms": ("zookeeper_connection_timeout_ms", _int, None),
    "broker.rack": ("broker_rack", str, None),
    "num.partitions": ("num_partitions", _int, 1),
    "default.replication.factor": ("default_replication_factor", _int, 1),
    "auto.create.topics.enable": ("auto_create_topics_enable", _bool, True),
    "log.segment.bytes": ("log_segment_bytes", _int, 1024 * 1024 * 1024),
    "log.roll.ms": ("log_roll_ms", _int, None),
    "log.roll.hours": ("log_roll_hours", _int, 168),
    "log.retention.ms": ("log_retention_ms", _int, None),
    "log.retention.minutes": ("log_retention_minutes", _int, None),
    "log.retention.hours": ("log_retention_hours", _int, 168),
    "log.retention.bytes": ("log_retention_bytes", _int, -1),
    "log.retention.check.interval.ms": ("log_retention_check_interval_ms", _int, 300000),
    "log.index.interval.bytes": ("log_index_interval_bytes", _int, 4096),
    "log.index.size.max.bytes": ("log_index_size_max_bytes", _int, 10 * 1024 * 1024),
    "log.flush.interval.messages": ("log_flush_interval_messages", _int, None),
    "log.flush.interval.ms": ("log_flush_interval_ms", _int, None),
    "log.message.timestamp.type": ("log_message_timestamp_type", str, "CreateTime"),
    "log.message.timestamp.difference.max.ms": (
        "log_message_timestamp_difference_max_ms",
        _int,
        2**63 - 1,
    ),
    "log.message.timestamp.before.max.ms": ("log_message_timestamp_before_max_ms", _int, 2**63 - 1),
    "log.message.timestamp.after.max.ms": ("log_message_timestamp_after_max_ms", _int, 2**63 - 1),
    "message.max.bytes": ("message_max_bytes", _int, 1048588),
    "compression.type": ("compression_type", str, "producer"),
    "socket.request.max.bytes": ("socket_request_max_bytes", _int, 104857600),
    "min.insync.replicas": ("min_insync_replicas", _int, 1),
    "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", _int, 3000),
    # KIP-848 (Kafka 4.0's names and defaults)
    "group.coordinator.rebalance.protocols": (
        "group_coordinator_rebalance_protocols",
        _protocols,
        ("classic", "consumer"),
    ),
    "group.consumer.session.timeout.ms": ("group_consumer_session_timeout_ms", _int, 45000),
    "group.consumer.heartbeat.interval.ms": ("group_consumer_heartbeat_interval_ms", _int, 5000),
    "group.consumer.assignors": (
        "group_consumer_assignors",
        lambda s: tuple(_assignor_name(p) for p in s.split(",") if p.strip()),
        ("uniform", "range"),
    ),
    "group.consumer.max.size": ("group_consumer_max_size", _int, 2**31 - 1),
    "group.consumer.migration.policy": (
        "group_consumer_migration_policy",
        _migration_policy,
        "bidirectional",
    ),
    "offsets.retention.minutes": ("offsets_retention_minutes", _int, 10080),
    "offsets.retention.check.interval.ms": ("offsets_retention_check_interval_ms", _int, 600000),
    "offset.metadata.max.bytes": ("offset_metadata_max_bytes", _int, 4096),
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", _int, 6000),
    "group.max.session.timeout.ms": ("group_max_session_timeout_ms", _int, 1800000),
    "max.connections": ("max_connections", _int, 2**31 - 1),
    "max.connections.per.ip": ("max_connections_per_ip", _int, 2**31 - 1),
    "max.connections.per.ip.overrides": (
        "max_connections_per_ip_overrides",
        lambda s: _ip_overrides(s),
        (),
    ),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", _bool, False),
    "replica.lag.time.max.ms": ("replica_lag_time_max_ms", _int, 30000),
    "log.flush.offset.checkpoint.interval.ms": (
        "log_flush_offset_checkpoint_interval_ms",
        _int,
        60000,
    ),
    "controlled.shutdown.enable": ("controlled_shutdown_enable", _bool, True),
    "controlled.shutdown.max.retries": ("controlled_shutdown_max_retries", _int, 3),
    "controlled.shutdown.retry.backoff.ms": ("controlled_shutdown_retry_backoff_ms", _int, 5000),
    "auto.leader.rebalance.enable": ("auto_leader_rebalance_enable", _bool, True),
    "leader.imbalance.check.interval.seconds": (
        "leader_imbalance_check_interval_seconds",
        _int,
        300,
    ),
    "leader.imbalance.per.broker.percentage": ("leader_imbalance_per_broker_percentage", _int, 10),
    "max.broker.partitions": ("max_broker_partitions", _int, 20000),
    "quota.window.num": ("quota_window_num", _int, 11),
    "quota.window.size.seconds": ("quota_window_size_seconds", _int, 1),
    "max.request.partition.size.limit": ("max_request_partition_size_limit", _int, 2000),
    "max.incremental.fetch.session.cache.slots": (
        "max_incremental_fetch_session_cache_slots",
        _int,
        1000,
    ),
    # log compaction (Kafka's LogConfig / CleanerConfig names and defaults)
    "log.cleanup.policy": ("log_cleanup_policy", _policy, "delete"),
    "log.cleaner.enable": ("log_cleaner_enable", _bool, True),
    "log.cleaner.threads": ("log_cleaner_threads", _int, 1),
    "log.cleaner.dedupe.buffer.size": ("log_cleaner_dedupe_buffer_size", _int, 128 * 1024 * 1024),
    "log.cleaner.io.buffer.size": ("log_cleaner_io_buffer_size", _int, 512 * 1024),
    "log.cleaner.io.buffer.load.factor": ("log_cleaner_io_buffer_load_factor", _double, 0.9),
    "log.cleaner.backoff.ms": ("log_cleaner_backoff_ms", _int, 15000),
    "log.cleaner.min.cleanable.ratio": ("log_cleaner_min_cleanable_ratio", _double, 0.5),
    "log.cleaner.delete.retention.ms": ("log_cleaner_delete_retention_ms", _int, 86400000),
    "log.cleaner.min.compaction.lag.ms": ("log_cleaner_min_compaction_lag_ms", _int, 0),
    "log.cleaner.max.compaction.lag.ms": ("log_cleaner_max_compaction_lag_ms", _int, LONG_MAX),
    # pybroker's own (no Kafka equivalent): log "event loop stalled N ms" past this; 0 = off
    "loop.stall.warn.ms": ("loop_stall_warn_ms", _int, 100),
    # pybroker's own: Prometheus metrics (and later the web console) over HTTP; off by default
    "metrics.listener": ("metrics_listener", _http_listener, None),
    # pybroker's own: the web console on that listener (docs/console.md)
    "console.enable": ("console_enable", _bool, True),
    "console.lag.sample.interval.ms": ("console_lag_sample_interval_ms", _int, 10000),
    "authorizer.class.name": ("authorizer_class_name", str, ""),
    "super.users": (
        "super_users",
        lambda s: tuple(u.strip() for u in s.split(";") if u.strip()),
        (),
    ),
    "allow.everyone.if.no.acl.found": ("allow_everyone_if_no_acl_found", _bool, False),
    "transaction.max.timeout.ms": ("transaction_max_timeout_ms", _int, 900000),
    "transactional.id.expiration.ms": ("transactional_id_expiration_ms", _int, 604800000),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        "transaction_abort_timed_out_transaction_cleanup_interval_ms",
        _int,
        10000,
    ),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (
        "transaction_remove_expired_transaction_cleanup_interval_ms",
        _int,
        3600000,
    ),
}


@dataclass(frozen=True)
class Config:
    broker_id: int = 0
    listeners: tuple[Endpoint, ...] = _KEYS["listeners"][2]
    advertised_listeners: tuple[Endpoint, ...] | None = None
    log_dirs: str | None = None
    log_dir: str | None = None
    zookeeper_connect: str | None = None
    zookeeper_session_timeout_ms: int = 18000
    zookeeper_connection_timeout_ms: int | None = None
    broker_rack: str | None = None
    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics_enable: bool = True
    log_segment_bytes: int = 1024 * 1024 * 1024
    log_roll_ms: int | None = None
    log_roll_hours: int = 168
    log_retention_ms: int | None = None
    log_retention_minutes: int | None = None
    log_retention_hours: int = 168
    log_retention_bytes: int = -1
    log_retention_check_interval_ms: int = 300000
    log_index_interval_bytes: int = 4096
    log_index_size_max_bytes: int = 10 * 1024 * 1024
    log_flush_interval_messages: int | None = None
    log_flush_interval_ms: int | None = None
    log_message_timestamp_type: str = "CreateTime"
    log_message_timestamp_difference_max_ms: int = 2**63 - 1
    log_message_timestamp_before_max_ms: int = 2**63 - 1
    log_message_timestamp_after_max_ms: int = 2**63 - 1
    message_max_bytes: int = 1048588
    compression_type: str = "producer"
    socket_request_max_bytes: int = 104857600
    min_insync_replicas: int = 1
    group_initial_rebalance_delay_ms: int = 3000
    group_coordinator_rebalance_protocols: tuple[str, ...] = ("classic", "consumer")
    group_consumer_session_timeout_ms: int = 45000
    group_consumer_heartbeat_interval_ms: int = 5000
    group_consumer_assignors: tuple[str, ...] = ("uniform", "range")
    group_consumer_max_size: int = 2**31 - 1
    group_consumer_migration_policy: str = "bidirectional"
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600000
    offset_metadata_max_bytes: int = 4096
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    max_connections: int = 2**31 - 1
    max_connections_per_ip: int = 2**31 - 1
    # (host or IP as given, limit), Kafka's "hostName:100,127.0.0.1:200"
    max_connections_per_ip_overrides: tuple[tuple[str, int], ...] = ()
    unclean_leader_election_enable: bool = False
    replica_lag_time_max_ms: int = 30000
    # recovery point (and the other) checkpoints of every log dir: also when a failed dir is
    # noticed at the latest if nothing else writes there
    log_flush_offset_checkpoint_interval_ms: int = 60000
    controlled_shutdown_enable: bool = True
    controlled_shutdown_max_retries: int = 3
    controlled_shutdown_retry_backoff_ms: int = 5000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    max_broker_partitions: int = 20000
    quota_window_num: int = 11  # client quotas' rate samples (quotas/rate.py)
    quota_window_size_seconds: int = 1
    max_incremental_fetch_session_cache_slots: int = 1000
    max_request_partition_size_limit: int = 2000
    log_cleanup_policy: str = "delete"
    log_cleaner_enable: bool = True
    log_cleaner_threads: int = 1
    log_cleaner_dedupe_buffer_size: int = 128 * 1024 * 1024
    log_cleaner_io_buffer_size: int = 512 * 1024
    log_cleaner_io_buffer_load_factor: float = 0.9
    log_cleaner_backoff_ms: int = 15000
    log_cleaner_min_cleanable_ratio: float = 0.5
    log_cleaner_delete_retention_ms: int = 86400000
    log_cleaner_min_compaction_lag_ms: int = 0
    log_cleaner_max_compaction_lag_ms: int = LONG_MAX
    loop_stall_warn_ms: int = 100
    metrics_listener: HttpEndpoint | None = None
    console_enable: bool = True
    console_lag_sample_interval_ms: int = 10000
    authorizer_class_name: str = ""
    super_users: tuple[str, ...] = ()
    allow_everyone_if_no_acl_found: bool = False
    transaction_max_timeout_ms: int = 900000
    transactional_id_expiration_ms: int = 604800000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3600000
    listener_security_protocol_map: tuple[tuple[str, str], ...] = _protocol_map(
        DEFAULT_PROTOCOL_MAP
    )
    security_inter_broker_protocol: str = "PLAINTEXT"
    inter_broker_listener_name: str | None = None
    # the replication quotas (Kafka's DynamicConfig.Broker): set only dynamically
    # (pybroker/dynamic_config.py), Long.MAX = unthrottled; read at use time
    leader_replication_throttled_rate: int = LONG_MAX
    follower_replication_throttled_rate: int = LONG_MAX
    replica_alter_log_dirs_io_max_bytes_per_second: int = LONG_MAX
    warnings: tuple[str, ...] = ()
    explicit_keys: frozenset[str] = frozenset()  # keys set in the file or by --override
    # ssl.* and listener.name.* settings as given (pybroker/tls.py reads them)
    security_settings: tuple[tuple[str, str], ...] = ()

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

    def listener_sasl(self, listener: str) -> Any:
        """A SASL listener's settings (pybroker/security/sasl.py); SaslConfigError names
        the key at fault."""
        return sasl.listener_sasl(dict(self.security_settings), listener)

    def principal_mapper(self) -> Any:
        """ssl.principal.mapping.rules as a function of a certificate's DN."""
        rules = sasl.parse_mapping_rules(
            dict(self.security_settings).get("ssl.principal.mapping.rules", "DEFAULT")
        )
        return lambda dn: sasl.map_principal(dn, rules)

    def inter_broker_sasl(self) -> tuple[str, str, str] | None:
        """(mechanism, username, password) this broker logs in with on the inter-broker
        listener, when it is a SASL one; else None."""
        if self.security_protocol(self.inter_broker_listener) not in (
            "SASL_PLAINTEXT",
            "SASL_SSL",
        ):
            return None
        mech = (
            dict(self.security_settings)
            .get("sasl.mechanism.inter.broker.protocol", "GSSAPI")
            .upper()
        )
        conf = self.listener_sasl(self.inter_broker_listener)
        if mech not in conf.mechanisms:
            raise sasl.SaslConfigError(
                "sasl.mechanism.inter.broker.protocol",
                f"{mech} is not enabled on the inter-broker listener {self.inter_broker_listener}",
            )
        if mech not in conf.logins:
            raise sasl.SaslConfigError(
                f"listener.name.{self.inter_broker_listener.lower()}.{mech.lower()}"
                ".sasl.jaas.config",
                "the inter-broker mechanism's JAAS entry needs username and password",
            )
        user, password = conf.logins[mech]
        return mech, user, password

    def ssl_context(self, listener: str) -> Any:
        """The server ssl.SSLContext of an SSL listener (pybroker/tls.py)."""
        return tls.server_context(dict(self.security_settings), listener)

    def inter_broker_ssl_context(self) -> Any:
        """The client ssl.SSLContext replication uses, when the inter-broker listener has TLS
        (its ssl.* settings, as Kafka configures a broker's own client side); else None."""
        if self.security_protocol(self.inter_broker_listener) not in ("SSL", "SASL_SSL"):
            return None
        return tls.client_context(dict(self.security_settings), self.inter_broker_listener)


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties: key=value or key:value or key value; # and ! comments; \\ continues."""
    out: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", logical)
        if m:
            out[m.group(1)] = m.group(2)
        elif logical:
            out[logical] = ""
        logical = ""
    return out


def _listener_protocols(settings: dict[str, str]) -> set[str]:
    try:
        listeners = _listeners(settings.get("listeners", "PLAINTEXT://127.0.0.1:9092"))
        protocols = dict(
            _protocol_map(settings.get("listener.security.protocol.map", DEFAULT_PROTOCOL_MAP))
        )
    except ValueError:
        return set()  # reported with its key below
    return {protocols.get(e.listener, "") for e in listeners}


def build_config(settings: dict[str, str]) -> Config:
    values: dict[str, Any] = {}
    warnings = []
    protocols = _listener_protocols(settings)
    ssl_served = bool(protocols & {"SSL", "SASL_SSL"})
    sasl_served = bool(protocols & {"SASL_PLAINTEXT", "SASL_SSL"})
    security: list[tuple[str, str]] = []
    for key, raw in settings.items():
        if key.startswith(("ssl.", "sasl.", "listener.name.", "connections.max.reauth.ms")):
            security.append((key, raw))
            if ssl_served and ".ssl." in f".{key}":
                continue  # read by pybroker/tls.py for the SSL listeners
            if sasl_served and (".sasl." in f".{key}" or key.endswith("connections.max.reauth.ms")):
                continue  # read by pybroker/security/sasl.py for the SASL listeners
        spec = _KEYS.get(key)
        if spec is None:
            if key.startswith(_INERT_WITHOUT_SECURE_LISTENER):
                # every listener is PLAINTEXT (or _validate refuses the configuration), and on
                # PLAINTEXT listeners Kafka does not use these either
                warnings.append(f"configuration key {key!r} has no effect: no SSL or SASL listener")
            else:
                warnings.append(f"unknown configuration key {key!r} ignored")
            continue
        field, parse, _ = spec
        try:
            values[field] = parse(raw)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"invalid value {raw!r} for configuration key {key!r}: {e}") from None
    explicit = frozenset(k for k in settings if k in _KEYS)
    cfg = Config(
        **values,
        warnings=tuple(warnings),
        explicit_keys=explicit,
        security_settings=tuple(security),
    )
    _validate(cfg)
    return cfg


def _validate_security(cfg: Config) -> None:
    """Every listener's security protocol comes from listener.security.protocol.map (a name
    missing there is refused, as Kafka refuses it); what a secured listener needs (TLS keys,
    SASL mechanisms and their JAAS entries) must be there, or the broker refuses to start,
    naming the key: never served unsecured."""
    for key, endpoints in (("listeners", cfg.listeners), ("advertised.listeners", cfg.advertised)):
        for e in endpoints:
            proto = cfg.security_protocol(e.listener)
            if proto is None:
                raise ConfigError(
                    f"invalid value for configuration key 'listener.security.protocol.map': "
                    f"no security protocol for listener {e.listener} (named in {key!r})"
                )
    if cfg.security_inter_broker_protocol.upper() not in SECURITY_PROTOCOLS:
        raise ConfigError(
            f"invalid value for configuration key 'security.inter.broker.protocol': "
            f"{cfg.security_inter_broker_protocol} (one of {', '.join(SECURITY_PROTOCOLS)})"
        )
    if cfg.inter_broker_listener_name is not None:
        if "security.inter.broker.protocol" in cfg.explicit_keys:
            raise ConfigError(
                "Only one of inter.broker.listener.name and security.inter.broker.protocol "
                "should be set."
            )
    for listener in cfg.ssl_listeners:
        try:
            cfg.ssl_context(listener)
        except tls.TlsConfigError as e:
            raise ConfigError(str(e)) from None
    names = [e.listener for e in cfg.advertised]
    try:
        cfg.inter_broker_ssl_context()
    except tls.TlsConfigError as e:
        raise ConfigError(str(e)) from None
    try:
        for listener in cfg.sasl_listeners:
            cfg.listener_sasl(listener)
        if cfg.inter_broker_listener in [e.listener for e in cfg.advertised]:
            cfg.inter_broker_sasl()  # (else refused below, naming the listener)
        cfg.principal_mapper()
    except sasl.SaslConfigError as e:
        raise ConfigError(str(e)) from None
    except ValueError as e:
        raise ConfigError(
            f"invalid value for configuration key 'ssl.principal.mapping.rules': {e}"
        ) from None
    if cfg.inter_broker_listener not in names:
        key = (
            "inter.broker.listener.name"
            if cfg.inter_broker_listener_name is not None
            else "security.inter.broker.protocol"
        )
        raise ConfigError(
            f"invalid value for configuration key {key!r}: inter.broker.listener.name must be "
            f"a listener name defined in advertised.listeners. The valid options based on "
            f"currently configured listeners are {','.join(names)}"
        )


def _validate(cfg: Config) -> None:
    def need(cond: bool, key: str, why: str) -> None:
        if not cond:
            raise ConfigError(f"invalid value for configuration key {key!r}: {why}")

    _validate_security(cfg)
    need(cfg.broker_id >= 0, "broker.id", "must be >= 0")
    need(cfg.num_partitions >= 1, "num.partitions", "must be >= 1")
    need(cfg.default_replication_factor >= 1, "default.replication.factor", "must be >= 1")
    need(cfg.log_segment_bytes >= 14, "log.segment.bytes", "must be >= 14")
    need(cfg.message_max_bytes >= 0, "message.max.bytes", "must be >= 0")
    need(cfg.socket_request_max_bytes >= 1, "socket.request.max.bytes", "must be >= 1")
    need(cfg.max_broker_partitions >= 1, "max.broker.partitions", "must be >= 1")
    need(cfg.quota_window_num >= 1, "quota.window.num", "must be >= 1")
    need(cfg.quota_window_size_seconds >= 1, "quota.window.size.seconds", "must be >= 1")
    need(cfg.max_connections >= 0, "max.connections", "must be >= 0")
    need(cfg.max_connections_per_ip >= 0, "max.connections.per.ip", "must be >= 0")
    for host, limit in cfg.max_connections_per_ip_overrides:
        need(limit >= 0, "max.connections.per.ip.overrides", f"{host}: must be >= 0")
    need(
        cfg.max_connections_per_ip > 0 or bool(cfg.max_connections_per_ip_overrides),
        "max.connections.per.ip",
        "0 needs max.connections.per.ip.overrides (it would refuse every connection)",
    )
    need(cfg.group_consumer_session_timeout_ms >= 1, "group.consumer.session.timeout.ms", ">= 1")
    need(
        1 <= cfg.group_consumer_heartbeat_interval_ms < cfg.group_consumer_session_timeout_ms,
        "group.consumer.heartbeat.interval.ms",
        "must be >= 1 and below group.consumer.session.timeout.ms",
    )
    need(bool(cfg.group_consumer_assignors), "group.consumer.assignors", "must name an assignor")
    need(cfg.group_consumer_max_size >= 1, "group.consumer.max.size", "must be >= 1")
    need(cfg.max_request_partition_size_limit >= 1, "max.request.partition.size.limit", ">= 1")
    need(
        cfg.max_incremental_fetch_session_cache_slots >= 0,
        "max.incremental.fetch.session.cache.slots",
        "must be >= 0",
    )
    need(cfg.min_insync_replicas >= 1, "min.insync.replicas", "must be >= 1")
    need(cfg.controlled_shutdown_max_retries >= 0, "controlled.shutdown.max.retries", ">= 0")
    need(
        cfg.controlled_shutdown_retry_backoff_ms >= 0,
        "controlled.shutdown.retry.backoff.ms",
        "must be >= 0",
    )
    need(
        cfg.leader_imbalance_check_interval_seconds >= 1,
        "leader.imbalance.check.interval.seconds",
        "must be >= 1",
    )
    need(
        cfg.leader_imbalance_per_broker_percentage >= 0,
        "leader.imbalance.per.broker.percentage",
        "must be >= 0",
    )
    need(cfg.log_retention_check_interval_ms >= 1, "log.retention.check.interval.ms", ">= 1")
    need(cfg.roll_ms >= 1, "log.roll.ms", "must be >= 1")
    need(
        cfg.compression_type in ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
        "compression.type",
        "must be producer, uncompressed, gzip, snappy, lz4 or zstd",
    )
    need(
        cfg.log_message_timestamp_type in ("CreateTime", "LogAppendTime"),
        "log.message.timestamp.type",
        "must be CreateTime or LogAppendTime",
    )
    need(cfg.loop_stall_warn_ms >= 0, "loop.stall.warn.ms", "must be >= 0 (0 turns it off)")
    if cfg.metrics_listener is not None and cfg.metrics_listener.port:
        clash = [str(e) for e in cfg.listeners if e.port == cfg.metrics_listener.port]
        need(not clash, "metrics.listener", f"its port is the Kafka listener's: {clash}")
    need(
        cfg.console_lag_sample_interval_ms >= 100,
        "console.lag.sample.interval.ms",
        "must be >= 100",
    )
    need(
        cfg.authorizer_class_name in ("", *AUTHORIZERS),
        "authorizer.class.name",
        f"{cfg.authorizer_class_name} is not an authorizer this broker has "
        f"(one of: {', '.join(AUTHORIZERS)})",
    )
    for u in cfg.super_users:
        need(":" in u and not u.startswith(":"), "super.users", f"{u!r} is not Type:name")
    for key, value in (
        ("transaction.max.timeout.ms", cfg.transaction_max_timeout_ms),
        ("transactional.id.expiration.ms", cfg.transactional_id_expiration_ms),
        (
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms,
        ),
        (
            "transaction.remove.expired.transaction.cleanup.interval.ms",
            cfg.transaction_remove_expired_transaction_cleanup_interval_ms,
        ),
    ):
        need(value >= 1, key, "must be >= 1")
    need(cfg.group_initial_rebalance_delay_ms >= 0, "group.initial.rebalance.delay.ms", ">= 0")
    need(
        0 < cfg.group_min_session_timeout_ms <= cfg.group_max_session_timeout_ms,
        "group.min.session.timeout.ms",
        "must be > 0 and <= group.max.session.timeout.ms",
    )
    need(cfg.offsets_retention_minutes >= 1, "offsets.retention.minutes", "must be >= 1")
    need(
        cfg.offsets_retention_check_interval_ms >= 1, "offsets.retention.check.interval.ms", ">= 1"
    )
    need(cfg.log_cleaner_threads >= 0, "log.cleaner.threads", "must be >= 0")
    need(cfg.log_cleaner_io_buffer_size >= 0, "log.cleaner.io.buffer.size", "must be >= 0")
    need(cfg.log_cleaner_backoff_ms >= 0, "log.cleaner.backoff.ms", "must be >= 0")
    need(
        0.0 <= cfg.log_cleaner_min_cleanable_ratio <= 1.0,
        "log.cleaner.min.cleanable.ratio",
        "must be between 0 and 1",
    )
    need(
        cfg.log_cleaner_delete_retention_ms >= 0, "log.cleaner.delete.retention.ms", "must be >= 0"
    )
    need(
        cfg.log_cleaner_min_compaction_lag_ms >= 0,
        "log.cleaner.min.compaction.lag.ms",
        "must be >= 0",
    )
    need(
        cfg.log_cleaner_max_compaction_lag_ms >= 1,
        "log.cleaner.max.compaction.lag.ms",
        "must be >= 1",
    )
    if cfg.log_cleaner_enable and cfg.log_cleaner_threads > 0:
        # Kafka's Cleaner: the offset map of each thread (24 bytes an entry: a 16-byte key
        # hash and an 8-byte offset) must hold more than one entry at its load factor
        slots = cfg.log_cleaner_dedupe_buffer_size // cfg.log_cleaner_threads // 24
        need(
            slots * cfg.log_cleaner_io_buffer_load_factor > 1,
            "log.cleaner.dedupe.buffer.size",
            "the offset map is too small to fit in even a single message; increase"
            " log.cleaner.dedupe.buffer.size or decrease log.cleaner.threads",
        )
    names = [e.listener for e in cfg.listeners]
    need(len(set(names)) == len(names), "listeners", "listener names must be unique")
    if cfg.zookeeper_connect is not None:
        for hp in cfg.zookeeper_connect.split("/")[0].split(","):
            u = urlsplit("//" + hp.strip())
            need(
                bool(u.hostname) and u.port is not None,
                "zookeeper.connect",
                "host:port[,..][/chroot]",
            )


def with_defaults_for_cli(cfg: Config, default_dir: str) -> Config:
    """`pybroker serve` with no log.dirs keeps data in a local directory it names on start."""
    if cfg.log_dirs is None and cfg.log_dir is None:
        return dataclasses.replace(cfg, log_dirs=os.path.abspath(default_dir))
    return cfg


def _render(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(
            ":".join(str(i) for i in v) if isinstance(v, tuple) else str(v) for v in value
        )
    return str(value)


def describe_settings(cfg: Config) -> list[tuple[str, str | None, bool]]:
    """(Kafka key, value as Kafka prints it, set explicitly?) for every honoured key."""
    return [
        (key, _render(getattr(cfg, field)), key in cfg.explicit_keys)
        for key, (field, _, _) in _KEYS.items()
    ]
