"""offsets.storage=kafka's coordinator side (coord/group/offsets_log.py) over an in-memory
__consumer_offsets (tests/fake_internal_log.py), and the records in Kafka's formats
(wire/coordinator_records.py)."""

from __future__ import annotations

import asyncio
import struct

import pytest

from pybroker.clock import ManualClock
from pybroker.coord.group.offsets import CommittedOffset, OffsetStore
from pybroker.coord.group.offsets_log import LogOffsetStore, offset_record
from pybroker.coord.group.txn_offsets import PendingTxnOffsets
from pybroker.coord.metadata.internal_log import CoordinatorWriteError
from pybroker.coord.metadata.local import LocalStore
from pybroker.coord.metadata.placement import partition_for
from pybroker.errors import ErrorCode
from pybroker.wire import coordinator_records as cr
from tests.fake_internal_log import FakeLog

T0, T1 = ("t", 0), ("t", 1)


def co(offset: int, ts: int = 1000, expire: int | None = None) -> CommittedOffset:
    # (OffsetCommit v2-v4 carry an expire timestamp and no leader epoch: Kafka's value v1)
    return CommittedOffset(offset, 3 if expire is None else -1, f"m{offset}", ts, expire)


# -- the records ----------------------------------------------------------------------------


def _s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def test_records_are_kafkas_bytes() -> None:
    assert cr.offset_commit_key("g", "t", 7) == struct.pack(">h", 1) + _s("g") + _s("t") + (
        struct.pack(">i", 7)
    )
    assert cr.group_metadata_key("g") == struct.pack(">h", 2) + _s("g")
    v3 = cr.offset_commit_value(cr.OffsetCommitValue(42, 5, "meta", 1234))
    assert v3 == struct.pack(">hqi", 3, 42, 5) + _s("meta") + struct.pack(">q", 1234)
    v1 = cr.offset_commit_value(cr.OffsetCommitValue(42, 5, "", 1234, 9999))
    assert v1 == struct.pack(">hq", 1, 42) + _s("") + struct.pack(">qq", 1234, 9999)
    assert cr.txn_log_key("tx") == struct.pack(">h", 0) + _s("tx")
    empty = cr.txn_log_value(cr.TransactionLogValue(9, 2, 60000, "Empty", (), 5, -1))
    assert empty == struct.pack(">hqhibiqq", 0, 9, 2, 60000, 0, -1, 5, -1)


def test_commit_records_carry_each_groups_own_key_whatever_its_length() -> None:
    """The commit path remembers the keys of short group ids: every record still has its own
    group's, topic's and partition's key in Kafka's format, long (32,767-character) ids too."""
    for group in ("g", "h", "é" * 255, "x" * 256, "y" * 32767):
        for tp in (("t", 0), ("t", 1), ("u", 0)):
            for _ in range(2):
                key, value = offset_record(group, tp, co(5))
                g = group.encode()
                assert key == struct.pack(">hh", 1, len(g)) + g + _s(tp[0]) + (
                    struct.pack(">i", tp[1])
                )
                assert cr.read_offset_commit_value(value).offset == 5
        assert offset_record(group, T0, None) == (cr.offset_commit_key(group, *T0), None)


def test_records_round_trip_and_flexible_versions_are_read() -> None:
    v = cr.OffsetCommitValue(42, 5, "meta", 1234)
    assert cr.read_offset_commit_value(cr.offset_commit_value(v)) == v
    # OffsetCommitValue v4 (flexible): compact string, tagged fields
    v4 = struct.pack(">hqi", 4, 42, 5) + bytes([5]) + b"meta" + struct.pack(">q", 1234) + b"\x00"
    assert cr.read_offset_commit_value(v4) == v
    member = cr.MemberMetadata("m-1", "inst", "client", "/127.0.0.1", 30000, 10000, b"s", b"a")
    g = cr.GroupMetadataValue("consumer", 7, "range", "m-1", 555, (member,))
    assert cr.read_group_metadata_value(cr.group_metadata_value(g)) == g
    txn = cr.TransactionLogValue(9, 2, 60000, "Ongoing", (("a", 1), ("b", 0)), 5, 4)
    assert cr.read_txn_log_value(cr.txn_log_value(txn)) == txn
    assert cr.read_group_key(cr.offset_commit_key("g", "t", 7)) == cr.OffsetCommitKey("g", "t", 7)
    assert cr.read_group_key(struct.pack(">h", 5)) == 5  # a KIP-848 record: not ours


# -- the store --------------------------------------------------------------------------------


async def _loaded(store: LogOffsetStore, log: FakeLog) -> None:
    for _ in range(1000):
        if all(store.load_error(p) is None for p in range(log.partitions)):
            return
        await asyncio.sleep(0)
    raise AssertionError("not loaded")


def _new(log: FakeLog, meta, clock) -> LogOffsetStore:
    return LogOffsetStore(log, meta, clock, partitions=log.partitions)


async def _elected(log: FakeLog, meta, clock) -> LogOffsetStore:
    """A new store, elected leader of every partition of ``log`` and loaded."""
    store = _new(log, meta, clock)
    log.elect(store)
    await _loaded(store, log)
    return store


@pytest.fixture
def env(tmp_path):
    async def start():
        clock = ManualClock()
        meta = LocalStore(tmp_path, clock)
        await meta.start()
        return clock, meta

    return start


def test_commits_are_replayed_by_the_next_leader(env) -> None:
    async def main() -> None:
        clock, meta = await env()
        log = FakeLog(partitions=5)
        a = _new(log, meta, clock)
        assert a.load_error(0) == ErrorCode.NOT_COORDINATOR
        log.elect(a)
        assert a.load_error(0) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        await _loaded(a, log)
        await a.commit("g1", {T0: co(5), T1: co(6)})
        await a.commit("g1", {T0: co(7, expire=9000)})
        await a.commit("g2", {T0: co(1)})
        await a.delete_offsets("g2", [T0])
        await a.store_group_metadata("g1", cr.GroupMetadataValue("consumer", 3, "range", None))
        assert await a.load("g1") == {T0: co(7, expire=9000), T1: co(6)}
        assert await a.groups() == ["g1"]

        b = await _elected(log, meta, clock)  # another broker takes every partition over
        assert await b.load("g1") == {T0: co(7, expire=9000), T1: co(6)}
        assert await b.load("g2") == {}
        assert b.group_metadata("g1").generation == 3
        assert await b.groups() == ["g1"]
        # the deposed leader's write reaches nothing, and it stops serving the partition
        with pytest.raises(CoordinatorWriteError) as e:
            await a.commit("g1", {T0: co(99)})
        assert e.value.code == ErrorCode.NOT_COORDINATOR
        assert a.load_error(a.partition_of("g1")) == ErrorCode.NOT_COORDINATOR
        await b.delete_group("g1")
        c = await _elected(log, meta, clock)
        assert await c.groups() == []
        for s in (a, b, c):
            await s.stop()
        await meta.close()

    asyncio.run(main())


def test_expiry_writes_tombstones(env) -> None:
    async def main() -> None:
        clock, meta = await env()
        log = FakeLog(partitions=3)
        s = await _elected(log, meta, clock)
        clock.advance(10_000)
        await s.commit("g", {T0: co(1, ts=1_000), T1: co(2, ts=9_000)})
        assert await s.expire("g", older_than_ms=5_000) == 1
        assert await s.load("g") == {T1: co(2, ts=9_000)}
        await s.stop()
        await meta.close()

    asyncio.run(main())


def test_transactional_offsets_wait_for_their_marker(env) -> None:
    async def main() -> None:
        clock, meta = await env()
        log = FakeLog(partitions=3)
        s = await _elected(log, meta, clock)
        p = s.partition_of("g")
        await s.commit("g", {T0: co(1)})
        assert await s.add("g", 77, 0, {T0: co(10), T1: co(11)})
        assert await s.add("g", 88, 0, {T1: co(20)})
        assert await s.pending_partitions("g") == {T0, T1}
        assert await s.load("g") == {T0: co(1)}  # OffsetFetch never shows pending offsets
        log.marker(p, 77, True)
        await s.complete(77, True, p)
        log.marker(p, 88, False)
        await s.complete(88, False, p)
        assert await s.load("g") == {T0: co(10), T1: co(11)}
        assert await s.pending_partitions("g") == set()
        # an older epoch of the producer is refused by the log: a fenced producer
        assert await s.add("g", 77, 1, {T0: co(30)})
        assert not await s.add("g", 77, 0, {T0: co(31)})
        # a new leader replays: committed ones committed, the still open one pending
        t = await _elected(log, meta, clock)
        assert await t.load("g") == {T0: co(10), T1: co(11)}
        assert await t.pending_partitions("g") == {T0}
        log.marker(p, 77, True)
        await t.complete(77, True, p)
        assert (await t.load("g"))[T0] == co(30)
        for x in (s, t):
            await x.stop()
        await meta.close()

    asyncio.run(main())


def test_offsets_in_the_metadata_store_move_into_the_log(env) -> None:
    """Switching offsets.storage from zookeeper to kafka: the leader of a partition moves the
    znode offsets (and pending transactional ones) of its groups into the log, newer commits
    winning, and deletes the znodes."""

    async def main() -> None:
        clock, meta = await env()
        zk = OffsetStore(meta, clock)
        await zk.commit("old", {T0: co(5, ts=2000), T1: co(6, ts=2000)})
        await zk.commit("both", {T0: co(50, ts=1000)})
        await PendingTxnOffsets(meta).add("old", 7, 0, {T1: co(60)})
        log = FakeLog(partitions=50)
        s = _new(log, meta, clock)
        # "both" has a newer commit in the log already
        log.epochs[partition_for("both")] = 0
        await log.append(
            partition_for("both"),
            [
                (
                    cr.offset_commit_key("both", "t", 0),
                    cr.offset_commit_value(cr.OffsetCommitValue(70, 3, "x", 3000)),
                )
            ],
            leader_epoch=0,
        )
        log.elect(s)
        await _loaded(s, log)
        assert await s.load("old") == {T0: co(5, ts=2000), T1: co(6, ts=2000)}
        assert (await s.load("both"))[T0].offset == 70
        assert await s.pending_partitions("old") == {T1}
        assert await OffsetStore(meta, clock).groups() == []
        assert await PendingTxnOffsets(meta).pending_partitions("old") == set()
        await s.stop()
        await meta.close()

    asyncio.run(main())


def test_a_record_that_cannot_be_read_is_skipped_not_fatal(env) -> None:
    async def main() -> None:
        clock, meta = await env()
        log = FakeLog(partitions=1)
        good = cr.offset_commit_value(cr.OffsetCommitValue(5, -1, "", 1000))
        await log.append(
            0,
            [
                (cr.offset_commit_key("bad", "t", 0), b"\x00\x09garbage"),
                (cr.group_metadata_key("bad"), b"\x00"),
                (cr.offset_commit_key("ok", "t", 0), good),
            ],
            leader_epoch=0,
        )
        s = await _elected(log, meta, clock)
        assert await s.groups() == ["ok"]
        assert (await s.load("ok"))[T0].offset == 5
        await s.stop()
        await meta.close()

    asyncio.run(main())
