"""Records sections written byte by byte, for the tests that feed record readers bytes only
(tests/test_record_walker.py, tests/test_compacted_records.py): header keys are raw bytes,
so a test can write what no client would (pybroker.wire.records.encode_record takes str)."""

from __future__ import annotations

from pybroker.wire.primitives import write_varint


def raw_record(off: int, ts: int, key: bytes | None, value: bytes | None, hdrs=()) -> bytes:
    """One length-prefixed record (attributes 0): offset delta ``off``, timestamp delta
    ``ts``, ``hdrs`` as (bytes key, bytes or None value) pairs."""
    body = bytearray(b"\x00")
    write_varint(body, ts)
    write_varint(body, off)
    for blob in (key, value):
        write_varint(body, -1 if blob is None else len(blob))
        body += blob or b""
    write_varint(body, len(hdrs))
    for k, v in hdrs:
        write_varint(body, len(k))
        body += k
        write_varint(body, -1 if v is None else len(v))
        body += v or b""
    out = bytearray()
    write_varint(out, len(body))
    return bytes(out + body)
