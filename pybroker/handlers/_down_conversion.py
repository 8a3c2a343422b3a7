"""A consumer's Fetch answer for old fetch versions (Kafka's KafkaApis.maybeConvertFetchedData),
applied to each partition of the answer after the fetch session made it:

* a topic whose compression.type is zstd, fetched below v10: UNSUPPORTED_COMPRESSION_TYPE
  (the fetcher could not read its batches)
* v0-3 (message format v0 before v2, v1 from v2): the stored v2 batches down-converted
  (pybroker/wire/legacy_records.py: control batches skipped, headers dropped, codecs kept,
  Kafka's answer size), unless the topic's message.downconversion.enable is false:
  UNSUPPORTED_VERSION; a zstd batch before anything convertible: UNSUPPORTED_COMPRESSION_TYPE
* v0-5: KAFKA_STORAGE_ERROR is answered as NOT_LEADER_OR_FOLLOWER, which those clients
  retry after a metadata refresh

Followers' fetches are never converted.  The stored bytes are read and converted on the event
loop when small (up to INLINE_BYTES), else in a worker thread.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from pybroker.errors import ErrorCode
from pybroker.handlers._topics import topic_value
from pybroker.handlers.context import RequestContext
from pybroker.wire.legacy_records import MAGIC_V0, MAGIC_V1, down_convert
from pybroker.wire.records import InvalidRecordError

INLINE_BYTES = 16 * 1024


def _error(entry: dict, code: int) -> dict:
    """Kafka's FetchResponse.partitionResponse(tp, error)."""
    return {
        "partition_index": entry["partition_index"],
        "error_code": code,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",
    }


def _stored_bytes(records: Any) -> bytes:
    """The bytes of a log region (a FileSlice: file, position, size), or of bytes."""
    if isinstance(records, bytes | bytearray | memoryview):
        return bytes(records)
    return os.pread(records.file.fileno(), records.size, records.position)


def _convert(records: Any, magic: int, fetch_offset: int) -> bytes:
    stored = getattr(records, "slice_size", -1)  # Kafka's slice: with a partial batch at the end
    return down_convert(
        _stored_bytes(records), magic, fetch_offset, stored if stored >= 0 else None
    )


async def convert_fetched_data(
    ctx: RequestContext, answered: list[tuple[Any, dict]]
) -> list[tuple[Any, dict]]:
    """``answered``: (FetchPartition, partition entry) pairs of a consumer's answer to Fetch
    version ``ctx.version`` (< 10); the same with entries converted as the module says."""
    version = ctx.version
    services = ctx.services
    out = []
    for p, entry in answered:
        info = services.cluster.topics.get(p.topic) if p.topic is not None else None
        configs = info.configs if info is not None else None
        if version <= 5 and entry["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR:
            entry = {**entry, "error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER}
        if configs is None:
            out.append((p, entry))
            continue
        if topic_value(services.config, configs, "compression.type") == "zstd":
            out.append((p, _error(entry, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)))
            continue
        if version > 3:
            out.append((p, entry))
            continue
        if not topic_value(services.config, configs, "message.downconversion.enable"):
            out.append((p, _error(entry, ErrorCode.UNSUPPORTED_VERSION)))
            continue
        magic = MAGIC_V0 if version <= 1 else MAGIC_V1
        records = entry.get("records") or b""
        size = len(records) if isinstance(records, bytes | bytearray) else records.size
        try:
            if size <= INLINE_BYTES:
                converted = _convert(records, magic, p.fetch_offset)
            else:
                converted = await asyncio.get_running_loop().run_in_executor(
                    None, _convert, records, magic, p.fetch_offset
                )
        except InvalidRecordError as e:  # zstd first, or a stored batch that cannot be read
            out.append((p, _error(entry, e.code)))
            continue
        out.append((p, {**entry, "records": converted}))
    return out
