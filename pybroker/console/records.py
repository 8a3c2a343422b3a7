"""The message browser: a bounded read of one partition's records, decoded for display.

``browse(broker, viewer, topic, partition, start=..., timestamp=..., limit=...)``:

* the start is an offset (clamped to the log start) or a timestamp, resolved with the
  ListOffsets handler itself (key 2, v9, as the viewer: Kafka's lookup by time, the first
  offset whose timestamp is at or after it; it needs this broker to lead the partition);
* records are read from this broker's replica (leader or follower), never past the high
  watermark (what a read_uncommitted consumer may see); control batches are skipped;
* bounded: at most ``MAX_READS`` reads of ``READ_BYTES`` (the log hands over a file slice on
  the loop; the bytes are read and decoded in a worker thread), at most ``limit``
  (<= ``MAX_LIMIT``) records, at most ``DECODE_BUDGET`` bytes decompressed per batch (a batch
  inflating further shows its first records and says it was cut).

``render_bytes(data, fmt)`` shows a key or value as text (UTF-8, invalid bytes replaced), JSON
(pretty-printed; as text when it does not parse) or hex, at most ``SHOW_BYTES`` bytes of it.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pybroker.console.auth import Viewer
from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers.list_offsets import list_offsets
from pybroker.wire.record_walker import fields, headers, walk_batch
from pybroker.wire.records import LOG_APPEND_TIME, BatchHeader, InvalidRecordError, scan_batches

READ_BYTES = 1024 * 1024
MAX_READS = 4
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


@dataclass
class Browse:
    start: int | None = None
    records: list[Shown] = field(default_factory=list)
    log_start: int = 0
    high_watermark: int = 0
    note: str = ""  # why nothing (or not everything) is shown
    found_timestamp: int | None = None


def parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 date-time (UTC when it names no zone)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


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


def _decode(data: bytes, start: int, end: int, room: int) -> tuple[list[Shown], int, bool]:
    """(records, the offset after the last batch looked at, cut) of a slice's bytes."""
    out: list[Shown] = []
    nxt = start
    cut = False
    for h in scan_batches(data):
        nxt = h.next_offset
        if h.is_control or h.last_offset < start:
            continue
        got, c = _records(data, h, start, end, room - len(out))
        out += got
        cut = cut or c
        if len(out) >= room or h.next_offset >= end or c:
            break
    return out, nxt, cut


async def _by_time(broker: Any, viewer: Viewer, topic: str, partition: int, ts: int) -> int:
    ctx = viewer.context(broker, 2, 9)
    req = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": partition, "current_leader_epoch": -1, "timestamp": ts}
                ],
            }
        ],
    }
    resp = await list_offsets(ctx, req)
    p = resp["topics"][0]["partitions"][0]
    if p["error_code"] != ErrorCode.NONE:
        raise KafkaError(p["error_code"], "the lookup by time needs this broker to lead it")
    return p["offset"]


async def browse(
    broker: Any,
    viewer: Viewer,
    topic: str,
    partition: int,
    *,
    start: int | None = None,
    timestamp: int | None = None,
    limit: int = DEFAULT_LIMIT,
) -> Browse:
    limit = max(1, min(limit, MAX_LIMIT))
    out = Browse()
    r = broker.replicas.replicas.get((topic, partition)) if broker.replicas else None
    if r is None:
        out.note = "this broker holds no replica of this partition"
        return out
    log = r.log
    out.log_start, out.high_watermark = log.log_start_offset, log.high_watermark
    if timestamp is not None:
        try:
            start = await _by_time(broker, viewer, topic, partition, timestamp)
        except KafkaError as e:
            out.note = f"lookup by time failed: {ErrorCode(e.code).name}"
            return out
        if start < 0:
            out.note = "no record at or after that time"
            return out
        out.found_timestamp = timestamp
    pos = max(log.log_start_offset, start if start is not None else log.log_start_offset)
    out.start = pos
    for _ in range(MAX_READS):
        end = log.high_watermark
        if pos >= end or len(out.records) >= limit:
            break
        try:
            piece = log.read(pos, READ_BYTES, max_offset=end)
        except KafkaError as e:
            out.note = f"read failed: {ErrorCode(e.code).name}"
            break
        if piece is None:
            break
        data = await asyncio.to_thread(_read_slice, piece)
        got, nxt, cut = await asyncio.to_thread(_decode, data, pos, end, limit - len(out.records))
        out.records += got
        if cut:
            out.note = "a batch was too large to show whole; its first records are shown"
            break
        if nxt <= pos:
            break
        pos = nxt
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
