"""The share-partition state machine (pybroker/share/partition.py), sans I/O: acquisition,
acknowledgement, lock timeouts, the delivery count limit, the start offset, and what is
stored (snapshot/load)."""

from __future__ import annotations

import pytest

from pybroker.coord.group.share_store import (
    ACKNOWLEDGED,
    ARCHIVED,
    AVAILABLE,
    PartitionState,
)
from pybroker.errors import ErrorCode
from pybroker.share.partition import (
    ACCEPT,
    GAP,
    REJECT,
    RELEASE,
    RENEW,
    AcknowledgeError,
    Acquired,
    Limits,
    SharePartition,
)

L = Limits(max_delivery_count=3, lock_duration_ms=1000, max_in_flight=100)
BATCHES = [(0, 9), (10, 19), (20, 29)]


def fresh(start: int = 0) -> SharePartition:
    return SharePartition.load(PartitionState(1, start), start, leader_epoch=0)


def acquire(sp, batches=BATCHES, *, member="m", n=1000, batch_size=1000, record_limit=False, now=0):  # type: ignore[no-untyped-def]
    return sp.acquire(
        member, batches, max_records=n, batch_size=batch_size, record_limit=record_limit,
        limits=L, now=now,
    )  # fmt: skip


def test_new_records_are_acquired_whole_log_batches_split_by_batch_size():
    sp = fresh()
    # 15 records wanted: the batch holding the 15th is taken whole (as Kafka's)
    got = acquire(sp, n=15, batch_size=10)
    assert got == [Acquired(0, 9, 1), Acquired(10, 19, 1)]
    assert sp.end_offset == 20
    # the next fetch reads on from there
    assert sp.fetch_offset() == 20
    assert acquire(sp, [(20, 29)], member="m2") == [Acquired(20, 29, 1)]


def test_record_limit_mode_takes_exactly_max_records():
    sp = fresh()
    assert acquire(sp, n=3, record_limit=True) == [Acquired(0, 2, 1)]
    assert acquire(sp, [(0, 9)], member="n", n=3, record_limit=True) == [Acquired(3, 5, 1)]


def test_the_in_flight_window_bounds_new_records():
    sp = fresh()
    small = Limits(max_delivery_count=3, lock_duration_ms=1000, max_in_flight=10)
    got = sp.acquire("m", BATCHES, max_records=100, batch_size=100, record_limit=False,
                     limits=small, now=0)  # fmt: skip
    assert got == [Acquired(0, 9, 1)]
    assert sp.acquire("n", BATCHES, max_records=100, batch_size=100, record_limit=False,
                      limits=small, now=0) == []  # fmt: skip
    assert not sp.can_acquire(30, small)
    sp.acknowledge("m", [(0, 9, [ACCEPT])], small, 0)
    assert sp.can_acquire(30, small)


def test_accept_moves_the_start_offset_and_release_comes_back_with_count_2():
    sp = fresh()
    acquire(sp, n=30)
    sp.acknowledge("m", [(0, 9, [ACCEPT]), (10, 19, [RELEASE])], L, 0)
    assert sp.start_offset == 10
    assert sp.fetch_offset() == 10
    got = acquire(sp, [(10, 19)], member="other")
    assert got == [Acquired(10, 19, 2)]


def test_reject_and_gap_archive():
    sp = fresh()
    acquire(sp, n=30)
    sp.acknowledge("m", [(0, 19, [REJECT]), (20, 29, [GAP])], L, 0)
    assert sp.start_offset == 30 and sp.runs == []
    assert sp.snapshot().batches == []


def test_per_offset_types():
    sp = fresh()
    acquire(sp, [(0, 4)])
    sp.acknowledge("m", [(0, 4, [ACCEPT, RELEASE, RELEASE, REJECT, ACCEPT])], L, 0)
    assert sp.start_offset == 1
    # what is stored: released (count 1), rejected, accepted; the accepted 0 is below the start
    assert sp.snapshot().batches == [
        (1, 2, AVAILABLE, 1),
        (3, 3, ARCHIVED, 1),
        (4, 4, ACKNOWLEDGED, 1),
    ]
    assert acquire(sp, [(0, 4)], member="n") == [Acquired(1, 2, 2)]


@pytest.mark.parametrize(
    "member, acks, code",
    [
        ("other", [(0, 9, [ACCEPT])], ErrorCode.INVALID_RECORD_STATE),  # not the owner
        ("m", [(40, 41, [ACCEPT])], ErrorCode.INVALID_RECORD_STATE),  # not in flight
        ("m", [(5, 35, [ACCEPT])], ErrorCode.INVALID_REQUEST),  # past the acquired records
    ],
)
def test_acknowledge_errors(member, acks, code):
    sp = fresh()
    acquire(sp, [(0, 9)])
    with pytest.raises(AcknowledgeError) as e:
        sp.acknowledge(member, acks, L, 0)
    assert e.value.code == code


def test_acknowledging_twice_is_invalid_record_state():
    sp = fresh()
    acquire(sp, [(0, 9), (10, 19)])
    sp.acknowledge("m", [(10, 19, [ACCEPT])], L, 0)
    with pytest.raises(AcknowledgeError) as e:
        sp.acknowledge("m", [(10, 19, [ACCEPT])], L, 0)
    assert e.value.code == ErrorCode.INVALID_RECORD_STATE


def test_a_failing_batch_leaves_the_others_of_the_request_unapplied():
    sp = fresh()
    acquire(sp, [(0, 9)])
    before = sp.dirty
    with pytest.raises(AcknowledgeError):
        sp.acknowledge("m", [(0, 4, [ACCEPT]), (5, 12, [ACCEPT])], L, 0)
    assert sp.dirty == before and sp.start_offset == 0
    sp.acknowledge("m", [(0, 9, [ACCEPT])], L, 0)
    assert sp.start_offset == 10


def test_lock_timeout_releases_and_the_delivery_limit_archives():
    sp = fresh()
    for attempt in (1, 2, 3):
        assert acquire(sp, [(0, 4)], now=attempt * 10_000) == [Acquired(0, 4, attempt)]
        assert sp.next_deadline() == attempt * 10_000 + L.lock_duration_ms
        assert not sp.expire(attempt * 10_000 + 999, L)
        assert sp.expire(attempt * 10_000 + 1000, L)
    # the third timeout hit share.delivery.count.limit (3): archived
    assert sp.start_offset == 5 and acquire(sp, [(0, 4)]) == []


def test_renew_extends_the_lock_and_can_be_disabled():
    sp = fresh()
    acquire(sp, [(0, 4)], now=0)
    sp.acknowledge("m", [(0, 4, [RENEW])], L, 900)
    assert not sp.expire(1500, L) and sp.next_deadline() == 1900
    off = Limits(max_delivery_count=3, lock_duration_ms=1000, max_in_flight=100,
                 renew_enabled=False)  # fmt: skip
    with pytest.raises(AcknowledgeError) as e:
        sp.acknowledge("m", [(0, 4, [RENEW])], off, 1000)
    assert e.value.code == ErrorCode.INVALID_RECORD_STATE


def test_release_member_gives_back_only_that_members_records():
    sp = fresh()
    acquire(sp, [(0, 9)], member="a")
    acquire(sp, [(10, 19)], member="b")
    assert sp.release_member("a", L)
    assert sp.fetch_offset() == 0
    assert acquire(sp, [(0, 9), (10, 19)], member="c") == [Acquired(0, 9, 2)]


def test_snapshot_keeps_an_acquisition_as_its_count_before_it():
    sp = fresh()
    acquire(sp, [(0, 9)])
    # acquired once, never released: nothing to store (Available, count 0)
    assert sp.snapshot().batches == []
    sp.acknowledge("m", [(0, 9, [RELEASE])], L, 0)
    acquire(sp, [(0, 9)])
    assert sp.snapshot().batches == [(0, 9, AVAILABLE, 1)]


def test_load_fills_gaps_and_round_trips():
    state = PartitionState(
        2, 10, 3, [(12, 13, ACKNOWLEDGED, 1), (15, 16, AVAILABLE, 2), (17, 19, ARCHIVED, 3)]
    )
    sp = SharePartition.load(state, 10, leader_epoch=4)
    assert sp.start_offset == 10 and sp.end_offset == 20
    assert sp.leader_epoch == 4 and sp.state_epoch == 2
    assert sp.fetch_offset() == 10
    got = acquire(sp, [(10, 19)], member="m")
    # never-delivered gaps count 1, the released ones 3
    assert got == [Acquired(10, 11, 1), Acquired(14, 14, 1), Acquired(15, 16, 3)]
    sp.acknowledge("m", [(10, 11, [ACCEPT]), (14, 16, [ACCEPT])], L, 0)
    assert sp.start_offset == 20 and sp.snapshot().batches == []


def test_a_terminal_prefix_moves_the_start_at_load():
    state = PartitionState(1, 0, 0, [(0, 4, ACKNOWLEDGED, 1), (5, 6, ARCHIVED, 5)])
    sp = SharePartition.load(state, 0, 0)
    assert sp.start_offset == 7 and sp.runs == []


def test_log_start_past_the_start_offset_archives_what_is_gone():
    sp = fresh()
    acquire(sp, [(0, 9)], member="a")
    sp.move_log_start(5)
    assert sp.start_offset == 5
    # the member acknowledges all ten: the part below the start is skipped, as in Kafka
    sp.acknowledge("a", [(0, 9, [ACCEPT])], L, 0)
    assert sp.start_offset == 10


def test_missing_records_are_archived_and_aborted_ones_never_delivered():
    sp = SharePartition.load(PartitionState(1, 0, 0, [(0, 4, AVAILABLE, 1)]), 0, 0)
    # the log now starts its read at 3 (0-2 compacted away)
    sp.archive_missing(0, 3)
    assert sp.start_offset == 3
    sp.archive_range(3, 4)
    assert sp.start_offset == 5
