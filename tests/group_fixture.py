"""A GroupCoordinator on a LocalStore for unit tests (no broker): one place for the configs
the group tests share."""

from __future__ import annotations

from collections.abc import Callable

from pybroker.clock import Clock
from pybroker.coord.group.classic import GroupConfig
from pybroker.coord.group.consumer_member import TopicMeta
from pybroker.coord.group.coordinator import GroupCoordinator
from pybroker.coord.group.offsets import OffsetStore
from pybroker.coord.metadata.local import LocalStore


async def started_coordinator(
    store: LocalStore, clock: Clock, topics: Callable[[], TopicMeta] | None = None
) -> GroupCoordinator:
    """A started coordinator of every group, offsets in ``store``, rebalances without delay."""
    gc = GroupCoordinator(
        OffsetStore(store, clock),
        clock,
        GroupConfig(min_session_timeout_ms=10, initial_rebalance_delay_ms=0),
        offsets_retention_ms=7 * 86_400_000,
        offsets_retention_check_interval_ms=600_000,
        offset_metadata_max_bytes=4096,
        topics=topics,
    )
    await gc.start()
    return gc
