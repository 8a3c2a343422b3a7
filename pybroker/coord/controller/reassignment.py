"""Partition reassignment (KIP-455) as Kafka 3.9's ZooKeeper controller runs it
(KafkaController.onPartitionReassignment and friends); owned by the active Controller.  The
state lives in the topic znode (RS = TRS + (ORS - TRS), ``adding_replicas``,
``removing_replicas``), so a new controller resumes every reassignment.  A partition's
reassignment completes once every target replica is in the ISR, in one fenced multi; a
cancellation reassigns to the original replicas.  Every write checks ``/controller_epoch`` and
compare-and-sets the znodes it read, under the Controller's lock.  The sequence:
docs/internals.md ("pybroker/coord/controller/reassignment.py").
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pybroker.coord.controller.context import ClusterView, ControllerFence
from pybroker.coord.metadata import paths
from pybroker.coord.metadata.model import PartitionState, TopicPartition
from pybroker.coord.metadata.store import (
    BadVersionError,
    ConnectionLossError,
    Delete,
    NoNodeError,
    Op,
    SetData,
)
from pybroker.errors import ErrorCode

log = logging.getLogger(__name__)

Result = tuple[ErrorCode, str | None]
MAX_ATTEMPTS = 20  # compare-and-set rounds against leaders' ISR writes


@dataclass(frozen=True)
class ReplicaAssignment:
    """Kafka's ReplicaAssignment: the full replica set and the replicas being added/removed."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def origin(self) -> list[int]:
        """ORS: the replicas before the reassignment."""
        return [r for r in self.replicas if r not in self.adding]

    @property
    def target(self) -> list[int]:
        """TRS: the replicas after it."""
        return [r for r in self.replicas if r not in self.removing]

    @property
    def being_reassigned(self) -> bool:
        return bool(self.adding or self.removing)

    def reassign_to(self, target: Iterable[int]) -> ReplicaAssignment:
        """ReplicaAssignment.reassignTo: RS = (TRS + ORS).distinct, always from the original
        replicas (a reassignment replacing another keeps the first one's origin)."""
        target = list(target)
        origin = self.origin
        full = tuple(dict.fromkeys(target + origin))
        return ReplicaAssignment(
            full,
            tuple(r for r in full if r not in origin),
            tuple(r for r in full if r not in target),
        )


def assignment_of(state: PartitionState) -> ReplicaAssignment:
    """The ReplicaAssignment a cached PartitionState carries."""
    return ReplicaAssignment(
        tuple(state.replicas), tuple(state.adding_replicas), tuple(state.removing_replicas)
    )


def validate_replicas(
    current: ReplicaAssignment, replicas: list[int], live: set[int]
) -> Result | None:
    """KafkaController.validateReplicas: INVALID_REPLICA_ASSIGNMENT for an empty list,
    duplicates, negative ids, or new replicas on brokers that are not live; None if valid."""
    if not replicas:
        return (
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "Empty replica list specified in partition reassignment.",
        )
    if len(set(replicas)) != len(replicas):
        return (
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Duplicate replica ids in partition reassignment replica list: {_seq(replicas)}",
        )
    if any(r < 0 for r in replicas):
        return (
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Invalid broker id in replica list: {_seq(replicas)}",
        )
    adding = current.reassign_to(replicas).adding
    if not set(adding) <= live:
        return (
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "Replica assignment has brokers that are not alive. Replica list: "
            f"{_seq(adding)}, live broker list: {_set(live)}",
        )
    return None


def _seq(xs: Iterable[int]) -> str:
    return "List(" + ", ".join(str(x) for x in xs) + ")"


def _set(xs: Iterable[int]) -> str:
    return "Set(" + ", ".join(str(x) for x in sorted(xs)) + ")"


def build(current: ReplicaAssignment, target: list[int] | None) -> ReplicaAssignment | None:
    """KafkaController.maybeBuildReassignment: None means NO_REASSIGNMENT_IN_PROGRESS (a
    cancellation of a partition not being reassigned)."""
    if current.being_reassigned:
        return current.reassign_to(target if target is not None else current.origin)
    return None if target is None else current.reassign_to(target)


def is_complete(assignment: ReplicaAssignment, isr: list[int]) -> bool:
    """isReassignmentComplete: every target replica is in the ISR (at once for an assignment
    with nothing to add or remove, such as a cancellation back to the original replicas)."""
    return not assignment.being_reassigned or set(assignment.target) <= set(isr)


def completion_leader(
    assignment: ReplicaAssignment, leader: int, isr: list[int], live: set[int]
) -> int:
    """The leader once the reassignment completes (moveReassignedPartitionLeaderIfRequired):
    the current one when it is a live target replica, else the first target replica that is
    live and in the ISR; -1 when there is none (the completion waits)."""
    target = assignment.target
    if leader in target and leader in live:
        return leader
    for r in target:
        if r in live and r in isr:
            return r
    return -1


# --------------------------------------------------------------------------- the controller part


class Reassignments:
    """The reassignment duties of one Controller (its lock held by every caller)."""

    def __init__(
        self, cluster: ClusterView, fence: ControllerFence, wake: Callable[[], None]
    ) -> None:
        """``fence``: the controller's epoch; ``wake``: runs a controller pass soon."""
        self.cluster = cluster
        self.store = cluster.store
        self.fence = fence
        self._wake = wake
        self._admin_watch_pending = False
        self._admin_dirty = True  # read /admin/reassign_partitions at the next pass
        self._resumed = False

    # ------------------------------------------------------------------ entry points

    def listing(
        self, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, ReplicaAssignment]:
        """ListPartitionReassignments: the partitions being reassigned (among ``partitions``,
        or all), from the controller's cache; unknown partitions are left out."""
        out: dict[TopicPartition, ReplicaAssignment] = {}
        if partitions is None:
            wanted = [
                (name, p)
                for name, info in sorted(self.cluster.topics.items())
                for p in sorted(info.partitions)
            ]
        else:
            wanted = list(partitions)
        for tp in wanted:
            info = self.cluster.topics.get(tp[0])
            st = info.partitions.get(tp[1]) if info is not None else None
            if st is not None and st.being_reassigned:
                out[tp] = assignment_of(st)
        return out

    async def alter(
        self, requests: dict[TopicPartition, list[int] | None], live: set[int]
    ) -> dict[TopicPartition, Result]:
        """AlterPartitionReassignments (handleAlterPartitionReassignments): per partition
        NONE once the reassignment started (or completed at once), NO_REASSIGNMENT_IN_PROGRESS,
        INVALID_REPLICA_ASSIGNMENT, UNKNOWN_TOPIC_OR_PARTITION."""
        results: dict[TopicPartition, Result] = {}
        todo: dict[TopicPartition, ReplicaAssignment] = {}
        for tp, target in requests.items():
            current = self._cached(tp) or ReplicaAssignment(())
            if target is not None:
                err = validate_replicas(current, target, live)
                if err is not None:
                    results[tp] = err
                    continue
            new = build(current, target)
            if new is None:
                results[tp] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)
            else:
                todo[tp] = new
        # the latest reassignment, by API or through the znode, takes precedence
        await self._remove_from_admin_node(lambda tp, _: tp in todo)
        results.update(await self._trigger(todo, live))
        return {tp: results[tp] for tp in requests}

    async def on_pass(self, topics: Iterable[str] | None, live: set[int]) -> None:
        """Part of every controller pass: the znode's new requests, the resumption after a
        controller move (first pass), and the completion of those of ``topics`` (None: all)
        whose target replicas have all joined the ISR."""
        if not self._resumed:
            self._resumed = True
            from_node = await self._process_admin_node(live)
            resume = {tp: a for tp, a in self._all_in_progress().items() if tp not in from_node}
            if resume:
                log.info("controller: resuming the reassignments of %s", sorted(resume))
                await self._trigger(resume, live)
        elif self._admin_dirty:
            await self._process_admin_node(live)
        names = list(self.cluster.topics) if topics is None else list(topics)
        for name in names:
            info = self.cluster.topics.get(name)
            if info is None:
                continue
            for p, st in sorted(info.partitions.items()):
                if st.being_reassigned and is_complete(assignment_of(st), st.isr):
                    await self._complete((name, p), live)

    # ------------------------------------------------------------------ the steps

    def _cached(self, tp: TopicPartition) -> ReplicaAssignment | None:
        info = self.cluster.topics.get(tp[0])
        st = info.partitions.get(tp[1]) if info is not None else None
        return None if st is None else assignment_of(st)

    def _all_in_progress(self) -> dict[TopicPartition, ReplicaAssignment]:
        return {
            (name, p): assignment_of(st)
            for name, info in sorted(self.cluster.topics.items())
            for p, st in sorted(info.partitions.items())
            if st.being_reassigned
        }

    async def _trigger(
        self, todo: dict[TopicPartition, ReplicaAssignment], live: set[int]
    ) -> dict[TopicPartition, Result]:
        """maybeTriggerPartitionReassignment."""
        results: dict[TopicPartition, Result] = {}
        for tp, new in todo.items():
            if self._cached(tp) is None:
                results[tp] = (
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    "The partition does not exist.",
                )
                continue
            try:
                results[tp] = await self._start(tp, new, live)
            except ConnectionLossError as e:
                results[tp] = (ErrorCode.REQUEST_TIMED_OUT, str(e))
        return results

    async def _start(self, tp: TopicPartition, new: ReplicaAssignment, live: set[int]) -> Result:
        """onPartitionReassignment: write RS = TRS + ORS with the leader epoch bumped (and the
        replicas an earlier reassignment added that this one drops out of the ISR), or
        complete at once when the target is in the ISR already."""
        for _ in range(MAX_ATTEMPTS):
            read = await self._read(tp)
            if read is None:
                return (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
            topic_data, topic_version, state, state_version = read
            current = self._assignment_in(topic_data, tp[1])
            if is_complete(new, state["isr"]):
                done = await self._complete(tp, live, new)
                if done is not None:
                    return done
                # no target replica can lead yet: written as in progress, completed later
            unneeded = [r for r in current.replicas if r not in new.replicas]
            isr = [b for b in state["isr"] if b not in unneeded]
            leader = state["leader"]
            if leader in unneeded:
                leader = next((r for r in new.replicas if r in live and r in isr), -1)
            if not isr:
                isr = list(state["isr"]) if leader < 0 else [leader]
            ok = await self._write(
                tp,
                topic_data,
                topic_version,
                new,
                (leader, state["leader_epoch"] + 1, isr),
                state_version,
                "reassignment started",
            )
            if ok:
                return (ErrorCode.NONE, None)
        return (ErrorCode.UNKNOWN_SERVER_ERROR, "the partition state kept changing")

    async def _complete(
        self, tp: TopicPartition, live: set[int], new: ReplicaAssignment | None = None
    ) -> Result | None:
        """B1-B7: RS = TRS, the leader moved to a target replica if needed, the removed
        replicas out of the ISR, the partition out of /admin/reassign_partitions.  None when
        it cannot complete yet (no target replica can lead, or not all are in the ISR)."""
        for _ in range(MAX_ATTEMPTS):
            read = await self._read(tp)
            if read is None:
                return (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
            topic_data, topic_version, state, state_version = read
            assignment = new or self._assignment_in(topic_data, tp[1])
            if new is None and not assignment.being_reassigned:
                return None  # completed already (the cache was behind)
            if not is_complete(assignment, state["isr"]):
                return None
            target = assignment.target
            leader = completion_leader(assignment, state["leader"], state["isr"], live)
            if leader < 0 and not assignment.being_reassigned:
                leader = state["leader"] if state["leader"] in target else -1  # nothing moves
            elif leader < 0:
                log.info(
                    "controller: %s-%d cannot complete its reassignment to %s yet: no target "
                    "replica is live and in the ISR %s",
                    *tp,
                    target,
                    state["isr"],
                )
                return None
            isr = [b for b in state["isr"] if b in target]
            done = ReplicaAssignment(tuple(target))
            ok = await self._write(
                tp,
                topic_data,
                topic_version,
                done,
                (leader, state["leader_epoch"] + 1, isr),
                state_version,
                "reassignment completed",
            )
            if ok:
                await self._remove_from_admin_node(
                    lambda p, replicas, target=target: p == tp and list(replicas) == target
                )
                return (ErrorCode.NONE, None)
        return (ErrorCode.UNKNOWN_SERVER_ERROR, "the partition state kept changing")

    # ------------------------------------------------------------------ store access

    @staticmethod
    def _assignment_in(topic_data: bytes, p: int) -> ReplicaAssignment:
        _, assignment = paths.decode_topic(topic_data)
        adding, removing = paths.decode_topic_reassignment(topic_data)
        return ReplicaAssignment(
            tuple(assignment.get(p, ())), tuple(adding.get(p, ())), tuple(removing.get(p, ()))
        )

    async def _read(self, tp: TopicPartition) -> tuple[bytes, int, dict, int] | None:
        try:
            topic_data, topic_stat = await self.store.get(paths.topic(tp[0]))
            state_data, state_stat = await self.store.get(paths.partition_state(*tp))
        except NoNodeError:
            return None
        _, assignment = paths.decode_topic(topic_data)
        if tp[1] not in assignment:
            return None
        state = paths.decode_partition_state(state_data)
        self.fence.check_read(state["controller_epoch"], f"{tp[0]}-{tp[1]}")
        return topic_data, topic_stat.version, state, state_stat.version

    async def _write(
        self,
        tp: TopicPartition,
        topic_data: bytes,
        topic_version: int,
        assignment: ReplicaAssignment,
        state: tuple[int, int, list[int]],
        state_version: int,
        why: str,
    ) -> bool:
        """One fenced multi: the topic znode with ``assignment`` for tp (the other partitions
        as read) and tp's state.  False when a compare-and-set lost (re-read and decide
        again)."""
        topic_id, full = paths.decode_topic(topic_data)
        adding, removing = paths.decode_topic_reassignment(topic_data)
        p = tp[1]
        full[p] = list(assignment.replicas)
        adding[p] = list(assignment.adding)
        removing[p] = list(assignment.removing)
        leader, leader_epoch, isr = state
        ops: list[Op] = [
            SetData(
                paths.topic(tp[0]),
                paths.encode_topic(topic_id, full, adding, removing),
                topic_version,
            ),
            SetData(
                paths.partition_state(*tp),
                paths.encode_partition_state(leader, leader_epoch, isr, self.fence.epoch),
                state_version,
            ),
        ]
        try:
            await self.fence.multi(self.store, ops)
        except (BadVersionError, NoNodeError):
            return False
        log.info(
            "controller (epoch %d): %s-%d %s: replicas %s (adding %s, removing %s), "
            "leader %d, leader_epoch %d, isr %s",
            self.fence.epoch,
            *tp,
            why,
            list(assignment.replicas),
            list(assignment.adding),
            list(assignment.removing),
            leader,
            leader_epoch,
            isr,
        )
        self._cache(tp, assignment, leader, leader_epoch, isr, state_version + 1, topic_version + 1)
        return True

    def _cache(
        self,
        tp: TopicPartition,
        assignment: ReplicaAssignment,
        leader: int,
        leader_epoch: int,
        isr: list[int],
        zk_version: int,
        topic_version: int,
    ) -> None:
        info = self.cluster.topics.get(tp[0])
        if info is None or tp[1] not in info.partitions:
            return
        st = dataclasses.replace(
            info.partitions[tp[1]],
            leader=leader,
            leader_epoch=leader_epoch,
            isr=list(isr),
            replicas=list(assignment.replicas),
            adding_replicas=tuple(assignment.adding),
            removing_replicas=tuple(assignment.removing),
            controller_epoch=self.fence.epoch,
            zk_version=zk_version,
        )
        self.cluster.put_assignment(tp[0], tp[1], st, topic_version)

    # ------------------------------------------------------------------ /admin/reassign_partitions

    def _on_admin_node(self, event: object) -> None:
        self._admin_watch_pending = False
        self._admin_dirty = True
        self._wake()

    async def _read_admin_node(self) -> tuple[dict[TopicPartition, list[int]], int] | None:
        """The znode's requests and version, setting one watch for its creation/change."""
        watch = None
        if not self._admin_watch_pending:
            self._admin_watch_pending = True
            watch = self._on_admin_node
        try:
            stat = await self.store.exists(paths.REASSIGN_PARTITIONS, watch=watch)
        except BaseException:
            if watch is not None:
                self._admin_watch_pending = False
            raise
        self._admin_dirty = False
        if stat is None:
            return None
        try:
            data, stat = await self.store.get(paths.REASSIGN_PARTITIONS)
        except NoNodeError:
            return None
        try:
            return paths.decode_reassignment(data), stat.version
        except ValueError as e:
            log.warning("%s is unreadable (%s): deleting it", paths.REASSIGN_PARTITIONS, e)
            await self._delete_admin_node(stat.version)
            return None

    async def _process_admin_node(self, live: set[int]) -> set[TopicPartition]:
        """processZkPartitionReassignment: start every partition the znode names; the ones
        that fail to start leave it.  Returns the partitions started."""
        read = await self._read_admin_node()
        if read is None:
            return set()
        requests, _ = read
        todo: dict[TopicPartition, ReplicaAssignment] = {}
        results: dict[TopicPartition, Result] = {}
        for tp, target in requests.items():
            current = self._cached(tp) or ReplicaAssignment(())
            new = build(current, target)
            if new is None:
                results[tp] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)
            else:
                todo[tp] = new
        results.update(await self._trigger(todo, live))
        failed = {tp for tp, (code, _) in results.items() if code != ErrorCode.NONE}
        if failed:
            log.warning(
                "controller: reassignments through %s failed: %s",
                paths.REASSIGN_PARTITIONS,
                {tp: results[tp] for tp in sorted(failed)},
            )
            await self._remove_from_admin_node(lambda tp, _: tp in failed)
        # completed at once: their entries went in _complete
        return set(results) - failed

    async def _remove_from_admin_node(self, drop) -> None:
        """maybeRemoveFromZkReassignment: rewrite the znode without the entries ``drop``
        selects (tp, replicas); delete it when nothing is left."""
        for _ in range(MAX_ATTEMPTS):
            try:
                data, stat = await self.store.get(paths.REASSIGN_PARTITIONS)
            except NoNodeError:
                return
            try:
                requests = paths.decode_reassignment(data)
            except ValueError:
                requests = {}
            keep = {tp: r for tp, r in requests.items() if not drop(tp, r)}
            if keep == requests and requests:
                return
            try:
                if keep:
                    await self.store.set(
                        paths.REASSIGN_PARTITIONS, paths.encode_reassignment(keep), stat.version
                    )
                else:
                    await self.store.delete(paths.REASSIGN_PARTITIONS, stat.version)
                return
            except (BadVersionError, NoNodeError):
                continue

    async def _delete_admin_node(self, version: int) -> None:
        try:
            await self.store.multi([Delete(paths.REASSIGN_PARTITIONS, version)])
        except (BadVersionError, NoNodeError):
            pass
