"""A ReplicaManager over real logs in a temporary directory, beside a stand-in cluster view,
for tests of the replication layer without a broker (tests/test_replica_fetcher_rounds.py,
tests/test_topic_change_notes.py)."""

from __future__ import annotations

from types import SimpleNamespace

from pybroker.clock import ManualClock
from pybroker.log.manager import LogManager
from pybroker.log.partition_log import LogConfig
from pybroker.purgatory import Purgatory
from pybroker.replication.fetcher import ReplicaFetcher
from pybroker.replication.manager import ReplicaManager


def replica_manager(
    tmp_path, broker_id: int, cluster: SimpleNamespace, clock: ManualClock
) -> tuple[ReplicaManager, LogManager]:
    """Broker ``broker_id``'s ReplicaManager (replica.lag.time.max.ms 30 s, min ISR 1) over
    fresh logs under ``tmp_path``, reading ``cluster`` as its metadata view."""
    logs = LogManager([tmp_path], LogConfig(), clock)
    logs.load_all()
    manager = ReplicaManager(
        broker_id,
        cluster,  # type: ignore[arg-type]
        logs,
        Purgatory(),
        clock,
        replica_lag_time_max_ms=30_000,
        min_insync_replicas=lambda topic: 1,
        open_log=logs.get_or_create,
        fetcher_factory=ReplicaFetcher,
    )
    return manager, logs
