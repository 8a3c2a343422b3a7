"""The composition root: builds the broker's parts and starts and stops them in order.

start: log dirs (LogManager: created, checked writable, recovered; none usable stops the
start naming log.dirs) -> the listeners' ports bound, not yet accepting (a port in use stops
the start naming listeners, before the broker registers or claims the controller role) ->
metadata store (ZooKeeper when zookeeper.connect is set, else the embedded store under
log.dirs) -> Cluster (cluster id, registration, controller) -> logs for the partitions this
broker leads -> group coordinator (groups known from committed offsets) -> the log cleaner's
threads (pybroker/log/cleaner.py) -> listeners accept -> periodic retention and
recovery-point checkpoints.  stop runs the same steps backwards; a
clean stop leaves the logs marked clean so the next start skips recovery scans.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import resource
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pybroker import dynamic_config
from pybroker.clock import SYSTEM_CLOCK, Clock
from pybroker.config import Config
from pybroker.console import Console
from pybroker.coord.controller.controller import Controller
from pybroker.coord.group.classic import GroupConfig
from pybroker.coord.group.consumer_member import ConsumerGroupConfig, TopicMeta
from pybroker.coord.group.coordinator import GroupCoordinator
from pybroker.coord.group.offsets import OffsetStore
from pybroker.coord.metadata import paths
from pybroker.coord.metadata.cluster import Cluster
from pybroker.coord.metadata.local import LocalStore
from pybroker.coord.metadata.paths import DEFAULT_ENTITY
from pybroker.coord.metadata.store import MetadataStore
from pybroker.coord.txn.coordinator import TransactionCoordinator, TxnConfig
from pybroker.coord.txn.markers import MarkerSender
from pybroker.coord.txn.store import TxnStateStore
from pybroker.dynamic_config import DynamicBrokerConfig
from pybroker.errors import ErrorCode, KafkaError
from pybroker.fetch_session import FetchSessionCache
from pybroker.flusher import Flusher
from pybroker.handlers._topics import flush_policy, log_config
from pybroker.handlers.write_txn_markers import write_txn_markers
from pybroker.http_server import HttpRequest, HttpResponse, HttpServer
from pybroker.log import LogManager, PartitionLog, meta_properties
from pybroker.log.cleaner import CleanerConfig, LogCleaner
from pybroker.log.manager import OfflineLogDirError
from pybroker.log.mover import LogDirMover
from pybroker.log.partition_metadata import other_incarnation
from pybroker.log.segment import DescriptorCache, descriptor_budget
from pybroker.loop_monitor import LoopMonitor
from pybroker.metrics import BrokerMetrics, exposition
from pybroker.purgatory import Purgatory
from pybroker.quotas.manager import QuotaManager
from pybroker.quotas.store import QuotaStore
from pybroker.replica_manager import ReplicaManager
from pybroker.replication import manager as replica_manager
from pybroker.replication.client import BrokerConnection
from pybroker.replication.controlled_shutdown import controlled_shutdown
from pybroker.replication.fetcher import ReplicaFetcher
from pybroker.replication.throttle import ReplicationThrottles
from pybroker.security import listeners as listener_security
from pybroker.security.authorizer import Authorizer
from pybroker.security.credentials import CredentialStore, fake_salt_key
from pybroker.server import KafkaServer

# the event loop's time for deleting a deleted topic's logs in one go (see _delete_logs)
LOG_DELETE_BUDGET_S = 0.01

log = logging.getLogger("pybroker.broker")

METADATA_DIR = "__cluster_metadata"
STOP_STEP_S = 3.0  # the most one shutdown step may take (SIGTERM must end the process)


async def _bounded(what: str, step: Any, timeout: float = STOP_STEP_S) -> None:
    """Await one shutdown step for at most ``timeout`` seconds; a step that fails or takes
    longer is logged and left behind (its task is cancelled), and the shutdown goes on."""
    try:
        async with asyncio.timeout(timeout):
            await step
    except TimeoutError:
        log.warning("shutdown: %s did not stop within %.0f s; going on", what, timeout)
    except Exception as e:
        log.warning("shutdown: %s failed to stop: %r; going on", what, e)


def make_store(config: Config, data_dir: Path, clock: Clock) -> MetadataStore:
    if config.zookeeper_connect:
        from pybroker.coord.metadata.zk import ZooKeeperStore

        return ZooKeeperStore(
            config.zookeeper_connect,
            session_timeout_ms=config.zookeeper_session_timeout_ms,
            connect_timeout_s=(
                config.zookeeper_connection_timeout_ms or config.zookeeper_session_timeout_ms
            )
            / 1000.0,
        )
    return LocalStore(data_dir / METADATA_DIR, clock=clock)


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


class Broker:
    def __init__(self, config: Config, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        # KIP-226: dynamic broker configs, applied to ``config`` in place (dynamic_config.py)
        self.dynamic = DynamicBrokerConfig(config)
        self.clock = clock
        self.purgatory = Purgatory()
        self.fetch_sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots)
        self.store: MetadataStore | None = None
        self.cluster: Cluster | None = None
        self.logs: LogManager | None = None
        self.descriptors: DescriptorCache | None = None
        self.log_mover: LogDirMover | None = None
        self._hosted_at_start: set[tuple[str, int]] = set()
        self.groups: GroupCoordinator | None = None
        self.transactions: TransactionCoordinator | None = None
        self.credentials: CredentialStore | None = None
        self.authorizer: Authorizer | None = None
        self.quota_store: QuotaStore | None = None
        self.quotas: QuotaManager | None = None
        self._fake_salt_key: bytes | None = None
        self._marker_sender: MarkerSender | None = None
        self.replicas: ReplicaManager | None = None
        self.flusher = Flusher(
            self._flush_policy,
            clock,
            on_io_error=lambda plog, e: self.logs.fail_dir(self.logs.dir_of(plog), e),
        )
        self._flush_policies: dict[str, tuple[int, int]] = {}
        self.server: KafkaServer | None = None
        self.cleaner: LogCleaner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task] = []
        self._stopping = False
        self._topic_meta_cache: TopicMeta | None = None
        # always running: its warnings (loop.stall.warn.ms, 0 = none) and the session lease
        self.loop_monitor = LoopMonitor(config.loop_stall_warn_ms)
        # metrics.listener: counters the request paths move (None: off, nothing counted)
        self.metrics: BrokerMetrics | None = (
            BrokerMetrics() if config.metrics_listener is not None else None
        )
        self.http: HttpServer | None = None
        self.console: Console | None = None

    @property
    def metadata_backend(self) -> str:
        return "zookeeper" if self.config.zookeeper_connect else "embedded"

    async def start(self) -> None:
        cfg = self.config
        self.loop_monitor.start()  # first, so a blocking start-up step shows too
        data_dir = cfg.data_dir
        soft, _ = raise_open_files_limit()
        # the log's segment descriptors, bounded whatever the number of partitions
        self.descriptors = DescriptorCache(descriptor_budget(soft))
        log.info(
            "open files limit %d; at most %d segment files open at once",
            soft,
            self.descriptors.capacity,
        )
        self.logs = LogManager(
            cfg.log_dir_list, log_config(cfg, {}), self.clock, descriptors=self.descriptors
        )
        await asyncio.to_thread(self.logs.load_all)  # none usable: an error naming log.dirs
        if not cfg.zookeeper_connect and self.logs.log_dir in self.logs.offline_dirs:
            raise OfflineLogDirError(
                f"log.dirs: the first log dir, {self.logs.log_dir}, holds the embedded metadata "
                f"store and cannot be used: {self.logs.start_errors.get(self.logs.log_dir)}"
            )
        for d in self.logs.online_dirs:  # a disk of another broker: refused, as Kafka does
            meta_properties.check_broker_id(d, cfg.broker_id)
        self.logs.dir_failure_listeners.append(self._on_log_dir_failure)
        self.log_mover = LogDirMover(
            self.logs,
            # read at every chunk: a dynamic change applies to moves under way
            rate=lambda: self.config.replica_alter_log_dirs_io_max_bytes_per_second,
            clock=self.clock,
        )
        # the listeners' ports are bound before the broker registers or claims the controller
        # role (a port in use stops it here, naming listeners); connections wait in the
        # kernel's backlog until server.start() below
        self.server = KafkaServer(
            self,
            cfg.listeners,
            max_request_bytes=cfg.socket_request_max_bytes,
            max_connections=cfg.max_connections,
            ssl_contexts={
                name: listener_security.ssl_context(cfg, name) for name in cfg.ssl_listeners
            },
            sasl={name: listener_security.listener_sasl(cfg, name) for name in cfg.sasl_listeners},
            principal_rules=listener_security.principal_mapper(cfg),
        )
        await self.server.bind()
        if cfg.metrics_listener is not None:
            self.http = HttpServer(cfg.metrics_listener.host, cfg.metrics_listener.port)
            await self.http.bind()
        self.store = make_store(cfg, data_dir, self.clock)
        await self.store.start()
        endpoints = [(e.listener, e.host, e.port) for e in cfg.advertised]
        self.cluster = Cluster(
            self.store,
            cfg.broker_id,
            endpoints,
            self.clock,
            rack=cfg.broker_rack,
            unclean_leader_election_enable=cfg.unclean_leader_election_enable,
            # a registration left by our previous process goes when its session times out
            registration_wait_ms=2 * cfg.zookeeper_session_timeout_ms
            if cfg.zookeeper_connect
            else 0,
            max_broker_partitions=cfg.max_broker_partitions,
            auto_leader_rebalance_enable=cfg.auto_leader_rebalance_enable,
            leader_imbalance_check_interval_s=cfg.leader_imbalance_check_interval_seconds,
            leader_imbalance_per_broker_percentage=cfg.leader_imbalance_per_broker_percentage,
            # the session lease (coord/metadata/cluster.py): a loop held up past a third of
            # the session
            stall_limit_ms=cfg.zookeeper_session_timeout_ms / 3 if cfg.zookeeper_connect else 0,
            loop_blocked_ms=self.loop_monitor.blocked_ms,
            controller=Controller,
        )
        self.loop_monitor.add_listener(self.cluster.loop_stalled)
        await self.cluster.start()
        for d in self.logs.online_dirs:  # (a wrong zookeeper.connect: refused, as Kafka does)
            meta_properties.check_cluster_id(d, self.cluster.cluster_id)
        for d in self.logs.online_dirs:
            try:
                meta_properties.write(d, cfg.broker_id, self.cluster.cluster_id)
            except OSError as e:
                self.logs.fail_dir(d, e)
        self._apply_broker_configs()  # before anything below reads a dynamic value
        self.replicas = ReplicaManager(
            cfg.broker_id,
            self.cluster,
            self.logs,
            self.purgatory,
            self.clock,
            replica_lag_time_max_ms=cfg.replica_lag_time_max_ms,
            min_insync_replicas=self._min_insync_replicas,
            open_log=self.partition_log,
            fetcher_factory=ReplicaFetcher,
            inter_broker_listener=cfg.inter_broker_listener,
            inter_broker_ssl=listener_security.inter_broker_ssl_context(cfg),
            inter_broker_sasl=listener_security.inter_broker_sasl(cfg),
            on_replica_removed=lambda t, p, plog: self._delete_logs([(t, p, plog)]),
            throttles=ReplicationThrottles(
                lambda: self.config, self.cluster, cfg.broker_id, self.clock
            ),
            config=self.config,
            flusher=self.flusher,
            metrics=self.metrics,
        )
        self._apply_topic_configs()
        self._loop = asyncio.get_running_loop()
        self.logs.owner_thread = threading.get_ident()
        self.logs.call_on_owner = self._loop.call_soon_threadsafe
        self.cleaner = self._new_cleaner()
        self.cleaner.start()
        self.flusher.start()
        me = cfg.broker_id
        self._hosted_at_start = {  # existing replicas (Kafka's isNew = false)
            (name, p)
            for name, info in self.cluster.topics.items()
            for p, st in info.partitions.items()
            if me in st.replicas
        }
        await self.replicas.start()
        self._delete_stray_logs()
        self.log_mover.resume()  # moves a crash interrupted go on
        self.cluster.add_listener(self._on_cluster_event)
        self.groups = GroupCoordinator(
            OffsetStore(self.store, self.clock),
            self.clock,
            GroupConfig(
                min_session_timeout_ms=cfg.group_min_session_timeout_ms,
                max_session_timeout_ms=cfg.group_max_session_timeout_ms,
                initial_rebalance_delay_ms=cfg.group_initial_rebalance_delay_ms,
            ),
            offsets_retention_ms=cfg.offsets_retention_minutes * 60_000,
            offsets_retention_check_interval_ms=cfg.offsets_retention_check_interval_ms,
            offset_metadata_max_bytes=cfg.offset_metadata_max_bytes,
            broker_id=cfg.broker_id,
            membership=lambda: (self.cluster.membership_epoch, self.cluster.brokers),
            consumer_config=ConsumerGroupConfig(
                session_timeout_ms=cfg.group_consumer_session_timeout_ms,
                heartbeat_interval_ms=cfg.group_consumer_heartbeat_interval_ms,
                assignors=cfg.group_consumer_assignors,
                max_size=cfg.group_consumer_max_size,
                migration_policy=cfg.group_consumer_migration_policy,
            ),
            topics=self._topic_meta,
        )
        await self.groups.start()
        self._marker_sender = MarkerSender(
            self.cluster,
            cfg.broker_id,
            write_local=lambda markers: write_txn_markers(self, markers),
            connect=lambda host, port: BrokerConnection(
                host,
                port,
                f"txn-coordinator-{self.config.broker_id}",
                ssl=listener_security.inter_broker_ssl_context(self.config),
                sasl=listener_security.inter_broker_sasl(self.config),
            ),
            listener=lambda: self.config.inter_broker_listener,
        )
        self.transactions = TransactionCoordinator(
            TxnStateStore(self.store),
            self.clock,
            TxnConfig(
                max_timeout_ms=cfg.transaction_max_timeout_ms,
                id_expiration_ms=cfg.transactional_id_expiration_ms,
                abort_interval_ms=cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                expire_interval_ms=cfg.transaction_remove_expired_transaction_cleanup_interval_ms,
            ),
            self.cluster.allocate_producer_id,
            self._marker_sender,
            broker_id=cfg.broker_id,
            membership=lambda: (self.cluster.membership_epoch, self.cluster.brokers),
        )
        await self.transactions.start()
        self.credentials = CredentialStore(self.store)
        self.quota_store = QuotaStore(self.store)
        await self.quota_store.watch()
        self.quotas = QuotaManager(
            lambda: self.quota_store.quotas,
            self.clock.time_ms,
            samples=cfg.quota_window_num,
            window_ms=cfg.quota_window_size_seconds * 1000,
        )
        if cfg.authorizer_class_name:
            self.authorizer = Authorizer(
                self.store,
                super_users=cfg.super_users,
                allow_everyone_if_no_acl_found=cfg.allow_everyone_if_no_acl_found,
                now_ms=self.clock.time_ms,
            )
            await self.authorizer.start()
        self._apply_connection_limits()
        await self.server.start()
        if self.http is not None:
            self.metrics.idle.start()
            self.http.route("/metrics", self._metrics_route)
            if cfg.console_enable:
                self.console = Console(self, cfg.console_lag_sample_interval_ms / 1000.0)
                self.console.install(self.http)
            await self.http.start()
            if self.console is not None:
                self.console.start()
        self._tasks.append(asyncio.create_task(self._retention_loop(), name="retention"))
        self._tasks.append(asyncio.create_task(self._checkpoint_loop(), name="checkpoint"))

    async def stop(self) -> None:
        """Every step is bounded (STOP_STEP_S): with ZooKeeper unreachable or a peer paused,
        a step waiting on them gives up and the shutdown goes on, so SIGTERM always ends the
        process.  The logs are closed (marked clean) before the metadata store, which is the
        step most likely to wait on an unreachable ZooKeeper.

        First, with ``controlled.shutdown.enable``, the controlled shutdown (replication/
        controlled_shutdown.py): leaderships and ISR memberships are handed over through the
        controller while the listeners still answer (clients are told NOT_LEADER_OR_FOLLOWER
        and find the new leaders), bounded by its own retries and deadline."""
        if (
            self.config.controlled_shutdown_enable
            and self.cluster is not None
            and self.replicas is not None
            and self.server is not None
            and self.server.serving
        ):
            try:
                await controlled_shutdown(
                    self.cluster,
                    self.replicas,
                    max_retries=self.config.controlled_shutdown_max_retries,
                    retry_backoff_ms=self.config.controlled_shutdown_retry_backoff_ms,
                )
            except Exception:
                log.exception("controlled shutdown failed; stopping")
        self._stopping = True  # metadata events (some already queued) change nothing now
        if self.cluster is not None:
            self.cluster.remove_listener(self._on_cluster_event)
        for t in self._tasks:
            t.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=STOP_STEP_S)
        if self.console is not None:
            await _bounded("console", self.console.stop())
        if self.http is not None:
            await _bounded("HTTP listener", self.http.stop())
        if self.server is not None:
            await _bounded("listeners", self.server.stop())
        if self.cleaner is not None:
            # not bounded: its threads stop between two steps of a clean, and a swap they
            # wait for needs the loop running; the logs must not close under them
            await asyncio.to_thread(self.cleaner.stop)
        if self.authorizer is not None:
            await _bounded("authorizer", self.authorizer.stop())
        if self.quota_store is not None:
            self.quota_store.close()
        if self.transactions is not None:
            await _bounded("transaction coordinator", self.transactions.stop())
        if self._marker_sender is not None:
            self._marker_sender.close()
        if self.groups is not None:
            await _bounded("group coordinator", self.groups.stop())
        if self.log_mover is not None:
            await _bounded("log dir mover", self.log_mover.stop())
        if self.replicas is not None:
            await _bounded("replica manager", self.replicas.stop())
        await _bounded("flusher", self.flusher.stop())
        if self.cluster is not None:
            await _bounded("cluster membership", self.cluster.stop())
        if self.logs is not None:
            await asyncio.to_thread(self.logs.close)  # local disk only: never skipped
        if self.store is not None:
            await _bounded("metadata store", self.store.close())
        await self.loop_monitor.stop()

    async def _metrics_route(self, request: HttpRequest) -> HttpResponse:
        body, content_type = await exposition(self, request.headers.get("accept"))
        return HttpResponse(200, body, content_type)

    # -- services used by the handlers -----------------------------------------------------
    async def scram_fake_salt_key(self) -> bytes:
        """The cluster's secret for the salts answered to unknown SCRAM users (one for every
        broker, so two brokers give the same answer): created once in the metadata store."""
        if self._fake_salt_key is None:
            self._fake_salt_key = await fake_salt_key(self.store)
        return self._fake_salt_key

    def partition_log(self, topic: str, partition: int) -> PartitionLog:
        existing = self.logs.get(topic, partition)
        info = self.cluster.topics[topic]
        if existing is not None and not other_incarnation(existing.topic_id, info.topic_id):
            return existing
        key = (topic, partition)
        if existing is None and self.logs.offline_dirs and key in self._hosted_at_start:
            # Kafka's getOrCreateLog(isNew = false) while a dir is offline: the replica may
            # be in that dir, and an empty log in its place could lead (data loss): offline
            # here, the controller is told (it moves the leadership, drops it from the ISR)
            log.error(
                "%s-%d: no log in the online dirs and %s offline: offline here",
                topic,
                partition,
                ", ".join(map(str, sorted(self.logs.offline_dirs))),
            )
            self.logs.offline_partitions.add(key)
            self._on_log_dir_failure(None, [key])
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{topic}-{partition} is offline")
        # new, or a log of an earlier incarnation of the topic (replaced by an empty one)
        return self.logs.get_or_create(
            topic, partition, log_config(self.config, info.configs), topic_id=info.topic_id
        )

    def _new_cleaner(self) -> LogCleaner:
        cfg = self.config
        return LogCleaner(
            self.logs,
            CleanerConfig(
                enable=cfg.log_cleaner_enable,
                threads=cfg.log_cleaner_threads,
                dedupe_buffer_size=cfg.log_cleaner_dedupe_buffer_size,
                io_buffer_size=cfg.log_cleaner_io_buffer_size,
                dedupe_buffer_load_factor=cfg.log_cleaner_io_buffer_load_factor,
                backoff_ms=cfg.log_cleaner_backoff_ms,
                use_process=True,
            ),
            self.clock,
            run_on_owner=self._run_on_loop,
        )

    def _apply_broker_configs(self) -> set[str]:
        """Apply the stored dynamic broker configs (ours and the cluster-wide defaults) to
        ``self.config``; returns the keys whose values moved."""
        stored = self.cluster.broker_configs
        changed = self.dynamic.update(
            stored.get(str(self.config.broker_id), {}), stored.get(DEFAULT_ENTITY, {})
        )
        cfg = self.config
        if changed & dynamic_config.LOG_CONFIGS or changed - dynamic_config.SUPPORTED:
            # (the second: synonyms such as log.retention.hours moved with log.retention.ms)
            self.logs.default_config = log_config(cfg, {})
            self._flush_policies.clear()
            if self.replicas is not None:
                self._apply_topic_configs()
            if self.cleaner is not None:
                self.cleaner.wake()
        self.cluster.unclean_leader_election_enable = cfg.unclean_leader_election_enable
        self._apply_connection_limits()
        if any(k.startswith("listener.name.") for k in changed):
            self.reload_tls()
        if "advertised.listeners" in changed:
            endpoints = [(e.listener, e.host, e.port) for e in cfg.advertised]
            self._tasks.append(
                asyncio.create_task(self.cluster.update_endpoints(endpoints), name="register")
            )
        if changed & dynamic_config.CLEANER_CONFIGS and self.cleaner is not None:
            self._tasks.append(asyncio.create_task(self._restart_cleaner(), name="cleaner"))
        return changed

    def _apply_connection_limits(self) -> None:
        """max.connections and Kafka's per-address limits, read by the listeners at accept."""
        if self.server is None:
            return
        cfg = self.config
        self.server.max_connections = cfg.max_connections
        self.server.max_connections_per_ip = cfg.max_connections_per_ip
        overrides: dict[str, int] = {}
        for host, limit in cfg.max_connections_per_ip_overrides:
            overrides[host] = limit
            try:  # a host name counts for the addresses it has now (Kafka resolves it too)
                for info in socket.getaddrinfo(host, None):
                    overrides.setdefault(info[4][0], limit)
            except OSError:
                log.warning("max.connections.per.ip.overrides: cannot resolve %s", host)
        self.server.max_connections_per_ip_overrides = overrides

    def reload_tls(self) -> None:
        """New server contexts for the SSL listeners from the current settings (files read
        again): new connections use them, open ones keep theirs (Kafka's SslFactory
        reconfiguration).  A context that cannot be built keeps the old one (logged)."""
        if self.server is None:
            return
        for name in self.config.ssl_listeners:
            try:
                self.server.ssl_contexts[name] = listener_security.ssl_context(self.config, name)
            except Exception as e:
                log.error("listener %s keeps its TLS context: %s", name, e)
                continue
            log.info("listener %s: TLS key and trust stores loaded", name)

    async def _restart_cleaner(self) -> None:
        """Kafka's LogCleaner.reconfigure: stop the cleaner threads (a clean under way is
        abandoned between two steps) and start them again with the new settings."""
        old = self.cleaner
        if old is None or self._stopping:
            return
        await asyncio.to_thread(old.stop)
        if self._stopping or self.cleaner is not old:
            return
        self.cleaner = self._new_cleaner()
        self.cleaner.start()
        log.info("log cleaner restarted with %d threads", self.config.log_cleaner_threads)

    def _on_log_dir_failure(self, directory: Path | None, lost: list[tuple[str, int]]) -> None:
        """LogManager.fail_dir's listener (on the loop: LogManager.owner_thread), Kafka's
        handleLogDirFailure: the dir's partitions go offline here and the controller is told
        (it moves their leadership and takes this broker out of their ISRs); with no log dir
        left the process halts with status 1, as Kafka does ("all log dirs have failed")."""
        if self._loop is None:
            return  # (at start: load_all reports what it could not load)
        if self.replicas is not None:
            self.replicas.mark_offline(lost)
        if not self.logs.online_dirs:
            log.critical(
                "Shutdown broker because all log dirs in %s have failed",
                ", ".join(map(str, self.logs.log_dirs)),
            )
            logging.shutdown()
            os._exit(1)
        if lost and self.store is not None and not self._stopping:
            self._loop.create_task(self._announce_offline(lost), name="log-dir-failure")

    async def _announce_offline(self, lost: list[tuple[str, int]]) -> None:
        data = json.dumps(
            {"version": 1, "broker": self.config.broker_id, "partitions": sorted(lost)}
        ).encode()
        for attempt in range(10):
            try:
                await self.store.create(
                    paths.offline_replicas_prefix(self.config.broker_id),
                    data,
                    ephemeral=True,
                    sequence=True,
                    makepath=True,
                )
                return
            except Exception as e:  # (store unreachable: try again)
                log.warning("log dir failure not announced yet: %s", e)
                await asyncio.sleep(min(0.1 * 2**attempt, 5.0))

    def _run_on_loop(self, fn: Callable[[], Any]) -> Any:
        """The log cleaner's one handoff: run ``fn`` (a segment swap, a look at the producer
        state) on the event loop, the owner of the logs, and wait for its result."""
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def call() -> None:
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(fn())
            except BaseException as e:  # handed to the waiting cleaner thread
                fut.set_exception(e)

        self._loop.call_soon_threadsafe(call)
        return fut.result()

    def _topic_meta(self) -> TopicMeta:
        """The cluster's topics for KIP-848 assignments: name -> (topic id, partitions); built
        once per change of the cluster's metadata (every change comes as a cluster event)."""
        assert self.cluster is not None
        if self._topic_meta_cache is None:
            self._topic_meta_cache = {
                n: (i.topic_id, len(i.partitions)) for n, i in self.cluster.topics.items()
            }
        return self._topic_meta_cache

    def _on_cluster_event(self, event: Any) -> None:
        self._topic_meta_cache = None
        if self._stopping:
            return
        if event.kind == "BROKER_CONFIG_CHANGED":
            self._apply_broker_configs()
            return
        if event.kind == "ENTITY_CONFIG_CHANGED":
            return
        # A topic's change touches only that topic's partitions; a change of the live brokers
        # or of the controller can move any leader.
        topic = event.topic if event.kind in ("TOPIC_CHANGED", "TOPIC_DELETED") else None
        self.replicas.sync_roles(topic)  # first: stops fetching partitions that are going away
        self._flush_policies.pop(topic, None)
        if event.kind == "TOPIC_CHANGED":
            self._apply_topic_configs(event.topic)
            if self.cleaner is not None:
                self.cleaner.wake()  # a topic that became compacted is looked at now
        if event.kind == "BROKERS_CHANGED" and self.groups is not None:
            self.groups.check_membership()
        if event.kind == "BROKERS_CHANGED" and self.transactions is not None:
            self.transactions.check_membership()
        if event.kind == "TOPIC_DELETED":
            # The topic may exist again by now (deleted and created at once, the events
            # delivered late): only the logs of the deleted incarnation go.
            info = self.cluster.topics.get(event.topic)
            self._delete_logs(
                [
                    (name, partition, plog)
                    for name, partition, plog in self.logs.partitions()
                    if name == event.topic
                    and (info is None or other_incarnation(plog.topic_id, info.topic_id))
                ]
            )

    def _delete_stray_logs(self) -> None:
        """At start: the logs of partitions this broker is no longer a replica of (a
        reassignment removed it while it was down) are deleted, as Kafka's controller has a
        returning broker delete such replicas."""
        me = self.config.broker_id
        stray = []
        for name, partition, plog in self.logs.partitions():
            info = self.cluster.topics.get(name)
            state = info.partitions.get(partition) if info is not None else None
            if state is None or other_incarnation(plog.topic_id, info.topic_id):
                continue
            if me not in state.replicas:
                stray.append((name, partition, plog))
        if stray:
            log.info(
                "deleting the logs of %d partitions reassigned away from this broker: %s",
                len(stray),
                ", ".join(f"{n}-{p}" for n, p, _ in stray[:20]),
            )
            self._delete_logs(stray)

    def _delete_logs(self, doomed: list[tuple[str, int, PartitionLog]]) -> None:
        """Delete these logs (a rename and closing its files each), for LOG_DELETE_BUDGET_S
        of the event loop at a time: a topic of thousands of partitions goes over several
        loop iterations.  A log that was replaced meanwhile (the topic created again) stays."""
        deadline = replica_manager.monotonic() + LOG_DELETE_BUDGET_S
        for k, (name, partition, plog) in enumerate(doomed):
            if k and replica_manager.monotonic() > deadline and self._loop is not None:
                self._loop.call_soon(self._delete_logs, doomed[k:])
                return
            if self.logs.get(name, partition) is plog:
                self.logs.delete(name, partition)

    def _apply_topic_configs(self, topic: str | None = None) -> None:
        """Give open logs their topic's configs (logs recovered at start open with defaults)."""
        topics = self.cluster.topics
        names = list(topics) if topic is None else [topic] if topic in topics else []
        for name in names:
            info = topics[name]
            wanted = log_config(self.config, info.configs)
            for partition in info.partitions:
                plog = self.logs.get(name, partition)
                if plog is not None and plog.config != wanted:
                    plog.config = wanted

    def _flush_policy(self, topic: str) -> tuple[int, int]:
        """Per topic, cached (it is asked on every append); TOPIC_CHANGED clears the cache."""
        policy = self._flush_policies.get(topic)
        if policy is None:
            info = self.cluster.topics.get(topic)
            policy = flush_policy(self.config, info.configs if info is not None else {})
            self._flush_policies[topic] = policy
        return policy

    def _min_insync_replicas(self, topic: str) -> int:
        info = self.cluster.topics.get(topic)
        value = info.configs.get("min.insync.replicas") if info is not None else None
        return int(value) if value is not None else self.config.min_insync_replicas

    async def _retention_loop(self) -> None:
        interval = self.config.log_retention_check_interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                # Retention only detaches and renames segments (cheap, on the loop, the
                # appends' owner); unlinking files happens in a thread, after a delay that
                # lets in-flight sendfile reads finish.
                self.logs.run_retention()
                await asyncio.to_thread(self.logs.delete_pending_files)
            except Exception:
                log.exception("retention check failed")

    async def _checkpoint_loop(self) -> None:
        # Flushing moves each log's recovery point, which bounds how much of the tail a
        # start after a crash must scan (the OS page cache already survives a process kill).
        while True:
            await asyncio.sleep(self.config.log_flush_offset_checkpoint_interval_ms / 1000)
            try:
                await asyncio.to_thread(self.logs.flush_all)
            except Exception:
                log.exception("recovery point checkpoint failed")


def describe(broker: Broker) -> dict[str, Any]:
    cfg = broker.config
    return {
        "broker.id": cfg.broker_id,
        "listeners": ",".join(str(e) for e in cfg.listeners),
        "log.dirs": ",".join(str(d) for d in cfg.log_dir_list),
        "metadata": broker.metadata_backend,
    }
