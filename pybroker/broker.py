"""The composition root: the broker's parts started in dependency order and stopped in reverse.

``start`` runs one small step per part (pybroker/builder.py makes each from the Config): the
log dirs (created, checked writable, recovered; none usable stops the start naming log.dirs)
-> the listeners' ports bound, not yet accepting (a port in use stops the start naming
listeners, before the broker registers or claims the controller role) -> the metadata store
(ZooKeeper when zookeeper.connect is set, else embedded under log.dirs) -> the Cluster
(registration, controller) -> the replica manager and the logs it leads -> the coordinators'
storages (offsets.storage, transaction.state.storage: the metadata store or the internal
topics) -> the group coordinator, share groups and the transaction coordinator (then the
internal topics' partitions led here are loaded) -> quotas, the authorizer -> the log cleaner -> the listeners accept
-> the metrics and console listener -> periodic retention and recovery-point checkpoints.
Each step registers its part's stop (``Stops``); ``stop`` runs them last-registered first,
after the controlled shutdown.  docs/internals.md ("The broker process") has the order.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import socket
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from pybroker import builder, dynamic_config
from pybroker.clock import SYSTEM_CLOCK, Clock
from pybroker.config import Config
from pybroker.console import Console
from pybroker.coord.group.consumer_member import TopicMeta
from pybroker.coord.group.coordinator import GroupCoordinator
from pybroker.coord.group.group_configs import Bounds, GroupConfigCache
from pybroker.coord.group.share_coordinator import ShareGroupCoordinator
from pybroker.coord.metadata import paths
from pybroker.coord.metadata.batching import BatchingStore
from pybroker.coord.metadata.cluster import Cluster
from pybroker.coord.metadata.paths import DEFAULT_ENTITY
from pybroker.coord.metadata.store import MetadataStore
from pybroker.coord.txn.coordinator import TransactionCoordinator
from pybroker.coord.txn.markers import MarkerSender
from pybroker.dynamic_config import DynamicBrokerConfig
from pybroker.exposition import exposition
from pybroker.fetch_session import FetchSessionCache
from pybroker.flusher import Flusher
from pybroker.gc_policy import GcPolicy
from pybroker.handlers.write_txn_markers import write_txn_markers
from pybroker.hosted_logs import HostedLogs
from pybroker.http_server import HttpRequest, HttpResponse, HttpServer
from pybroker.internal_topics import InternalTopic
from pybroker.log import LogManager, meta_properties
from pybroker.log.cleaner import LogCleaner
from pybroker.log.descriptors import DescriptorCache
from pybroker.log.manager import OfflineLogDirError
from pybroker.log.mover import LogDirMover
from pybroker.loop_monitor import LoopMonitor
from pybroker.metrics import BrokerMetrics
from pybroker.purgatory import Purgatory
from pybroker.quotas.manager import QuotaManager
from pybroker.quotas.store import QuotaStore
from pybroker.replica_manager import ReplicaManager
from pybroker.replication.controlled_shutdown import controlled_shutdown
from pybroker.security import listeners as listener_security
from pybroker.security.authorizer import Authorizer
from pybroker.security.credentials import CredentialStore, fake_salt_key
from pybroker.server import KafkaServer
from pybroker.share.manager import SharePartitionManager
from pybroker.stops import STOP_STEP_S, Stops

log = logging.getLogger("pybroker.broker")


class Broker:
    """The broker: its parts (pybroker/services.py's BrokerServices once started), the order
    they start and stop in, and its reactions to metadata and log dir events."""

    def __init__(
        self, config: Config, clock: Clock = SYSTEM_CLOCK, *, store: MetadataStore | None = None
    ) -> None:
        """``store``: a metadata store made by the caller (a multi-core node's RemoteStore,
        pybroker/node/) instead of make_store's; the broker starts and closes it."""
        self.config = config
        self._given_store = store
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
        # the logs hosted here, in step with the cluster's metadata (made with the Cluster)
        self.hosted: HostedLogs | None = None
        self.groups: GroupCoordinator | None = None
        # share groups (KIP-932): the coordinator side, the leader side, the group configs
        self.group_configs: GroupConfigCache | None = None
        self.share_groups: ShareGroupCoordinator | None = None
        self.shares: SharePartitionManager | None = None
        self.transactions: TransactionCoordinator | None = None
        # the coordinators' view of the metadata store (group commit, coord/metadata/batching.py)
        self.coord_store: BatchingStore | None = None
        # offsets.storage=kafka / transaction.state.storage=kafka: the internal topics
        self.offsets_topic: InternalTopic | None = None
        self.txn_topic: InternalTopic | None = None
        self._drain_topic: InternalTopic | None = None  # offsets.storage=zookeeper
        self._offsets_storage: builder.OffsetsStorage | None = None
        self._txn_storage: builder.TxnStateStorage | None = None
        self.credentials: CredentialStore | None = None
        self.authorizer: Authorizer | None = None
        self.quota_store: QuotaStore | None = None
        self.quotas: QuotaManager | None = None
        self._fake_salt_key: bytes | None = None
        self._marker_sender: MarkerSender | None = None
        self.replicas: ReplicaManager | None = None
        self.flusher = Flusher(
            lambda topic: self.hosted.flush_policy(topic),
            clock,
            lambda plog: self.logs.log_flusher.flush(plog),
        )
        self.server: KafkaServer | None = None
        self.cleaner: LogCleaner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task] = []
        self._stops = Stops()
        self._stopping = False
        self._topic_meta_cache: TopicMeta | None = None
        # always running: its warnings (loop.stall.warn.ms, 0 = none) and the session lease
        self.loop_monitor = LoopMonitor(config.loop_stall_warn_ms)
        # metrics.listener: counters the request paths move (None: off, nothing counted)
        self.metrics: BrokerMetrics | None = builder.broker_metrics(config)
        self.http: HttpServer | None = None
        self.console: Console | None = None

    @property
    def metadata_backend(self) -> str:
        return "zookeeper" if self.config.zookeeper_connect else "embedded"

    # -- start and stop -----------------------------------------------------------------------
    async def start(self) -> None:
        for step in (
            self._start_loop_monitor,
            self._load_logs,
            self._bind_listeners,
            self._start_store,
            self._start_cluster,
            self._start_replicas,
            self._start_coordinator_storages,
            self._start_group_coordinator,
            self._start_share_groups,
            self._start_transaction_coordinator,
            self._start_quotas,
            self._start_authorizer,
            self._start_cleaner,
            self._serve,
            self._serve_http,
            self._start_periodic_tasks,
        ):
            await step()
        self.store.started_up()

    async def _start_loop_monitor(self) -> None:
        self.loop_monitor.start()  # first, so a blocking start-up step shows too
        self._stops.push("loop monitor", self.loop_monitor.stop, bounded=False)

    async def _load_logs(self) -> None:
        cfg = self.config
        soft, _ = builder.raise_open_files_limit()
        self.descriptors = builder.descriptor_cache(soft)
        log.info(
            "open files limit %d; at most %d segment files open at once",
            soft,
            self.descriptors.capacity,
        )
        self.logs = builder.log_manager(cfg, clock=self.clock, descriptors=self.descriptors)
        # local disk only: never skipped (a clean close lets the next start skip recovery)
        self._stops.push(
            "logs",
            lambda: asyncio.to_thread(
                self.logs.close, self.config.num_recovery_threads_per_data_dir
            ),
            bounded=False,
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
        self.log_mover = builder.log_dir_mover(cfg, logs=self.logs, clock=self.clock)

    async def _bind_listeners(self) -> None:
        """The listeners' ports are bound before the broker registers or claims the controller
        role (a port in use stops it here, naming listeners); connections wait in the kernel's
        backlog until ``_serve``."""
        self.server = builder.kafka_server(self.config, services=self)
        self._stops.push("listeners", self.server.stop)
        await self.server.bind()
        self.http = builder.http_server(self.config)
        if self.http is not None:
            self._stops.push("HTTP listener", self.http.stop)
            await self.http.bind()

    async def _start_store(self) -> None:
        cfg = self.config
        self.store = self._given_store or builder.make_store(
            cfg, data_dir=cfg.data_dir, clock=self.clock
        )
        self._stops.push("metadata store", self.store.close)
        # the logs close (marked clean) before the store, the stop most likely to wait on an
        # unreachable ZooKeeper
        self._stops.bump("logs")
        await self.store.start()

    async def _start_cluster(self) -> None:
        cfg = self.config
        self.cluster = builder.cluster(
            cfg, store=self.store, clock=self.clock, loop_monitor=self.loop_monitor
        )
        self.loop_monitor.add_listener(self.cluster.loop_stalled)
        self._stops.push("cluster membership", self.cluster.stop)
        await self.cluster.start()
        for d in self.logs.online_dirs:  # (a wrong zookeeper.connect: refused, as Kafka does)
            meta_properties.check_cluster_id(d, self.cluster.cluster_id)
        for d in self.logs.online_dirs:
            try:
                meta_properties.write(d, cfg.broker_id, self.cluster.cluster_id)
            except OSError as e:
                self.logs.fail_dir(d, e)
        self.hosted = HostedLogs(
            cfg,
            self.logs,
            self.cluster,
            asyncio.get_running_loop(),
            on_offline=lambda keys: self._on_log_dir_failure(None, keys),
        )
        self._apply_broker_configs()  # before anything below reads a dynamic value

    async def _start_replicas(self) -> None:
        """The replica manager, the flusher, the roles of the partitions hosted here."""
        self.replicas = builder.replica_manager(
            self.config,
            cluster=self.cluster,
            logs=self.logs,
            purgatory=self.purgatory,
            clock=self.clock,
            flusher=self.flusher,
            metrics=self.metrics,
            min_insync_replicas=self.hosted.min_insync_replicas,
            open_log=self.hosted.partition_log,
            create_logs=self.hosted.create_new_logs,
            on_replica_removed=lambda t, p, plog: self.hosted.delete_logs([(t, p, plog)]),
        )
        self.hosted.apply_topic_configs()
        self._loop = asyncio.get_running_loop()
        self.logs.owner_thread = threading.get_ident()
        self.logs.call_on_owner = self._loop.call_soon_threadsafe
        self.flusher.start()
        self._stops.push("flusher", self.flusher.stop)
        self._stops.push("replica manager", self.replicas.stop)
        await self.replicas.start()
        self.hosted.delete_stray_logs()
        self.log_mover.resume()  # moves a crash interrupted go on
        self._stops.push("log dir mover", self.log_mover.stop)
        self.cluster.add_listener(self._on_cluster_event)

    async def _start_coordinator_storages(self) -> None:
        """The group and transaction coordinators' storages (offsets.storage,
        transaction.state.storage) and placements: the metadata store behind a BatchingStore
        (rendezvous placement), or the internal topics (internal_topics.py; their partitions'
        leaders coordinate).  With offsets in the metadata store, an __consumer_offsets left
        by the kafka storage is drained into it."""
        cfg = self.config
        self.coord_store = builder.coordinator_store(store=self.store)
        self._stops.push("group commit counts", self.coord_store.log_counts)
        self._offsets_storage = builder.offsets_storage(
            cfg,
            services=self,
            cluster=self.cluster,
            coord_store=self.coord_store,
            clock=self.clock,
        )
        self.offsets_topic = self._offsets_storage.topic
        self._drain_topic = self._offsets_storage.drain_topic
        self._txn_storage = builder.txn_state_storage(
            cfg, services=self, cluster=self.cluster, coord_store=self.coord_store
        )
        self.txn_topic = self._txn_storage.topic
        self._push_loading_stops()

    def _push_loading_stops(self) -> None:
        """The internal topics' loading stops (their stores' loads and unloads), run in
        main's order __consumer_offsets, __transaction_state, the drain; pushed again once
        the marker sender is, so they run after the transaction coordinator's stop and
        before the marker sender's."""
        for topic in (self._drain_topic, self.txn_topic, self.offsets_topic):
            if topic is not None and topic.owner is not None:
                self._stops.push(f"{topic.name} loading", topic.stop)

    async def _start_group_coordinator(self) -> None:
        storage = self._offsets_storage
        self.groups = builder.group_coordinator(
            self.config,
            offsets=storage.offsets,
            placement=storage.placement,
            drain=storage.drain,
            clock=self.clock,
            cluster=self.cluster,
            topics=self._topic_meta,
        )
        self._stops.push("group coordinator", self.groups.stop)
        if storage.drain is not None:
            await storage.drain.start()
        await self.groups.start()

    async def _start_share_groups(self) -> None:
        """Share groups (KIP-932): the group coordinator's side (membership, assignment,
        share-partition state initialization) and the leader's (share-partitions, share
        sessions); both keep their state in the metadata store (docs/internals.md)."""
        store = builder.share_state_store(store=self.store)
        self.group_configs = builder.group_config_cache(store=self.store)
        self.share_groups = builder.share_group_coordinator(
            self.config,
            store=store,
            clock=self.clock,
            cluster=self.cluster,
            groups=self.groups,
            group_configs=self.group_configs,
            topics=self._topic_meta,
        )
        self._stops.push("share-group coordinator", self.share_groups.stop)
        self.groups.share_group_exists = self.share_groups.exists
        self.shares = builder.share_partition_manager(
            self.config,
            store=store,
            replicas=self.replicas,
            purgatory=self.purgatory,
            clock=self.clock,
            group_configs=self.group_configs,
        )
        self._stops.push("share-partitions", self.shares.stop)

    async def _start_transaction_coordinator(self) -> None:
        self._marker_sender = builder.marker_sender(
            self.config,
            cluster=self.cluster,
            write_local=lambda markers: write_txn_markers(self, markers),
            offsets_owner=self.groups.placement.owner,
        )
        self._stops.push("transaction marker sender", self._marker_sender.close, bounded=False)
        self._push_loading_stops()
        self.transactions = builder.transaction_coordinator(
            self.config,
            storage=self._txn_storage.storage,
            placement=self._txn_storage.placement,
            clock=self.clock,
            cluster=self.cluster,
            markers=self._marker_sender,
        )
        self._stops.push("transaction coordinator", self.transactions.stop)
        await self.transactions.start()
        self._take_up_internal_topics()

    async def _start_quotas(self) -> None:
        """SCRAM credentials and client quotas, both read from the metadata store."""
        self.credentials = CredentialStore(self.store)
        self.quota_store = QuotaStore(self.store)
        self._stops.push("quota store", self.quota_store.close, bounded=False)
        await self.quota_store.watch()
        self.quotas = builder.quota_manager(
            self.config, quota_store=self.quota_store, clock=self.clock
        )

    async def _start_authorizer(self) -> None:
        self.authorizer = builder.authorizer(self.config, store=self.store, clock=self.clock)
        if self.authorizer is not None:
            self._stops.push("authorizer", self.authorizer.stop)
            await self.authorizer.start()

    async def _start_cleaner(self) -> None:
        self.cleaner = self._new_cleaner()
        # not bounded: its threads stop between two steps of a clean, and a swap they wait for
        # needs the loop running; the logs must not close under them.  (The cleaner may have
        # been restarted since: the current one is stopped.)
        self._stops.push("log cleaner", lambda: asyncio.to_thread(self.cleaner.stop), bounded=False)
        self.cleaner.start()

    async def _serve(self) -> None:
        self._apply_connection_limits()
        await self.server.start()
        self._stops.bump("listeners")  # the first to stop: no new requests from here on

    async def _serve_http(self) -> None:
        """/metrics and the console on metrics.listener (when configured)."""
        if self.http is None:
            return
        self.metrics.idle.start()
        self.http.route("/metrics", self._metrics_route)
        if self.config.console_enable:
            self.console = Console(self, self.config.console_lag_sample_interval_ms / 1000.0)
            self.console.install(self.http)
        await self.http.start()
        self._stops.bump("HTTP listener")
        if self.console is not None:
            self.console.start()
            self._stops.push("console", self.console.stop)

    async def _start_periodic_tasks(self) -> None:
        self._tasks.append(asyncio.create_task(self.hosted.retention_loop(), name="retention"))
        self._tasks.append(asyncio.create_task(self.hosted.checkpoint_loop(), name="checkpoint"))

    def _take_up_internal_topics(self) -> None:
        """Load and unload the internal topics' partitions as this broker's leadership of
        them changes (and the ones it leads already), telling the coordinators."""
        if self.offsets_topic is not None:
            self.offsets_topic.owner.on_change = self.groups.check_membership
            self.replicas.leadership_listeners.append(self.offsets_topic.leadership_changed)
            self.offsets_topic.take_up_led_partitions()
        if self._drain_topic is not None:
            self.replicas.leadership_listeners.append(self._drain_topic.leadership_changed)
            self._drain_topic.take_up_led_partitions()
        if self.txn_topic is not None:
            self.txn_topic.owner.on_change = self.transactions.check_membership
            self.replicas.leadership_listeners.append(self.txn_topic.leadership_changed)
            self.txn_topic.take_up_led_partitions()

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """A serving process's broker (``pybroker serve``, a node's worker): started under the
        process's GC policy (docs/scale.md, "The garbage collector"), the start's survivors
        frozen; on exit stopped, the policy removed.  A failed start stops what it started."""
        gc_policy = GcPolicy(asyncio.get_running_loop())
        gc_policy.install()
        try:
            await self.start()
        except BaseException:
            gc_policy.uninstall()
            await self.stop()
            raise
        gc_policy.freeze_now()
        if self.server is not None:
            self.server.on_open = gc_policy.connections_open
        try:
            yield
        finally:
            await self.stop()
            gc_policy.uninstall()

    async def stop(self) -> None:
        """Every step is bounded (STOP_STEP_S) unless it only touches local disk or threads:
        with ZooKeeper unreachable or a peer paused, a step waiting on them gives up and the
        shutdown goes on, so SIGTERM always ends the process.

        First, with ``controlled.shutdown.enable``, the controlled shutdown (replication/
        controlled_shutdown.py): leaderships and ISR memberships are handed over through the
        controller while the listeners still answer (clients are told NOT_LEADER_OR_FOLLOWER
        and find the new leaders), bounded by its own retries and deadline.  Then metadata
        events stop mattering, the periodic tasks end, and the parts stop in reverse."""
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
        await self._stops.run()

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

    def _new_cleaner(self) -> LogCleaner:
        return builder.log_cleaner(
            self.config, logs=self.logs, clock=self.clock, run_on_owner=self._run_on_loop
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
            self.hosted.broker_defaults_changed()
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

    def share_config_bounds(self) -> Bounds:
        """The group.share.min/max.* configs that group configs are held to."""
        return builder.share_config_bounds(self.config)

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
        if event.kind == "TOPIC_CHANGED":
            if self.hosted.topic_changed(event.topic) and self.cleaner is not None:
                self.cleaner.wake()  # a topic that became compacted is looked at now
        if event.kind == "BROKERS_CHANGED" and self.groups is not None:
            self.groups.check_membership()
        if event.kind == "BROKERS_CHANGED" and self.transactions is not None:
            self.transactions.check_membership()
        if event.kind == "TOPIC_DELETED":
            self.hosted.topic_deleted(event.topic)


def describe(broker: Broker) -> dict[str, Any]:
    cfg = broker.config
    return {
        "broker.id": cfg.broker_id,
        "listeners": ",".join(str(e) for e in cfg.listeners),
        "log.dirs": ",".join(str(d) for d in cfg.log_dir_list),
        "metadata": broker.metadata_backend,
    }
