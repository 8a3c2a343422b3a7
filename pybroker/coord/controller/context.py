"""What a controller works with: its view of the cluster (:class:`ClusterView`, the narrow
interface of metadata/cluster.py's Cluster it reads and writes through) and the fence of its
epoch (:class:`ControllerFence`).

Fencing (Kafka's controller-epoch check via ``multi``): every controller write is a store multi
that starts with ``Check(/controller_epoch, <its version when we won>)``, so a controller whose
epoch was superseded fails atomically and writes nothing.  A failure on that check, or a state
read that carries a newer controller epoch, fences the controller: it stops and the Cluster
reads /controller again (``ClusterView.recheck_controller``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from pybroker.coord.metadata import paths
from pybroker.coord.metadata.model import Listener, PartitionState, TopicInfo
from pybroker.coord.metadata.store import Check, ConnectionLossError, MetadataStore, Op, StoreError

log = logging.getLogger(__name__)


class ClusterView(Protocol):
    """The controller's view of the Cluster: the cache it reads, its settings, and the writer
    interface through which what it wrote enters the cache at once."""

    store: MetadataStore
    broker_id: int
    topics: dict[str, TopicInfo]
    # the broker default of unclean.leader.election.enable (topic configs override it)
    unclean_leader_election_enable: bool
    # auto.leader.rebalance.enable and its interval / threshold
    auto_leader_rebalance_enable: bool
    leader_imbalance_check_interval_s: float
    leader_imbalance_per_broker_percentage: int

    def add_listener(self, cb: Listener) -> None: ...

    def remove_listener(self, cb: Listener) -> None: ...

    def put_partition_state(self, name: str, p: int, state: PartitionState) -> None: ...

    def put_partition_states(self, name: str, states: dict[int, PartitionState]) -> None: ...

    def awaiting_read_back(self, name: str, p: int) -> bool: ...

    def put_assignment(
        self, name: str, p: int, state: PartitionState, topic_version: int
    ) -> None: ...

    def recheck_controller(self) -> None: ...


class ControllerFencedError(Exception):
    """This controller's epoch was superseded (or it was stopped): it must not write."""


class ControllerFence:
    """One controller epoch: whether it may still write, and its fenced multis."""

    def __init__(
        self,
        broker_id: int,
        epoch: int,
        epoch_zk_version: int,
        on_fenced: Callable[[], None],
    ) -> None:
        """``epoch_zk_version``: the znode version of /controller_epoch right after we wrote
        ``epoch``; ``on_fenced``: called once when a write or a read finds the epoch moved."""
        self.broker_id = broker_id
        self.epoch = epoch
        self.epoch_zk_version = epoch_zk_version
        self.active = True
        self._on_fenced = on_fenced

    def check_active(self) -> None:
        if not self.active:
            raise ControllerFencedError(f"controller epoch {self.epoch} is not active")

    def fence(self, why: str) -> None:
        if self.active:
            log.warning(
                "broker %d: controller epoch %d is fenced (%s); stepping down",
                self.broker_id,
                self.epoch,
                why,
            )
        self.active = False
        self._on_fenced()

    def check_read(self, controller_epoch: int, what: str) -> None:
        """A state read stamped with ``controller_epoch``: a newer one than ours fences us."""
        if controller_epoch > self.epoch:
            self.fence(f"{what} carries controller epoch {controller_epoch}")
            raise ControllerFencedError(f"newer controller epoch {controller_epoch}")

    async def multi_many(
        self, store: MetadataStore, batches: list[list[Op]]
    ) -> list[StoreError | None]:
        """Each batch in its own multi behind the epoch check, pipelined (store.multi_many;
        Kafka wraps each controller write so): each batch's outcome (None, or its error with
        ``op_index`` counting the check).  Raises ControllerFencedError when a check failed
        (this controller is then fenced)."""
        self.check_active()
        check = Check(paths.CONTROLLER_EPOCH, self.epoch_zk_version)
        out = await store.multi_many([[check, *ops] for ops in batches])
        for e in out:
            if e is not None and e.op_index == 0 and not isinstance(e, ConnectionLossError):
                self.fence(f"{type(e).__name__} on {paths.CONTROLLER_EPOCH}")
                raise ControllerFencedError(str(e)) from e
        return out

    async def multi(self, store: MetadataStore, ops: list[Op]) -> None:
        """``ops`` in one multi behind the epoch check.  Raises ControllerFencedError when the
        check fails (this controller is then fenced), else the store's error (a lost
        connection, or a failed op: its ``op_index`` counts the check)."""
        self.check_active()
        try:
            await store.multi([Check(paths.CONTROLLER_EPOCH, self.epoch_zk_version), *ops])
        except StoreError as e:
            if e.op_index == 0 and not isinstance(e, ConnectionLossError):
                self.fence(f"{type(e).__name__} on {paths.CONTROLLER_EPOCH}")
                raise ControllerFencedError(str(e)) from e
            raise
