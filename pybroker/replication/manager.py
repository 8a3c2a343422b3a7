"""The replica manager: what this broker does for each partition it holds a replica of.

Roles follow the partition state in the metadata store (see docs/replication.md): the broker
named as leader leads, the other replicas follow, and a partition without a live leader is
offline.  The manager reacts to every metadata change by comparing each partition's
(leader, leader epoch) with the role it is playing.

As leader it owns the partition's high watermark (the smallest log end offset over the ISR,
never moving backwards), records each follower's fetch position, expands the ISR when a
follower has caught up to the high watermark and shrinks it when a follower has not caught up
to the log end within replica.lag.time.max.ms (ISR changes are written to the store with
compare-and-set by Cluster.update_isr), and completes acks=all produces once the high
watermark passes their records.  As follower it hands the partition to the fetcher for its
leader (fetcher.py), which truncates a divergent tail and then copies the leader's batches.

Everything here runs on the event loop, which owns the partitions' state; store writes are
awaited in tasks of their own so no request waits on them.  The request paths over these
replicas (append_records, read_from_log) are pybroker/replica_manager.py's subclass, which is
the broker's replica manager.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pybroker.clock import Clock
from pybroker.errors import ErrorCode, KafkaError
from pybroker.log import LogManager, PartitionLog
from pybroker.log.partition_metadata import other_incarnation
from pybroker.purgatory import Purgatory
from pybroker.replication.changes import ChangeFeed, partition_view
from pybroker.replication.leader_side import LeaderSide
from pybroker.replication.replica import (
    FOLLOWER,
    LEADER,
    OFFLINE,
    FollowerState,
    Replica,
    consumer_key,
    follower_key,
    hw_key,
    leo_key,
)

if TYPE_CHECKING:
    import ssl

    from pybroker.coord.metadata.cluster import Cluster
    from pybroker.coord.metadata.model import PartitionState, TopicInfo
    from pybroker.replication.fetcher import ReplicaFetcher
    from pybroker.replication.throttle import ReplicationThrottles

log = logging.getLogger("pybroker.replication")


# One pass of sync_roles opens new logs and takes up leadership for at most this long (seconds
# of the event loop); the rest continues in a later loop iteration, so a CreatePartitions of
# thousands of partitions never stalls other clients (each takes ~1 ms: files, checkpoints).
SYNC_ROLES_BUDGET_S = 0.01
CREATE_LOGS_BATCH = 256  # new partitions' logs created per worker-thread job
# ... once this many partitions wait (fewer are created on the loop, within the budget: a
# client producing right after CreateTopics finds them at once, as before)
CREATE_LOGS_OFF_LOOP_MIN = 64
# the clock of that budget (a test may replace it)
monotonic: Callable[[], float] = time.monotonic


class ReplicaManager(LeaderSide):
    def __init__(
        self,
        broker_id: int,
        cluster: Cluster,
        logs: LogManager,
        purgatory: Purgatory,
        clock: Clock,
        *,
        replica_lag_time_max_ms: int,
        replica_fetch_backoff_ms: int = 1000,
        min_insync_replicas: Callable[[str], int],
        open_log: Callable[[str, int], PartitionLog],
        fetcher_factory: Callable[[ReplicaManager, int], ReplicaFetcher],
        inter_broker_listener: str | None = None,
        inter_broker_ssl: ssl.SSLContext | None = None,
        inter_broker_sasl: tuple[str, str, str] | None = None,
        on_replica_removed: Callable[[str, int, PartitionLog], None] | None = None,
        throttles: ReplicationThrottles | None = None,
        create_logs: Callable[[list[tuple[str, int]]], Awaitable[None]] | None = None,
    ) -> None:
        self.broker_id = broker_id
        # creates the logs of new partitions off the event loop (the broker's
        # create_new_logs): partitions left over by a pass are created by it in batches
        self.create_logs = create_logs
        self._opening: set[tuple[str, int]] = set()  # logs being created by create_logs
        self._to_create: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._creator: asyncio.Task | None = None
        # a reassignment took this broker out of a partition's replicas (the topic still
        # exists): the broker deletes the log (Kafka's StopReplica with deletePartition)
        self.on_replica_removed = on_replica_removed
        # replication throttles (replication/throttle.py); None: never throttled
        self.throttles = throttles
        self.cluster = cluster
        self.logs = logs
        self.purgatory = purgatory
        self.clock = clock
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.replica_fetch_backoff_ms = replica_fetch_backoff_ms  # the fetchers' error delay
        self.min_insync_replicas = min_insync_replicas
        self.open_log = open_log
        self.fetcher_factory = fetcher_factory
        # the leaders' listener followers fetch from (None: their first endpoint)
        self.inter_broker_listener = inter_broker_listener
        self.inter_broker_ssl = inter_broker_ssl  # client ssl.SSLContext if that listener is SSL
        self.inter_broker_sasl = inter_broker_sasl  # (mechanism, user, password) if it is SASL
        self.replicas: dict[tuple[str, int], Replica] = {}
        self.changes = ChangeFeed()
        # a log's start moves without an append (DeleteRecords, retention, a moved log)
        logs.log_start_listeners.append(self.note_changed)
        # ... and a follower's fetch carries its log start (the fetcher's kept parameters)
        logs.log_start_listeners.append(self._follower_log_start_moved)
        self._by_topic: dict[str, set[int]] = {}  # the partitions of each topic in replicas
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._tasks: set[asyncio.Task] = set()
        self._isr_task: asyncio.Task | None = None
        self._stopped = False
        # controlled shutdown: replicas keep following the metadata (a partition whose
        # leadership moved away is a follower here) but nothing is fetched any more, so no
        # leader adds this broker back to an ISR
        self._fetching_stopped = False
        # left over by a pass, for the next (oldest first; OrderedDict pops its first entry in
        # O(1), so n partitions deferred cost O(n) in all, not a copy of the rest per pass)
        self._deferred: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._deferred_scheduled = False
        # Kafka's IsrShrinksPerSec / IsrExpandsPerSec: ISR changes this leader made
        self.isr_shrinks = 0
        self.isr_expands = 0
        # ISR changes waiting for the next batched write (LeaderSide._change_isr)
        self.isr_queue: dict[tuple[str, int], tuple[Replica, list[int], str, int]] = {}
        self.replication_bytes_in = 0  # ReplicationBytesInPerSec: batches copied as a follower
        # partitions whose log dir failed (LogManager.fail_dir): offline on this broker until
        # it restarts, answered KAFKA_STORAGE_ERROR (Kafka's HostedPartition.Offline)
        self.offline: set[tuple[str, int]] = set()
        # (topic, partition, leader epoch or None, continued) whenever this broker starts
        # leading a partition, its epoch moves (``continued``: it led it without interruption)
        # or it stops (None): the coordinators load and unload the partitions of their
        # internal topics (Kafka's onLeadershipChange); called on the loop
        self.leadership_listeners: list[Callable[[str, int, int | None, bool], None]] = []
        # new leaderships whose high watermark is below the epoch start: until their ISR
        # followers fetched once, those followers' fetches are answered at once (owes_fetch)
        self._lagging: dict[tuple[str, int], Replica] = {}

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        # before the broker listens: every replica set up in one pass (nobody waits yet, and
        # a client must not find a partition of this broker not led after a restart)
        self.sync_roles(bounded=False)
        self._isr_task = asyncio.create_task(self._isr_loop(), name="isr-shrink")

    async def stop(self) -> None:
        # From here on no role change starts a fetcher: a metadata event handled during the
        # shutdown would otherwise start one that nothing stops, and the process would not
        # end (asyncio.run waits for every task).
        self._stopped = True
        await asyncio.gather(*(f.stop() for f in self.fetchers.values()))
        self.fetchers.clear()
        tasks = list(self._tasks) + ([self._isr_task] if self._isr_task else [])
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)

    async def stop_fetching(self) -> None:
        """Controlled shutdown: stop every fetcher, and start none from here on."""
        self._fetching_stopped = True
        fetchers = list(self.fetchers.values())
        self.fetchers.clear()
        if fetchers:
            await asyncio.gather(*(f.stop() for f in fetchers), return_exceptions=True)

    def _spawn(self, coro: Any, name: str) -> None:
        t = asyncio.create_task(coro, name=name)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    # -- roles ----------------------------------------------------------------------------
    def sync_roles(self, topic: str | None = None, *, bounded: bool = True) -> None:
        """Bring the local replicas in line with the partition states in the metadata cache:
        every partition, or only ``topic``'s (a change of one topic touches only its own
        partitions; with thousands of partitions a full pass per event would dominate).
        Nothing once stopped.

        Opening a new replica's log and becoming a leader touch files: a pass does them for
        SYNC_ROLES_BUDGET_S at most and queues the rest of those partitions (never a step
        down) for the next loop iteration, which takes them up in the same way; meanwhile
        such a partition answers as not (yet) led here, as a partition still being set up
        does on Kafka."""
        if self._stopped:
            return
        me = self.broker_id
        seen = set()
        budget = _Budget(bounded and _running_loop() is not None)
        if topic is None:
            topics = list(self.cluster.topics.items())
        else:
            info = self.cluster.topics.get(topic)
            topics = [(topic, info)] if info is not None else []
        for name, info in topics:
            for index, state in info.partitions.items():
                if me in state.replicas:
                    seen.add((name, index))
                    self._sync_partition(name, index, info, state, budget)
        if topic is None:
            stale = [k for k in self.replicas if k not in seen]
        else:  # (this topic's replicas only: a scan of all per topic event was O(n) each)
            stale = [(topic, p) for p in self._by_topic.get(topic, ()) if (topic, p) not in seen]
        for key in stale:
            r = self._pop_replica(key)
            self._detach(r)
            self._lost_leadership(r)
            r.role = OFFLINE
            info = self.cluster.topics.get(key[0])
            if (
                info is not None
                and key[1] in info.partitions
                and not other_incarnation(r.log.topic_id, info.topic_id)
            ):
                # still a partition of this topic, no longer ours: reassigned away
                log.info("%s-%d: no longer a replica here (reassigned): stopping", *key)
                if self.on_replica_removed is not None:
                    self.on_replica_removed(key[0], key[1], r.log)
        self._defer(budget.deferred)

    def _sync_deferred(self) -> None:
        """The partitions earlier passes left over, oldest first, as they stand now, for one
        budget; the rest waits untouched for the next loop iteration."""
        self._deferred_scheduled = False
        if self._stopped:
            self._deferred.clear()
            return
        budget = _Budget(True)
        deferred = self._deferred
        while deferred and not budget.exhausted():
            name, index = key = deferred.popitem(last=False)[0]
            info = self.cluster.topics.get(name)
            state = info.partitions.get(index) if info is not None else None
            if state is None or self.broker_id not in state.replicas:
                continue
            if self._create_off_loop(key):
                continue
            self._sync_partition(name, index, info, state, budget)
        self._defer(budget.deferred)

    def _create_off_loop(self, key: tuple[str, int]) -> bool:
        """A partition left over by a pass whose log does not exist yet, while many wait: its
        files are created in a worker thread (create_logs, in batches; a busy disk can hold one
        mkdir for seconds), then it is synced again.  False: created on the loop."""
        if key in self._opening:
            return True
        if (
            self.create_logs is None
            or len(self._deferred) + len(self._to_create) < CREATE_LOGS_OFF_LOOP_MIN
            or key in self.replicas
            or self.logs.get(*key) is not None
            or self.logs.offline_dirs
        ):
            return False
        self._opening.add(key)
        self._to_create[key] = None
        if self._creator is None or self._creator.done():
            self._creator = asyncio.create_task(self._create_batches(), name="create-logs")
            self._tasks.add(self._creator)
            self._creator.add_done_callback(self._tasks.discard)
        return True

    async def _create_batches(self) -> None:
        while self._to_create and not self._stopped:
            batch = []
            while self._to_create and len(batch) < CREATE_LOGS_BATCH:
                batch.append(self._to_create.popitem(last=False)[0])
            try:
                assert self.create_logs is not None
                await self.create_logs(batch)
            except Exception:
                log.exception("creating %d partition logs failed", len(batch))
            finally:
                self._opening.difference_update(batch)
            self._defer(batch)  # leader or follower now, on the loop (the log is there)

    def _defer(self, keys: list[tuple[str, int]]) -> None:
        for key in keys:
            self._deferred[key] = None
        if self._deferred and not self._deferred_scheduled:
            self._deferred_scheduled = True
            asyncio.get_running_loop().call_soon(self._sync_deferred)

    def _sync_partition(
        self, name: str, index: int, info: TopicInfo, state: PartitionState, budget: _Budget
    ) -> None:
        """One partition brought in line with its state; noted on the change feed when what
        a fetch session's stamp of it holds may have changed here: its replica, role, leader,
        epoch, ISR or partition_view (the others' notes: after_leader_append, _wake, which
        _detach calls, and the logs' log_start_listeners).  A partition that did not change
        is not noted: a topic's event (any of its partitions changed) noted all of them, and
        every follower session then read the whole topic again (W22's restart, restart12)."""
        key = (name, index)
        r = self.replicas.get(key)
        before = _seen(r, index)
        self._apply_partition(name, index, info, state, budget)
        after = self.replicas.get(key)
        if after is not r or _seen(after, index) != before:
            self.changes.note(key)

    def _apply_partition(
        self, name: str, index: int, info: TopicInfo, state: PartitionState, budget: _Budget
    ) -> None:
        me = self.broker_id
        key = (name, index)
        if key in self.offline or key in self._opening:
            return
        r = self.replicas.get(key)
        costly = (
            r is None
            or other_incarnation(r.log.topic_id, info.topic_id)
            or (state.leader == me and (r.role != LEADER or r.leader_epoch != state.leader_epoch))
        )
        if costly and not budget.take(key):
            return
        if r is not None and other_incarnation(r.log.topic_id, info.topic_id):
            # the topic was deleted and created again: that replica's log belongs to
            # the old incarnation (open_log replaces it with an empty one)
            self._detach(self._pop_replica(key))
            r = None
        if r is None:
            try:
                plog = self.open_log(name, index)
            except KafkaError as e:  # its log dir is offline (HostedLogs.partition_log)
                if e.code != ErrorCode.KAFKA_STORAGE_ERROR:
                    raise
                self.offline.add(key)
                return
            r = Replica(name, index, plog)
            self.replicas[key] = r
            self._by_topic.setdefault(name, set()).add(index)
        r.replicas = list(state.replicas)
        if r.checked_info is not info and not other_incarnation(r.log.topic_id, info.topic_id):
            r.checked_info = info  # (as leader_replica would: the stamps compare it)
        if state.leader == me:
            if r.role != LEADER or r.leader_epoch != state.leader_epoch:
                self._become_leader(r, state)
            else:
                r.isr = list(state.isr)
                self._maybe_advance_hw(r)
        elif state.leader >= 0 and state.leader in self.cluster.brokers:
            if (
                r.role != FOLLOWER
                or r.leader != state.leader
                or r.leader_epoch != state.leader_epoch
            ):
                self._become_follower(r, state)
            r.isr = list(state.isr)
        else:
            if r.role != OFFLINE:
                log.info("%s-%d is offline (leader %d)", name, index, state.leader)
            self._detach(r)
            self._lost_leadership(r)
            r.role, r.leader, r.leader_epoch = OFFLINE, state.leader, state.leader_epoch
            r.isr = list(state.isr)

    def _follower_log_start_moved(self, topic: str, partition: int) -> None:
        r = self.replicas.get((topic, partition))
        if r is not None and r.role == FOLLOWER:
            fetcher = self.fetchers.get(r.leader)
            if fetcher is not None:
                fetcher.touch((topic, partition))

    def _pop_replica(self, key: tuple[str, int]) -> Replica:
        r = self.replicas.pop(key)
        parts = self._by_topic.get(key[0])
        if parts is not None:
            parts.discard(key[1])
            if not parts:
                del self._by_topic[key[0]]
        return r

    def _lost_leadership(self, r: Replica) -> None:
        if r.role == LEADER:
            self._tell_leadership(r.topic, r.partition, None, False)

    def _tell_leadership(
        self, topic: str, partition: int, epoch: int | None, continued: bool
    ) -> None:
        for cb in self.leadership_listeners:
            try:
                cb(topic, partition, epoch, continued)
            except Exception:
                log.exception("leadership listener %r failed for %s-%d", cb, topic, partition)

    def mark_offline(self, keys: list[tuple[str, int]]) -> None:
        """Their log dir failed: stop fetching and leading them here, for good."""
        for key in keys:
            self.offline.add(key)
            r = self.replicas.get(key)
            if r is not None:
                self._detach(r)
                self._lost_leadership(r)
                r.role = OFFLINE
                log.warning("%s-%d: offline on this broker (log dir failure)", *key)

    def _detach(self, r: Replica) -> None:
        for f in self.fetchers.values():
            f.remove(r.topic, r.partition)
        self._wake(r)

    def _become_leader(self, r: Replica, state: PartitionState) -> None:
        now = self.clock.time_ms()
        continued = r.role == LEADER
        if continued:
            # the same leader in a new epoch (the controller bumped it: a reassignment, an ISR
            # change of its own): as Kafka's makeLeader with isNewLeader false, followers keep
            # their positions and waiting acks=all produces stay valid
            followers = r.followers
            r.followers = {
                b: followers.get(b) or FollowerState() for b in r.replicas if b != self.broker_id
            }
        else:
            self._detach(r)
            r.leadership_epoch = state.leader_epoch
            r.followers = {
                b: FollowerState(last_caught_up_ms=now if b in state.isr else 0)
                for b in r.replicas
                if b != self.broker_id
            }
        r.role, r.leader, r.leader_epoch = LEADER, self.broker_id, state.leader_epoch
        r.isr = list(state.isr)
        r.leader_since_ms = now
        r.leader_epoch_start_offset = r.log.log_end_offset
        r.log.leader_epochs.assign(state.leader_epoch, r.log.log_end_offset)
        self._tell_leadership(r.topic, r.partition, state.leader_epoch, continued)
        log.info(
            "%s-%d: leader (epoch %d, isr %s, log end %d, hw %d)",
            r.topic,
            r.partition,
            state.leader_epoch,
            r.isr,
            r.log.log_end_offset,
            r.log.high_watermark,
        )
        self._maybe_advance_hw(r)
        if r.high_watermark_lagging():
            # Kafka's makeLeader: the ISR followers' next fetch advances the high watermark;
            # their fetches parked here (for other partitions) are answered now, so they come
            # back at once with this partition once they know of this leader
            self._lagging[(r.topic, r.partition)] = r
            for b in r.isr:
                if b != self.broker_id:
                    self.purgatory.notify(follower_key(b))

    def owes_fetch(self, broker_id: int) -> bool:
        """True while ``broker_id`` is in the ISR of a partition this broker has just taken
        over, whose high watermark waits for that follower's first fetch: its fetches are then
        answered at once rather than after max_wait_ms, so that it comes back with the
        partition as soon as it knows of the new leader (its metadata can lag ours)."""
        for key, r in list(self._lagging.items()):
            if (
                r.role != LEADER
                or not r.high_watermark_lagging()
                or self.replicas.get(key) is not r
            ):
                del self._lagging[key]
                continue
            st = r.followers.get(broker_id)
            if broker_id in r.isr and (st is None or st.log_end_offset < 0):
                return True
        return False

    def _become_follower(self, r: Replica, state: PartitionState) -> None:
        self._detach(r)
        self._lost_leadership(r)
        r.role, r.leader, r.leader_epoch = FOLLOWER, state.leader, state.leader_epoch
        r.followers = {}
        r.leader_epoch_start_offset = -1
        if self._fetching_stopped:
            log.info(
                "%s-%d: follower of %d (epoch %d), not fetching (controlled shutdown)",
                r.topic,
                r.partition,
                state.leader,
                state.leader_epoch,
            )
            return
        fetcher = self.fetchers.get(state.leader)
        if fetcher is None:
            fetcher = self.fetcher_factory(self, state.leader)
            self.fetchers[state.leader] = fetcher
            fetcher.start()
        fetcher.add(r)
        log.info(
            "%s-%d: follower of %d (epoch %d, log end %d)",
            r.topic,
            r.partition,
            state.leader,
            state.leader_epoch,
            r.log.log_end_offset,
        )

    # -- leader side ------------------------------------------------------------------------
    def leader_replica(
        self,
        topic: str,
        partition: int,
        current_leader_epoch: int = -1,
        lease_ok: bool | None = None,
    ) -> Replica:
        """This broker's replica of the partition if it leads it (in ``current_leader_epoch``
        when >= 0), else the KafkaError to answer.  ``lease_ok``: the store session lease,
        when the caller has read it for a whole request (None: read it here)."""
        key = (topic, partition)
        if self.offline and key in self.offline:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "the replica's log dir is offline")
        r = self.replicas.get(key)
        info = self.cluster.topics.get(topic)
        if r is not None and info is not None and r.checked_info is not info:
            if not other_incarnation(r.log.topic_id, info.topic_id):
                if partition_view(r.checked_info, partition) != partition_view(info, partition):
                    self.changes.note(key)  # (the topic's event, still queued, will not)
                r.checked_info = info
        if r is None or (info is not None and r.checked_info is not info):
            # created (or deleted and created again) a moment ago: the change event is still
            # queued; never append to or read from the log of the deleted incarnation
            if info is None or partition not in info.partitions:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            key = (topic, partition)
            state = info.partitions[partition]
            if self.broker_id in state.replicas and key not in self._opening:
                if key in self._deferred:  # left over by a pass: this one is wanted now
                    del self._deferred[key]
                    self._sync_partition(topic, partition, info, state, _Budget(False))
                else:
                    self.sync_roles(topic)
            r = self.replicas.get((topic, partition))
            if r is None:
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if current_leader_epoch >= 0:
            if current_leader_epoch < r.leader_epoch:
                raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)
            if current_leader_epoch > r.leader_epoch:
                raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)
        if r.role != LEADER:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if lease_ok is None:
            lease_ok = self.lease_ok
        if not lease_ok:
            # held up past a third of the session: we may have been replaced
            # (coord/metadata/cluster.py)
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "leadership is being confirmed")
        return r


class _Budget:
    """SYNC_ROLES_BUDGET_S of costly partition work for one pass (unbounded off a loop: no
    later iteration would take the rest up); always at least one partition."""

    def __init__(self, bounded: bool) -> None:
        self.bounded = bounded
        self.deadline = monotonic() + SYNC_ROLES_BUDGET_S
        self.done = 0
        self.deferred: list[tuple[str, int]] = []

    def exhausted(self) -> bool:
        return self.bounded and self.done > 0 and monotonic() > self.deadline

    def take(self, key: tuple[str, int]) -> bool:
        if self.exhausted():
            self.deferred.append(key)
            return False
        self.done += 1
        return True


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


__all__ = [
    "FOLLOWER",
    "LEADER",
    "OFFLINE",
    "FollowerState",
    "Replica",
    "ReplicaManager",
    "consumer_key",
    "follower_key",
    "hw_key",
    "leo_key",
]


def _seen(r: Replica | None, index: int) -> tuple | None:
    """What of a replica a fetch session's stamp depends on and _sync_partition may change."""
    if r is None:
        return None
    return (r.role, r.leader, r.leader_epoch, tuple(r.isr), partition_view(r.checked_info, index))
