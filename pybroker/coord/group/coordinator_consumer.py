"""The consumer protocol's requests (KIP-848: ConsumerGroupHeartbeat,
ConsumerGroupDescribe, OffsetFetch's member check) in the group coordinator, with the online
upgrade of a classic group that a consumer-protocol member joins (migration.py)."""

from __future__ import annotations

import logging
from typing import Any

from pybroker.coord.group.classic import (
    Group,
    GroupState,
)
from pybroker.coord.group.consumer import ConsumerGroup
from pybroker.coord.group.consumer_member import (
    ConsumerGroupError,
    HeartbeatRequest,
)
from pybroker.coord.group.coordinator_core import (
    GroupCoordinatorCore,
)
from pybroker.coord.group.migration import (
    MigrationRefused,
    can_upgrade,
    upgrade,
)
from pybroker.coord.group.responses import heartbeat_error
from pybroker.errors import ErrorCode

log = logging.getLogger(__name__)


class ConsumerGroupRequests(GroupCoordinatorCore):
    async def describe_consumer_group(self, group_id: str) -> dict[str, Any] | None:
        """ConsumerGroupDescribe: a KIP-848 group's entry; None when there is none.  Raises
        StoreError when the group's state cannot be loaded."""
        self.check_membership()
        await self._ensure_loaded(group_id)
        g = self.groups.get(group_id)
        if not isinstance(g, ConsumerGroup) or g.dead:
            return None
        return g.describe_consumer(self._topics())

    async def consumer_heartbeat(self, group_id: str, req: HeartbeatRequest) -> dict:
        """ConsumerGroupHeartbeat: the response body (its error code included), sent once the
        change it made is stored."""
        code = await self.load_group(group_id)
        if code is not None:
            return heartbeat_error(code, "The coordinator is loading the group.")
        now = self.clock.time_ms()
        g = self.groups.get(group_id)
        if isinstance(g, Group):
            if g.state in (GroupState.EMPTY, GroupState.DEAD):
                g = None  # an empty classic group (offsets only) becomes a consumer group
            else:
                why = can_upgrade(g, self.consumer_config) if req.member_epoch == 0 else ""
                if why is not None:
                    if why:
                        log.info("group %s: cannot upgrade to a consumer group: %s", group_id, why)
                    return heartbeat_error(
                        ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group."
                    )
                try:
                    cg, outputs = upgrade(g, self.consumer_config, now, self._topics())
                except MigrationRefused as e:
                    return heartbeat_error(ErrorCode.GROUP_ID_NOT_FOUND, str(e))
                log.info("group %s: upgraded from classic to consumer (online migration)", group_id)
                self.groups[group_id] = cg
                self._deliver(group_id, outputs)
                g = cg
        if g is None or g.dead:
            seen = self.groups.get(group_id)
            code = await self._share_group_holds(group_id)
            if code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL:
                return heartbeat_error(
                    ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group."
                )
            if code is not None:
                return heartbeat_error(code, "The coordinator could not read the group.")
            if self.groups.get(group_id) is not seen:
                # another request created or replaced the group while the share groups were
                # read: start again with that one (replacing it would fence its members)
                return await self.consumer_heartbeat(group_id, req)
            if req.member_epoch != 0:
                # no such group (stored or in memory): the member is unknown and rejoins at
                # epoch 0 (a GROUP_ID_NOT_FOUND would be fatal to the Java consumer)
                return heartbeat_error(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"Member {req.member_id} is not a member of group {group_id}.",
                )
            g = ConsumerGroup(group_id, self.consumer_config, state_timestamp_ms=now)
            self.groups[group_id] = g
        before = (g.group_epoch, g.assignment_epoch, len(g.members))
        had_consumer_members = not g.all_classic
        try:
            resp = g.heartbeat(now, req, self._topics())
        except ConsumerGroupError as e:
            resp = heartbeat_error(e.code, e.message)
        self._schedule(group_id)
        # only the heartbeat's member's record can have changed, and those of the members
        # whose target the heartbeat recomputed (comparing every member's record on each
        # join made a group's joins quadratic: W24, docs/scale.md)
        member = resp.get("member_id") or req.member_id
        code = await self._persist(g, [member, *sorted(g.take_target_changed())])
        if code is not None:
            return heartbeat_error(code, "The group's state could not be stored.")
        if had_consumer_members and len(g.members) < before[2]:
            await self._maybe_downgrade(g, before[0])
        return resp

    async def validate_offset_fetch(self, group_id: str, member_id: str | None, epoch: int) -> int:
        """OffsetFetch v9+ with a member id and epoch: checked in a KIP-848 group only."""
        code = await self.load_group(group_id)
        if code is not None:
            return code
        g = self.groups.get(group_id)
        if isinstance(g, ConsumerGroup):
            return g.validate_offset_fetch(member_id, epoch)
        return ErrorCode.NONE
