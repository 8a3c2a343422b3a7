"""Transaction coordinator state in the metadata store: one JSON znode per transactional.id.

``/transactions/<encoded transactional.id>`` holds ``TxnMetadata.to_dict()``.  Every
write is a compare-and-set on the znode's version, so a coordinator that lost ownership (a
new one has already written) gets ``BadVersionError`` instead of overwriting the newer state;
the new coordinator reads everything with ``load_all`` and resumes in-flight transactions.
"""

from __future__ import annotations

import json

from pybroker.coord.metadata.paths import component_to_name, name_to_component
from pybroker.coord.metadata.store import InvalidPathError, MetadataStore
from pybroker.coord.txn.state import TxnMetadata

TRANSACTIONS = "/transactions"


def txn_path(transactional_id: str) -> str:
    """Any transactional.id maps to one valid znode name (encoded as group ids are:
    metadata/paths.name_to_component; "", "." and ".." included)."""
    return f"{TRANSACTIONS}/{name_to_component(transactional_id)}"


class TxnStateStore:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    async def load_all(self) -> dict[str, tuple[TxnMetadata, int]]:
        """Every stored transactional.id -> (metadata, znode version)."""
        await self.store.ensure_path(TRANSACTIONS)
        out: dict[str, tuple[TxnMetadata, int]] = {}
        for child in await self.store.get_children(TRANSACTIONS):
            got = await self.load(component_to_name(child))
            if got is not None:
                out[got[0].transactional_id] = got
        return out

    async def load(self, transactional_id: str) -> tuple[TxnMetadata, int] | None:
        try:
            if await self.store.exists(txn_path(transactional_id)) is None:
                return None
        except InvalidPathError:  # longer than a store path holds: nothing stored under it
            return None
        data, stat = await self.store.get(txn_path(transactional_id))
        return TxnMetadata.from_dict(json.loads(data)), stat.version

    async def put(self, md: TxnMetadata, version: int | None) -> int:
        """Write ``md``; ``version`` None creates the node (NodeExistsError if someone did),
        else compare-and-set (BadVersionError if it moved).  Returns the new version."""
        data = json.dumps(md.to_dict(), separators=(",", ":")).encode()
        path = txn_path(md.transactional_id)
        if version is None:
            await self.store.ensure_path(TRANSACTIONS)
            await self.store.create(path, data)
            return 0
        return (await self.store.set(path, data, version)).version

    async def delete(self, transactional_id: str, version: int) -> None:
        await self.store.delete(txn_path(transactional_id), version)


__all__ = ["TRANSACTIONS", "TxnStateStore", "txn_path"]
