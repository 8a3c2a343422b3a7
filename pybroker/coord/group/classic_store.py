"""Classic groups' metadata in the metadata store, so that it outlives a coordinator.

Kafka writes a classic group's metadata record (GroupMetadataValue) to __consumer_offsets when
a rebalance completes (the leader's SyncGroup) and when the group becomes Empty, and a
coordinator that loads the group takes its protocol type, generation and state time from it:
an Empty group that had "consumer" members is still listed as "consumer" after a restart.
pybroker keeps classic membership in memory (members rejoin after a restart, as after a
coordinator move), so it stores the group's fields without the members::

    /pybroker/classic_groups/<group>   {"version":1,"protocol_type":"consumer","generation":5,
                                        "protocol":"range","state":"Empty",
                                        "current_state_timestamp":<ms>}

(``<group>`` escaped as the offsets' znodes are: ``offsets.name_to_component``, so every group
id Kafka accepts maps to exactly one znode.)  A group loaded from it is Empty; an Empty record
gives the time the group became empty (offset retention counts from it), a Stable one "now".

Writes are upserts, last writer wins (the record is informative: offsets stay the source of
truth and are compare-and-set); ``save`` returns at once and one writer task per group writes
the latest wanted record, so records of one group land in the order they were saved and a
burst of changes costs one write.  ``None`` deletes the record.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from pybroker.coord.metadata import paths
from pybroker.coord.metadata.paths import component_to_name, name_to_component
from pybroker.coord.metadata.store import (
    MetadataStore,
    NoNodeError,
    StoreError,
    set_or_create,
)

log = logging.getLogger(__name__)

ROOT = paths.CLASSIC_GROUPS
_UNSET = object()


def group_path(group_id: str) -> str:
    return f"{ROOT}/{name_to_component(group_id)}"


def encode(record: dict[str, Any]) -> bytes:
    return json.dumps({"version": 1, **record}, separators=(",", ":"), sort_keys=True).encode()


class ClassicGroupStore:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._stored: dict[str, bytes | None] = {}  # what this broker last wrote or read
        self._wanted: dict[str, bytes | None] = {}  # saved, not yet written
        self._writers: dict[str, asyncio.Task[None]] = {}
        self._encoded: dict[str, tuple[dict[str, Any], bytes]] = {}  # save's last record

    async def groups(self) -> list[str]:
        """The ids of the groups with a stored record."""
        try:
            return [component_to_name(c) for c in await self.store.get_children(ROOT)]
        except NoNodeError:
            return []

    async def load(self, group_id: str) -> dict[str, Any] | None:
        """The group's record (None: none, or one this version cannot read).  Raises
        StoreError."""
        try:
            data, _ = await self.store.get(group_path(group_id))
        except NoNodeError:
            self._stored[group_id] = None
            return None
        self._stored[group_id] = data
        try:
            record = json.loads(data)
            if not isinstance(record, dict) or not isinstance(record.get("generation"), int):
                raise ValueError("not a group record")
        except ValueError as e:
            log.warning("group %s: its stored metadata cannot be read (%s)", group_id, e)
            return None
        return record

    def save(self, group_id: str, record: dict[str, Any] | None) -> None:
        """Store ``record`` (None: delete it) in the background.  (Called on every offset
        commit and heartbeat: the group's last record is remembered with its encoding.)"""
        if record is None:
            data = None
            self._encoded.pop(group_id, None)
        else:
            last = self._encoded.get(group_id)
            if last is not None and last[0] == record:
                data = last[1]
            else:
                data = encode(record)
                self._encoded[group_id] = (record, data)
        if group_id not in self._wanted and self._stored.get(group_id, _UNSET) == data:
            return  # stored already
        self._wanted[group_id] = data
        if group_id not in self._writers:
            task = asyncio.get_running_loop().create_task(self._write(group_id))
            self._writers[group_id] = task

    async def _put(self, group_id: str, data: bytes | None) -> None:
        """Write (None: delete) the group's record.  Raises StoreError."""
        path = group_path(group_id)
        if data is None:
            try:
                await self.store.delete(path)
            except NoNodeError:
                pass
        else:
            await set_or_create(self.store, path, data)

    async def _write(self, group_id: str) -> None:
        try:
            while group_id in self._wanted:
                data = self._wanted.pop(group_id)
                try:
                    await self._put(group_id, data)
                    self._stored[group_id] = data
                except StoreError as e:
                    self._stored.pop(group_id, None)
                    log.warning("group %s: storing its metadata failed: %s", group_id, e)
        finally:
            self._writers.pop(group_id, None)

    async def flush(self, group_id: str) -> None:
        """Wait until the group's saved records are written (or failed)."""
        while (task := self._writers.get(group_id)) is not None:
            await asyncio.shield(task)

    async def drain(self) -> None:
        """Wait for the writes under way (a clean shutdown keeps the last records)."""
        while self._writers:
            await asyncio.gather(*list(self._writers.values()), return_exceptions=True)
