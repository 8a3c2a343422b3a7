"""Transaction state persisted in the metadata store: resume after reopen, CAS fencing."""

from __future__ import annotations

import asyncio

import pytest

from pybroker.clock import ManualClock
from pybroker.coord.metadata.local import LocalStore
from pybroker.coord.metadata.store import BadVersionError, NodeExistsError
from pybroker.coord.txn import state as ts
from pybroker.coord.txn.store import TxnStateStore, txn_path

TP = frozenset({("t", 0), ("t", 2)})


def test_persisted_state_resumes_after_reopen(tmp_path) -> None:
    async def main() -> None:
        clock = ManualClock()
        s = LocalStore(tmp_path, clock)
        await s.start()
        st = TxnStateStore(s)
        md = ts.init_producer_id(None, "a/b tx", 60_000, 900_000, -1, -1, clock.time_ms(), 5).new
        assert md is not None
        v = await st.put(md, None)
        md = ts.add_partitions(md, 5, 0, TP, clock.time_ms()).new
        assert md is not None
        v = await st.put(md, v)
        prepared = ts.end_txn(md, 5, 0, True, clock.time_ms()).new
        assert prepared is not None
        await st.put(prepared, v)
        await s.close()

        s2 = LocalStore(tmp_path, clock)
        await s2.start()
        loaded = await TxnStateStore(s2).load_all()
        got, version = loaded["a/b tx"]
        assert got == prepared and got.state is ts.TxnState.PREPARE_COMMIT
        assert got.partitions == TP  # the new coordinator knows where to write markers
        assert version == 2
        await s2.close()

    asyncio.run(main())


def test_stale_coordinator_cannot_overwrite(tmp_path) -> None:
    async def main() -> None:
        s = LocalStore(tmp_path, ManualClock())
        await s.start()
        st = TxnStateStore(s)
        md = ts.TxnMetadata("tx", 1, 0, 1000)
        await st.put(md, None)
        with pytest.raises(NodeExistsError):
            await st.put(md, None)
        await st.put(md, 0)  # the new coordinator wrote version 1
        with pytest.raises(BadVersionError):
            await st.put(md, 0)  # the old one still holds version 0
        assert txn_path("a/b") == "/transactions/a%2Fb"
        await st.delete("tx", 1)
        assert await st.load("tx") is None
        await s.close()

    asyncio.run(main())
