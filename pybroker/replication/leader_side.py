"""The leader's side of a partition (Kafka's Partition as leader): the high watermark (the
smallest log end offset over the ISR, never moving backwards), the followers' fetch positions,
ISR expansion and shrinking (written with compare-and-set through Cluster.update_isr) and
acks=all produces completed once the high watermark passes them.  A part of ReplicaManager
(manager.py)."""

from __future__ import annotations

import asyncio
import logging

from pybroker.coord.metadata.isr import IsrChange
from pybroker.coord.metadata.model import PartitionState
from pybroker.errors import ErrorCode, KafkaError
from pybroker.replication.changes import ChangeFeed, IdleFetches, partition_view
from pybroker.replication.replica import (
    LEADER,
    FollowerState,
    Replica,
    consumer_key,
    followers_append_key,
    hw_key,
    leo_key,
)

log = logging.getLogger("pybroker.replication")
_NONE = ErrorCode.NONE  # (read once: an Enum class attribute is a slow lookup on 3.11)
_FOLLOWERS_APPEND = followers_append_key()


class LeaderSide:
    """ReplicaManager's leader side (module docstring)."""

    # what changed for followers' fetch sessions (replication/changes.py): noted by
    # note_changed, by appends (after_leader_append) and by _wake (high watermark, ISR,
    # a replica detached); the roles' side notes its own changes
    changes: ChangeFeed

    def note_changed(self, topic: str, partition: int) -> None:
        self.changes.note((topic, partition))

    @property
    def lease_ok(self) -> bool:
        """The store session lease (Cluster.lease_ok): a leader answers only while it holds;
        read once a request by the fetch paths."""
        return self.cluster.lease_ok

    def fetch_stamp(self, topic: str, partition: int, read_committed: bool) -> tuple | None:
        """What a consumer's fetch of an idle partition depends on, for the Fetch handler to
        see that nothing changed since its last answer: this broker still leads the same
        replica in the same epoch, the topic's id and configs and the partition's state are
        the same (changes.partition_view, not the TopicInfo object), and the log's
        end, high watermark, start (and LSO for read_committed) are where they were.  None
        when this broker does not lead it now (the full path then answers the error)."""
        r = self.replicas.get((topic, partition))
        if r is None or r.role != LEADER or not self.lease_ok:
            return None
        log = r.log
        return (
            r,
            r.leader_epoch,
            partition_view(self.cluster.topics.get(topic), partition),
            log.log_end_offset,
            log.high_watermark,
            log.log_start_offset,
            log.last_stable_offset if read_committed else -1,
        )

    def follower_fetch_stamp(self, topic: str, partition: int, replica_id: int) -> tuple | None:
        """What an in-sync follower's fetch of an idle partition depends on (as fetch_stamp
        for a consumer): the same replica, log and partition_view, the same leader
        epoch, log end, high watermark and log start, the follower in the ISR (or in the ISR
        being written: its fetch at the log end asked for nothing more, and the write's end
        is noted either way, _write_isrs) and the high watermark past this epoch's start.  The
        first element is the Replica.  None when its fetch must take the full path (not led,
        offline, not in the ISR, a lagging high watermark).  The caller checks the store
        session's lease once for the request."""
        key = (topic, partition)
        r = self.replicas.get(key)
        if (
            r is None
            or r.role != LEADER
            or (
                replica_id not in r.isr
                and (r.pending_isr is None or replica_id not in r.pending_isr)
            )
            or r.checked_info is not self.cluster.topics.get(topic)
            or (self.offline and key in self.offline)
        ):
            return None
        log = r.log
        hw = log.high_watermark
        if hw < r.leader_epoch_start_offset:  # (high_watermark_lagging)
            return None
        return (
            r,
            r.leader_epoch,
            partition_view(r.checked_info, partition),
            log,
            log.log_end_offset,
            hw,
            log.log_start_offset,
        )

    def follower_skips(self, replica_id: int, replicas: list[Replica], idle: IdleFetches) -> None:
        """A follower's fetch session skips these partitions as unchanged: from now on each
        of its rounds (``idle.last_ms``) counts as a fetch of them at the log end, until it
        reads them again (settle_follower_reads)."""
        for r in replicas:
            st = r.followers.get(replica_id)
            if st is not None:
                st.idle = idle

    def settle_follower_reads(self, replica_id: int, keys: list[tuple[str, int]]) -> None:
        """A follower's fetch reads these partitions again, or no longer fetches them: their
        idle rounds so far are recorded, the next ones are not."""
        get = self.replicas.get
        for key in keys:
            r = get(key)
            if r is not None:
                st = r.followers.get(replica_id)
                if st is not None and st.idle is not None:
                    st.settle_idle()

    def check_enough_replicas(self, r: Replica) -> None:
        """acks=all precondition: the ISR is at least min.insync.replicas and the store session
        that lets us guarantee it is alive."""
        if not self.cluster.session_ok:
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                "this broker has lost its metadata-store session",
            )
        need = self.min_insync_replicas(r.topic)
        if len(r.isr) < need:
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"ISR {r.isr} is smaller than min.insync.replicas={need}",
            )

    def after_leader_append(self, r: Replica) -> None:
        notify = self.purgatory.notify
        notify(leo_key(r.topic, r.partition))
        notify(_FOLLOWERS_APPEND)
        if not self._maybe_advance_hw(r):  # (when it moved, _wake noted the change)
            self.changes.note((r.topic, r.partition))

    def _maybe_advance_hw(self, r: Replica) -> bool:
        """Move the high watermark to the lowest log end of the ISR; True if it moved."""
        if r.role != LEADER:
            return False
        leo = r.log.log_end_offset
        candidate = leo
        for b in r.isr:
            if b == self.broker_id:
                continue
            st = r.followers.get(b)
            candidate = min(candidate, st.log_end_offset if st is not None else -1)
        if candidate > r.log.high_watermark:
            lagging = r.high_watermark_lagging()
            r.log.high_watermark = candidate
            if lagging and not r.high_watermark_lagging():
                log.info(
                    "%s-%d: high watermark %d reached the start of leader epoch %d after %d ms",
                    r.topic,
                    r.partition,
                    candidate,
                    r.leader_epoch,
                    self.clock.time_ms() - r.leader_since_ms,
                )
            self._wake(r)
            return True
        return False

    def _wake(self, r: Replica) -> None:
        self.changes.note((r.topic, r.partition))
        self.purgatory.notify(hw_key(r.topic, r.partition))
        self.purgatory.notify(consumer_key(r.topic, r.partition))

    def record_follower_fetch(self, r: Replica, replica_id: int, fetch_offset: int) -> bool:
        """A follower fetched from ``fetch_offset``: everything before it is on its log.  True
        when this fetch brought a new leader's high watermark to its epoch start (the fetch is
        then answered at once: the follower learns the high watermark it may soon serve)."""
        if replica_id not in r.followers:
            if replica_id not in r.replicas:
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{replica_id} is no replica")
            r.followers[replica_id] = FollowerState()
        st = r.followers[replica_id]
        now = self.clock.time_ms()
        st.log_end_offset = fetch_offset
        if fetch_offset >= r.log.log_end_offset:
            st.last_caught_up_ms = now
        # In sync (Kafka's isFollowerInSync): at the high watermark and holding everything
        # of earlier epochs; a follower that joined below this epoch's start could be elected
        # without records the ISR had and the high watermark would go back.  And a live broker
        # (Kafka's ZooKeeper-mode isReplicaIsrEligible): one that still fetches while its
        # session is gone (cut from ZooKeeper only) stays out, or the controller would take it
        # out again at once, and again at every fetch.
        if (
            replica_id not in r.isr
            and fetch_offset >= r.log.high_watermark
            and fetch_offset >= r.leader_epoch_start_offset
            and replica_id in self.cluster.brokers
        ):
            self._change_isr(r, sorted(set(r.isr) | {replica_id}), "caught up")
        lagging = r.high_watermark_lagging()
        self._maybe_advance_hw(r)
        return lagging and not r.high_watermark_lagging()

    def _change_isr(self, r: Replica, new_isr: list[int], why: str) -> None:
        """Queue the change; the changes of one pass of the loop go to the store together
        (_write_isrs, Cluster.update_isrs), one at a time per partition."""
        if r.isr_change_in_flight or new_isr == r.isr:
            return
        r.isr_change_in_flight = True
        r.pending_isr = new_isr
        queue = self.isr_queue
        if not queue:
            self._spawn(self._write_isrs(), "isr-writes")
        queue[(r.topic, r.partition)] = (r, new_isr, why, r.leader_epoch)  # (as of now)

    async def _write_isrs(self) -> None:
        """Write the ISR changes queued so far together: each partition's compare-and-set at
        its cached version, pipelined, a conflict re-read and retried for that partition alone
        (metadata/isr.py).  Changes queued meanwhile go out with the next task (spawned by
        the first of them), each in the leader epoch it was decided in."""
        await asyncio.sleep(0)  # (the rest of this pass's changes join the batch)
        batch = list(self.isr_queue.values())
        self.isr_queue.clear()  # (changes queued from now on go out in the next batch)
        changes = [
            IsrChange(r.topic, r.partition, new_isr, self.broker_id, epoch)
            for r, new_isr, _, epoch in batch
        ]
        try:
            results = await self.cluster.update_isrs(changes)
        except Exception as e:
            results = [e] * len(batch)
        verbose = len(batch) <= 20
        failed = 0
        note = self.changes.note
        for (r, _, why, _), change, state in zip(batch, changes, results, strict=True):
            r.isr_change_in_flight = False
            r.pending_isr = None
            # (a follower session may skip the partition while its addition is written:
            # follower_fetch_stamp; read it again whatever came of the write)
            note((r.topic, r.partition))
            if isinstance(state, Exception):
                failed += 1
                if verbose or failed == 1:
                    log.warning("%s-%d: ISR change to %s failed: %s", *change[:3], state)
                continue
            self._isr_written(r, state, change.leader_epoch, why, verbose)
        if not verbose:
            log.info(
                "%d ISR changes written together, %d failed (%s, ...)",
                len(batch),
                failed,
                batch[0][2],
            )

    def _isr_written(
        self, r: Replica, state: PartitionState | None, epoch: int, why: str, verbose: bool
    ) -> None:
        if state is None or r.role != LEADER or r.leader_epoch != epoch:
            return
        if verbose:
            log.info("%s-%d: ISR %s -> %s (%s)", r.topic, r.partition, r.isr, state.isr, why)
        if len(state.isr) < len(r.isr):
            self.isr_shrinks += 1
        elif len(state.isr) > len(r.isr):
            self.isr_expands += 1
        r.isr = list(state.isr)
        self._maybe_advance_hw(r)
        self._wake(r)

    def shrink_isrs(self) -> None:
        now = self.clock.time_ms()
        for r in list(self.replicas.values()):
            if r.role != LEADER:
                continue
            lagging = [
                b
                for b in r.isr
                if b != self.broker_id
                and now - r.followers.get(b, FollowerState()).caught_up_ms()
                > self.replica_lag_time_max_ms
            ]
            if lagging:
                self._change_isr(r, [b for b in r.isr if b not in lagging], f"{lagging} lagging")

    async def _isr_loop(self) -> None:
        interval = max(self.replica_lag_time_max_ms / 2000.0, 0.05)
        while True:
            await asyncio.sleep(interval)
            try:
                self.shrink_isrs()
            except Exception:
                log.exception("ISR check failed")

    def commit_result(self, r: Replica, end_offset: int, epoch: int) -> int | None:
        """acks=all: the error code for a batch ending before ``end_offset`` appended in leader
        epoch ``epoch``, if it is settled now (None: wait for the high watermark)."""
        if r.role != LEADER or not r.leadership_epoch <= epoch <= r.leader_epoch:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if r.log.high_watermark >= end_offset:
            if len(r.isr) < self.min_insync_replicas(r.topic):
                return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            return _NONE
        return None

    async def wait_for_commit(self, r: Replica, end_offset: int, timeout_ms: int) -> int:
        """acks=all: wait until the high watermark reaches ``end_offset``; the error code."""
        deadline = self.clock.monotonic() + max(timeout_ms, 0) / 1000.0
        epoch = r.leader_epoch
        key = hw_key(r.topic, r.partition)
        while True:
            code = self.commit_result(r, end_offset, epoch)
            if code is not None:
                return code
            left = deadline - self.clock.monotonic()
            if left <= 0:
                return ErrorCode.REQUEST_TIMED_OUT
            await self.purgatory.wait_any([key], left)
