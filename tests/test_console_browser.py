"""The console's message browser (pybroker/console/records.py) over real partition logs, without
a broker: paging forward and back by offset cursors, one partition or several merged by
timestamp, key / value substring filters, and the per-page scan budget.  What a user must be
able to rely on: following "next" from the oldest page (or "previous" from the newest) shows
every matching record exactly once, in timestamp order, however small the budget; a page never
scans more than the budget.  Pages in a browser: compat_tests/test_console.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from pybroker.clock import ManualClock
from pybroker.console import records
from pybroker.console.auth import Viewer
from pybroker.console.records import Shown, Span, browse
from pybroker.log.partition_log import LogConfig, PartitionLog
from pybroker.wire.records import build_batch, parse_batches

T0 = 1_700_000_000_000


def _broker(tmp_path: Path, partitions: dict[int, list[tuple[bytes, bytes, int]]], codec=0):
    """A stand-in for the broker's replica manager: one real log per partition holding the
    given (key, value, timestamp) records, two or three to a batch."""
    replicas = {}
    for p, recs in partitions.items():
        log = PartitionLog.open(tmp_path / f"t-{p}", LogConfig(), ManualClock())
        i = 0
        while i < len(recs):
            n = 2 + (i // 2) % 2
            chunk = recs[i : i + n]
            buf = bytearray(
                build_batch(
                    [(k, v, [], ts) for k, v, ts in chunk], timestamp=chunk[0][2], compression=codec
                )
            )
            log.append(buf, parse_batches(buf))
            i += n
        log.high_watermark = log.log_end_offset
        replicas[("t", p)] = SimpleNamespace(log=log)
    return SimpleNamespace(replicas=SimpleNamespace(replicas=replicas))


def _data(partitions: int = 3, n: int = 40) -> dict[int, list[tuple[bytes, bytes, int]]]:
    """Partition p's record i: timestamp T0 + 10*i + p (interleaved across partitions); every
    third value holds "hit"."""
    return {
        p: [
            (
                f"k{p}-{i}".encode(),
                (b"hit-" if i % 3 == 0 else b"miss-") + f"{p}-{i}".encode(),
                T0 + 10 * i + p,
            )
            for i in range(n)
        ]
        for p in range(partitions)
    }


def _expected(data, value: bytes | None = None) -> list[tuple[int, int]]:
    rows = [
        (ts, p, off)
        for p, recs in data.items()
        for off, (_, v, ts) in enumerate(recs)
        if value is None or value in v
    ]
    return [(p, off) for _, p, off in sorted(rows)]


def _run(coro):
    return asyncio.run(coro)


def _forward(broker, parts, limit, **kw) -> tuple[list[list[tuple[int, int]]], list]:
    async def main():
        pages, browses = [], []
        b = await browse(broker, Viewer(None, "*"), "t", parts, limit=limit, **kw)
        for _ in range(500):
            pages.append([(r.partition, r.offset) for r in b.records])
            browses.append(b)
            if b.at_end:
                return pages, browses
            b = await browse(
                broker, Viewer(None, "*"), "t", parts, after=b.after, limit=limit, **kw
            )
        raise AssertionError("paging did not reach the end")

    return _run(main())


def _backward(broker, parts, limit, **kw) -> list[list[tuple[int, int]]]:
    async def main():
        pages = []
        b = await browse(broker, Viewer(None, "*"), "t", parts, before={}, limit=limit, **kw)
        for _ in range(500):
            pages.append([(r.partition, r.offset) for r in b.records])
            if b.at_start:
                return pages
            b = await browse(
                broker, Viewer(None, "*"), "t", parts, before=b.before, limit=limit, **kw
            )
        raise AssertionError("paging did not reach the start")

    return _run(main())


@pytest.mark.parametrize("value", [None, b"hit"])
@pytest.mark.parametrize("parts", [[1], [0, 1, 2]])
def test_next_and_previous_show_every_matching_record_once_in_time_order(tmp_path, parts, value):
    data = _data()
    broker = _broker(tmp_path, data)
    want = _expected({p: data[p] for p in parts}, value)
    pages, _ = _forward(broker, parts, 7, value=value)
    assert [x for page in pages for x in page] == want
    assert all(len(page) <= 7 for page in pages)
    back = _backward(broker, parts, 7, value=value)
    assert [x for page in reversed(back) for x in page] == want


def test_a_small_budget_pages_through_everything_and_says_what_it_scanned(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "SCAN_RECORDS", 9)
    monkeypatch.setattr(records, "SCAN_BYTES", 300)
    data = _data()
    broker = _broker(tmp_path, data, codec=1)  # gzip batches
    want = _expected(data, b"hit")
    pages, browses = _forward(broker, [0, 1, 2], 5, value=b"hit")
    assert [x for page in pages for x in page] == want
    for b in browses:  # each partition's share: max(9 // 3, the page's 5 records)
        for s in b.spans:
            assert s.scanned <= 5, s
            assert s.end - s.start == s.scanned  # contiguous, no control batches here
    back = _backward(broker, [0, 1, 2], 5, value=b"hit")
    assert [x for page in reversed(back) for x in page] == want


def test_previous_from_the_next_page_comes_back_to_the_same_page(tmp_path):
    data = _data(partitions=3, n=30)
    broker = _broker(tmp_path, data)
    viewer = Viewer(None, "*")

    async def main():
        first = await browse(broker, viewer, "t", [0, 1, 2], limit=8)
        second = await browse(broker, viewer, "t", [0, 1, 2], after=first.after, limit=8)
        again = await browse(broker, viewer, "t", [0, 1, 2], before=second.before, limit=8)
        return first, second, again

    first, second, again = _run(main())
    shown = [(r.partition, r.offset) for r in first.records]
    assert [(r.partition, r.offset) for r in again.records] == shown
    assert first.at_start and not second.at_start
    assert {(r.partition, r.offset) for r in second.records}.isdisjoint(shown)


def test_one_partition_from_an_offset_a_time_or_the_newest(tmp_path):
    data = _data(partitions=1, n=20)
    broker = _broker(tmp_path, data)
    viewer = Viewer(None, "*")

    async def main():
        by_offset = await browse(broker, viewer, "t", [0], start=5, limit=3)
        newest = await browse(broker, viewer, "t", [0], before={}, limit=4)
        keyed = await browse(broker, viewer, "t", [0], key=b"k0-1", limit=50)
        return by_offset, newest, keyed

    by_offset, newest, keyed = _run(main())
    assert [r.offset for r in by_offset.records] == [5, 6, 7]
    (span,) = by_offset.spans
    assert (span.start, span.end, span.scanned) == (5, 8, 3)
    assert by_offset.after == {0: 8} and by_offset.before == {0: 5}
    assert [r.offset for r in newest.records] == [16, 17, 18, 19]
    assert newest.at_end and newest.before == {0: 16}
    # "k0-1" is in the keys of records 1 and 10-19
    assert [r.offset for r in keyed.records] == [1, *range(10, 20)]
    assert keyed.spans[0].scanned == 20


def test_a_partition_this_broker_does_not_hold_is_said_so(tmp_path):
    broker = _broker(tmp_path, _data(partitions=1, n=3))
    b = _run(browse(broker, Viewer(None, "*"), "t", [0, 7], limit=5))
    assert b.no_replica == [7] and [r.offset for r in b.records] == [0, 1, 2]
    b = _run(browse(broker, Viewer(None, "*"), "t", [7], limit=5))
    assert b.note == "this broker holds no replica of this partition" and not b.spans


def _span(p: int, stamps: list[int], early: bool = False) -> Span:
    s = Span(p, 0, 100, 0, len(stamps))
    s.matches = [Shown(i, ts, None, None, [], p) for i, ts in enumerate(stamps)]
    s.scanned = len(stamps)
    s.first_ts, s.last_ts, s.early = stamps[0], stamps[-1], early
    return s


def test_the_merge_does_not_pass_a_partition_that_stopped_early():
    """Partition 1 stopped (budget) after a record at time 15: records of partition 0 after
    15 wait for the next page, so pages stay in time order."""
    a, b = _span(0, [10, 20, 30]), _span(1, [12, 15], early=True)
    got = records._merge([a, b], 10, backward=False)
    assert [(r.partition, r.timestamp) for r in got] == [(0, 10), (1, 12), (1, 15)]
    assert (a.shown, b.shown) == (1, 2)
    br = records.Browse(spans=[a, b])
    records._cursors(br)
    assert br.after == {0: 1, 1: 2} and br.before == {0: 0, 1: 0}


def test_cursors_parse_and_refuse_garbage():
    assert records.parse_cursor("0:5, 2:7,") == {0: 5, 2: 7}
    assert records.format_cursor({2: 7, 0: 5}) == "0:5,2:7"
    for bad in ("5", "a:1", "1:b", ",".join(f"{p}:0" for p in range(records.MERGE_MAX + 1))):
        with pytest.raises(ValueError):
            records.parse_cursor(bad)


def test_record_counts_are_exact_only_without_compaction_or_transactions(tmp_path):
    """High watermark minus log start; approximate (an upper bound) once the log is compacted
    or holds transactions, whose markers take offsets."""
    from pybroker.console import state
    from pybroker.console.state import RecordCount
    from pybroker.console.views.topics import TopicPage, _record_count

    def row(log):
        broker = SimpleNamespace(
            replicas=SimpleNamespace(replicas={("t", 0): SimpleNamespace(log=log)})
        )
        meta = SimpleNamespace(leader=0, replicas=[0], isr=[0])
        return state._row(broker, "t", 0, meta, {0: None})

    plain = PartitionLog.open(tmp_path / "t-0", LogConfig(), ManualClock())
    buf = bytearray(build_batch([(None, b"v", [])] * 3, timestamp=T0))
    plain.append(buf, parse_batches(buf))
    plain.high_watermark = plain.log_end_offset
    txn = PartitionLog.open(tmp_path / "x" / "t-0", LogConfig(), ManualClock())
    buf = bytearray(
        build_batch(
            [(None, b"v", [])] * 2, timestamp=T0, producer_id=7, producer_epoch=0,
            base_sequence=0, is_transactional=True,
        )
    )  # fmt: skip
    txn.append(buf, parse_batches(buf))
    txn.append_txn_marker(7, 0, 0, committed=True)
    txn.high_watermark = txn.log_end_offset
    compacted = PartitionLog.open(
        tmp_path / "c" / "t-0", LogConfig(cleanup_policy="compact"), ManualClock()
    )
    r_plain, r_txn, r_compacted = row(plain), row(txn), row(compacted)
    assert (r_plain.records, r_plain.transactional, r_plain.compacted) == (3, False, False)
    assert (r_txn.records, r_txn.transactional) == (3, True)  # 2 records + 1 marker
    assert r_compacted.compacted and r_compacted.records == 0

    def label(rows):
        page = TopicPage("t", "id", len(rows), 1, 0, 0, rows, None, [], 1, True, {})
        return _record_count(page)

    assert "exact: high watermark minus log start offset over all partitions" in label([r_plain])
    assert "approximate (transactions: their markers take offsets)" in label([r_plain, r_txn])
    assert "approximate (compacted" in label([r_compacted])
    count = RecordCount()
    count.add(r_plain)
    count.add(r_txn)
    assert (count.records, count.local, count.approximate) == (6, 2, True)
