"""What the request paths may use of the broker: the ``BrokerServices`` protocol.

The broker (pybroker/broker.py) implements it once started; handlers (``RequestContext.services``),
the connection, the server and the console see the broker only through it, so import-linter
sees the real edges (the types below are imported for checking only, and grimp counts those
imports too).  Structural: a new service is one line here and an attribute of the broker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pybroker.clock import Clock
    from pybroker.config import Config
    from pybroker.coord.group.coordinator import GroupCoordinator
    from pybroker.coord.group.group_configs import Bounds, GroupConfigCache
    from pybroker.coord.group.share_coordinator import ShareGroupCoordinator
    from pybroker.coord.metadata.cluster import Cluster
    from pybroker.coord.txn.coordinator import TransactionCoordinator
    from pybroker.dynamic_config import DynamicBrokerConfig
    from pybroker.fetch_session import FetchSessionCache
    from pybroker.internal_topics import InternalTopic
    from pybroker.log.manager import LogManager
    from pybroker.log.mover import LogDirMover
    from pybroker.metrics import BrokerMetrics
    from pybroker.purgatory import Purgatory
    from pybroker.quotas.manager import QuotaManager
    from pybroker.quotas.store import QuotaStore
    from pybroker.replica_manager import ReplicaManager
    from pybroker.security.authorizer import Authorizer
    from pybroker.security.credentials import CredentialStore
    from pybroker.share.manager import SharePartitionManager


class BrokerServices(Protocol):
    """The broker's parts a request may reach.  Those typed ``| None`` may be absent while
    the broker serves (no authorizer configured, no metrics listener, the transaction
    coordinator not started yet); the others exist from the moment the listeners accept."""

    config: Config  # the broker's settings; dynamic changes are applied to it in place
    dynamic: DynamicBrokerConfig  # KIP-226: the dynamic broker configs behind ``config``
    clock: Clock
    purgatory: Purgatory  # delayed produces and fetches
    fetch_sessions: FetchSessionCache  # KIP-227
    cluster: Cluster  # the metadata cache and the cluster's writers
    logs: LogManager
    log_mover: LogDirMover  # AlterReplicaLogDirs' copies between log dirs
    replicas: ReplicaManager  # append_records / read_from_log, roles, ISR
    groups: GroupCoordinator
    # share groups (KIP-932): the coordinator side, the leader side, the groups' own configs
    share_groups: ShareGroupCoordinator
    shares: SharePartitionManager
    group_configs: GroupConfigCache
    transactions: TransactionCoordinator | None
    # offsets.storage=kafka / transaction.state.storage=kafka: the internal topics (None: the
    # metadata store holds them; handlers/_topics.auto_create, write_txn_markers)
    offsets_topic: InternalTopic | None
    txn_topic: InternalTopic | None
    credentials: CredentialStore  # SCRAM credentials
    authorizer: Authorizer | None  # None: authorizer.class.name unset, everything allowed
    quota_store: QuotaStore
    quotas: QuotaManager | None
    metrics: BrokerMetrics | None  # None: no metrics.listener, nothing counted

    async def scram_fake_salt_key(self) -> bytes:
        """The cluster's secret for the salts answered to unknown SCRAM users."""
        ...

    def share_config_bounds(self) -> Bounds:
        """The group.share.min/max.* configs that group configs are held to."""
        ...

    def reload_tls(self) -> None:
        """New TLS contexts for the SSL listeners, their files read again."""
        ...
