"""The transaction coordinator over both storages (transaction.state.storage): a real
LocalStore, and __transaction_state as coord/txn/state_log.py sees it (tests/fake_internal_log.py):
commit cycle, markers, timeout abort, resume by a new coordinator, NOT_COORDINATOR for ids
another broker owns."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from pybroker.clock import ManualClock
from pybroker.coord.metadata.local import LocalStore
from pybroker.coord.metadata.placement import SingleBroker, coordinator_for
from pybroker.coord.metadata.store import ConnectionLossError, StoreError
from pybroker.coord.txn import state as ts
from pybroker.coord.txn.coordinator import TransactionCoordinator, TxnConfig
from pybroker.coord.txn.state_log import TxnStateLog
from pybroker.coord.txn.store import TxnStateStore
from pybroker.errors import ErrorCode
from tests.fake_internal_log import FakeLog

TPS = [("t", 0), ("t", 1), ("t", 2)]


class Markers:
    """Records the markers written; ``fail`` makes every partition answer an error."""

    def __init__(self) -> None:
        self.written: list[tuple[int, int, bool, int, list[tuple[str, int]]]] = []
        self.fail = False

    async def __call__(self, pid, epoch, committed, coord_epoch, partitions):
        if self.fail:
            return {tp: ErrorCode.NOT_LEADER_OR_FOLLOWER for tp in partitions}
        self.written.append((pid, epoch, committed, coord_epoch, partitions))
        return {tp: ErrorCode.NONE for tp in partitions}


class Storage:
    """One storage that the coordinators of a test share.  ``view()`` is what a new
    coordinator uses: on the metadata store the store itself; on __transaction_state a
    TxnStateLog that leads every partition at the next leader epoch (the broker it runs on
    took the partitions over), loaded before it is returned."""

    def __init__(self, kind: str, tmp_path, clock: ManualClock) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.clock = clock
        self.store: LocalStore | None = None
        self.log = FakeLog()
        self.views: list[TxnStateLog] = []

    async def start(self) -> Storage:
        self.store = LocalStore(self.tmp_path, self.clock)
        await self.store.start()
        return self

    async def view(self):
        if self.kind == "metadata-store":
            return TxnStateStore(self.store)
        v = TxnStateLog(self.log, partitions=self.log.partitions)
        self.log.elect(v)
        while any(v.load_error(p) is not None for p in range(self.log.partitions)):
            await asyncio.sleep(0)
        self.views.append(v)
        return v

    async def unowned_view(self):
        """A storage view on a broker that leads no partition."""
        if self.kind == "metadata-store":
            return TxnStateStore(self.store)
        return TxnStateLog(self.log, partitions=self.log.partitions)

    async def load(self, tid: str):
        if self.kind == "metadata-store":
            return await TxnStateStore(self.store).load(tid)
        return await (await self.view()).load(tid)

    async def close(self) -> None:
        for v in self.views:
            await v.stop()
        await self.store.close()


@pytest.fixture(params=["metadata-store", "__transaction_state"])
def storage_kind(request) -> str:
    return request.param


async def _coord(storage: Storage, markers, *, view=None, **kw) -> TransactionCoordinator:
    ids = itertools.count(1000)

    async def alloc() -> int:
        return next(ids)

    cfg = TxnConfig(max_timeout_ms=300_000, marker_retry_ms=1)
    view = view if view is not None else await storage.view()
    return TransactionCoordinator(view, storage.clock, cfg, alloc, markers, **kw)


def _zk_coord(store, clock, markers, **kw) -> TransactionCoordinator:
    """A coordinator on the metadata store ``store`` itself (the tests of store failures)."""
    ids = itertools.count(1000)

    async def alloc() -> int:
        return next(ids)

    cfg = TxnConfig(max_timeout_ms=300_000, marker_retry_ms=1)
    return TransactionCoordinator(TxnStateStore(store), clock, cfg, alloc, markers, **kw)


async def _settle(c: TransactionCoordinator) -> None:
    for _ in range(200):
        if all(t.done() for t in c._completing.values()):
            return
        await asyncio.sleep(0.005)


def test_commit_then_abort_cycle(tmp_path, storage_kind) -> None:
    async def main() -> None:
        clock = ManualClock()
        storage = await Storage(storage_kind, tmp_path, clock).start()
        m = Markers()
        c = await _coord(storage, m)
        assert await c.init_producer_id("tx", 400_000) == (
            ErrorCode.INVALID_TRANSACTION_TIMEOUT,
            -1,
            -1,
        )
        err, pid, epoch = await c.init_producer_id("tx", 60_000)
        assert (err, epoch) == (ErrorCode.NONE, 0)
        assert await c.add_partitions("tx", pid, epoch, TPS[:2]) is ErrorCode.NONE
        assert await c.add_partitions("tx", pid, epoch, TPS[2:]) is ErrorCode.NONE
        assert await c.end_txn("tx", pid, epoch, True) is ErrorCode.NONE
        await _settle(c)
        assert [(w[0], w[1], w[2], w[4]) for w in m.written] == [(pid, 0, True, TPS)]
        assert c.txns["tx"][0].state is ts.TxnState.COMPLETE_COMMIT
        assert await c.end_txn("tx", pid, epoch, True) is ErrorCode.NONE  # retry
        assert await c.add_partitions("tx", pid, epoch, TPS[:1]) is ErrorCode.NONE
        assert await c.end_txn("tx", pid, epoch, False) is ErrorCode.NONE
        await _settle(c)
        assert m.written[-1][2] is False and m.written[-1][4] == TPS[:1]
        await c.stop()
        await storage.close()

    asyncio.run(main())


def test_markers_in_flight_answer_concurrent_transactions_and_new_coordinator_finishes(
    tmp_path, storage_kind
) -> None:
    async def main() -> None:
        clock = ManualClock()
        storage = await Storage(storage_kind, tmp_path, clock).start()
        m = Markers()
        m.fail = True
        old = await _coord(storage, m)
        _, pid, epoch = await old.init_producer_id("tx", 60_000)
        await old.add_partitions("tx", pid, epoch, TPS)
        assert await old.end_txn("tx", pid, epoch, True) is ErrorCode.NONE
        await asyncio.sleep(0.02)
        assert await old.init_producer_id("tx", 60_000) == (
            ErrorCode.CONCURRENT_TRANSACTIONS,
            -1,
            -1,
        )
        assert await old.add_partitions("tx", pid, epoch, TPS) is ErrorCode.CONCURRENT_TRANSACTIONS
        await old.stop()  # the old coordinator dies with the markers unwritten

        m2 = Markers()
        new = await _coord(storage, m2)
        await new.resume()
        await _settle(new)
        assert [(w[0], w[2], w[4]) for w in m2.written] == [(pid, True, TPS)]
        assert new.txns["tx"][0].state is ts.TxnState.COMPLETE_COMMIT
        await new.stop()
        await storage.close()

    asyncio.run(main())


def test_timeout_abort_fences_the_producer(tmp_path, storage_kind) -> None:
    async def main() -> None:
        clock = ManualClock()
        storage = await Storage(storage_kind, tmp_path, clock).start()
        m = Markers()
        c = await _coord(storage, m)
        _, pid, epoch = await c.init_producer_id("tx", 10_000)
        await c.add_partitions("tx", pid, epoch, TPS)
        clock.advance(10_000)
        assert await c.abort_timed_out() == []
        clock.advance(1)
        assert await c.abort_timed_out() == ["tx"]
        await _settle(c)
        assert [(w[1], w[2]) for w in m.written] == [(epoch + 1, False)]
        assert await c.end_txn("tx", pid, epoch, True) is ErrorCode.PRODUCER_FENCED
        err, pid2, epoch2 = await c.init_producer_id("tx", 10_000)
        assert (err, pid2, epoch2) == (ErrorCode.NONE, pid, epoch + 2)
        await c.stop()
        await storage.close()

    asyncio.run(main())


def test_stale_coordinator_gets_not_coordinator(tmp_path, storage_kind) -> None:
    async def main() -> None:
        clock = ManualClock()
        storage = await Storage(storage_kind, tmp_path, clock).start()
        a = await _coord(storage, Markers())
        _, pid, epoch = await a.init_producer_id("tx", 60_000)
        b = await _coord(storage, Markers())  # b took over ...
        await b.init_producer_id("tx", 60_000)  # ... and fenced epoch 0
        assert await a.add_partitions("tx", pid, epoch, TPS) is ErrorCode.NOT_COORDINATOR
        # a read the store again and found the new epoch; a deposed leader of the id's
        # partition of __transaction_state unloaded it
        again = await a.add_partitions("tx", pid, epoch, TPS)
        if storage_kind == "metadata-store":
            assert again is ErrorCode.PRODUCER_FENCED
        else:  # (its placement still names it: as a leader about to take over, retriable)
            assert again is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if storage_kind == "metadata-store":  # rendezvous hashing names the other broker
            owner = coordinator_for("tx", [1, 2])
            other = await _coord(
                storage, Markers(), broker_id=3 - owner, membership=lambda: (1, [1, 2])
            )
        else:  # a broker that does not lead the id's partition (broker 7 does)
            other = await _coord(
                storage, Markers(), view=await storage.unowned_view(), placement=SingleBroker(7)
            )
        assert await other.init_producer_id("tx", 60_000) == (ErrorCode.NOT_COORDINATOR, -1, -1)
        await storage.close()

    asyncio.run(main())


def test_list_states_and_id_expiration(tmp_path, storage_kind) -> None:
    async def main() -> None:
        clock = ManualClock()
        storage = await Storage(storage_kind, tmp_path, clock).start()
        c = await _coord(storage, Markers())
        _, pid_a, ep_a = await c.init_producer_id("a", 60_000)
        _, pid_b, _ = await c.init_producer_id("b", 60_000)
        await c.add_partitions("a", pid_a, ep_a, TPS)
        assert [m.transactional_id for m in c.list_states()] == ["a", "b"]
        assert [m.transactional_id for m in c.list_states(states=["Ongoing"])] == ["a"]
        assert [m.transactional_id for m in c.list_states(producer_ids=[pid_b])] == ["b"]
        clock.advance(c.config.id_expiration_ms)
        assert await c.expire_ids() == ["b"]  # "a" is Ongoing: never expired
        assert await storage.load("b") is None
        assert await c.end_txn("b", pid_b, 0, True) is ErrorCode.INVALID_PRODUCER_ID_MAPPING
        await c.stop()
        await storage.close()

    asyncio.run(main())


def _lose_one_write(store: LocalStore, state: bytes, landed: bool) -> list[str]:
    """The store's first write of a state holding ``state`` meets a lost connection
    (ConnectionLossError, as when ZooKeeper's answer never came); ``landed``: ZooKeeper had
    applied it.  Returns the list the lost write's path goes into."""
    real_multi = store.multi
    lost: list[str] = []

    async def multi(ops):
        if not lost and any(state in bytes(getattr(op, "data", b"")) for op in ops):
            lost.append(ops[0].path)
            if landed:
                await real_multi(ops)
            raise ConnectionLossError(ops[0].path)
        return await real_multi(ops)

    store.multi = multi
    return lost


async def _until_answered(call, answers: list[ErrorCode], c: TransactionCoordinator) -> None:
    """A producer's retries: ``call()`` again while it answers CONCURRENT_TRANSACTIONS (the
    markers of a prepared transaction are being written)."""
    for _ in range(50):
        answers.append(await call())
        if answers[-1] is not ErrorCode.CONCURRENT_TRANSACTIONS:
            return
        await _settle(c)


def test_completion_survives_a_lost_store_connection(tmp_path) -> None:
    """The markers are written and CompleteCommit is kept in memory until the flush pass
    stores it; that write meets a lost ZooKeeper connection (landed or not: the outcome is
    unknown).  The coordinator drops the cached state and reads the store again at the
    producer's next request: the next transaction is accepted (after CONCURRENT_TRANSACTIONS
    while a PrepareCommit read back has its markers written again, as a coordinator taking
    over does) and no abort marker is ever written for the committed one."""

    async def main(landed: bool) -> None:
        clock = ManualClock()
        store = LocalStore(tmp_path / str(landed), clock)
        await store.start()
        m = Markers()
        c = _zk_coord(store, clock, m)
        _, pid, epoch = await c.init_producer_id("tx", 60_000)
        await c.add_partitions("tx", pid, epoch, TPS)
        assert await c.end_txn("tx", pid, epoch, True) is ErrorCode.NONE
        await _settle(c)
        assert [(w[0], w[2], w[4]) for w in m.written] == [(pid, True, TPS)]
        stored, _ = await TxnStateStore(store).load("tx")
        assert stored.state is ts.TxnState.PREPARE_COMMIT  # Complete* is stored by the flush
        lost = _lose_one_write(store, b"CompleteCommit", landed)
        with pytest.raises(StoreError):
            await c.flush_completed()
        assert lost, "the completion was never written"
        stored, _ = await TxnStateStore(store).load("tx")
        expected = ts.TxnState.COMPLETE_COMMIT if landed else ts.TxnState.PREPARE_COMMIT
        assert stored.state is expected
        answers: list[ErrorCode] = []
        await _until_answered(lambda: c.add_partitions("tx", pid, epoch, TPS[:1]), answers, c)
        assert answers[-1] is ErrorCode.NONE, answers
        stored, _ = await TxnStateStore(store).load("tx")
        assert (stored.state, stored.partitions) == (ts.TxnState.ONGOING, {TPS[0]})
        # the first transaction's markers: once if its completion landed, else written again
        assert [(w[0], w[2], w[4]) for w in m.written] == [(pid, True, TPS)] * (1 if landed else 2)
        assert await c.end_txn("tx", pid, epoch, True) is ErrorCode.NONE
        await _settle(c)
        assert m.written[-1][2] is True and m.written[-1][4] == TPS[:1]
        assert [t.exception() for t in c._completing.values()] == [None]
        await c.stop()
        stored, _ = await TxnStateStore(store).load("tx")
        assert stored.state is ts.TxnState.COMPLETE_COMMIT
        await store.close()

    asyncio.run(main(False))
    asyncio.run(main(True))


def test_requests_answer_coordinator_not_available_while_the_store_is_unreachable(
    tmp_path,
) -> None:
    """EndTxn whose PrepareCommit write meets a lost connection answers
    COORDINATOR_NOT_AVAILABLE (Kafka's answer when its transaction log append fails; the
    producer retries), never an exception that closes the client's connection; so does
    every request while the store cannot be read.  Whether the write landed or not, the
    producer's retries end with the transaction committed: a PrepareCommit read back from
    the store gets its markers written, once."""

    async def main(landed: bool) -> None:
        clock = ManualClock()
        store = LocalStore(tmp_path / str(landed), clock)
        await store.start()
        m = Markers()
        c = _zk_coord(store, clock, m)
        _, pid, epoch = await c.init_producer_id("tx", 60_000)
        await c.add_partitions("tx", pid, epoch, TPS)
        lost = _lose_one_write(store, b"PrepareCommit", landed)
        assert await c.end_txn("tx", pid, epoch, True) is ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert lost
        real_get = store.get

        async def get_lost(path, *a, **kw):
            raise ConnectionLossError(path)

        store.get = get_lost  # still unreachable: every request answers the same
        assert await c.end_txn("tx", pid, epoch, True) is ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert await c.add_partitions("tx", pid, epoch, TPS) is ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert (await c.describe("tx"))[0] is ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert await c.verify_partitions("tx", pid, epoch, TPS[:1]) == {
            TPS[0]: ErrorCode.COORDINATOR_NOT_AVAILABLE
        }
        store.get = real_get
        answers: list[ErrorCode] = []
        await _until_answered(lambda: c.end_txn("tx", pid, epoch, True), answers, c)
        assert answers[-1] is ErrorCode.NONE, answers
        await _settle(c)
        assert [(w[0], w[2], w[4]) for w in m.written] == [(pid, True, TPS)]
        await c.stop()  # (stores the completion kept in memory)
        stored, _ = await TxnStateStore(store).load("tx")
        assert stored.state is ts.TxnState.COMPLETE_COMMIT
        await store.close()

    asyncio.run(main(False))
    asyncio.run(main(True))


def test_coordination_that_moved_away_and_back_reads_the_store_again(tmp_path) -> None:
    """Broker A coordinates "tx"; its session is lost (A cut off) and B coordinates meanwhile:
    the producer's transaction commits at B and the next one begins there.  When A coordinates
    again (the membership epoch moved, A still owns the id by the new membership), it must
    answer from the store, not from what it cached before: answering EndTxn from its old
    CompleteCommit would tell the producer 'committed' for a transaction still Ongoing at B
    (found by the fault campaign: INVALID_TXN_STATE answered from a stale CompleteAbort)."""

    async def main() -> None:
        clock = ManualClock()
        store = LocalStore(tmp_path, clock)
        await store.start()
        owner = coordinator_for("tx", [1, 2])
        epoch_a = [1]
        a = _zk_coord(
            store, clock, Markers(), broker_id=owner, membership=lambda: (epoch_a[0], [1, 2])
        )
        b = _zk_coord(store, clock, Markers())  # the interim coordinator (sees only itself)
        _, pid, epoch = await a.init_producer_id("tx", 60_000)
        await a.add_partitions("tx", pid, epoch, TPS)
        assert await a.end_txn("tx", pid, epoch, False) is ErrorCode.NONE
        await _settle(a)  # A cached CompleteAbort
        await a.flush_completed()  # (Complete* is stored with the next write or this pass)
        # A is cut off; B coordinates: a committed transaction, then an Ongoing one
        await b.add_partitions("tx", pid, epoch, TPS)
        assert await b.end_txn("tx", pid, epoch, True) is ErrorCode.NONE
        await _settle(b)
        await b.flush_completed()
        assert await b.add_partitions("tx", pid, epoch, TPS[:1]) is ErrorCode.NONE
        # A's session came back: the membership epoch moved, A owns "tx" again; the
        # producer's EndTxn arrives before any event about it was handled
        epoch_a[0] = 2
        assert await a.end_txn("tx", pid, epoch, True) is ErrorCode.NONE  # the Ongoing one
        await _settle(a)
        await a.flush_completed()
        state, _ = await TxnStateStore(store).load("tx")
        assert state.state is ts.TxnState.COMPLETE_COMMIT
        await a.stop()
        await b.stop()
        await store.close()

    asyncio.run(main())


def test_an_invalid_end_txn_is_logged_with_the_state_it_met(tmp_path, caplog) -> None:
    """INVALID_TXN_STATE is fatal to a client; the coordinator's log names the state."""

    async def main() -> None:
        clock = ManualClock()
        store = LocalStore(tmp_path, clock)
        await store.start()
        c = _zk_coord(store, clock, Markers())
        _, pid, epoch = await c.init_producer_id("tx", 60_000)
        assert await c.add_partitions("tx", pid, epoch, TPS) is ErrorCode.NONE
        assert await c.end_txn("tx", pid, epoch, True) is ErrorCode.NONE
        await _settle(c)
        with caplog.at_level("INFO", logger="pybroker.coord.txn.coordinator"):
            assert await c.end_txn("tx", pid, epoch, False) is ErrorCode.INVALID_TXN_STATE
        assert f"EndTxn(abort) of producer {pid} epoch {epoch} in state CompleteCommit" in (
            caplog.text
        )
        await c.stop()
        await store.close()

    asyncio.run(main())
