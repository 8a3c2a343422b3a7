"""The logs this broker hosts, kept in step with the cluster's metadata (Kafka's
ReplicaManager.getOrCreatePartition and LogManager's side of the broker): which log a
replica gets (created off the loop, never in the place of one in an offline dir), the logs
that go (a deleted topic's incarnation, replicas reassigned away while the broker was down),
their topic configs and flush policies, and the periodic retention and recovery-point
checkpoint.  The broker (pybroker/broker.py) makes one once its cluster and replica
manager exist and routes metadata events here; docs/internals.md ("The broker process").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from pybroker.config import Config
from pybroker.coord.metadata.cluster import Cluster
from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers._topics import flush_policy, log_config
from pybroker.log import LogManager, PartitionLog
from pybroker.log.partition_metadata import other_incarnation
from pybroker.replication import manager as replica_manager

# the event loop's time for deleting a deleted topic's logs in one go (see delete_logs)
LOG_DELETE_BUDGET_S = 0.01

log = logging.getLogger("pybroker.broker")

Key = tuple[str, int]


class HostedLogs:
    """``on_offline(keys)``: a replica's log is offline here (the broker's log dir failure
    handling); ``hosted_at_start``: the replicas this broker had at start (Kafka's
    isNew = false), whose logs are never created afresh while a dir is offline."""

    def __init__(
        self,
        config: Config,
        logs: LogManager,
        cluster: Cluster,
        loop: asyncio.AbstractEventLoop,
        *,
        on_offline: Callable[[list[Key]], None],
    ) -> None:
        self.config = config
        self.logs = logs
        self.cluster = cluster
        self.loop = loop
        self.on_offline = on_offline
        me = config.broker_id
        self.hosted_at_start: set[Key] = {
            (name, p)
            for name, info in cluster.topics.items()
            for p, st in info.partitions.items()
            if me in st.replicas
        }
        self._flush_policies: dict[str, tuple[int, int]] = {}
        # the configs object last applied to each topic's logs (TOPIC_CHANGED skips the same)
        self._configs_applied: dict[str, dict[str, str]] = {}

    # -- a replica's log ----------------------------------------------------------------------
    def partition_log(self, topic: str, partition: int) -> PartitionLog:
        existing = self.logs.get(topic, partition)
        info = self.cluster.topics[topic]
        if existing is not None and not other_incarnation(existing.topic_id, info.topic_id):
            return existing
        key = (topic, partition)
        if existing is None and self.logs.offline_dirs and key in self.hosted_at_start:
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
            self.on_offline([key])
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{topic}-{partition} is offline")
        # new, or a log of an earlier incarnation of the topic (replaced by an empty one)
        return self.logs.get_or_create(
            topic, partition, log_config(self.config, info.configs), topic_id=info.topic_id
        )

    async def create_new_logs(self, keys: list[Key]) -> None:
        """Create the logs of these new partitions in a worker thread (the replica manager's
        create_logs: mkdir and file creation can block for seconds on a busy disk, and a
        CreateTopics of thousands of partitions would stall every client), then hand them to
        the log manager on the loop.  A partition that got a log meanwhile, whose topic went
        or changed incarnation, is skipped (its new log deleted); the replica manager syncs
        each key again afterwards."""
        me = self.config.broker_id
        plans = []
        for t, p in keys:
            info = self.cluster.topics.get(t)
            st = info.partitions.get(p) if info is not None else None
            if st is None or me not in st.replicas or self.logs.get(t, p) is not None:
                continue
            epoch = st.leader_epoch if st.leader == me else None
            plans.append(((t, p), log_config(self.config, info.configs), info.topic_id, epoch))
        if not plans or self.logs.offline_dirs:
            return
        placed = self.logs.place(key for key, *_ in plans)

        def open_all() -> list[tuple[Key, PartitionLog | OSError, Any]]:
            out: list[tuple[Key, PartitionLog | OSError, Any]] = []
            for key, config, topic_id, epoch in plans:
                try:
                    plog = self.logs.open_new(placed[key], key, config, topic_id, epoch)
                except OSError as e:
                    out.append((key, e, topic_id))
                else:
                    out.append((key, plog, topic_id))
            return out

        for key, result, topic_id in await asyncio.to_thread(open_all):
            if isinstance(result, OSError):
                self.logs.fail_dir(placed[key], result)
                continue
            info = self.cluster.topics.get(key[0])
            if info is None or other_incarnation(info.topic_id, topic_id):
                self.logs.discard(result)  # (deleted, or created again, meanwhile)
                continue
            self.logs.adopt(key, result)

    # -- logs that go -------------------------------------------------------------------------
    def delete_stray_logs(self) -> None:
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
            self.delete_logs(stray)

    def topic_deleted(self, topic: str) -> None:
        """The logs of the deleted incarnation go: the topic may exist again by now (deleted
        and created at once, the events delivered late)."""
        self._flush_policies.pop(topic, None)
        self._configs_applied.pop(topic, None)
        info = self.cluster.topics.get(topic)
        self.delete_logs(
            [
                (name, partition, plog)
                for name, partition, plog in self.logs.partitions()
                if name == topic
                and (info is None or other_incarnation(plog.topic_id, info.topic_id))
            ]
        )

    def delete_logs(self, doomed: list[tuple[str, int, PartitionLog]]) -> None:
        """Delete these logs (a rename and closing its files each), for LOG_DELETE_BUDGET_S
        of the event loop at a time: a topic of thousands of partitions goes over several
        loop iterations.  A log that was replaced meanwhile (the topic created again) stays."""
        deadline = replica_manager.monotonic() + LOG_DELETE_BUDGET_S
        for k, (name, partition, plog) in enumerate(doomed):
            if k and replica_manager.monotonic() > deadline:
                self.loop.call_soon(self.delete_logs, doomed[k:])
                return
            if self.logs.get(name, partition) is plog:
                self.logs.delete(name, partition)

    # -- configs ------------------------------------------------------------------------------
    def apply_topic_configs(self, topic: str | None = None) -> None:
        """Give open logs their topic's configs (logs recovered at start open with defaults)."""
        topics = self.cluster.topics
        names = list(topics) if topic is None else [topic] if topic in topics else []
        for name in names:
            info = topics[name]
            self._configs_applied[name] = info.configs
            wanted = log_config(self.config, info.configs)
            for partition in info.partitions:
                plog = self.logs.get(name, partition)
                if plog is not None and plog.config != wanted:
                    plog.config = wanted

    def topic_changed(self, topic: str) -> bool:
        """A topic's metadata changed: its flush policy is read again; its logs take its
        configs if they changed.  True: they did, and the topic is compacted now (the log
        cleaner looks at it)."""
        self._flush_policies.pop(topic, None)
        info = self.cluster.topics.get(topic)
        # (every partition state change is a TOPIC_CHANGED: only a change of the topic's
        # configs touches its logs, and only a compacted topic wakes the cleaner, whose
        # look at every log per event stalled the loop at thousands of partitions)
        if info is None or self._configs_applied.get(topic) is info.configs:
            return False
        self.apply_topic_configs(topic)
        return log_config(self.config, info.configs).compact

    def broker_defaults_changed(self) -> None:
        """The broker defaults of topic configs moved (a dynamic broker config)."""
        self.logs.default_config = log_config(self.config, {})
        self._flush_policies.clear()
        self.apply_topic_configs()

    def flush_policy(self, topic: str) -> tuple[int, int]:
        """Per topic, cached (it is asked on every append); a topic's change clears it."""
        policy = self._flush_policies.get(topic)
        if policy is None:
            info = self.cluster.topics.get(topic)
            policy = flush_policy(self.config, info.configs if info is not None else {})
            self._flush_policies[topic] = policy
        return policy

    def min_insync_replicas(self, topic: str) -> int:
        info = self.cluster.topics.get(topic)
        value = info.configs.get("min.insync.replicas") if info is not None else None
        return int(value) if value is not None else self.config.min_insync_replicas

    # -- periodic -----------------------------------------------------------------------------
    async def retention_loop(self) -> None:
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

    async def checkpoint_loop(self) -> None:
        # Kafka's checkpointLogRecoveryOffsets: write the recovery points the logs reached (a
        # roll's flush, flush.messages / flush.ms), fsyncing no log; a start after a crash
        # scans from there (the OS page cache survives a process kill).
        while True:
            await asyncio.sleep(self.config.log_flush_offset_checkpoint_interval_ms / 1000)
            try:
                await asyncio.to_thread(self.logs.checkpoint)
            except Exception:
                log.exception("recovery point checkpoint failed")
