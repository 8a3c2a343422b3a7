"""Where the transaction coordinator keeps its state: the storage interface and its
metadata-store implementation (``transaction.state.storage=zookeeper``, the default).

``TxnStorage`` is what the coordinator needs of a storage: every write is conditional on the
version the coordinator last saw (a coordinator that lost ownership fails instead of
overwriting its successor's state), and ``coordinator_epoch`` is what the markers of a
Prepare write carry (it only grows for a transactional.id).  The other implementation is
``__transaction_state`` (coord/txn/state_log.py, ``transaction.state.storage=kafka``).

Here: one znode per transactional.id, ``/transactions/<encoded transactional.id>`` holding
``TxnMetadata.to_dict()`` as JSON.  A write is ONE ``multi`` (a ``Create`` or a
version-checked ``SetData``), so a BatchingStore (metadata/batching.py) merges the writes of
many transactional ids into one round trip; a read is one ``get``.  The coordinator epoch is
the znode's version.
"""

from __future__ import annotations

import asyncio
import json
from typing import Protocol

from pybroker.coord.metadata.paths import component_to_name, name_to_component
from pybroker.coord.metadata.store import (
    Create,
    Delete,
    InvalidPathError,
    MetadataStore,
    NoNodeError,
    SetData,
)
from pybroker.coord.txn.state import TxnMetadata

TRANSACTIONS = "/transactions"


class TxnStorage(Protocol):
    async def load_all(self) -> dict[str, tuple[TxnMetadata, int]]:
        """Every transactional.id this broker may coordinate -> (metadata, version)."""
        ...

    async def load(self, transactional_id: str) -> tuple[TxnMetadata, int] | None: ...

    async def put(self, md: TxnMetadata, version: int | None) -> int:
        """Write ``md`` if the stored version is still ``version`` (None: nothing stored);
        the new version.  Raises BadVersionError / NodeExistsError when it moved."""
        ...

    async def delete(self, transactional_id: str, version: int) -> None: ...

    def coordinator_epoch(self, transactional_id: str, version: int) -> int:
        """The coordinator epoch of markers written for the state stored at ``version``."""
        ...


def txn_path(transactional_id: str) -> str:
    """Any transactional.id maps to one valid znode name (encoded as group ids are:
    metadata/paths.name_to_component; "", "." and ".." included)."""
    return f"{TRANSACTIONS}/{name_to_component(transactional_id)}"


def encode(md: TxnMetadata) -> bytes:
    return json.dumps(md.to_dict(), separators=(",", ":")).encode()


class TxnStateStore:
    """TxnStorage in the metadata store (module docstring)."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._root_exists = False

    async def load_all(self) -> dict[str, tuple[TxnMetadata, int]]:
        """Every stored transactional.id -> (metadata, znode version)."""
        await self._ensure_root()
        children = await self.store.get_children(TRANSACTIONS)
        loaded = await asyncio.gather(*(self.load(component_to_name(c)) for c in children))
        return {got[0].transactional_id: got for got in loaded if got is not None}

    async def load(self, transactional_id: str) -> tuple[TxnMetadata, int] | None:
        try:
            data, stat = await self.store.get(txn_path(transactional_id))
        except (NoNodeError, InvalidPathError):  # (longer than a store path: nothing stored)
            return None
        return TxnMetadata.from_dict(json.loads(data)), stat.version

    async def put(self, md: TxnMetadata, version: int | None) -> int:
        """Write ``md``; ``version`` None creates the node (NodeExistsError if someone did),
        else compare-and-set (BadVersionError if it moved).  Returns the new version."""
        path = txn_path(md.transactional_id)
        if version is None:
            await self._ensure_root()
            await self.store.multi([Create(path, encode(md))])
            return 0
        await self.store.multi([SetData(path, encode(md), version)])
        return version + 1

    async def delete(self, transactional_id: str, version: int) -> None:
        await self.store.multi([Delete(txn_path(transactional_id), version)])

    def coordinator_epoch(self, transactional_id: str, version: int) -> int:
        return version

    async def _ensure_root(self) -> None:
        if not self._root_exists:
            await self.store.ensure_path(TRANSACTIONS)
            self._root_exists = True


__all__ = ["TRANSACTIONS", "TxnStateStore", "TxnStorage", "encode", "txn_path"]
