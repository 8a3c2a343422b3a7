"""Cluster: broker registration, controller election, topic creation, producer-id blocks and a
metadata cache kept current by watches.  The same code runs on both stores (LocalStore for the
one-node default, ZooKeeperStore for a real ensemble), through the MetadataStore interface only.

Start (``await cluster.start()``; the store must be started already, the Cluster does not own
it):

1. ensure Kafka's persistent paths (``paths.PERSISTENT_PATHS``);
2. ``/cluster/id``: keep an existing one, or create a fresh 22-char base64url uuid;
3. register the ephemeral ``/brokers/ids/<id>``; if it exists and belongs to another session,
   wait up to ``registration_wait_ms`` for it to expire (the previous process of this broker
   died with kill -9 and its session has not timed out yet), then raise
   :class:`BrokerIdInUseError` (a live broker with the same broker.id);
4. controller election: Kafka's ``registerControllerAndIncrementControllerEpoch`` in one store
   ``multi``: create the ephemeral ``/controller`` and compare-and-set ``/controller_epoch`` to
   epoch + 1.  Losing (NodeExists) means someone else is controller: we watch ``/controller``
   and run the election again when it goes away;
5. load the cache (brokers; topics with partition states and configs), setting watches.

Watches and refreshes: every watch callback only marks a key dirty (``("brokers",)``,
``("topic", name)``, ``("partition", name, p)`` ...); one task (``_sync_loop``) owns the cache
and re-reads dirty keys, re-setting their watches (one-shot).  A key has at most one pending
watch at a time (``_watching``), so watches do not pile up.  A read that fails sets no watch
(``_watched`` frees the key), and one that fails with a lost connection is retried with
backoff, so the retry sets the watch again.  After a LOST session (ZooKeeper), the next
CONNECTED re-registers the broker, re-runs the election and reloads everything.

Listeners (``add_listener``) get a :class:`ClusterEvent` on the loop whenever the broker set,
the controller or a topic changes; the broker uses it to create the partition logs it leads.

Controller (multi-broker replication, docs/replication.md).  While this broker holds
/controller, a :class:`pybroker.coord.controller.Controller` runs (created in
``_on_become_controller`` with our epoch and the znode version of /controller_epoch we wrote;
stopped in ``_on_resign``, on a LOST session, at ``stop()``, or when its writes find the
epoch moved).  It elects partition leaders when brokers go and come back and drops dead
followers from ISRs, writing state znodes with compare-and-set inside multis that check
/controller_epoch (see its module docstring for the rules).  ``elect_leaders`` is the hook for
the ElectLeaders API.  Topic creation still writes the initial states itself (leader = first
replica, ISR = replicas, stamped with the controller epoch this broker knows).

ISR changes by leaders: ``update_isr`` compare-and-sets the state znode, keeping leader and
leader_epoch, and gives up (None) when the caller no longer leads at that epoch; no controller
RPC.  Every broker, controller included, learns of state changes through the state znodes'
watches (``ClusterEvent("TOPIC_CHANGED", ...)``); ``PartitionState.zk_version`` is the znode
version last seen, and the cache never goes back to an older version than a local write put
there.  ``session_ok`` tells the replica manager whether our store session and registration
are intact (acks=all is refused while it is False).

The session lease (``lease_ok``): ZooKeeper's client runs in its own thread, so after the whole
process was held up (SIGSTOP, swapped out) for longer than the session, the event loop can
answer requests as a leader before that thread has noticed the expiry, showing clients a high
watermark below the one the successor already showed.  With ``stall_limit_ms`` set (a third of
the session timeout: no session can expire in less than two thirds of it after the last
heartbeat), a loop hold-up longer than that (``loop_stalled``, or ``blocked_ms`` seen before
the monitor woke) suspends the lease: leaders answer NOT_LEADER_OR_FOLLOWER and coordinators
COORDINATOR_NOT_AVAILABLE until a read in a session that still holds our registration, followed
by a fresh read of brokers and partition states, confirms what we lead.

Not yet: topics created without states by an external tool (the controller could create the
missing state znodes), deletion via /admin/delete_topics (pybroker deletes at once), preferred
leader rebalancing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import random
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pybroker import topic_config
from pybroker.clock import SYSTEM_CLOCK, Clock
from pybroker.configdef import ConfigException
from pybroker.coord import config_changes, paths
from pybroker.coord.controller import Controller, ElectionResult, TopicPartition
from pybroker.coord.store import (
    CONNECTED,
    LOST,
    SUSPENDED,
    BadVersionError,
    ConnectionLossError,
    Create,
    Delete,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    Op,
    SetData,
    StoreError,
    WatchedEvent,
)
from pybroker.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_SIZE = (
    1000  # kafka.server.ProducerIdManager / ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
)
MAX_TOPIC_NAME_LENGTH = 249


# --------------------------------------------------------------------------- cache types


@dataclass(frozen=True)
class BrokerInfo:
    id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: list[tuple[str, str, int]] = field(default_factory=list)  # (listener, host, port)

    def endpoint(self, listener: str | None) -> tuple[str, int] | None:
        """(host, port) of the broker's advertised ``listener``, None if it has no such
        listener (Kafka: the broker is then left out of what clients of that listener see).
        ``listener`` None: the first endpoint."""
        if listener is None or not self.endpoints:
            return self.host, self.port
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None


@dataclass(frozen=True)
class PartitionState:
    leader: int  # -1: no leader
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    controller_epoch: int = 0
    # the state znode's version as read (the partition epoch; -1: unknown / no znode).  Left out
    # of equality: two states with the same content compare equal whatever version they were
    # read at (the cache still tracks it: see _update_topic).
    zk_version: int = field(default=-1, compare=False)
    # a reassignment in progress (KIP-455, the topic znode's adding_replicas /
    # removing_replicas): ``replicas`` is then the full set, original plus target
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def being_reassigned(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionState]
    configs: dict[str, str]
    # the topic znode's version the assignment was read at (or a local write made): a read
    # that started before a local reassignment write never puts the older assignment back
    assignment_version: int = field(default=-1, compare=False)


class ClusterEvent(NamedTuple):
    # "BROKERS_CHANGED" | "CONTROLLER_CHANGED" | "TOPIC_CHANGED" | "TOPIC_DELETED"
    # | "BROKER_CONFIG_CHANGED" (topic: the entity, "<default>" or our id: ``broker_configs``)
    # | "ENTITY_CONFIG_CHANGED" (topic: the entity path of another type, e.g. "clients/x")
    kind: str
    topic: str | None = None


class ClusterError(Exception):
    pass


class BrokerIdInUseError(ClusterError):
    """broker.id is registered by another live broker (another store session)."""


# --------------------------------------------------------------------------- validation


_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: str) -> None:
    """org.apache.kafka.common.internals.Topic.validate: raises INVALID_TOPIC_EXCEPTION."""

    def bad(msg: str) -> KafkaError:
        return KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, msg)

    if not name:
        raise bad("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise bad('Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise bad(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} "
            f"characters, topic name: {name}"
        )
    if not _LEGAL_TOPIC.match(name):
        raise bad(
            f'Topic name "{name}" is illegal, it contains a character other than '
            "ASCII alphanumerics, '.', '_' and '-'"
        )


def has_collision_chars(name: str) -> bool:
    return "." in name or "_" in name


def unify_collision_chars(name: str) -> str:
    return name.replace(".", "_")


def validate_topic_configs(configs: dict[str, str | None]) -> dict[str, str]:
    """Kafka's checks of a topic's configs (pybroker/topic_config.py, over Kafka's defaults:
    the handlers check them over the broker's first); raises INVALID_CONFIG.  Returns the
    configs as given (Kafka stores the strings the client sent)."""
    try:
        return topic_config.validate(configs, {})
    except ConfigException as e:
        raise topic_config.create_error(e) from None


def assign_replicas_to_brokers(
    broker_ids: list[int],
    num_partitions: int,
    replication_factor: int,
    rng: random.Random | None = None,
    *,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
) -> dict[int, list[int]]:
    """kafka.admin.AdminUtils.assignReplicasToBrokersRackUnaware: the first replica of
    partition p is broker[(p + start) % n]; followers are shifted by nextReplicaShift, which
    grows by one every n partitions, so replicas spread evenly."""
    if num_partitions <= 0:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
        )
    if replication_factor <= 0:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
        )
    if replication_factor > len(broker_ids):
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(broker_ids)}.",
        )
    rng = rng or random.Random()
    brokers = sorted(broker_ids)
    n = len(brokers)
    start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    next_replica_shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    current = max(0, start_partition_id)
    result: dict[int, list[int]] = {}
    for _ in range(num_partitions):
        if current > 0 and current % n == 0:
            next_replica_shift += 1
        first = (current + start_index) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            shift = 1 + (next_replica_shift + j) % (n - 1)
            replicas.append(brokers[(first + shift) % n])
        result[current] = replicas
        current += 1
    return result


def _zk_versions(info: TopicInfo | None) -> dict[int, int] | None:
    return None if info is None else {p: s.zk_version for p, s in info.partitions.items()}


# --------------------------------------------------------------------------- the cluster

Listener = Callable[[ClusterEvent], object]


class Cluster:
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
    ) -> None:
        self.store = store
        # the controller's preferred-leader rebalance (coord/controller.py); the broker passes
        # Kafka's auto.leader.rebalance.enable (default true), off for a bare Cluster
        self.auto_leader_rebalance_enable = auto_leader_rebalance_enable
        self.leader_imbalance_check_interval_s = leader_imbalance_check_interval_s
        self.leader_imbalance_per_broker_percentage = leader_imbalance_per_broker_percentage
        # the session lease (module docstring): 0 = none (the embedded store has no session)
        self.stall_limit_ms = stall_limit_ms
        self._loop_blocked_ms = loop_blocked_ms
        self._lease_confirmed = True
        # at start, how long to wait for a registration left by our previous process
        self.registration_wait_ms = registration_wait_ms
        # max.broker.partitions: partition replicas one broker may host (checked by the
        # controller on CreateTopics, CreatePartitions and auto-creation)
        self.max_broker_partitions = max_broker_partitions
        self.broker_id = broker_id
        self.endpoints = list(endpoints)
        self.rack = rack
        self.clock = clock
        self.rng = rng or random.Random()
        self.cluster_id: str = ""
        self.controller_id: int = -1
        self.controller_epoch: int = 0
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self._listeners: list[Listener] = []
        self._dirty: dict[tuple, None] = {}  # insertion-ordered set of keys to re-read
        self._wake = asyncio.Event()
        self._watching: set[tuple] = set()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session_lost = False
        self._local_gen = 0  # bumped by local topic writes (see _refresh_topics)
        self._locally_written: dict[str, int] = {}
        self._pid_next = 0
        self._pid_end = -1  # inclusive end of the block in hand
        self._pid_claim: asyncio.Future[None] | None = None
        self._started = False
        # the broker default of unclean.leader.election.enable (topic configs override it)
        self.unclean_leader_election_enable = unclean_leader_election_enable
        self._controller: Controller | None = None
        self._controller_epoch_zk_version = -1  # /controller_epoch's version when we won
        self._registered = False  # our /brokers/ids/<id> is held by the current session
        self._connected = True
        # bumped whenever the live broker set may have changed since we last looked: a change
        # of /brokers/ids seen by its cversion (so a broker that left and came back between
        # two reads counts too) and the loss of our own session (see membership_epoch)
        self._membership_epoch = 0
        self._brokers_cversion = -1
        # dynamic broker configs (KIP-226) this broker applies: "<default>" and str(broker_id)
        # -> the entity's stored configs, kept current through /config/changes
        self.broker_configs: dict[str, dict[str, str]] = {}
        self._changes = config_changes.ChangeCursor()

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
        return not (self.stall_limit_ms and blocked is not None and blocked() > self.stall_limit_ms)

    def loop_stalled(self, late_ms: float) -> None:
        """The loop monitor's listener: a hold-up past ``stall_limit_ms`` suspends the lease
        until ``_confirm_session`` has run."""
        if not self.stall_limit_ms or late_ms <= self.stall_limit_ms:
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
    def membership_epoch(self) -> int:
        """A counter that moves whenever the set of live brokers may have changed behind what
        ``brokers`` showed before: /brokers/ids gained or lost a child (its cversion moved, even
        if the set read back is the same) or our session was lost (others may have acted on
        our absence).  State derived from "which broker owns what" (group coordination) is
        valid only for the epoch it was derived in."""
        return self._membership_epoch

    @property
    def controller(self) -> Controller | None:
        """The running Controller while this broker is the controller, else None."""
        c = self._controller
        return c if c is not None and c.active else None

    def add_listener(self, cb: Listener) -> None:
        self._listeners.append(cb)

    def remove_listener(self, cb: Listener) -> None:
        if cb in self._listeners:
            self._listeners.remove(cb)

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
        self._task = asyncio.create_task(self._sync_loop(), name=f"cluster-sync-{self.broker_id}")

    async def stop(self) -> None:
        """Leave the cluster: stop the watches' work and delete our ephemerals (the controller
        znode if we hold it, our registration) so other brokers react at once."""
        self._started = False
        self.store.remove_session_listener(self._on_session_state)
        await self._stop_controller()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
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
        """Controller duties start here: a fresh Controller for our new epoch (see
        coord/controller.py)."""
        await self._stop_controller()
        self._controller = Controller(
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
        """AlterPartitionReassignments on this broker: see coord/reassignment.py.  Raises
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

    # ------------------------------------------------------------------ watches + refresh

    def _watch(self, key: tuple) -> Callable[[WatchedEvent], None] | None:
        """A watch callback for key, or None if one is already pending for it."""
        if key in self._watching:
            return None
        self._watching.add(key)
        return functools.partial(self._on_watch, key)

    def _unwatch(self, key: tuple, watch: Callable | None) -> None:
        """The read that was to set this watch failed: no watch is pending."""
        if watch is not None:
            self._watching.discard(key)

    async def _watched(self, key: tuple, call: Callable[..., Any], path: str) -> Any:
        """``call(path, watch=...)`` with key's watch; a call that raises sets no watch, so the
        key is free to be watched again by the retry (a lost connection must not leave the
        key marked as watched forever)."""
        watch = self._watch(key)
        try:
            return await call(path, watch=watch)
        except BaseException:
            self._unwatch(key, watch)
            raise

    def _on_watch(self, key: tuple, event: WatchedEvent) -> None:
        self._watching.discard(key)
        self._mark(key)

    def _mark(self, key: tuple) -> None:
        self._dirty[key] = None
        self._wake.set()

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

    async def _sync_loop(self) -> None:
        backoff = 0.05
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._dirty:
                key = next(iter(self._dirty))
                del self._dirty[key]
                try:
                    await self._refresh(key)
                    backoff = 0.05
                except ConnectionLossError as e:
                    log.info("metadata refresh of %s deferred: %s", key, e)
                    self._dirty[key] = None
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("metadata refresh of %s failed", key)

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
        elif kind == "brokers" or kind == "broker":
            await self._refresh_brokers()
        elif kind == "topics":
            await self._refresh_topics()
        elif kind == "topic":
            await self._refresh_topic(key[1])
        elif kind == "partition":
            await self._refresh_partition(key[1], key[2])
        elif kind == "config":
            await self._refresh_config(key[1])
        elif kind == "changes":
            await self._refresh_changes()
        elif kind == "broker_config":
            await self._refresh_broker_config(key[1])

    async def _confirm_session(self) -> None:
        """Re-establish the lease: our registration is held by the live session (a read that
        succeeds proves the session alive now), then everything we act on is read again so
        that leadership lost meanwhile is seen before we answer as a leader."""
        if not (self._registered and self._connected):
            raise ConnectionLossError("not registered in a live session yet")
        stat = await self.store.exists(paths.broker(self.broker_id))
        if stat is None or stat.ephemeral_owner != self.store.session_id:
            raise ConnectionLossError("our registration is not held by the current session")
        await self._elect()
        await self._refresh_brokers()
        await self._refresh_topics(load_all=True)
        if ("confirm",) in self._dirty or not (self._registered and self._connected):
            return  # held up again meanwhile, or the session went: the next round decides
        self._lease_confirmed = True
        log.info("ZooKeeper session confirmed: leadership resumed")

    async def _refresh_brokers(self) -> None:
        # cversion first: a change after it is read shows up in the next refresh as well
        stat = await self.store.exists(paths.BROKER_IDS)
        cversion = stat.cversion if stat is not None else -1
        ids = await self._watched(("brokers",), self.store.get_children, paths.BROKER_IDS)
        brokers: dict[int, BrokerInfo] = {}
        for child in ids:
            try:
                bid = int(child)
            except ValueError:
                continue
            try:
                data, _ = await self._watched(("broker", bid), self.store.get, paths.broker(bid))
            except NoNodeError:
                continue
            try:
                reg = paths.decode_broker(data)
            except (ValueError, KeyError, TypeError):
                log.warning("unreadable registration of broker %d: %r", bid, data)
                continue
            first = reg["endpoints"][0] if reg["endpoints"] else ("", reg["host"] or "", -1)
            brokers[bid] = BrokerInfo(bid, first[1], first[2], reg["rack"], reg["endpoints"])
        moved = cversion != self._brokers_cversion
        self._brokers_cversion = cversion
        if brokers != self.brokers or moved:
            self.brokers = brokers
            self._membership_epoch += 1
            self._notify(ClusterEvent("BROKERS_CHANGED"))

    async def _refresh_topics(self, *, load_all: bool = False) -> None:
        gen = self._local_gen
        names = await self._watched(("topics",), self.store.get_children, paths.TOPICS)
        for name in names:
            if load_all or name not in self.topics:
                await self._refresh_topic(name)
        present = set(names)
        for name in list(self.topics):
            if name not in present and self._locally_written.get(name, -1) <= gen:
                del self.topics[name]
                self._notify(ClusterEvent("TOPIC_DELETED", name))

    async def _refresh_topic(self, name: str) -> None:
        gen = self._local_gen
        try:
            data, topic_stat = await self._watched(
                ("topic", name), self.store.get, paths.topic(name)
            )
        except NoNodeError:
            if name in self.topics and self._locally_written.get(name, -1) <= gen:
                del self.topics[name]
                self._notify(ClusterEvent("TOPIC_DELETED", name))
            return
        topic_id, assignment = paths.decode_topic(data)
        adding, removing = paths.decode_topic_reassignment(data)
        partitions = {}
        for k, (p, replicas) in enumerate(sorted(assignment.items())):
            if k % 256 == 255:
                await asyncio.sleep(0)  # the embedded store answers at once: let others run
            partitions[p] = dataclasses.replace(
                await self._read_partition(name, p, replicas),
                adding_replicas=tuple(adding.get(p, ())),
                removing_replicas=tuple(removing.get(p, ())),
            )
        configs = await self._read_config(name)
        old = self.topics.get(name)
        version = topic_stat.version
        if old is not None and (topic_id is None or topic_id == old.topic_id):
            stale_assignment = version < old.assignment_version
            if stale_assignment:
                # read before a local write of the topic znode (a reassignment step, new
                # partitions) landed in the cache: its assignment stays (its watch brings any
                # later change)
                version = old.assignment_version
                for p, cached in old.partitions.items():
                    partitions.setdefault(p, cached)
            for p, st in list(partitions.items()):
                cached = old.partitions.get(p)
                if cached is None:
                    continue
                if stale_assignment:
                    st = partitions[p] = dataclasses.replace(
                        st,
                        replicas=list(cached.replicas),
                        adding_replicas=cached.adding_replicas,
                        removing_replicas=cached.removing_replicas,
                    )
                if 0 <= st.zk_version < cached.zk_version:
                    # read before a newer local write (update_isr, the controller) landed
                    # in the cache: keep the newer one (the watch brings any later change)
                    partitions[p] = dataclasses.replace(
                        cached,
                        replicas=st.replicas,
                        adding_replicas=st.adding_replicas,
                        removing_replicas=st.removing_replicas,
                    )
        info = TopicInfo(
            name,
            topic_id or (old.topic_id if old else uuid.UUID(int=0)),
            partitions,
            configs,
            version,
        )
        self._update_topic(info)

    async def _read_partition(self, name: str, p: int, replicas: list[int]) -> PartitionState:
        key = ("partition", name, p)
        path = paths.partition_state(name, p)
        try:
            data, stat = await self._watched(key, self.store.get, path)
        except NoNodeError:
            # watch for its creation (by the controller, or a slow creator)
            if await self._watched(key, self.store.exists, path) is not None:
                return await self._read_partition(name, p, replicas)
            return PartitionState(-1, -1, list(replicas), [], -1)
        st = paths.decode_partition_state(data)
        return PartitionState(
            st["leader"],
            st["leader_epoch"],
            list(replicas),
            st["isr"],
            st["controller_epoch"],
            stat.version,
        )

    async def _read_config(self, name: str) -> dict[str, str]:
        key = ("config", name)
        try:
            data, _ = await self._watched(key, self.store.get, paths.topic_config(name))
        except NoNodeError:
            if await self._watched(key, self.store.exists, paths.topic_config(name)) is not None:
                return await self._read_config(name)
            return {}
        return paths.decode_topic_config(data)

    async def _refresh_partition(self, name: str, p: int) -> None:
        info = self.topics.get(name)
        if info is None or p not in info.partitions:
            await self._refresh_topic(name)
            return
        state = await self._read_partition(name, p, info.partitions[p].replicas)
        self._set_partition_state(name, p, state)

    def _set_partition_state(self, name: str, p: int, state: PartitionState) -> None:
        """Put one partition's state into the cache (from a watch's re-read or a local write),
        unless the cache already holds a newer znode version.  Only leader, epochs and ISR are
        taken: the assignment (replicas, adding and removing replicas) is the topic znode's,
        cached by _refresh_topic and set_assignment."""
        info = self.topics.get(name)
        if info is None or p not in info.partitions:
            return
        cached = info.partitions[p]
        if 0 <= state.zk_version < cached.zk_version:
            return  # an older read than what a local write already put there
        state = dataclasses.replace(
            state,
            replicas=list(cached.replicas),
            adding_replicas=cached.adding_replicas,
            removing_replicas=cached.removing_replicas,
        )
        self._update_topic(dataclasses.replace(info, partitions={**info.partitions, p: state}))

    async def _refresh_config(self, name: str) -> None:
        configs = await self._read_config(name)
        info = self.topics.get(name)
        if info is not None:
            self._update_topic(dataclasses.replace(info, configs=configs))

    # ------------------------------------------------------------------ entity configs

    def _broker_entities(self) -> tuple[str, str]:
        return (paths.DEFAULT_ENTITY, str(self.broker_id))

    async def _load_broker_configs(self) -> None:
        """At start and after a new session: every notification so far counts as seen, the
        entities are read whole (Kafka's DynamicConfigManager.startup)."""
        self._changes = config_changes.ChangeCursor()
        children = await self._watched(("changes",), self.store.get_children, paths.CONFIG_CHANGES)
        if children:
            self._changes.last = max(config_changes.sequence_of(c) for c in children)
        await self._note_ctimes(children)
        for entity in self._broker_entities():
            await self._refresh_broker_config(entity)

    async def _note_ctimes(self, children: list[str]) -> None:
        for child in children:
            if child in self._changes.ctimes:
                continue
            stat = await self.store.exists(f"{paths.CONFIG_CHANGES}/{child}")
            if stat is not None:
                self._changes.ctimes[child] = stat.ctime

    async def _refresh_changes(self) -> None:
        """ZkNodeChangeNotificationListener.processNotifications: each notification after the
        last processed one names an entity to read again; then the expired ones are purged."""
        children = await self._watched(("changes",), self.store.get_children, paths.CONFIG_CHANGES)
        for child in self._changes.unseen(children):
            try:
                data, stat = await self.store.get(f"{paths.CONFIG_CHANGES}/{child}")
            except NoNodeError:
                continue  # purged meanwhile
            self._changes.last = max(self._changes.last, config_changes.sequence_of(child))
            self._changes.ctimes[child] = stat.ctime
            entity_path = paths.decode_config_change(data)
            if entity_path is None:
                log.warning("ignoring config change notification %s: %r", child, data)
                continue
            kind, _, name = entity_path.partition("/")
            if kind == "brokers":
                if name in self._broker_entities():
                    self._mark(("broker_config", name))
            elif kind == "topics":
                if name in self.topics:
                    self._mark(("config", name))
            else:
                self._notify(ClusterEvent("ENTITY_CONFIG_CHANGED", entity_path))
        self._changes.forget_missing(children)
        await self._note_ctimes(children)
        for child in self._changes.expired(self.clock.time_ms()):
            try:
                await self.store.delete(f"{paths.CONFIG_CHANGES}/{child}")
            except NoNodeError:
                pass
            self._changes.ctimes.pop(child, None)

    async def _refresh_broker_config(self, entity: str) -> None:
        try:
            data, _ = await self.store.get(paths.broker_config(entity))
            configs = paths.decode_topic_config(data)
        except NoNodeError:
            configs = {}
        except ValueError:
            log.error("unreadable dynamic broker configs at %s", paths.broker_config(entity))
            return
        self._set_broker_config(entity, configs)

    def _set_broker_config(self, entity: str, configs: dict[str, str]) -> None:
        if self.broker_configs.get(entity) != configs:
            self.broker_configs[entity] = dict(configs)
            self._notify(ClusterEvent("BROKER_CONFIG_CHANGED", entity))

    async def alter_broker_configs(
        self,
        entity: str,
        update: Callable[[dict[str, str]], dict[str, str]],
        *,
        validate_only: bool = False,
    ) -> dict[str, str]:
        """Compare-and-set the dynamic configs of ``entity`` ("<default>" or a broker id) at
        /config/brokers/<entity>, with a change notification (AdminZkClient.changeBrokerConfig).
        ``update(stored) -> new`` may raise KafkaError.  Returns the new set.  Store trouble:
        KafkaError REQUEST_TIMED_OUT (connection) or UNKNOWN."""
        try:
            old, new = await config_changes.write_entity_config(
                self.store, f"brokers/{entity}", update, validate_only=validate_only
            )
        except ConnectionLossError as e:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"altering broker configs: {e}") from e
        except StoreError as e:
            raise KafkaError(ErrorCode.UNKNOWN, f"could not alter broker configs: {e}") from e
        if not validate_only:
            log.info("broker configs of %s: %s -> %s", entity, old, new)
            if entity in self._broker_entities():
                self._set_broker_config(entity, new)
        return new

    def _update_topic(self, info: TopicInfo) -> None:
        old = self.topics.get(info.name)
        if old != info or _zk_versions(old) != _zk_versions(info):
            self.topics[info.name] = info
            self._notify(ClusterEvent("TOPIC_CHANGED", info.name))

    def _notify(self, event: ClusterEvent) -> None:
        if self._loop is None:
            return
        for cb in list(self._listeners):
            self._loop.call_soon(self._call_listener, cb, event)

    @staticmethod
    def _call_listener(cb: Listener, event: ClusterEvent) -> None:
        try:
            cb(event)
        except Exception:
            log.exception("cluster listener %r failed on %s", cb, event)

    # ------------------------------------------------------------------ topics

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
        """Create a topic the way Kafka's ZkAdminManager.createTopics does (same checks, same
        order, same error codes and messages), in one store multi.  Raises KafkaError.

        ``assignments`` (partition -> replica broker ids, already validated by the caller)
        replaces the computed replica assignment."""
        configs = dict(configs or {})
        if name in self.topics:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        nulls = [k for k, v in configs.items() if v is None]
        if nulls:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                f"Null value not supported for topic configs: {','.join(nulls)}",
            )
        if assignments is not None:
            assignment = {p: list(r) for p, r in sorted(assignments.items())}
        else:
            self._check_partition_capacity(num_partitions, replication_factor)
            assignment = assign_replicas_to_brokers(
                list(self.brokers), num_partitions, replication_factor, self.rng
            )
        self._check_broker_partitions(assignment.values())
        validate_topic_name(name)
        try:
            if await self.store.exists(paths.delete_topic(name)) is not None:
                raise KafkaError(
                    ErrorCode.TOPIC_ALREADY_EXISTS, f'Topic "{name}" is already marked for deletion'
                )
            existing = await self.store.get_children(paths.TOPICS)
        except ConnectionLossError as e:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, str(e)) from e
        if has_collision_chars(name):
            unified = unify_collision_chars(name)
            colliding = [t for t in existing if t != name and unify_collision_chars(t) == unified]
            if colliding:
                raise KafkaError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"Topic '{name}' collides with existing topics: {', '.join(colliding)}",
                )
        if name in existing:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        clean_configs = validate_topic_configs(configs)

        topic_id = paths.random_kafka_uuid()
        epoch = self.controller_epoch
        partitions = {
            p: PartitionState(replicas[0], 0, list(replicas), list(replicas), epoch, 0)
            for p, replicas in assignment.items()
        }
        info = TopicInfo(name, topic_id, partitions, clean_configs, 0)
        if validate_only:
            return info

        ops: list[Op] = [
            Create(paths.topic(name), paths.encode_topic(topic_id, assignment)),
            Create(paths.partitions(name)),
        ]
        for p, st in partitions.items():
            ops.append(Create(paths.partition(name, p)))
            ops.append(
                Create(
                    paths.partition_state(name, p),
                    paths.encode_partition_state(st.leader, st.leader_epoch, st.isr, epoch),
                )
            )
        config_data = paths.encode_topic_config(clean_configs)
        try:
            config_exists = await self.store.exists(paths.topic_config(name)) is not None
            if config_exists:  # left over from an earlier attempt: Kafka overwrites it
                ops.append(SetData(paths.topic_config(name), config_data))
            else:
                ops.append(Create(paths.topic_config(name), config_data))
            await self.store.multi(ops)
        except NodeExistsError as e:
            if e.path == paths.topic(name):
                raise KafkaError(
                    ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
                ) from e
            raise KafkaError(ErrorCode.UNKNOWN, f"could not create topic {name}: {e}") from e
        except ConnectionLossError as e:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"creating {name}: {e}") from e
        except StoreError as e:
            raise KafkaError(ErrorCode.UNKNOWN, f"could not create topic {name}: {e}") from e
        self._local_gen += 1
        self._locally_written[name] = self._local_gen
        self._update_topic(info)
        self._mark(("topic", name))  # read it back once, which sets the watches on its znodes
        return info

    # ------------------------------------------------------------------ partition limits

    def _replica_counts(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for info in self.topics.values():
            for st in info.partitions.values():
                for b in st.replicas:
                    counts[b] = counts.get(b, 0) + 1
        return counts

    def _limit_error(self, detail: str) -> KafkaError:
        return KafkaError(
            ErrorCode.POLICY_VIOLATION,
            f"{detail}, over max.broker.partitions={self.max_broker_partitions}.",
        )

    def _check_partition_capacity(self, new_partitions: int, replication_factor: int) -> None:
        """Refuse before computing an assignment when the live brokers together cannot host
        the new replicas (a count of 2**31 - 1 must not be assigned one by one first)."""
        if new_partitions <= 0 or replication_factor <= 0:
            return  # assign_replicas_to_brokers answers these
        capacity = self.max_broker_partitions * max(1, len(self.brokers))
        total = sum(self._replica_counts().values()) + new_partitions * replication_factor
        if total > capacity:
            raise self._limit_error(
                f"{new_partitions} new partitions (replication factor {replication_factor}) "
                f"would make {total} partition replicas on {len(self.brokers)} broker(s)"
            )

    def _check_broker_partitions(self, new_replicas: Iterable[list[int]]) -> None:
        """POLICY_VIOLATION when the new replicas would put any broker over
        max.broker.partitions (KIP-578's broker limit)."""
        added: dict[int, int] = {}
        for replicas in new_replicas:
            for b in replicas:
                added[b] = added.get(b, 0) + 1
        counts = self._replica_counts()
        for b in sorted(added):
            total = counts.get(b, 0) + added[b]
            if total > self.max_broker_partitions:
                raise self._limit_error(
                    f"{added[b]} new partition replicas would make {total} on broker {b}"
                )

    async def alter_topic_configs(
        self,
        name: str,
        new_configs: dict[str, str] | Callable[[dict[str, str]], dict[str, str]],
        *,
        validate_only: bool = False,
    ) -> dict[str, str]:
        """Replace a topic's config overrides in /config/topics/<t>, with a change notification
        (Kafka's AdminZkClient.changeTopicConfig; coord/config_changes.py): ``new_configs`` is the new set, or a function from the
        stored set to the new one (incremental changes; it may raise KafkaError).  The result
        goes through Kafka's checks (:func:`validate_topic_configs`, INVALID_CONFIG) and is
        written with compare-and-set on the znode version, re-reading and re-applying the
        function when another writer got in first.  validate_only: everything but the write.
        Returns the configs written (or that would be).  Raises KafkaError:
        UNKNOWN_TOPIC_OR_PARTITION for an unknown topic, INVALID_CONFIG, REQUEST_TIMED_OUT when
        the store cannot be reached."""
        if name not in self.topics:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
            )

        def update(current: dict[str, str]) -> dict[str, str]:
            wanted = new_configs(current) if callable(new_configs) else new_configs
            return validate_topic_configs(dict(wanted))

        try:
            current, clean = await config_changes.write_entity_config(
                self.store, f"topics/{name}", update, validate_only=validate_only
            )
        except BadVersionError:
            raise KafkaError(
                ErrorCode.UNKNOWN, f"configs of {name} keep changing concurrently; try again"
            ) from None
        except ConnectionLossError as e:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"altering configs of {name}: {e}") from e
        except StoreError as e:
            raise KafkaError(ErrorCode.UNKNOWN, f"could not alter configs of {name}: {e}") from e
        if validate_only:
            return clean
        log.info("topic %s: configs %s -> %s", name, current, clean)
        info = self.topics.get(name)
        if info is not None:
            self._update_topic(dataclasses.replace(info, configs=clean))
        self._mark(("config", name))  # read it back (and keep its watch set)
        return clean

    async def delete_topic(self, name: str) -> None:
        """Delete a topic's znodes (assignment, partition states, config) in one multi.  Kafka's
        ZooKeeper controller does this after /admin/delete_topics/<t> appears; pybroker's
        controller deletes at once.  Brokers drop the partition logs on the TOPIC_DELETED event."""
        if name not in self.topics:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name}")
        try:
            ops: list[Op] = []
            try:
                partitions = await self.store.get_children(paths.partitions(name))
            except NoNodeError:
                partitions = []
            for child in partitions:
                p = int(child)
                for leaf in await self.store.get_children(paths.partition(name, p)):
                    ops.append(Delete(paths.partition(name, p) + "/" + leaf))
                ops.append(Delete(paths.partition(name, p)))
            if partitions or await self.store.exists(paths.partitions(name)) is not None:
                ops.append(Delete(paths.partitions(name)))
            ops.append(Delete(paths.topic(name)))
            if await self.store.exists(paths.topic_config(name)) is not None:
                ops.append(Delete(paths.topic_config(name)))
            await self.store.multi(ops)
        except NoNodeError as e:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name} vanished") from e
        except ConnectionLossError as e:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"deleting {name}: {e}") from e
        except StoreError as e:
            raise KafkaError(ErrorCode.UNKNOWN, f"could not delete topic {name}: {e}") from e
        self._local_gen += 1
        self._locally_written[name] = self._local_gen
        if self.topics.pop(name, None) is not None:
            self._notify(ClusterEvent("TOPIC_DELETED", name))

    async def create_partitions(
        self,
        name: str,
        count: int,
        assignments: list[list[int]] | None = None,
        *,
        validate_only: bool = False,
    ) -> TopicInfo:
        """Grow a topic to ``count`` partitions (Kafka's AdminZkClient.addPartitions): new
        replicas spread over live brokers unless ``assignments`` names them; the topic znode is
        rewritten with compare-and-set and the new partition states created in one multi."""
        info = self.topics.get(name)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name}")
        if any(st.being_reassigned for st in info.partitions.values()):
            # Kafka's ZkAdminManager.createPartitions (the topic znode holds the reassignment)
            raise KafkaError(
                ErrorCode.REASSIGNMENT_IN_PROGRESS, "A partition reassignment is in progress."
            )
        current = len(info.partitions)
        if count <= current:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {current} partitions, {count} is not enough to increase it.",
            )
        rf = len(next(iter(info.partitions.values())).replicas)
        if assignments is not None:
            if len(assignments) != count - current:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Increasing the number of partitions by {count - current} but "
                    f"{len(assignments)} assignments provided.",
                )
            for replicas in assignments:
                if len(replicas) != rf or len(set(replicas)) != rf:
                    raise KafkaError(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"Inconsistent replication factor between partitions, expected {rf}.",
                    )
                unknown = set(replicas) - set(self.brokers)
                if unknown:
                    raise KafkaError(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"Unknown broker(s) in replica assignment: {sorted(unknown)}.",
                    )
            added = {current + i: list(r) for i, r in enumerate(assignments)}
        else:
            self._check_partition_capacity(count - current, rf)
            added = assign_replicas_to_brokers(
                list(self.brokers),
                count - current,
                rf,
                self.rng,
                start_partition_id=current,
            )
            added = {current + i: r for i, (_, r) in enumerate(sorted(added.items()))}
        self._check_broker_partitions(added.values())
        epoch = self.controller_epoch
        partitions = dict(info.partitions)
        for p, replicas in added.items():
            partitions[p] = PartitionState(replicas[0], 0, list(replicas), list(replicas), epoch, 0)
        new_info = dataclasses.replace(info, partitions=partitions)
        if validate_only:
            return new_info
        try:
            _, stat = await self.store.get(paths.topic(name))
            assignment = {p: list(st.replicas) for p, st in partitions.items()}
            ops: list[Op] = [
                SetData(
                    paths.topic(name), paths.encode_topic(info.topic_id, assignment), stat.version
                )
            ]
            for p, replicas in added.items():
                ops.append(Create(paths.partition(name, p)))
                ops.append(
                    Create(
                        paths.partition_state(name, p),
                        paths.encode_partition_state(replicas[0], 0, list(replicas), epoch),
                    )
                )
            await self.store.multi(ops)
        except (BadVersionError, NodeExistsError) as e:
            raise KafkaError(
                ErrorCode.REASSIGNMENT_IN_PROGRESS, f"topic {name} changed concurrently: {e}"
            ) from e
        except NoNodeError as e:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name} vanished") from e
        except ConnectionLossError as e:
            raise KafkaError(
                ErrorCode.REQUEST_TIMED_OUT, f"adding partitions to {name}: {e}"
            ) from e
        self._local_gen += 1
        self._locally_written[name] = self._local_gen
        new_info = dataclasses.replace(new_info, assignment_version=stat.version + 1)
        self._update_topic(new_info)
        self._mark(("topic", name))
        return new_info

    # ------------------------------------------------------------------ ISR writes by leaders

    async def update_isr(
        self,
        topic: str,
        partition: int,
        new_isr: list[int],
        *,
        leader: int,
        leader_epoch: int,
    ) -> PartitionState | None:
        """The leader's ISR write (Kafka ZK mode's AlterIsr without the controller hop): read
        the state znode with its version; if its leader or leader_epoch is not the caller's
        (the caller was deposed) return None; else compare-and-set the new ISR (same leader,
        same leader_epoch, controller_epoch kept), re-reading and retrying when another writer
        got in first.  Updates the cache at once and returns the new state (with its
        ``zk_version``).  None also when the partition does not exist (any more).

        Raises ValueError when new_isr is empty, lacks the leader, or names a non-replica;
        ConnectionLossError when the store cannot be reached (the outcome of the last write is
        then unknown: the caller re-reads through the cache or retries)."""
        isr = list(dict.fromkeys(new_isr))
        if leader not in isr:
            raise ValueError(f"the ISR {new_isr} must contain the leader {leader}")
        path = paths.partition_state(topic, partition)
        while True:
            replicas = await self._replicas_of(topic, partition)
            if replicas is None:
                return None
            unknown = [b for b in isr if b not in replicas]
            if unknown:
                raise ValueError(f"{unknown} are not replicas of {topic}-{partition}: {replicas}")
            try:
                data, stat = await self.store.get(path)
            except NoNodeError:
                return None
            st = paths.decode_partition_state(data)
            current = PartitionState(
                st["leader"],
                st["leader_epoch"],
                replicas,
                st["isr"],
                st["controller_epoch"],
                stat.version,
            )
            if current.leader != leader or current.leader_epoch != leader_epoch:
                self._set_partition_state(topic, partition, current)
                log.info(
                    "broker %d: ISR update of %s-%d refused: leader %d epoch %d now, not %d/%d",
                    self.broker_id,
                    topic,
                    partition,
                    current.leader,
                    current.leader_epoch,
                    leader,
                    leader_epoch,
                )
                return None
            if current.isr == isr:
                self._set_partition_state(topic, partition, current)
                return current
            data = paths.encode_partition_state(leader, leader_epoch, isr, current.controller_epoch)
            try:
                new_stat = await self.store.set(path, data, version=stat.version)
            except BadVersionError:
                continue  # someone wrote meanwhile: re-read, check we still lead, retry
            except NoNodeError:
                return None
            state = dataclasses.replace(current, isr=isr, zk_version=new_stat.version)
            log.info(
                "broker %d: %s-%d ISR %s -> %s (leader %d, leader_epoch %d, zk version %d)",
                self.broker_id,
                topic,
                partition,
                current.isr,
                isr,
                leader,
                leader_epoch,
                new_stat.version,
            )
            self._set_partition_state(topic, partition, state)
            return state

    async def _replicas_of(self, topic: str, partition: int) -> list[int] | None:
        info = self.topics.get(topic)
        if info is not None and partition in info.partitions:
            return list(info.partitions[partition].replicas)
        try:
            data, _ = await self.store.get(paths.topic(topic))
        except NoNodeError:
            return None
        _, assignment = paths.decode_topic(data)
        r = assignment.get(partition)
        return None if r is None else list(r)

    # ------------------------------------------------------------------ producer ids

    async def allocate_producer_id(self) -> int:
        """The next producer id: from the block in hand, claiming a new block of 1000 from
        /latest_producer_id_block with compare-and-set when it is used up (Kafka's
        ZkProducerIdManager)."""
        while self._pid_next > self._pid_end:
            if self._pid_claim is None:
                self._pid_claim = asyncio.ensure_future(self._claim_producer_id_block())
            claim = self._pid_claim
            try:
                await asyncio.shield(claim)
            finally:
                if self._pid_claim is claim and claim.done():
                    self._pid_claim = None
        pid = self._pid_next
        self._pid_next += 1
        return pid

    async def _claim_producer_id_block(self) -> None:
        while True:
            try:
                data, stat = await self.store.get(paths.PRODUCER_ID_BLOCK)
            except NoNodeError:
                await self.store.ensure_path(paths.PRODUCER_ID_BLOCK)
                continue
            current = paths.decode_producer_id_block(data)
            start = 0 if current is None else current[2] + 1
            if start > 2**63 - 1 - PRODUCER_ID_BLOCK_SIZE:
                raise KafkaError(
                    ErrorCode.UNKNOWN,
                    "Exhausted all producerIds as the next block's end "
                    "producerId has exceeded the int64 type limit",
                )
            end = start + PRODUCER_ID_BLOCK_SIZE - 1
            try:
                await self.store.set(
                    paths.PRODUCER_ID_BLOCK,
                    paths.encode_producer_id_block(self.broker_id, start, end),
                    version=stat.version,
                )
            except BadVersionError:
                continue  # another broker claimed a block meanwhile: retry on its result
            self._pid_next, self._pid_end = start, end
            return
