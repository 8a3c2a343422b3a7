"""The controller's partition-leadership duties (Kafka ZooKeeper mode, see docs/replication.md).

A :class:`Controller` exists while this broker holds ``/controller``: the Cluster creates and
starts one when it wins the election (``Cluster._on_become_controller``) and stops it when it
resigns, loses its store session (LOST), or is fenced.  Its duties:

* **Broker loss.**  For every partition whose leader is not live (its ``/brokers/ids/<id>`` is
  gone), elect a new leader: the first replica, in replica order, that is in the ISR and live
  (clean); otherwise, when ``unclean.leader.election.enable`` is true for the topic (topic
  override in ``/config/topics/<t>``, else the broker default ``cluster.unclean_leader_election
  _enable``), the first live replica, with ISR = [new leader] (unclean); otherwise the
  partition goes offline: leader = -1, ISR unchanged (Kafka keeps the last ISR so that a
  returning member can lead without data loss).  Every leader change, going offline included,
  bumps ``leader_epoch``; an election shrinks the ISR to the live brokers.  For partitions
  whose leader is live but whose ISR names dead followers, the dead followers are removed from
  the ISR without bumping ``leader_epoch``; the leader itself is never removed, so the ISR
  never becomes empty.
* **Broker return, controller start.**  The same rule covers offline partitions (leader -1 or
  not live): they get a leader as soon as a live ISR member exists (or any live replica when
  unclean election is allowed).
* **ElectLeaders.**  :meth:`Controller.elect_leaders` runs preferred elections (the first
  replica becomes leader if it is live and in the ISR) or unclean ones (only for partitions
  without a live leader), answering Kafka's per-partition error codes.
* **Controlled shutdown.**  A broker stopping on SIGTERM creates the ephemeral
  ``/pybroker/controlled_shutdown/<id>`` (replication/controlled_shutdown.py); every pass reads
  those children (with a watch that starts a full pass) into ``shutting_down``.  Such a broker
  is never elected; the partitions it leads move to the first other live ISR member (leader
  epoch + 1) and it leaves every ISR (Kafka's ControlledShutdownPartitionLeaderElection and
  OfflineReplica transition).  A partition nobody else can lead stays with it.
* **Log dir failure.**  A broker whose log dir failed creates an ephemeral
  ``/pybroker/offline_replicas/<id>-<seq>`` naming the partitions it lost (log/manager.py,
  ``fail_dir``); every pass reads them (a watch on the children starts a full pass).  For
  such a partition that broker counts as dead: a partition it leads gets a new leader from
  the other live ISR members (or goes offline, leader -1, as Kafka's OfflinePartition), and it
  leaves the ISR (Kafka's OfflineReplica transition after a LogDirEventNotification).
* **Preferred leaders.**  With ``auto.leader.rebalance.enable``, 5 s after the start and then
  every ``leader.imbalance.check.interval.seconds``, :meth:`Controller.
  rebalance_preferred_leaders` runs Kafka's checkAndTriggerAutoLeaderRebalance: a preferred
  election for the partitions of each broker whose imbalance ratio exceeds
  ``leader.imbalance.per.broker.percentage``; skipped while any partition is being reassigned
  (as Kafka's check).

Design decisions:

* **Level-triggered.**  A pass does not diff the broker set against the previous one; it looks
  at every candidate partition's state against the live set and fixes whatever is wrong.  So a
  broker death missed during a controller failover or a lost watch is handled by the next pass,
  and a leader's ISR write racing a controller shrink (the leader re-applies its ISR after a
  compare-and-set conflict and may re-add a dead follower) is repaired on the state-change
  event that follows.  Triggers: controller start (all topics), ``BROKERS_CHANGED`` (all
  topics), ``TOPIC_CHANGED`` (that topic).  Events are coalesced: one pass handles everything
  marked since the previous one.
* **Cheap selection, fresh decision.**  Candidates are chosen from the Cluster's cached
  states (no store reads for healthy partitions); each candidate's state znode is then re-read
  (data + version) and the decision is made on what was read.  The live set is read from
  ``/brokers/ids`` at each pass, never taken from the (possibly lagging) cache.
* **Compare-and-set + epoch fencing.**  Writes are ``SetData(state, version=<read version>)``
  batched in store multis of at most :data:`MAX_OPS_PER_MULTI` operations, each multi starting
  with ``Check(/controller_epoch, <its version when we won>)``: a controller whose epoch was
  superseded fails atomically and writes nothing (Kafka's controller-epoch fencing via
  ``multi`` with a version check).  A failure on that check (or reading a state stamped with a
  newer controller epoch) fences this controller: it stops and asks the Cluster to re-read
  ``/controller``.  A failure on a state op (BadVersion: a leader wrote its ISR meanwhile;
  NoNode: the topic went) rolls the multi back; its partitions are re-read and decided again
  while this controller is active.  A lost connection retries with backoff, also re-reading
  (so a write that did land is seen and not repeated).
* **One writer.**  Passes and ``elect_leaders`` hold one lock, so this controller never races
  itself; its only competitors are partition leaders writing ISR changes (``Cluster.
  update_isr``), which keep leader and leader_epoch and also use compare-and-set.
* Every written state carries ``controller_epoch`` = this controller's epoch.  The Cluster's
  cache is updated at once after each successful multi (the watches confirm it later).
* Each decision is logged at INFO: partition, old leader -> new leader, leader epoch, ISR.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pybroker.coord.controller.reassignment import Reassignments, ReplicaAssignment
from pybroker.coord.metadata import paths
from pybroker.coord.metadata.store import (
    BadVersionError,
    Check,
    ConnectionLossError,
    NoNodeError,
    Op,
    SetData,
    StoreError,
)
from pybroker.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from pybroker.coord.metadata.cluster import Cluster, ClusterEvent

log = logging.getLogger(__name__)

MAX_OPS_PER_MULTI = 100  # the Check on /controller_epoch plus up to 99 state writes
READ_CONCURRENCY = 100

TopicPartition = tuple[str, int]
ElectionResult = tuple[ErrorCode, str | None]


@dataclass(frozen=True)
class StoredState:
    """A partition state znode as read: its content and znode version."""

    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int
    zk_version: int


@dataclass(frozen=True)
class Decision:
    """What to write to a partition state znode."""

    leader: int
    leader_epoch: int
    isr: list[int]
    reason: str


class ControllerFencedError(Exception):
    """This controller's epoch was superseded (or it was stopped): it must not write."""


# --------------------------------------------------------------------------- pure decisions


def is_unclean_allowed(topic_configs: dict[str, str], default: bool) -> bool:
    value = topic_configs.get("unclean.leader.election.enable")
    if value is None:
        return default
    return value.strip().lower() == "true"


def decide_for_live_set(
    st: StoredState,
    replicas: list[int],
    live: set[int],
    unclean: bool,
    shutting_down: frozenset[int] | set[int] = frozenset(),
) -> Decision | None:
    """The controller's automatic rule (broker loss / return, controlled shutdown); None when
    nothing changes.  A broker in ``shutting_down`` (live, in controlled shutdown) is never
    elected and leaves every ISR; a partition it leads moves to the first other replica that is
    in the ISR and live (Kafka's ControlledShutdownPartitionLeaderElectionStrategy), and stays
    with it when there is none."""
    eligible = live - set(shutting_down)
    if st.leader >= 0 and st.leader in live:
        if st.leader in shutting_down:
            others = [r for r in replicas if r in st.isr and r in eligible]
            if others:
                isr = [b for b in st.isr if b in eligible]
                return Decision(others[0], st.leader_epoch + 1, isr, "controlled shutdown")
        # leader alive: only drop dead (or shutting-down) followers from the ISR, never the
        # leader itself
        isr = [b for b in st.isr if b in eligible or b == st.leader]
        if isr and isr != st.isr:
            why = "dead followers leave the ISR"
            if any(b in shutting_down for b in st.isr if b != st.leader):
                why = "followers in controlled shutdown leave the ISR"
            return Decision(st.leader, st.leader_epoch, isr, why)
        return None
    live_isr = [r for r in replicas if r in st.isr and r in eligible]
    if live_isr:
        isr = [b for b in st.isr if b in eligible]
        return Decision(live_isr[0], st.leader_epoch + 1, isr, "clean election")
    if unclean:
        live_replicas = [r for r in replicas if r in eligible]
        if live_replicas:
            leader = live_replicas[0]
            return Decision(leader, st.leader_epoch + 1, [leader], "UNCLEAN election")
    if st.leader == -1:
        return None  # already offline, nobody eligible yet
    return Decision(-1, st.leader_epoch + 1, list(st.isr), "offline: no eligible leader")


def imbalanced_partitions(
    assignments: Iterable[tuple[TopicPartition, list[int], int]],
    percentage: int,
    eligible: set[int],
) -> dict[int, tuple[float, list[TopicPartition]]]:
    """Kafka's checkAndTriggerAutoLeaderRebalance selection.  ``assignments``: (partition,
    replicas, current leader).  Partitions are grouped by their preferred (first) replica; a
    broker whose share of such partitions led by another broker exceeds ``percentage`` % gets
    back those of them it can lead (it is eligible: live, not shutting down).  Returns
    {preferred broker: (imbalance ratio, partitions to elect it for)} for the brokers over the
    limit."""
    by_preferred: dict[int, list[tuple[TopicPartition, int]]] = {}
    for tp, replicas, leader in assignments:
        if replicas:
            by_preferred.setdefault(replicas[0], []).append((tp, leader))
    out: dict[int, tuple[float, list[TopicPartition]]] = {}
    for broker, tps in sorted(by_preferred.items()):
        elsewhere = [tp for tp, leader in tps if leader != broker]
        ratio = len(elsewhere) / len(tps)
        if ratio > percentage / 100.0 and broker in eligible:
            out[broker] = (ratio, elsewhere)
    return out


def decide_preferred(
    st: StoredState, replicas: list[int], live: set[int]
) -> Decision | ElectionResult:
    """Preferred election: the first replica leads if it is live and in the ISR."""
    if not replicas:
        return (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, "the partition has no replicas")
    preferred = replicas[0]
    if st.leader == preferred:
        return (ErrorCode.ELECTION_NOT_NEEDED, "the preferred replica is already the leader")
    if preferred not in live or preferred not in st.isr:
        return (
            ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
            f"Failed to elect leader for partition: preferred replica {preferred} is "
            f"{'not in the ISR' if preferred in live else 'not live'}",
        )
    isr = [b for b in st.isr if b in live]
    return Decision(preferred, st.leader_epoch + 1, isr, "preferred election")


def decide_unclean(
    st: StoredState, replicas: list[int], live: set[int]
) -> Decision | ElectionResult:
    """ElectLeaders UNCLEAN: only for partitions without a live leader; a live ISR member is
    still preferred, else any live replica."""
    if st.leader >= 0 and st.leader in live:
        return (ErrorCode.ELECTION_NOT_NEEDED, "the partition has a live leader")
    d = decide_for_live_set(st, replicas, live, True)
    if d is None or d.leader < 0:
        return (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "no live replica can lead")
    return d


# --------------------------------------------------------------------------- the controller

Decide = Callable[[TopicPartition, StoredState, list[int], set[int]], "Decision | ElectionResult"]


class Controller:
    def __init__(self, cluster: Cluster, epoch: int, epoch_zk_version: int) -> None:
        """``epoch``: our controller epoch; ``epoch_zk_version``: the znode version of
        /controller_epoch right after we wrote that epoch (the fencing check)."""
        self.cluster = cluster
        self.store = cluster.store
        self.epoch = epoch
        self.epoch_zk_version = epoch_zk_version
        self.active = True
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._full = False
        self._topics: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._rebalance_task: asyncio.Task[None] | None = None
        self.passes = 0  # completed reconcile passes (tests, diagnostics)
        # brokers in controlled shutdown (children of paths.CONTROLLED_SHUTDOWN), read with a
        # watch at every pass; at most one watch pending
        self.shutting_down: set[int] = set()
        self._cs_watch_pending = False
        self._cs_dirty = True
        self._cs_ids: set[int] = set()  # the children as last read
        # replicas offline after a log dir failure: {child name: (broker, partitions)}
        # (children are immutable: each is read once), watch as for controlled shutdown
        self._offline_nodes: dict[str, tuple[int, frozenset[TopicPartition]]] = {}
        self._or_watch_pending = False
        self._or_dirty = True
        self.reassignments = Reassignments(self)  # KIP-455 (coord/controller/reassignment.py)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.cluster.add_listener(self._on_event)
        self._full = True
        self._wake.set()
        self._task = asyncio.create_task(
            self._run(), name=f"controller-{self.cluster.broker_id}-e{self.epoch}"
        )
        if self.cluster.auto_leader_rebalance_enable:
            self._rebalance_task = asyncio.create_task(
                self._rebalance_loop(),
                name=f"leader-rebalance-{self.cluster.broker_id}-e{self.epoch}",
            )
        log.info(
            "broker %d: controller duties start (epoch %d)", self.cluster.broker_id, self.epoch
        )

    def deactivate(self) -> None:
        """Stop at once (from a synchronous callback); ``stop`` completes the shutdown."""
        if self.active:
            log.info(
                "broker %d: controller duties stop (epoch %d)", self.cluster.broker_id, self.epoch
            )
        self.active = False
        self.cluster.remove_listener(self._on_event)
        for task in (self._task, self._rebalance_task):
            if task is not None and not task.done():
                task.cancel()

    async def stop(self) -> None:
        self.deactivate()
        tasks = [self._task, self._rebalance_task]
        self._task = self._rebalance_task = None
        for task in tasks:
            if task is not None and task is not asyncio.current_task():
                try:
                    await task
                except asyncio.CancelledError:
                    pass

    def wake(self) -> None:
        """Run a pass soon (a watch of a duty's own fired)."""
        if self.active:
            self._wake.set()

    def _fence(self, why: str) -> None:
        if self.active:
            log.warning(
                "broker %d: controller epoch %d is fenced (%s); stepping down",
                self.cluster.broker_id,
                self.epoch,
                why,
            )
        self.active = False
        self.cluster.remove_listener(self._on_event)
        self.cluster._mark(("controller",))  # re-read /controller: who is it now?

    # ------------------------------------------------------------------ triggers

    def _on_event(self, event: ClusterEvent) -> None:
        if not self.active:
            return
        if event.kind in ("BROKERS_CHANGED", "BROKER_CONFIG_CHANGED"):
            # (a dynamic unclean.leader.election.enable=true elects offline partitions now,
            # as Kafka's enableDefaultUncleanLeaderElection)
            self._full = True
        elif event.kind == "TOPIC_CHANGED" and event.topic is not None:
            self._topics.add(event.topic)
        else:
            return
        self._wake.set()

    async def _run(self) -> None:
        backoff = 0.05
        while self.active:
            await self._wake.wait()
            self._wake.clear()
            full, topics = self._full, self._topics
            self._full, self._topics = False, set()
            names = list(self.cluster.topics) if full else sorted(topics)
            try:
                await self.reconcile(names)
                backoff = 0.05
                self.passes += 1
            except ControllerFencedError:
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if isinstance(e, ConnectionLossError):
                    log.info("controller pass deferred: %s", e)
                else:
                    log.exception("controller pass failed")
                self._full = self._full or full
                self._topics |= topics
                self._wake.set()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    # ------------------------------------------------------------------ passes

    async def reconcile(self, topics: Iterable[str]) -> None:
        """One level-triggered pass over ``topics`` (see the module docstring)."""
        topics = list(topics)
        async with self._lock:
            self._check_active()
            live = await self._live_brokers()
            shutting = await self._read_shutting_down(live)
            offline = await self._read_offline_replicas(live)
            candidates: list[TopicPartition] = []
            for name in topics:
                info = self.cluster.topics.get(name)
                if info is None:
                    continue
                unclean = self._unclean(name)
                for p, ps in sorted(info.partitions.items()):
                    cached = StoredState(
                        ps.leader, ps.leader_epoch, ps.isr, ps.controller_epoch, ps.zk_version
                    )
                    here = live - offline.get((name, p), set())
                    if decide_for_live_set(cached, ps.replicas, here, unclean, shutting):
                        candidates.append((name, p))
            if candidates:

                def auto(tp: TopicPartition, st: StoredState, replicas: list[int], live: set[int]):
                    here = live - offline.get(tp, set())
                    d = decide_for_live_set(st, replicas, here, self._unclean(tp[0]), shutting)
                    return (ErrorCode.NONE, None) if d is None else d

                await self._run_decisions(candidates, auto, live, {})
            await self.reassignments.on_pass(topics, live - shutting)

    async def alter_partition_reassignments(
        self, requests: dict[TopicPartition, list[int] | None]
    ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        """AlterPartitionReassignments (coord/controller/reassignment.py): per partition (error code,
        message).  Raises KafkaError(NOT_CONTROLLER) when this controller is not active, or
        REQUEST_TIMED_OUT when the store cannot be reached."""
        async with self._lock:
            if not self.active:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, "this broker is not the controller")
            try:
                live = await self._live_brokers()
                live -= await self._read_shutting_down(live)
                return await self.reassignments.alter(requests, live)
            except ControllerFencedError as e:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, "the controller was fenced") from e
            except ConnectionLossError as e:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, str(e)) from e

    def list_partition_reassignments(
        self, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, ReplicaAssignment]:
        """ListPartitionReassignments: the partitions being reassigned (of ``partitions``, or
        all).  Raises KafkaError(NOT_CONTROLLER) when this controller is not active."""
        if not self.active:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "this broker is not the controller")
        return self.reassignments.listing(partitions)

    async def elect_leaders(
        self, partitions: Iterable[TopicPartition], *, preferred: bool = True
    ) -> dict[TopicPartition, ElectionResult]:
        """Kafka's ElectLeaders: ``preferred=True`` is ElectionType PREFERRED (0), False is
        UNCLEAN (1).  Returns (error code, message) per partition: NONE after a successful
        election, ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE,
        ELIGIBLE_LEADERS_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION, NOT_CONTROLLER (fenced
        meanwhile).  Raises KafkaError(NOT_CONTROLLER) when this controller is not active."""
        wanted = list(dict.fromkeys(partitions))
        results: dict[TopicPartition, ElectionResult] = {}
        known: list[TopicPartition] = []
        for tp in wanted:
            info = self.cluster.topics.get(tp[0])
            if info is None or tp[1] not in info.partitions:
                results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
            else:
                known.append(tp)
        decide: Decide
        if preferred:

            def decide(tp, st, replicas, live):
                return decide_preferred(st, replicas, live)
        else:

            def decide(tp, st, replicas, live):
                return decide_unclean(st, replicas, live)

        async with self._lock:
            if not self.active:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, "this broker is not the controller")
            try:
                live = await self._live_brokers()
                live -= await self._read_shutting_down(live)  # never elected
                await self._run_decisions(known, decide, live, results)
            except ControllerFencedError:
                for tp in known:
                    results.setdefault(tp, (ErrorCode.NOT_CONTROLLER, "the controller was fenced"))
            except ConnectionLossError as e:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, str(e)) from e
        return {tp: results[tp] for tp in wanted}

    # ------------------------------------------------------------------ preferred leaders

    async def _rebalance_loop(self) -> None:
        """auto.leader.rebalance.enable: a first check 5 s after becoming controller (as
        Kafka's onControllerFailover schedules it), then every
        leader.imbalance.check.interval.seconds."""
        delay = min(5.0, float(self.cluster.leader_imbalance_check_interval_s))
        while self.active:
            await asyncio.sleep(delay)
            delay = float(self.cluster.leader_imbalance_check_interval_s)
            try:
                await self.rebalance_preferred_leaders()
            except ControllerFencedError:
                return
            except asyncio.CancelledError:
                raise
            except ConnectionLossError as e:
                log.info("leader imbalance check deferred: %s", e)
            except Exception:
                log.exception("leader imbalance check failed")

    async def rebalance_preferred_leaders(self) -> dict[TopicPartition, ElectionResult]:
        """Kafka's checkAndTriggerAutoLeaderRebalance: for each broker whose leader imbalance
        ratio (its preferred partitions led elsewhere / its preferred partitions) exceeds
        leader.imbalance.per.broker.percentage, a preferred election of those partitions
        (the broker leads each again when it is in the ISR).  Returns the election results."""
        if any(
            st.being_reassigned
            for info in self.cluster.topics.values()
            for st in info.partitions.values()
        ):
            # Kafka: "only if ... there are no partitions being reassigned currently"
            log.info(
                "controller (epoch %d): leader imbalance check skipped: reassignments in progress",
                self.epoch,
            )
            return {}
        live = await self._live_brokers()
        eligible = live - await self._read_shutting_down(live)
        assignments = [
            ((name, p), ps.replicas, ps.leader)
            for name, info in sorted(self.cluster.topics.items())
            for p, ps in sorted(info.partitions.items())
        ]
        over = imbalanced_partitions(
            assignments, self.cluster.leader_imbalance_per_broker_percentage, eligible
        )
        wanted: list[TopicPartition] = []
        for broker, (ratio, tps) in over.items():
            log.info(
                "controller (epoch %d): leader imbalance ratio for broker %d is %.3f; "
                "preferred election of %d partitions",
                self.epoch,
                broker,
                ratio,
                len(tps),
            )
            wanted += tps
        if not wanted:
            return {}
        results: dict[TopicPartition, ElectionResult] = {}

        def decide(tp, st, replicas, live):
            return decide_preferred(st, replicas, live - self.shutting_down)

        async with self._lock:
            self._check_active()
            await self._run_decisions(wanted, decide, live, results)
        return results

    # ------------------------------------------------------------------ the write machinery

    async def _read_shutting_down(self, live: set[int]) -> set[int]:
        """The live brokers in controlled shutdown, read from the store; sets one watch on the
        children, whose firing starts a full pass.  While that watch is pending nothing changed
        there, and the last read is answered without a store round trip."""
        if self._cs_watch_pending and not self._cs_dirty:
            self.shutting_down = self._cs_ids & live
            return set(self.shutting_down)
        watch = None
        if not self._cs_watch_pending:
            self._cs_watch_pending = True
            watch = self._on_shutting_down_changed
        try:
            children = await self.store.get_children(paths.CONTROLLED_SHUTDOWN, watch=watch)
        except BaseException as e:
            if watch is not None:
                self._cs_watch_pending = False  # no watch was set
            if not isinstance(e, NoNodeError):
                raise
            children = []
        self._cs_dirty = False
        ids = set()
        for child in children:
            try:
                ids.add(int(child))
            except ValueError:
                continue
        self._cs_ids = ids
        shutting = ids & live
        for b in sorted(shutting - self.shutting_down):
            log.info("controller (epoch %d): broker %d is in controlled shutdown", self.epoch, b)
        self.shutting_down = shutting
        return shutting

    async def _read_offline_replicas(self, live: set[int]) -> dict[TopicPartition, set[int]]:
        """{partition: live brokers whose replica of it is offline (log dir failure)}."""
        if not (self._or_watch_pending and not self._or_dirty):
            watch = None
            if not self._or_watch_pending:
                self._or_watch_pending = True
                watch = self._on_offline_changed
            try:
                children = await self.store.get_children(paths.OFFLINE_REPLICAS, watch=watch)
            except BaseException as e:
                if watch is not None:
                    self._or_watch_pending = False
                if not isinstance(e, NoNodeError):
                    raise
                children = []
            self._or_dirty = False
            nodes = {}
            for child in children:
                known = self._offline_nodes.get(child)
                if known is None:
                    try:
                        data, _ = await self.store.get(f"{paths.OFFLINE_REPLICAS}/{child}")
                        doc = json.loads(data)
                        known = (
                            int(doc["broker"]),
                            frozenset((str(t), int(p)) for t, p in doc["partitions"]),
                        )
                    except NoNodeError:
                        continue
                    except (ValueError, KeyError, TypeError):
                        log.warning("unreadable offline replicas node %s", child)
                        continue
                    log.info(
                        "controller (epoch %d): broker %d lost %d replica(s) to a log dir failure",
                        self.epoch,
                        known[0],
                        len(known[1]),
                    )
                nodes[child] = known
            self._offline_nodes = nodes
        out: dict[TopicPartition, set[int]] = {}
        for broker, tps in self._offline_nodes.values():
            if broker in live:
                for tp in tps:
                    out.setdefault(tp, set()).add(broker)
        return out

    def _on_offline_changed(self, event: object) -> None:
        self._or_watch_pending = False
        self._or_dirty = True
        if self.active:
            self._full = True
            self._wake.set()

    def _on_shutting_down_changed(self, event: object) -> None:
        self._cs_watch_pending = False
        self._cs_dirty = True
        if self.active:
            self._full = True
            self._wake.set()

    def _check_active(self) -> None:
        if not self.active:
            raise ControllerFencedError(f"controller epoch {self.epoch} is not active")

    def _unclean(self, topic: str) -> bool:
        info = self.cluster.topics.get(topic)
        return is_unclean_allowed(
            info.configs if info else {}, self.cluster.unclean_leader_election_enable
        )

    async def _live_brokers(self) -> set[int]:
        live: set[int] = set()
        for child in await self.store.get_children(paths.BROKER_IDS):
            try:
                live.add(int(child))
            except ValueError:
                continue
        return live

    async def _read_state(self, tp: TopicPartition) -> StoredState | None:
        try:
            data, stat = await self.store.get(paths.partition_state(*tp))
        except NoNodeError:
            return None
        try:
            st = paths.decode_partition_state(data)
        except (ValueError, KeyError, TypeError):
            log.warning("unreadable partition state %s-%d: %r", tp[0], tp[1], data)
            return None
        return StoredState(
            st["leader"], st["leader_epoch"], st["isr"], st["controller_epoch"], stat.version
        )

    async def _read_states(
        self, tps: list[TopicPartition]
    ) -> dict[TopicPartition, StoredState | None]:
        out: dict[TopicPartition, StoredState | None] = {}
        for i in range(0, len(tps), READ_CONCURRENCY):
            chunk = tps[i : i + READ_CONCURRENCY]
            states = await asyncio.gather(*(self._read_state(tp) for tp in chunk))
            out.update(zip(chunk, states, strict=True))
        return out

    async def _run_decisions(
        self,
        tps: list[TopicPartition],
        decide: Decide,
        live: set[int],
        results: dict[TopicPartition, ElectionResult],
    ) -> None:
        """Read, decide, write with CAS in fenced multis; re-read and decide again what lost a
        compare-and-set, while active.  Fills ``results`` as partitions are settled (so a
        caller still has them if this raises ControllerFencedError)."""
        pending = list(tps)
        attempt = 0
        while pending:
            self._check_active()
            if attempt:
                await asyncio.sleep(min(0.01 * 2**attempt, 1.0))
                live = await self._live_brokers()
            attempt += 1
            reads = await self._read_states(pending)
            writes: list[tuple[TopicPartition, StoredState, list[int], Decision]] = []
            for tp in pending:
                st = reads[tp]
                info = self.cluster.topics.get(tp[0])
                if st is None or info is None or tp[1] not in info.partitions:
                    results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
                    continue
                if st.controller_epoch > self.epoch:
                    self._fence(f"{tp[0]}-{tp[1]} carries controller epoch {st.controller_epoch}")
                    raise ControllerFencedError(f"newer controller epoch {st.controller_epoch}")
                replicas = info.partitions[tp[1]].replicas
                outcome = decide(tp, st, replicas, live)
                if isinstance(outcome, Decision):
                    writes.append((tp, st, replicas, outcome))
                else:
                    results[tp] = outcome
            pending = []
            step = MAX_OPS_PER_MULTI - 1
            for i in range(0, len(writes), step):
                chunk = writes[i : i + step]
                self._check_active()
                ops: list[Op] = [Check(paths.CONTROLLER_EPOCH, self.epoch_zk_version)]
                ops += [
                    SetData(
                        paths.partition_state(*tp),
                        paths.encode_partition_state(d.leader, d.leader_epoch, d.isr, self.epoch),
                        st.zk_version,
                    )
                    for tp, st, _, d in chunk
                ]
                try:
                    await self.store.multi(ops)
                except ConnectionLossError as e:
                    log.info("controller write deferred (%s); re-reading", e)
                    pending += [tp for tp, *_ in chunk]
                    continue
                except StoreError as e:
                    if e.op_index == 0:
                        self._fence(f"{type(e).__name__} on {paths.CONTROLLER_EPOCH}")
                        raise ControllerFencedError(str(e)) from e
                    if isinstance(e, (BadVersionError, NoNodeError)):
                        pending += [tp for tp, *_ in chunk]  # someone wrote meanwhile: redo
                        continue
                    raise
                for tp, st, replicas, d in chunk:
                    self._applied(tp, st, replicas, d)
                    results[tp] = (ErrorCode.NONE, None)

    def _applied(
        self, tp: TopicPartition, st: StoredState, replicas: list[int], d: Decision
    ) -> None:
        from pybroker.coord.metadata.cluster import PartitionState

        log.info(
            "controller (epoch %d): %s-%d %s: leader %d -> %d, leader_epoch %d, isr %s -> %s",
            self.epoch,
            tp[0],
            tp[1],
            d.reason,
            st.leader,
            d.leader,
            d.leader_epoch,
            st.isr,
            d.isr,
        )
        self.cluster._set_partition_state(
            tp[0],
            tp[1],
            PartitionState(
                d.leader, d.leader_epoch, list(replicas), list(d.isr), self.epoch, st.zk_version + 1
            ),
        )
