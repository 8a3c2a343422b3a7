"""The message browser: bounded reads of a topic's records, decoded for display, paged by offset
cursors and filtered by key or value substring.  ``browse(broker, viewer, topic, partitions,
...)`` reads this broker's replica of one partition or several (merged by timestamp), forward
from a cursor, an offset or a timestamp, or backward from one, never past the high watermark;
every page is bounded (bytes, records, reads, decompression), the bytes read and decoded in a
worker thread.  ``render_bytes(data, fmt)`` shows a key or value as text, JSON or hex.
Paging and bounds: docs/internals.md ("pybroker/console/records.py").
"""

from __future__ import annotations

import asyncio
import heapq
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pybroker.console.auth import Viewer
from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers.list_offsets import list_offsets
from pybroker.wire.record_walker import fields, headers, walk_batch
from pybroker.wire.records import LOG_APPEND_TIME, BatchHeader, InvalidRecordError, scan_batches

if TYPE_CHECKING:
    from pybroker.services import BrokerServices

READ_BYTES = 1024 * 1024
SCAN_BYTES = 4 * READ_BYTES
SCAN_RECORDS = 10_000
MAX_READS = 256
MERGE_MAX = 64
MAX_LIMIT = 200
DEFAULT_LIMIT = 20
DECODE_BUDGET = 4 * 1024 * 1024
SHOW_BYTES = 4096
FORMATS = ("text", "json", "hex")


@dataclass(slots=True)
class Shown:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    partition: int = 0


@dataclass(slots=True)
class Budget:
    """What one partition's scan may still spend."""

    bytes: int
    records: int
    reads: int

    @property
    def spent(self) -> bool:
        return self.bytes <= 0 or self.records <= 0 or self.reads <= 0


@dataclass
class Span:
    """What was looked at in one partition: the offsets [start, end), the records decoded
    there, those that matched (offset order), and how many of them the page shows."""

    partition: int
    log_start: int
    high_watermark: int
    start: int
    end: int
    scanned: int = 0
    matches: list[Shown] = field(default_factory=list)
    shown: int = 0
    early: bool = False  # stopped by the budget (or a cut batch), not by the range or limit
    first_ts: int | None = None  # timestamp of the first / last record decoded
    last_ts: int | None = None
    note: str = ""


@dataclass
class Browse:
    records: list[Shown] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    backward: bool = False
    after: dict[int, int] = field(default_factory=dict)  # the next page's cursor
    before: dict[int, int] = field(default_factory=dict)  # the previous page's cursor
    note: str = ""  # why nothing (or not everything) is shown
    no_replica: list[int] = field(default_factory=list)  # partitions not held here
    not_merged: int = 0  # partitions left out: those after the MERGE_MAX-th merged

    @property
    def scanned(self) -> int:
        return sum(s.scanned for s in self.spans)

    @property
    def matched(self) -> int:
        return sum(len(s.matches) for s in self.spans)

    @property
    def at_start(self) -> bool:
        return all(self.before.get(s.partition, 0) <= s.log_start for s in self.spans)

    @property
    def at_end(self) -> bool:
        return all(self.after.get(s.partition, 0) >= s.high_watermark for s in self.spans)


def parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 date-time (UTC when it names no zone)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def parse_cursor(text: str) -> dict[int, int]:
    """``partition:offset`` pairs separated by commas; ValueError otherwise."""
    out: dict[int, int] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        p, sep, o = part.partition(":")
        if not sep:
            raise ValueError(f"not partition:offset: {part!r}")
        out[int(p)] = int(o)
        if len(out) > MERGE_MAX:
            raise ValueError(f"more than {MERGE_MAX} partitions")
    return out


def format_cursor(cursor: dict[int, int]) -> str:
    return ",".join(f"{p}:{o}" for p, o in sorted(cursor.items()))


class Match:
    """A record matches when its key contains ``key`` and its value ``value`` (bytes; None:
    anything)."""

    __slots__ = ("key", "value")

    def __init__(self, key: bytes | None, value: bytes | None) -> None:
        self.key, self.value = key or None, value or None

    def __bool__(self) -> bool:
        return self.key is not None or self.value is not None

    def __call__(self, r: Shown) -> bool:
        if self.key is not None and (r.key is None or self.key not in r.key):
            return False
        return self.value is None or (r.value is not None and self.value in r.value)


def _records(data: bytes, h: BatchHeader, start: int, end: int, room: int) -> tuple[list, bool]:
    """Records of batch ``h`` with start <= offset < end, at most ``room``; True when the
    batch was cut by the decode budget or malformed (the records before that are shown)."""
    base_offset = h.base_offset
    log_append = h.timestamp_type == LOG_APPEND_TIME
    base_ts = h.max_timestamp if log_append else h.base_timestamp
    out: list[Shown] = []

    def show(buf: bytes, _i: int, off: int, ts: int, _klen: int, at: int, _end: int) -> bool:
        offset = base_offset + off
        if offset >= end:
            return True
        if offset >= start:
            f = fields(buf, at)
            names = [(k.decode("utf-8", "replace"), v) for k, v in headers(buf, f.headers_pos)]
            stamp = base_ts if log_append else base_ts + ts
            out.append(Shown(offset, stamp, f.key(buf), f.value(buf), names))
            return len(out) >= room
        return False

    try:
        walk_batch(
            data,
            h,
            max_record_bytes=DECODE_BUDGET,
            max_uncompressed_bytes=DECODE_BUDGET,
            gaps=True,
            visit=show,
        )
    except InvalidRecordError:  # too large to show whole, or malformed
        return out, True
    return out, False


@dataclass(slots=True)
class Decoded:
    matches: list[Shown]
    upto: int  # the offset after the last one looked at
    scanned: int
    cut: bool
    first_ts: int | None = None
    last_ts: int | None = None


def _decode(
    data: bytes,
    start: int,
    end: int,
    room: int,
    max_scan: int = SCAN_RECORDS,
    match: Callable[[Shown], bool] | None = None,
) -> Decoded:
    """The records of a slice's bytes with start <= offset < end that ``match``: at most
    ``room`` of them, after decoding at most ``max_scan`` (at least one whole batch's worth
    when it fits)."""
    d = Decoded([], start, 0, False)
    for h in scan_batches(data):
        if h.base_offset >= end:
            break
        if h.last_offset < start:
            continue
        if h.is_control:
            d.upto = max(d.upto, min(h.next_offset, end))
            continue
        got, cut = _records(data, h, start, end, 1 << 62)
        for r in got:
            if len(d.matches) >= room or d.scanned >= max_scan:
                return d
            d.scanned += 1
            d.upto = r.offset + 1
            if d.first_ts is None:
                d.first_ts = r.timestamp
            d.last_ts = r.timestamp
            if match is None or match(r):
                d.matches.append(r)
        if cut:
            d.cut = True
            if not got:  # nothing of it can be shown: pass over it
                d.upto = max(d.upto, min(h.next_offset, end))
            return d
        d.upto = max(d.upto, min(h.next_offset, end))
        if len(d.matches) >= room or d.scanned >= max_scan:
            return d
    return d


async def _by_time(
    broker: BrokerServices, viewer: Viewer, topic: str, partitions: list[int], ts: int
) -> dict[int, int | str]:
    """ListOffsets by time for each partition: its offset (-1: no record at or after ``ts``),
    or the error's name."""
    ctx = viewer.context(broker, 2, 9)
    req = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": p, "current_leader_epoch": -1, "timestamp": ts}
                    for p in partitions
                ],
            }
        ],
    }
    resp = await list_offsets(ctx, req)
    out: dict[int, int | str] = {}
    for p in resp["topics"][0]["partitions"]:
        code = p["error_code"]
        out[p["partition_index"]] = p["offset"] if code == ErrorCode.NONE else ErrorCode(code).name
    return out


async def _scan(
    log: Any,
    span: Span,
    end: int,
    room: int,
    budget: Budget,
    match: Match,
    *,
    one_read: bool = False,
) -> None:
    """Forward from ``span.start`` over [start, end): matches go to ``span.matches`` (at
    most ``room``), ``span.end`` to the offset after the last one looked at.  With
    ``one_read``, the first read happens even if the budget is spent."""
    pos = span.start
    while pos < end and len(span.matches) < room:
        if budget.spent and not one_read:
            span.early = True
            break
        one_read = False
        try:
            piece = log.read(pos, max(1, min(READ_BYTES, budget.bytes)), max_offset=end)
        except KafkaError as e:
            span.note = f"read failed: {ErrorCode(e.code).name}"
            span.early = True
            break
        if piece is None:
            break
        budget.reads -= 1
        budget.bytes -= piece.size
        data = await asyncio.to_thread(_read_slice, piece)
        d = await asyncio.to_thread(
            _decode, data, pos, end, room - len(span.matches), max(budget.records, 1), match or None
        )
        budget.records -= d.scanned
        span.scanned += d.scanned
        for r in d.matches:
            r.partition = span.partition
        span.matches += d.matches
        if span.first_ts is None:
            span.first_ts = d.first_ts
        if d.last_ts is not None:
            span.last_ts = d.last_ts
        if d.cut:
            span.note = "a batch was too large to show whole; its first records are shown"
        if d.upto <= pos:
            span.early = True
            break
        pos = d.upto
        if d.cut:
            span.early = pos < end
            break
    span.end = pos


async def _scan_back(log: Any, span: Span, limit: int, budget: Budget, match: Match) -> None:
    """Backward from ``span.end``: windows of offsets below it, each scanned forward and each
    twice as wide as the one before, until ``limit`` matches, the log start or the budget.
    The range stays contiguous and ends at ``span.end`` (so paging back misses nothing): a
    window the budget cut short is dropped, and the first one is tried narrower until it fits,
    down to the one batch holding the offset below ``span.end``, each try allowed one read
    beyond the budget."""
    hi, width = span.end, max(limit, 1)
    span.start = hi
    first = True
    while hi > span.log_start and len(span.matches) < limit:
        if budget.spent and not first:
            span.early = True
            break
        lo = max(span.log_start, hi - width)
        w = Span(span.partition, span.log_start, span.high_watermark, lo, lo)
        await _scan(log, w, hi, 1 << 62, budget, match, one_read=first)
        if w.end < hi:  # cut short
            span.note = w.note or span.note
            if first and hi - lo > 1 and w.end > w.start:
                width = (hi - lo) // 2
                continue
            span.early = True
            break
        first = False
        span.matches = w.matches + span.matches
        span.scanned += w.scanned
        span.start, hi, width = lo, lo, width * 2
        if w.first_ts is not None:
            span.first_ts = w.first_ts
        if span.last_ts is None:
            span.last_ts = w.last_ts
        span.note = w.note or span.note


def _merge(spans: list[Span], limit: int, backward: bool) -> list[Shown]:
    """Merge each span's matches by (timestamp, partition), taking from the heads (forward)
    or the tails (backward), at most ``limit``; not past a span that stopped early (its last
    (first) timestamp seen bounds the others), unless that leaves nothing.  Sets ``shown``."""
    seen = [s.first_ts if backward else s.last_ts for s in spans if s.early]
    stops = [t for t in seen if t is not None]

    def key(r: Shown) -> tuple[int, int]:
        return (r.timestamp, r.partition)

    if backward:
        bound = max(stops, default=None)
        source = heapq.merge(*(reversed(s.matches) for s in spans), key=key, reverse=True)
    else:
        bound = min(stops, default=None)
        source = heapq.merge(*(s.matches for s in spans), key=key)
    taken: list[Shown] = []
    for r in source:
        if len(taken) >= limit:
            break
        beyond = bound is not None and (r.timestamp < bound if backward else r.timestamp > bound)
        if beyond and taken:
            break
        taken.append(r)
        if beyond:  # nothing within the bound: this one record, so the page moves on
            break
    counts: dict[int, int] = {}
    for r in taken:
        counts[r.partition] = counts.get(r.partition, 0) + 1
    for s in spans:
        s.shown = counts.get(s.partition, 0)
    if backward:
        taken.reverse()
    return taken


def _cursors(b: Browse) -> None:
    """The next and previous pages' cursors (module docstring)."""
    for s in b.spans:
        if b.backward:
            b.after[s.partition] = s.end
            if s.shown == len(s.matches):
                b.before[s.partition] = s.start
            else:
                b.before[s.partition] = (
                    s.matches[len(s.matches) - s.shown].offset if s.shown else s.end
                )
        else:
            b.before[s.partition] = s.start
            if s.shown == len(s.matches):
                b.after[s.partition] = s.end
            else:
                b.after[s.partition] = s.matches[s.shown].offset


async def browse(
    broker: BrokerServices,
    viewer: Viewer,
    topic: str,
    partitions: list[int],
    *,
    after: dict[int, int] | None = None,
    before: dict[int, int] | None = None,
    start: int | None = None,
    timestamp: int | None = None,
    limit: int = DEFAULT_LIMIT,
    key: bytes | None = None,
    value: bytes | None = None,
) -> Browse:
    """One page of records (module docstring).  Precedence: ``before``, ``after``,
    ``timestamp``, ``start``; none: forward from each log start."""
    limit = max(1, min(limit, MAX_LIMIT))
    out = Browse(backward=before is not None)
    replicas = broker.replicas.replicas if broker.replicas else {}
    logs = {}
    for p in partitions:
        if len(logs) >= MERGE_MAX:
            out.not_merged += 1
            continue
        r = replicas.get((topic, p))
        if r is None:
            out.no_replica.append(p)
        else:
            logs[p] = r.log
    if not logs:
        out.note = (
            "this broker holds no replica of this partition"
            if len(partitions) == 1
            else "this broker holds no replica of these partitions"
        )
        return out
    positions: dict[int, int] = {}
    if before is None and after is None and timestamp is not None:
        found = await _by_time(broker, viewer, topic, list(logs), timestamp)
        failed = sorted({v for v in found.values() if isinstance(v, str)})
        if failed:
            out.note = f"lookup by time failed: {', '.join(failed)}"
            if all(isinstance(v, str) for v in found.values()):
                return out
        if all(v == -1 for v in found.values() if isinstance(v, int)):
            out.note = "no record at or after that time"
            return out
        for p, v in found.items():
            if isinstance(v, int):
                positions[p] = v if v >= 0 else logs[p].high_watermark
        logs = {p: log for p, log in logs.items() if p in positions}
    n = len(logs)
    match = Match(key, value)
    for p, log in logs.items():
        ls, hw = log.log_start_offset, log.high_watermark
        budget = Budget(SCAN_BYTES // n, max(SCAN_RECORDS // n, limit), max(MAX_READS // n, 2))
        if out.backward:
            assert before is not None
            pos = min(max(before.get(p, hw), ls), hw)
            span = Span(p, ls, hw, pos, pos)
            await _scan_back(log, span, limit, budget, match)
        else:
            if after is not None:
                pos = after.get(p, ls)
            elif p in positions:
                pos = positions[p]
            else:
                pos = start if start is not None else ls
            pos = min(max(pos, ls), hw)
            span = Span(p, ls, hw, pos, pos)
            await _scan(log, span, hw, limit, budget, match)
        out.spans.append(span)
    out.records = _merge(out.spans, limit, out.backward)
    _cursors(out)
    notes = sorted({s.note for s in out.spans if s.note})
    if notes:
        out.note = "; ".join([out.note, *notes] if out.note else notes)
    return out


def _read_slice(piece: Any) -> bytes:
    f = piece.file
    f.seek(piece.position)
    return f.read(piece.size)


def render_bytes(data: bytes | None, fmt: str) -> tuple[str, str]:
    """(text to show, a note): never more than SHOW_BYTES of the data."""
    if data is None:
        return "", "null"
    note = f"{len(data):,} bytes" if len(data) > SHOW_BYTES else ""
    part = data[:SHOW_BYTES]
    if fmt == "hex":
        lines = [part[i : i + 16].hex(" ") for i in range(0, len(part), 16)]
        return "\n".join(lines), note
    text = part.decode("utf-8", "replace")
    if fmt == "json" and not note:
        try:
            return json.dumps(json.loads(data), indent=2, ensure_ascii=False), note
        except ValueError:  # not JSON: shown as text
            return text, note
    return text, note
