"""The composition root: builds the broker's parts and starts and stops them in order.

start: data dir -> log recovery (LogManager) -> metadata store (ZooKeeper when
zookeeper.connect is set, else the embedded store under log.dirs) -> Cluster (cluster id,
registration, controller) -> logs for the partitions this broker leads -> group coordinator
(groups known from committed offsets) -> listeners ->
periodic retention and recovery-point checkpoints.  stop runs the same steps backwards; a
clean stop leaves the logs marked clean so the next start skips recovery scans.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from pybroker.clock import SYSTEM_CLOCK, Clock
from pybroker.config import Config
from pybroker.coord.cluster import Cluster
from pybroker.coord.group_coordinator import GroupCoordinator
from pybroker.coord.groups import GroupConfig
from pybroker.coord.local import LocalStore
from pybroker.coord.offsets import OffsetStore
from pybroker.coord.store import MetadataStore
from pybroker.flusher import Flusher
from pybroker.handlers._topics import flush_policy, log_config
from pybroker.log import LogManager, PartitionLog
from pybroker.loop_monitor import LoopMonitor
from pybroker.purgatory import Purgatory
from pybroker.replication.fetcher import ReplicaFetcher
from pybroker.replication.manager import ReplicaManager
from pybroker.server import KafkaServer

log = logging.getLogger("pybroker.broker")

METADATA_DIR = "__cluster_metadata"
CHECKPOINT_INTERVAL_S = 60.0


def make_store(config: Config, data_dir: Path, clock: Clock) -> MetadataStore:
    if config.zookeeper_connect:
        from pybroker.coord.zk import ZooKeeperStore

        return ZooKeeperStore(
            config.zookeeper_connect,
            session_timeout_ms=config.zookeeper_session_timeout_ms,
            connect_timeout_s=(
                config.zookeeper_connection_timeout_ms or config.zookeeper_session_timeout_ms
            )
            / 1000.0,
        )
    return LocalStore(data_dir / METADATA_DIR, clock=clock)


class Broker:
    def __init__(self, config: Config, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.clock = clock
        self.purgatory = Purgatory()
        self.store: MetadataStore | None = None
        self.cluster: Cluster | None = None
        self.logs: LogManager | None = None
        self.groups: GroupCoordinator | None = None
        self.replicas: ReplicaManager | None = None
        self.flusher = Flusher(self._flush_policy, clock)
        self._flush_policies: dict[str, tuple[int, int]] = {}
        self.server: KafkaServer | None = None
        self._tasks: list[asyncio.Task] = []
        self.loop_monitor: LoopMonitor | None = None
        if config.loop_stall_warn_ms > 0:
            self.loop_monitor = LoopMonitor(config.loop_stall_warn_ms)

    @property
    def metadata_backend(self) -> str:
        return "zookeeper" if self.config.zookeeper_connect else "embedded"

    async def start(self) -> None:
        cfg = self.config
        if self.loop_monitor is not None:
            self.loop_monitor.start()  # first, so a blocking start-up step shows too
        data_dir = cfg.data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        self.logs = LogManager(data_dir, log_config(cfg, {}), self.clock)
        await asyncio.to_thread(self.logs.load_all)
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
        )
        await self.cluster.start()
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
        )
        self._apply_topic_configs()
        self.flusher.start()
        await self.replicas.start()
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
        )
        await self.groups.start()
        self.server = KafkaServer(
            self,
            cfg.listeners,
            max_request_bytes=cfg.socket_request_max_bytes,
            max_connections=cfg.max_connections,
        )
        await self.server.start()
        self._tasks.append(asyncio.create_task(self._retention_loop(), name="retention"))
        self._tasks.append(asyncio.create_task(self._checkpoint_loop(), name="checkpoint"))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5.0)
        if self.server is not None:
            await self.server.stop()
        if self.groups is not None:
            await self.groups.stop()
        if self.replicas is not None:
            await self.replicas.stop()
        await self.flusher.stop()
        if self.cluster is not None:
            await self.cluster.stop()
        if self.store is not None:
            await self.store.close()
        if self.logs is not None:
            await asyncio.to_thread(self.logs.close)
        if self.loop_monitor is not None:
            await self.loop_monitor.stop()

    # -- services used by the handlers -----------------------------------------------------
    def partition_log(self, topic: str, partition: int) -> PartitionLog:
        existing = self.logs.get(topic, partition)
        if existing is not None:
            return existing
        info = self.cluster.topics[topic]
        return self.logs.get_or_create(topic, partition, log_config(self.config, info.configs))

    def _on_cluster_event(self, event: Any) -> None:
        # A topic's change touches only that topic's partitions; a change of the live brokers
        # or of the controller can move any leader.
        topic = event.topic if event.kind in ("TOPIC_CHANGED", "TOPIC_DELETED") else None
        self.replicas.sync_roles(topic)  # first: stops fetching partitions that are going away
        self._flush_policies.pop(topic, None)
        if event.kind == "TOPIC_CHANGED":
            self._apply_topic_configs(event.topic)
        if event.kind == "TOPIC_DELETED":
            for name, partition, _ in list(self.logs.partitions()):
                if name == event.topic:
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
            await asyncio.sleep(CHECKPOINT_INTERVAL_S)
            try:
                await asyncio.to_thread(self.logs.flush_all)
            except Exception:
                log.exception("recovery point checkpoint failed")


def describe(broker: Broker) -> dict[str, Any]:
    cfg = broker.config
    return {
        "broker.id": cfg.broker_id,
        "listeners": ",".join(str(e) for e in cfg.listeners),
        "log.dirs": str(cfg.data_dir),
        "metadata": broker.metadata_backend,
    }
