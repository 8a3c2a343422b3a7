"""The classic protocol's requests (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
DescribeGroups) in the group coordinator: a classic group answers them through its state
machine (classic.py); a KIP-848 group with members, through its classic members
(ConsumerGroup.classic_*, online migration)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pybroker.coord.group.classic import Group, JoinRequest
from pybroker.coord.group.consumer import ConsumerGroup
from pybroker.coord.group.consumer_member import ConsumerGroupError
from pybroker.coord.group.coordinator_core import GroupCoordinatorCore
from pybroker.coord.group.responses import join_error
from pybroker.errors import ErrorCode

log = logging.getLogger(__name__)


class ClassicGroupRequests(GroupCoordinatorCore):
    async def join(self, group_id: str, req: JoinRequest) -> dict:
        code = await self.load_group(group_id)
        if code is not None:
            return join_error(code, req.member_id)
        cg = self.groups.get(group_id)
        if isinstance(cg, ConsumerGroup) and not cg.is_empty and not cg.dead:
            # a classic member of a KIP-848 group (online migration)
            try:
                resp = cg.classic_join(self.clock.time_ms(), req, self._topics())
            except ConsumerGroupError as e:
                resp = join_error(e.code, req.member_id)
            self._schedule(group_id)
            code = await self._persist(cg)
            if code is not None:
                return join_error(code, req.member_id)
            return resp
        if cg is None:
            code = await self._share_group_holds(group_id)
            if code is not None:  # Kafka's classicGroupJoin: INCONSISTENT_GROUP_PROTOCOL
                return join_error(code)
            if self.groups.get(group_id) is not None:
                # another request created the group while the share groups were read (a
                # consumer-protocol group among them): start again with that one
                return await self.join(group_id, req)
        g = self._get(group_id, create=True)
        assert g is not None
        fut = asyncio.get_running_loop().create_future()
        self._deliver(group_id, g.join(fut, self.clock.time_ms(), req))
        return await fut

    async def sync(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> dict:
        cg = self.groups.get(group_id)
        if isinstance(cg, ConsumerGroup) and not cg.is_empty and not cg.dead:
            try:
                resp = cg.classic_sync(
                    self.clock.time_ms(),
                    member_id,
                    instance_id,
                    generation_id,
                    protocol_type,
                    protocol_name,
                )
            except ConsumerGroupError as e:
                resp = {
                    "error_code": e.code,
                    "protocol_type": None,
                    "protocol_name": None,
                    "assignment": b"",
                }
            self._schedule(group_id)
            return resp
        g = self._get(group_id, create=False)
        if g is None:
            return {"error_code": ErrorCode.UNKNOWN_MEMBER_ID, "assignment": b""}
        fut = asyncio.get_running_loop().create_future()
        outputs = g.sync(
            fut,
            self.clock.time_ms(),
            member_id,
            instance_id,
            generation_id,
            protocol_type,
            protocol_name,
            assignments,
        )
        self._deliver(group_id, outputs)
        return await fut

    def heartbeat(
        self, group_id: str, member_id: str, instance_id: str | None, generation_id: int
    ) -> int:
        cg = self.groups.get(group_id)
        if isinstance(cg, ConsumerGroup) and not cg.is_empty and not cg.dead:
            code = cg.classic_heartbeat(self.clock.time_ms(), member_id, instance_id, generation_id)
            self._schedule(group_id)
            return code
        g = self._get(group_id, create=False)
        if g is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        code = g.heartbeat(self.clock.time_ms(), member_id, instance_id, generation_id)
        self._schedule(group_id)
        return code

    async def leave(self, group_id: str, leaving: list[tuple[str, str | None]]) -> list[int]:
        cg = self.groups.get(group_id)
        if isinstance(cg, ConsumerGroup) and not cg.is_empty and not cg.dead:
            errors = cg.classic_leave(self.clock.time_ms(), leaving, self._topics())
            self._schedule(group_id)
            code = await self._persist(cg)
            return errors if code is None else [code] * len(leaving)
        g = self._get(group_id, create=False)
        if g is None:
            return [ErrorCode.UNKNOWN_MEMBER_ID] * len(leaving)
        errors, outputs = g.leave(self.clock.time_ms(), leaving)
        self._deliver(group_id, outputs)
        return errors

    def describe(self, group_id: str) -> dict[str, Any] | None:
        """DescribeGroups: classic groups only; a KIP-848 group is not found there, as in
        Kafka 3.9 (ConsumerGroupDescribe describes it)."""
        g = self.groups.get(group_id)
        return g.describe() if isinstance(g, Group) else None
