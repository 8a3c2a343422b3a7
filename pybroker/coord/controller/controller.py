"""The controller's partition-leadership duties (Kafka ZooKeeper mode, see docs/replication.md),
while this broker holds ``/controller``: leaders for partitions of lost and returning brokers,
ElectLeaders, log dir failures, reassignments (KIP-455) and preferred leaders.  Level-triggered:
every pass looks at each candidate partition against the live set read from the store and
fixes what is wrong.  One writer: writes are compare-and-set behind the controller epoch
(``ControllerFence``), so a superseded controller writes nothing.  It reads and writes the
cluster through ``context.ClusterView`` only.  Duties and design: docs/internals.md
("pybroker/coord/controller/controller.py").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from pybroker.coord.controller.channel import StatePushes
from pybroker.coord.controller.context import ClusterView, ControllerFence, ControllerFencedError
from pybroker.coord.controller.election import (
    Decision,
    ElectionResult,
    StoredState,
    decide_for_live_set,
    decide_preferred,
    decide_unclean,
    imbalanced_partitions,
    is_unclean_allowed,
)
from pybroker.coord.controller.live_brokers import LiveBrokers
from pybroker.coord.controller.reassignment import Reassignments, ReplicaAssignment
from pybroker.coord.metadata import paths
from pybroker.coord.metadata.model import ClusterEvent, PartitionState, TopicPartition
from pybroker.coord.metadata.store import (
    BadVersionError,
    ConnectionLossError,
    NoNodeError,
    Op,
    SetData,
)
from pybroker.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

# the Check on /controller_epoch, state writes and a push to each other live broker
MAX_OPS_PER_MULTI = 500
MULTIS_IN_FLIGHT = 4  # pipelined (~100 KB each, far below ZooKeeper's 1 MB jute.maxbuffer)
# ISR-only changes (dead followers leave), each its own fenced multi, pipelined: this many
# per batch (Controller._chunks, _write_each)
MAX_ISR_OPS_PER_WRITE = 500

Decide = Callable[[TopicPartition, StoredState, list[int], set[int]], "Decision | ElectionResult"]
# one state write: the partition, its state as read, its replicas, what to write
_Write = tuple[TopicPartition, StoredState, list[int], Decision]


class Controller:
    def __init__(self, cluster: ClusterView, epoch: int, epoch_zk_version: int) -> None:
        """``epoch``: our controller epoch; ``epoch_zk_version``: the znode version of
        /controller_epoch right after we wrote that epoch (the fencing check)."""
        self.cluster = cluster
        self.store = cluster.store
        self.epoch = epoch
        self.fence = ControllerFence(cluster.broker_id, epoch, epoch_zk_version, self._fenced)
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._full = False
        self._topics: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._rebalance_task: asyncio.Task[None] | None = None
        self.passes = 0  # completed reconcile passes (tests, diagnostics)
        self.brokers = LiveBrokers(self.store, epoch, self._full_pass_soon)
        # KIP-455 (coord/controller/reassignment.py)
        self.reassignments = Reassignments(cluster, self.fence, self.wake)
        # what it writes, pushed to the other live brokers (Kafka's LeaderAndIsr/UpdateMetadata)
        self.pushes = StatePushes(self.store, cluster.broker_id, epoch)

    @property
    def active(self) -> bool:
        """False once stopped or fenced: this controller writes nothing more."""
        return self.fence.active

    @property
    def shutting_down(self) -> set[int]:
        """The live brokers in controlled shutdown, as of the last pass."""
        return self.brokers.shutting_down

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
        self.fence.active = False
        self.cluster.remove_listener(self._on_event)
        self.pushes.stop()
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

    def _fenced(self) -> None:
        """The fence found our epoch superseded: no more passes, and the Cluster reads
        /controller again (who is it now?)."""
        self.cluster.remove_listener(self._on_event)
        self.cluster.recheck_controller()

    def _full_pass_soon(self) -> None:
        """A watch of the broker states fired: a full pass."""
        if self.active:
            self._full = True
            self._wake.set()

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
            self.fence.check_active()
            live = await self.brokers.read_live()
            shutting = await self.brokers.read_shutting_down(live)
            offline = await self.brokers.read_offline_replicas(live)
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
                log.info(
                    "controller (epoch %d): %d partitions to change (live brokers %s)",
                    self.epoch,
                    len(candidates),
                    sorted(live),
                )

                def auto(tp: TopicPartition, st: StoredState, replicas: list[int], live: set[int]):
                    here = live - offline.get(tp, set())
                    d = decide_for_live_set(st, replicas, here, self._unclean(tp[0]), shutting)
                    return (ErrorCode.NONE, None) if d is None else d

                await self._run_decisions(candidates, auto, live, {}, from_cache=True)
            await self.reassignments.on_pass(topics, live - shutting)

    async def alter_partition_reassignments(
        self, requests: dict[TopicPartition, list[int] | None]
    ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        """AlterPartitionReassignments (reassignment.py): per partition (error code,
        message).  Raises KafkaError(NOT_CONTROLLER) when this controller is not active, or
        REQUEST_TIMED_OUT when the store cannot be reached."""
        async with self._lock:
            if not self.active:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, "this broker is not the controller")
            try:
                live = await self.brokers.read_live()
                live -= await self.brokers.read_shutting_down(live)
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
        offline: dict[TopicPartition, set[int]] = {}
        decide: Decide
        if preferred:

            def decide(tp, st, replicas, live):
                return decide_preferred(st, replicas, live - offline.get(tp, set()))
        else:

            def decide(tp, st, replicas, live):
                return decide_unclean(st, replicas, live - offline.get(tp, set()))

        async with self._lock:
            if not self.active:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, "this broker is not the controller")
            try:
                live = await self.brokers.read_live()
                live -= await self.brokers.read_shutting_down(live)  # never elected
                # (Kafka's isReplicaOnline: a replica on a failed log dir is never elected)
                offline.update(await self.brokers.read_offline_replicas(live))
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
        live = await self.brokers.read_live()
        eligible = live - await self.brokers.read_shutting_down(live)
        offline = await self.brokers.read_offline_replicas(live)
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
            # Kafka's canPreferredReplicaBeLeader: never a replica on a failed log dir
            tps = [tp for tp in tps if broker not in offline.get(tp, ())]
            if not tps:
                continue
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
            here = live - self.shutting_down - offline.get(tp, set())
            return decide_preferred(st, replicas, here)

        async with self._lock:
            self.fence.check_active()
            await self._run_decisions(wanted, decide, live, results)
        return results

    # ------------------------------------------------------------------ the write machinery

    def _unclean(self, topic: str) -> bool:
        info = self.cluster.topics.get(topic)
        return is_unclean_allowed(
            info.configs if info else {}, self.cluster.unclean_leader_election_enable
        )

    def _cached_states(self, tps: list[TopicPartition]) -> dict[TopicPartition, StoredState | None]:
        """The states of ``tps`` as the cache holds them, with their znode versions (None
        where the cache has none, or knows its state is older than the store's: its watch
        fired and the read-back is pending; those are read, together: at 100,000 replicas a
        controlled shutdown right after the restart's ISR expansions lost 15,435 of its
        writes' compare-and-sets on such states, and its elections took 50 s)."""
        out: dict[TopicPartition, StoredState | None] = {}
        for tp in tps:
            info = self.cluster.topics.get(tp[0])
            ps = info.partitions.get(tp[1]) if info is not None else None
            if ps is None or ps.zk_version < 0 or self.cluster.awaiting_read_back(*tp):
                out[tp] = None
            else:
                out[tp] = StoredState(
                    ps.leader, ps.leader_epoch, list(ps.isr), ps.controller_epoch, ps.zk_version
                )
        return out

    async def _read_states(
        self, tps: list[TopicPartition]
    ) -> dict[TopicPartition, StoredState | None]:
        """The state znodes of ``tps``, read together (store.get_many: pipelined)."""
        out: dict[TopicPartition, StoredState | None] = {}
        reads = await self.store.get_many([paths.partition_state(*tp) for tp in tps])
        for tp, got in zip(tps, reads, strict=True):
            if got is None:
                out[tp] = None
                continue
            data, stat = got
            try:
                st = paths.decode_partition_state(data)
            except (ValueError, KeyError, TypeError):
                log.warning("unreadable partition state %s-%d: %r", tp[0], tp[1], data)
                out[tp] = None
                continue
            out[tp] = StoredState(
                st["leader"], st["leader_epoch"], st["isr"], st["controller_epoch"], stat.version
            )
        return out

    async def _run_decisions(
        self,
        tps: list[TopicPartition],
        decide: Decide,
        live: set[int],
        results: dict[TopicPartition, ElectionResult],
        *,
        from_cache: bool = False,
    ) -> None:
        """Read the states (``from_cache``: the cached states and znode versions for the
        first round, as for a pass whose candidates were chosen on them: a stale one loses
        its CAS; ElectLeaders answers without a write, so it reads), decide, write with CAS
        in fenced multis; read and decide again what lost a compare-and-set (at once:
        someone else wrote it, or the cache lagged) or could not be written (a lost
        connection: after a backoff), while active.  Leader changes are written before
        ISR-only changes (clients wait for the former; the latter race with the leaders' own
        ISR shrinks).  Fills ``results`` as partitions are settled (so a caller still has
        them if this raises ControllerFencedError)."""
        pending = list(tps)
        backoff = 0.0
        redo = 0
        first = from_cache
        started = asyncio.get_running_loop().time()
        written = conflicts = multis = 0
        while pending:
            self.fence.check_active()
            if backoff:
                await asyncio.sleep(backoff)
            if redo:  # (a broker back or gone meanwhile: decided on the live set as it is now)
                live = await self.brokers.read_live()
            if first:  # the cached states (and versions); a stale one loses its CAS
                reads = self._cached_states(pending)
                unknown = [tp for tp, st in reads.items() if st is None]
                if unknown:
                    reads.update(await self._read_states(unknown))
                first = False
            else:
                reads = await self._read_states(pending)
            writes: list[_Write] = []
            for tp in pending:
                st = reads[tp]
                info = self.cluster.topics.get(tp[0])
                if st is None or info is None or tp[1] not in info.partitions:
                    results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
                    continue
                self.fence.check_read(st.controller_epoch, f"{tp[0]}-{tp[1]}")
                replicas = info.partitions[tp[1]].replicas
                outcome = decide(tp, st, replicas, live)
                if isinstance(outcome, Decision):
                    writes.append((tp, st, replicas, outcome))
                else:
                    results[tp] = outcome
            pending, deferred = [], False
            sem = asyncio.Semaphore(MULTIS_IN_FLIGHT)

            async def send(chunk: list[_Write], targets: list[int], sem: asyncio.Semaphore = sem):
                async with sem:
                    try:
                        if chunk[0][3].leader != chunk[0][1].leader:
                            return chunk, await self._write_chunk(chunk, targets)
                        return chunk, await self._write_each(chunk)
                    except ConnectionLossError as e:
                        return chunk, e

            # each multi is applied to the cache as soon as it lands (an election's multi
            # never waits for an ISR-only multi that is redoing lost compare-and-sets)
            # the brokers an election's multi pushes its states to (in the multi itself)
            targets = await self.pushes.watching(live | self.shutting_down)
            chunks = self._chunks(writes, len(targets))
            tasks = [asyncio.ensure_future(send(c, targets)) for c in chunks]
            try:
                for landed in asyncio.as_completed(tasks):
                    chunk, outcome = await landed
                    if isinstance(outcome, ConnectionLossError):
                        log.info("controller write deferred (%s); re-reading", outcome)
                        pending += [tp for tp, *_ in chunk]
                        deferred = True
                        continue
                    applied, conflicted, sent = outcome
                    multis += sent
                    written += len(applied)
                    conflicts += len(conflicted)
                    # (an election's multi pushed its states itself; ISR-only ones after)
                    pushed = bool(applied) and applied[0][3].leader != applied[0][1].leader
                    self._applied(applied, [] if pushed else targets)
                    for tp, *_ in applied:
                        results[tp] = (ErrorCode.NONE, None)
                    pending += [tp for tp, *_ in conflicted]  # someone wrote meanwhile
            finally:
                for t in tasks:
                    t.cancel()
            # a lost connection, or the same partitions losing again: back off; a first
            # conflict is redone at once
            redo += 1 if pending else 0
            backoff = min(0.01 * 2**redo, 1.0) if deferred or redo > 1 else 0.0
        if written or conflicts:
            log.info(
                "controller (epoch %d): %d partition states written in %d multis "
                "(%d lost a compare-and-set and were redone) in %.0f ms",
                self.epoch,
                written,
                multis,
                conflicts,
                (asyncio.get_running_loop().time() - started) * 1000,
            )

    @staticmethod
    def _chunks(writes: list[_Write], pushes: int = 0) -> list[list[_Write]]:
        """Leader changes in multis of up to MAX_OPS_PER_MULTI - 1 - ``pushes`` states (the
        epoch check, the states, a push to each of ``pushes`` brokers), then ISR-only
        changes in batches of up to MAX_ISR_OPS_PER_WRITE, each partition its own multi
        (these race with the leaders' own ISR writes: a lost compare-and-set in a shared
        multi sent all of it again, one conflict per round trip: at 100,000 replicas a
        pass removing a dead broker from 22,000 ISRs ran for minutes)."""
        elections = [w for w in writes if w[3].leader != w[1].leader]
        isr_only = [w for w in writes if w[3].leader == w[1].leader]
        out: list[list[_Write]] = []
        per_multi = max(1, MAX_OPS_PER_MULTI - 1 - pushes)
        for ws, step in ((elections, per_multi), (isr_only, MAX_ISR_OPS_PER_WRITE)):
            out += [ws[i : i + step] for i in range(0, len(ws), step)]
        return out

    async def _write_each(self, chunk: list[_Write]) -> tuple[list[_Write], list[_Write], int]:
        """ISR-only changes (they race with the leaders' own ISR writes): each partition in
        its own fenced multi, all pipelined (as Kafka's controller writes each state behind
        its epoch check), so a lost compare-and-set fails that partition alone.  Returns
        (applied, conflicted, requests sent).  Raises ConnectionLossError (the first one
        seen: the batch's outcome is then partly unknown, and all of it is read again) or
        ControllerFencedError."""
        out = await self.fence.multi_many(
            self.store,
            [
                [
                    SetData(
                        paths.partition_state(*tp),
                        paths.encode_partition_state(d.leader, d.leader_epoch, d.isr, self.epoch),
                        st.zk_version,
                    )
                ]
                for tp, st, _, d in chunk
            ],
        )
        applied: list[_Write] = []
        conflicted: list[_Write] = []
        for w, e in zip(chunk, out, strict=True):
            if e is None:
                applied.append(w)
            elif isinstance(e, (BadVersionError, NoNodeError)):
                conflicted.append(w)
            else:
                raise e
        return applied, conflicted, len(chunk)

    async def _write_chunk(
        self, chunk: list[_Write], targets: list[int]
    ) -> tuple[list[_Write], list[_Write], int]:
        """``chunk`` in one fenced multi, with its push to ``targets`` (channel.py); an op
        that loses its compare-and-set (or finds its node gone) fails the whole multi, so it
        alone is left out and the rest sent again at once (a push whose parent is missing:
        the rest without the pushes; after a first conflict, those of the rest whose version
        moved too: a lagging cache cost a round trip per stale state, and at 100,000
        replicas a controlled shutdown right after a restart's ISR expansions got no
        election written for 70 s).  Returns (applied, conflicted, multis sent).  Raises
        ConnectionLossError or ControllerFencedError."""
        conflicted: list[_Write] = []
        sent = 0
        rechecked = False
        while chunk:
            ops: list[Op] = [
                SetData(
                    paths.partition_state(*tp),
                    paths.encode_partition_state(d.leader, d.leader_epoch, d.isr, self.epoch),
                    st.zk_version,
                )
                for tp, st, _, d in chunk
            ]
            ops += self.pushes.creates(self._pushed_states(chunk), targets)
            sent += 1
            try:
                await self.fence.multi(self.store, ops)
            except (BadVersionError, NoNodeError) as e:
                k = -1 if e.op_index is None else e.op_index - 1  # (op 0 is the epoch check)
                if k >= len(chunk) and targets and isinstance(e, NoNodeError):
                    self.pushes.forget()
                    targets = []
                    continue
                if not 0 <= k < len(chunk):
                    return [], conflicted + chunk, sent
                conflicted.append(chunk[k])
                chunk = chunk[:k] + chunk[k + 1 :]
                if chunk and not rechecked:
                    # a stale cache: ZooKeeper names one failing op per multi, so the rest's
                    # versions are read once and those that moved set aside too
                    rechecked = True
                    moved = await self._moved(chunk)
                    conflicted += [w for w in chunk if w[0] in moved]
                    chunk = [w for w in chunk if w[0] not in moved]
                continue
            return chunk, conflicted, sent
        return [], conflicted, sent

    async def _moved(self, chunk: list[_Write]) -> set[TopicPartition]:
        """The partitions of ``chunk`` whose state znode is no longer at the version the
        write expects (read together)."""
        tps = [tp for tp, *_ in chunk]
        got = await self.store.get_many([paths.partition_state(*tp) for tp in tps])
        return {
            tp
            for tp, (_, st, _, _), r in zip(tps, chunk, got, strict=True)
            if r is None or r[1].version != st.zk_version
        }

    def _pushed_states(self, chunk: list[_Write]) -> list[paths.PushedState]:
        """``chunk``'s states as pushed (channel.py): each with its topic id and the state
        znode's version once written."""
        out: list[paths.PushedState] = []
        for tp, st, _, d in chunk:
            info = self.cluster.topics.get(tp[0])
            if info is not None:
                zk_version = st.zk_version + 1
                topic_id = str(info.topic_id)
                out.append(
                    (tp[0], topic_id, tp[1], d.leader, d.leader_epoch, list(d.isr), zk_version)
                )
        return out

    def _applied(self, chunk: list[_Write], push_to: list[int]) -> None:
        """What ``chunk`` wrote: into our cache, and pushed to the brokers ``push_to``."""
        by_topic: dict[str, dict[int, PartitionState]] = {}
        for tp, st, replicas, d in chunk:
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
            by_topic.setdefault(tp[0], {})[tp[1]] = PartitionState(
                d.leader, d.leader_epoch, list(replicas), list(d.isr), self.epoch, st.zk_version + 1
            )
        for name, states in by_topic.items():
            self.cluster.put_partition_states(name, states)
        if push_to:
            self.pushes.push(self._pushed_states(chunk), push_to)
