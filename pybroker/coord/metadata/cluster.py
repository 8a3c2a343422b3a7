"""Cluster: this broker's membership of the cluster (registration, controller election, the
session and its lease) over the metadata cache (metadata/cache.py), with the admin writes
(metadata/admin.py), the leader's ISR write (metadata/isr.py) and producer-id blocks
(metadata/producer_ids.py) behind it; the same code on both stores, through the MetadataStore
interface only.  Start: Kafka's persistent paths, the cluster id, the ephemeral registration,
the controller election (``/controller`` created and ``/controller_epoch`` bumped in one
multi), the cache.  ``session_ok`` and the session lease (``lease_ok``) keep a broker whose
session may have expired from answering as a leader.  Start, controller and lease:
docs/internals.md ("pybroker/coord/metadata/cluster.py").
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from typing import Any, Protocol

from pybroker.clock import SYSTEM_CLOCK, Clock
from pybroker.coord.metadata import isr, paths
from pybroker.coord.metadata.admin import ClusterAdmin
from pybroker.coord.metadata.cache import MetadataCache
from pybroker.coord.metadata.model import (
    BrokerIdInUseError,
    ClusterEvent,
    PartitionState,
    TopicInfo,
    TopicPartition,
)
from pybroker.coord.metadata.producer_ids import ProducerIdManager
from pybroker.coord.metadata.pushed_states import PushedStates
from pybroker.coord.metadata.store import (
    CONNECTED,
    LOST,
    SUSPENDED,
    BadVersionError,
    ConnectionLossError,
    Create,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    Op,
    SetData,
    StoreError,
)
from pybroker.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

#: (error code, message) for one partition of an ElectLeaders / AlterPartitionReassignments
ElectionResult = tuple[ErrorCode, str | None]


class ControllerRole(Protocol):
    """What the Cluster needs of the controller it runs while it holds /controller (Kafka's
    onControllerFailover / onControllerResignation), and the controller-only APIs it serves
    (coord/controller/controller.py's Controller)."""

    @property
    def active(self) -> bool: ...

    def start(self) -> None: ...

    def deactivate(self) -> None: ...

    async def stop(self) -> None: ...

    async def elect_leaders(
        self, partitions: list[TopicPartition], *, preferred: bool = True
    ) -> dict[TopicPartition, ElectionResult]: ...

    async def alter_partition_reassignments(
        self, requests: dict[TopicPartition, list[int] | None]
    ) -> dict[TopicPartition, ElectionResult]: ...

    def list_partition_reassignments(
        self, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, Any]: ...


#: (this Cluster, controller epoch, /controller_epoch's znode version when we won) -> controller
ControllerFactory = Callable[["Cluster", int, int], ControllerRole]


class Cluster(MetadataCache):
    def __init__(
        self,
        store: MetadataStore,
        broker_id: int,
        endpoints: list[tuple[str, str, int]],
        clock: Clock = SYSTEM_CLOCK,
        *,
        rack: str | None = None,
        rng: random.Random | None = None,
        unclean_leader_election_enable: bool = False,
        registration_wait_ms: int = 0,
        max_broker_partitions: int = 2**31 - 1,
        stall_limit_ms: float = 0,
        loop_blocked_ms: Callable[[], float] | None = None,
        auto_leader_rebalance_enable: bool = False,
        leader_imbalance_check_interval_s: float = 300.0,
        leader_imbalance_per_broker_percentage: int = 10,
        controller: ControllerFactory | None = None,
    ) -> None:
        """``controller``: what runs the controller's duties while this broker holds
        /controller (the broker passes Controller); None: none (a cache-only Cluster)."""
        super().__init__(store, broker_id, clock)
        self._controller_factory = controller
        # the controller's preferred-leader rebalance (coord/controller/controller.py); the
        # broker passes Kafka's auto.leader.rebalance.enable (default true), off for a bare
        # Cluster
        self.auto_leader_rebalance_enable = auto_leader_rebalance_enable
        self.leader_imbalance_check_interval_s = leader_imbalance_check_interval_s
        self.leader_imbalance_per_broker_percentage = leader_imbalance_per_broker_percentage
        # the session lease (module docstring): 0 = none (the embedded store has no session)
        self.stall_limit_ms = stall_limit_ms
        self._loop_blocked_ms = loop_blocked_ms
        self._lease_confirmed = True
        # at start, how long to wait for a registration left by our previous process
        self.registration_wait_ms = registration_wait_ms
        # max.broker.partitions: partition replicas one broker may host (checked on
        # CreateTopics, CreatePartitions and auto-creation)
        self.admin = ClusterAdmin(
            self, rng or random.Random(), max_broker_partitions=max_broker_partitions
        )
        self.producer_ids = ProducerIdManager(store, broker_id)
        self.endpoints = list(endpoints)
        self.rack = rack
        self._session_lost = False
        self._started = False
        # the broker default of unclean.leader.election.enable (topic configs override it)
        self.unclean_leader_election_enable = unclean_leader_election_enable
        self._controller: ControllerRole | None = None
        self._controller_epoch_zk_version = -1  # /controller_epoch's version when we won
        self._registered = False  # our /brokers/ids/<id> is held by the current session
        self._registration_session = 0  # the session that created it
        self._connected = True
        # the states the controller pushes to us (its LeaderAndIsr/UpdateMetadata)
        self.pushed_states = PushedStates(store, broker_id, self)

    @property
    def is_controller(self) -> bool:
        return self.controller_id == self.broker_id

    @property
    def session_ok(self) -> bool:
        """True while our store session is usable and our registration is held by it: False
        from SUSPENDED or LOST until the connection is back (SUSPENDED) or the broker has
        re-registered in the new session (LOST).  The replica manager refuses acks=all appends
        while it is False."""
        return self._started and self._registered and self._connected and self.lease_ok

    @property
    def lease_ok(self) -> bool:
        """False while what this broker knows of leadership may be stale because its event loop
        was held up for longer than ``stall_limit_ms`` (module docstring): leaders and
        coordinators must not answer until the session is confirmed."""
        if not self._lease_confirmed:
            return False
        blocked = self._loop_blocked_ms
        return not (
            self.stall_limit_ms
            and blocked is not None
            and blocked() > self.stall_limit_ms
            and not self._session_heard_lately()
        )

    def _session_heard_lately(self) -> bool:
        """The store's session probe (MetadataStore.session_heard) had an answer, in the
        session holding our registration, to a request sent within twice ``stall_limit_ms``
        (two thirds of the session timeout): the process kept running, and the session
        cannot expire before a whole timeout after that send, so a loop held up by its own
        work (not a stopped process) keeps the lease, with a third of the session to spare."""
        heard = self.store.session_heard()
        return (
            heard is not None
            and heard[1] == self._registration_session
            and (time.monotonic() - heard[0]) * 1000.0 <= 2 * self.stall_limit_ms
        )

    def loop_stalled(self, late_ms: float) -> None:
        """The loop monitor's listener: a hold-up past ``stall_limit_ms`` suspends the lease
        until ``_confirm_session`` has run, unless the session was heard from meanwhile
        (``_session_heard_lately``)."""
        if not self.stall_limit_ms or late_ms <= self.stall_limit_ms:
            return
        if self._lease_confirmed and self._session_heard_lately():
            log.info(
                "event loop held up %d ms; the ZooKeeper session answered meanwhile: "
                "leadership kept",
                late_ms,
            )
            return
        if self._lease_confirmed:
            log.warning(
                "event loop held up %d ms (more than a third of the ZooKeeper session): "
                "leadership suspended until the session is confirmed",
                late_ms,
            )
        self._lease_confirmed = False
        self._mark(("confirm",))

    @property
    def controller(self) -> ControllerRole | None:
        """The running Controller while this broker is the controller, else None."""
        c = self._controller
        return c if c is not None and c.active else None

    def recheck_controller(self) -> None:
        """Read /controller again soon (a controller of ours found itself fenced: who is the
        controller now?)."""
        self._mark(("controller",))

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self.store.add_session_listener(self._on_session_state)
        for path in paths.PERSISTENT_PATHS:
            await self.store.ensure_path(path)
        self.cluster_id = await self._ensure_cluster_id()
        await self._register_broker(wait_ms=self.registration_wait_ms)
        await self._elect()
        await self._refresh_brokers()
        await self._refresh_topics(load_all=True)
        await self._load_broker_configs()
        self._started = True
        self._start_sync()
        self.pushed_states.start()

    async def stop(self) -> None:
        """Leave the cluster: stop the watches' work and delete our ephemerals (the controller
        znode if we hold it, our registration) so other brokers react at once."""
        self._started = False
        self.store.remove_session_listener(self._on_session_state)
        await self._stop_controller()
        await self._stop_sync()
        await self.pushed_states.stop()
        for path in (paths.CONTROLLER, paths.broker(self.broker_id)):
            try:
                data, stat = await self.store.get(path)
                # ours: our session's, and naming us (several brokers may share one LocalStore
                # session in tests)
                mine = (
                    paths.decode_controller(data) == self.broker_id
                    if path == paths.CONTROLLER
                    else True
                )
                if mine and stat.ephemeral_owner == self.store.session_id:
                    await self.store.delete(path, stat.version)
            except NoNodeError:
                pass
            except (StoreError, ValueError, KeyError) as e:
                log.warning("could not delete %s at shutdown: %s", path, e)
        self.controller_id = -1
        self._registered = False

    async def _ensure_cluster_id(self) -> str:
        while True:
            try:
                data, _ = await self.store.get(paths.CLUSTER_ID)
                return paths.decode_cluster_id(data)
            except NoNodeError:
                pass
            cluster_id = paths.kafka_uuid_str(paths.random_kafka_uuid())
            try:
                await self.store.create(
                    paths.CLUSTER_ID, paths.encode_cluster_id(cluster_id), makepath=True
                )
                return cluster_id
            except NodeExistsError:
                continue

    async def _register_broker(self, *, wait_ms: int = 0) -> None:
        """Create our ephemeral registration.  If it exists and belongs to another session, it
        is either a live broker with our broker.id or what a previous process of ours left
        when it died (kill -9): ZooKeeper removes that one when the old session times out.
        So wait up to ``wait_ms`` for it to go, then register; raise BrokerIdInUseError if it
        is still there (a live broker holds the id)."""
        path = paths.broker(self.broker_id)
        data = paths.encode_broker(self.endpoints, self.clock.time_ms(), self.rack)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000.0
        announced = False
        while True:
            try:
                await self.store.create(path, data, ephemeral=True)
                self._registered = True
                self._registration_session = self.store.session_id
                if announced:
                    log.info("registered at %s: the previous registration expired", path)
                return
            except NodeExistsError:
                pass
            try:
                _, stat = await self.store.get(path)
            except NoNodeError:
                continue  # it just went away: try again
            if stat.ephemeral_owner == self.store.session_id:
                await self.store.set(path, data)  # ours already (same session)
                self._registered = True
                self._registration_session = self.store.session_id
                return
            if loop.time() >= deadline:
                raise BrokerIdInUseError(
                    f"broker.id {self.broker_id} is already registered at {path} by another "
                    f"live broker (session 0x{stat.ephemeral_owner:x}, ours is "
                    f"0x{self.store.session_id:x})"
                    + (f", and it did not expire within {wait_ms} ms" if wait_ms else "")
                )
            if not announced:
                announced = True
                log.info(
                    "%s is held by session 0x%x (a previous process of broker %d that died, "
                    "or a live broker with the same broker.id): waiting up to %.1f s for it "
                    "to expire",
                    path,
                    stat.ephemeral_owner,
                    self.broker_id,
                    wait_ms / 1000.0,
                )
            await asyncio.sleep(0.2)

    async def update_endpoints(self, endpoints: list[tuple[str, str, int]]) -> None:
        """A dynamic advertised.listeners: rewrite our registration with the new endpoints
        (Kafka's KafkaController.updateBrokerInfo); every broker's watch on /brokers/ids/<id>
        brings the change into its metadata."""
        if list(endpoints) == self.endpoints:
            return
        self.endpoints = list(endpoints)
        try:
            await self._register_broker()
        except (StoreError, BrokerIdInUseError) as e:
            log.error("could not register the new advertised listeners: %s", e)
            return
        log.info("registration updated: endpoints %s", self.endpoints)
        self._mark(("brokers",))

    # ------------------------------------------------------------------ controller

    async def _elect(self) -> None:
        """Kafka's KafkaController.elect(): become controller or learn who is, and watch."""
        before = self.controller_id
        while True:
            try:
                data, stat = await self._watched(("controller",), self.store.get, paths.CONTROLLER)
            except NoNodeError:
                pass
            else:
                self.controller_id = paths.decode_controller(data)
                if self.controller_id != self.broker_id or stat.ephemeral_owner != (
                    self.store.session_id
                ):
                    self.controller_epoch = await self._read_controller_epoch()
                break
            try:
                epoch_data, epoch_stat = await self.store.get(paths.CONTROLLER_EPOCH)
                epoch, epoch_version = paths.decode_controller_epoch(epoch_data), epoch_stat.version
            except NoNodeError:
                try:
                    await self.store.create(
                        paths.CONTROLLER_EPOCH, paths.encode_controller_epoch(0)
                    )
                except NodeExistsError:
                    continue
                epoch, epoch_version = 0, 0
            ops: list[Op] = [
                Create(
                    paths.CONTROLLER,
                    paths.encode_controller(self.broker_id, self.clock.time_ms()),
                    ephemeral=True,
                ),
                SetData(
                    paths.CONTROLLER_EPOCH,
                    paths.encode_controller_epoch(epoch + 1),
                    version=epoch_version,
                ),
            ]
            try:
                await self.store.multi(ops)
            except (NodeExistsError, BadVersionError):
                continue  # lost the race: read the winner and watch it
            self.controller_id = self.broker_id
            self.controller_epoch = epoch + 1
            self._controller_epoch_zk_version = epoch_version + 1
            log.info("broker %d is the controller (epoch %d)", self.broker_id, epoch + 1)
            if await self._watched(("controller",), self.store.exists, paths.CONTROLLER) is None:
                continue
            await self._on_become_controller()
            break
        if self.controller_id != self.broker_id and self._controller is not None:
            await self._on_resign()
        if before != self.controller_id:
            self._notify(ClusterEvent("CONTROLLER_CHANGED"))

    async def _read_controller_epoch(self) -> int:
        try:
            data, _ = await self.store.get(paths.CONTROLLER_EPOCH)
            return paths.decode_controller_epoch(data)
        except NoNodeError:
            return 0

    async def _on_become_controller(self) -> None:
        """Controller duties start here: a fresh controller for our new epoch (see
        coord/controller/controller.py)."""
        await self._stop_controller()
        if self._controller_factory is None:
            return
        self._controller = self._controller_factory(
            self, self.controller_epoch, self._controller_epoch_zk_version
        )
        self._controller.start()

    async def _on_resign(self) -> None:
        """Controller duties stop here."""
        await self._stop_controller()

    async def _stop_controller(self) -> None:
        controller, self._controller = self._controller, None
        if controller is not None:
            await controller.stop()

    async def elect_leaders(
        self, partitions: list[TopicPartition], *, preferred: bool = True
    ) -> dict[TopicPartition, ElectionResult]:
        """ElectLeaders on this broker: see Controller.elect_leaders.  Raises
        KafkaError(NOT_CONTROLLER) unless this broker is the (active) controller."""
        controller = self.controller
        if controller is None:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "this broker is not the controller")
        return await controller.elect_leaders(partitions, preferred=preferred)

    async def alter_partition_reassignments(
        self, requests: dict[TopicPartition, list[int] | None]
    ) -> dict[TopicPartition, ElectionResult]:
        """AlterPartitionReassignments on this broker: see coord/controller/reassignment.py.  Raises
        KafkaError(NOT_CONTROLLER) unless this broker is the (active) controller."""
        controller = self.controller
        if controller is None:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "this broker is not the controller")
        return await controller.alter_partition_reassignments(requests)

    def list_partition_reassignments(
        self, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, Any]:
        """ListPartitionReassignments on this broker: {partition: ReplicaAssignment}.  Raises
        KafkaError(NOT_CONTROLLER) unless this broker is the (active) controller."""
        controller = self.controller
        if controller is None:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "this broker is not the controller")
        return controller.list_partition_reassignments(partitions)

    # ------------------------------------------------------------------ session

    def _on_session_state(self, state: str) -> None:
        if state == LOST:
            self._membership_epoch += 1
            self._session_lost = True
            self._connected = False
            self._registered = False  # our ephemerals went with the session
            self._watching.clear()  # the session's watches are gone with it
            if self._controller is not None:
                self._controller.deactivate()  # /controller went too: stop writing at once
            if self.controller_id == self.broker_id:
                self.controller_id = -1
                self._notify(ClusterEvent("CONTROLLER_CHANGED"))
        elif state == SUSPENDED:
            self._connected = False
        elif state == CONNECTED:
            self._connected = True
            if self._session_lost:
                self._session_lost = False
                self._mark(("session",))

    async def _refresh(self, key: tuple) -> None:
        kind = key[0]
        if kind == "session":
            self._watching.clear()
            try:
                await self._register_broker()
            except BrokerIdInUseError:
                log.error("after a new ZooKeeper session, broker.id %d is taken", self.broker_id)
            await self._elect()
            await self._refresh_brokers()
            await self._refresh_topics(load_all=True)
            await self._load_broker_configs()
        elif kind == "confirm":
            await self._confirm_session()
        elif kind == "controller":
            await self._elect()
        else:
            await super()._refresh(key)

    async def _confirm_session(self) -> None:
        """Re-establish the lease: our registration is held by the live session (a read that
        succeeds proves the session alive now), then whatever changed meanwhile is read again
        so that leadership lost meanwhile is seen before we answer as a leader (of the
        partition states, those this broker leads: ``_led_here``; the sync loop reads the
        others after).  What changed
        is what the watches marked: in a session that never ended every cached key has a
        watch pending (or a re-read queued), ZooKeeper sends a watch event before the answer
        to any later read of the session, and a lost connection fires every watch; so after
        that read and the store's barrier, the marked keys are all that can differ.  (Reading
        every topic again, as before, cost O(partitions) per stall: at 5,000 partitions on a
        loaded machine each re-read stalled the loop past the limit again.)"""
        if not (self._registered and self._connected):
            raise ConnectionLossError("not registered in a live session yet")
        stat = await self.store.exists(paths.broker(self.broker_id))
        if stat is None or stat.ephemeral_owner != self.store.session_id:
            raise ConnectionLossError("our registration is not held by the current session")
        await self.store.barrier()
        await self._elect()
        await self._refresh_brokers()
        await self._refresh_pending(frozenset({"confirm", "session"}), self._led_here)
        if ("confirm",) in self._dirty or not (self._registered and self._connected):
            return  # held up again meanwhile, or the session went: the next round decides
        self._lease_confirmed = True
        log.info("ZooKeeper session confirmed: leadership resumed")

    def _led_here(self, key: tuple) -> bool:
        """A marked partition key the confirmation must re-read: one this broker leads as
        far as its cache knows.  The others cannot make it answer as a leader, so their
        re-read is left to the sync loop (after a failover at 100,000 replicas the
        confirmation otherwise re-read tens of thousands of states before resuming)."""
        info = self.topics.get(key[1])
        st = None if info is None else info.partitions.get(key[2])
        return st is None or st.leader == self.broker_id

    # ------------------------------------------------------------------ writes (admin.py, isr.py)

    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: dict[str, str | None] | None = None,
        *,
        validate_only: bool = False,
        assignments: dict[int, list[int]] | None = None,
    ) -> TopicInfo:
        """ClusterAdmin.create_topic."""
        return await self.admin.create_topic(
            name,
            num_partitions,
            replication_factor,
            configs,
            validate_only=validate_only,
            assignments=assignments,
        )

    async def create_partitions(
        self,
        name: str,
        count: int,
        assignments: list[list[int]] | None = None,
        *,
        validate_only: bool = False,
    ) -> TopicInfo:
        """ClusterAdmin.create_partitions."""
        return await self.admin.create_partitions(
            name, count, assignments, validate_only=validate_only
        )

    async def delete_topic(self, name: str) -> None:
        """ClusterAdmin.delete_topic."""
        await self.admin.delete_topic(name)

    async def alter_topic_configs(
        self,
        name: str,
        new_configs: dict[str, str] | Callable[[dict[str, str]], dict[str, str]],
        *,
        validate_only: bool = False,
    ) -> dict[str, str]:
        """ClusterAdmin.alter_topic_configs."""
        return await self.admin.alter_topic_configs(name, new_configs, validate_only=validate_only)

    async def alter_broker_configs(
        self,
        entity: str,
        update: Callable[[dict[str, str]], dict[str, str]],
        *,
        validate_only: bool = False,
    ) -> dict[str, str]:
        """ClusterAdmin.alter_broker_configs."""
        return await self.admin.alter_broker_configs(entity, update, validate_only=validate_only)

    async def update_isr(
        self,
        topic: str,
        partition: int,
        new_isr: list[int],
        *,
        leader: int,
        leader_epoch: int,
    ) -> PartitionState | None:
        """The leader's ISR write: metadata/isr.py."""
        return await isr.update_isr(
            self, topic, partition, new_isr, leader=leader, leader_epoch=leader_epoch
        )

    async def update_isrs(
        self, changes: list[isr.IsrChange]
    ) -> list[PartitionState | None | Exception]:
        """Many leaders' ISR writes together: metadata/isr.py's update_isrs."""
        return await isr.update_isrs(self, changes)

    async def allocate_producer_id(self) -> int:
        """The next producer id (ProducerIdManager)."""
        return await self.producer_ids.allocate()
