"""The group coordinator: the classic protocol's requests (coordinator_classic.py), the
consumer protocol's (KIP-848, coordinator_consumer.py) and committed offsets
(coordinator_offsets.py) over one core (coordinator_core.py: ownership, coordination terms,
timers, the groups' durable state).  Ownership and terms: docs/internals.md
("pybroker/coord/group/coordinator.py").
"""

from __future__ import annotations

import asyncio
import logging

from pybroker.coord.group.classic import Group
from pybroker.coord.group.consumer import ConsumerGroup
from pybroker.coord.group.coordinator_classic import ClassicGroupRequests
from pybroker.coord.group.coordinator_consumer import ConsumerGroupRequests
from pybroker.coord.group.coordinator_core import group_dead, group_empty
from pybroker.coord.group.coordinator_offsets import GroupOffsets
from pybroker.coord.metadata.store import StoreError
from pybroker.errors import ErrorCode

log = logging.getLogger(__name__)


class GroupCoordinator(ClassicGroupRequests, ConsumerGroupRequests, GroupOffsets):
    async def start(self) -> None:
        await self._adopt_groups()
        self._expiry_task = asyncio.create_task(self._expire_loop(), name="offset-expiry")

    def list_groups(self) -> list[Group | ConsumerGroup]:
        """The groups this broker coordinates now (ListGroups asks every broker)."""
        self.check_membership()
        return [g for g in self.groups.values() if not group_dead(g)]

    async def delete(self, group_id: str) -> int:
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if not group_empty(g):
            return ErrorCode.NON_EMPTY_GROUP
        try:
            await self.offsets.delete_group(group_id)
        except StoreError as e:
            log.warning("deleting group %s failed: %s", group_id, e)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self.groups.get(group_id) is g and group_empty(g):
            g.mark_dead(self.clock.time_ms())
            del self.groups[group_id]
            self._schedule(group_id)
            self.classic_store.save(group_id, None)
            await self.classic_store.flush(group_id)
        return ErrorCode.NONE
