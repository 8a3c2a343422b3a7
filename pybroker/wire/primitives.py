"""Kafka's primitive types over a memoryview (Reader) and a growing bytearray (Writer).

Big-endian fixed-width integers; unsigned varints (7 bits a byte, low group first) and
zig-zag signed varints; classic strings and bytes (int16 / int32 length, -1 = null); compact
strings, bytes and arrays (unsigned varint length + 1, 0 = null); 16-byte UUIDs; tagged
field sections (count, then tag, size, bytes).

Every read checks bounds and raises :class:`DecodeError`; a length that claims more bytes
than the frame holds fails at once, so an absurd array length can never make us allocate.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")

ZERO_UUID = uuid.UUID(int=0)


class DecodeError(ValueError):
    """The bytes do not form a valid message; the connection that sent them is closed."""


# The one varint reader and writer: the protocol's fields (Reader/Writer below) and the records
# inside a batch (pybroker/wire/record_walker.py, which inlines the one- and two-byte cases of
# its hot loop and calls these for the rest).


def uvarint_at(buf: Any, pos: int, end: int, max_bytes: int = 10) -> tuple[int, int]:
    """The unsigned varint at ``pos`` (7 bits a byte, low group first) in ``buf[:end]``:
    ``(value, position after it)``.  DecodeError when truncated or longer than ``max_bytes``."""
    if pos < end:
        b = buf[pos]
        if b < 0x80:  # one byte: most lengths, counts and tags
            return b, pos + 1
    result = 0
    shift = 0
    stop = min(end, pos + max_bytes)
    while pos < stop:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
    if pos >= end:
        raise DecodeError("truncated varint")
    raise DecodeError(f"varint longer than {max_bytes} bytes")


def varint_at(buf: Any, pos: int, end: int, max_bytes: int = 10) -> tuple[int, int]:
    """The zig-zag (signed) varint at ``pos``, as :func:`uvarint_at`."""
    v, pos = uvarint_at(buf, pos, end, max_bytes)
    return (v >> 1) ^ -(v & 1), pos


def write_uvarint(out: bytearray, v: int) -> None:
    if 0 <= v < 0x80:
        out.append(v)
        return
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def write_varint(out: bytearray, v: int) -> None:
    """Zig-zag (64-bit) then unsigned varint."""
    if -0x40 <= v < 0x40:  # one byte (a record's deltas and short lengths)
        out.append(v << 1 if v >= 0 else (-v << 1) - 1)
        return
    write_uvarint(out, ((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF)


class Reader:
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None):
        self.buf = buf if isinstance(buf, memoryview) else memoryview(buf)
        self.pos = pos
        self.end = len(self.buf) if end is None else end

    def remaining(self) -> int:
        return self.end - self.pos

    def _take(self, n: int) -> int:
        p = self.pos
        if n < 0 or p + n > self.end:
            raise DecodeError(f"need {n} bytes at {p}, frame has {self.end - p}")
        self.pos = p + n
        return p

    def _fixed(self, s: struct.Struct) -> Any:
        return s.unpack_from(self.buf, self._take(s.size))[0]

    def int8(self) -> int:
        return self._fixed(_I8)

    def int16(self) -> int:
        return self._fixed(_I16)

    def uint16(self) -> int:
        return self._fixed(_U16)

    def int32(self) -> int:
        return self._fixed(_I32)

    def uint32(self) -> int:
        return self._fixed(_U32)

    def int64(self) -> int:
        return self._fixed(_I64)

    def float64(self) -> float:
        return self._fixed(_F64)

    def bool(self) -> bool:
        return self._fixed(_I8) != 0

    def uuid(self) -> uuid.UUID:
        p = self._take(16)
        return uuid.UUID(bytes=bytes(self.buf[p : p + 16]))

    def uvarint(self) -> int:
        v, self.pos = uvarint_at(self.buf, self.pos, self.end)
        return v

    def varint(self) -> int:
        v, self.pos = varint_at(self.buf, self.pos, self.end)
        return v

    def raw(self, n: int) -> memoryview:
        p = self._take(n)
        return self.buf[p : p + n]

    # -- strings and bytes -------------------------------------------------------------
    def _text(self, n: int) -> str:
        p = self._take(n)
        try:
            return str(self.buf[p : p + n], "utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError(f"invalid utf-8 string: {e}") from None

    def string(self) -> str:
        n = self.int16()
        if n < 0:
            raise DecodeError("null where a string is required")
        return self._text(n)

    def nullable_string(self) -> str | None:
        n = self.int16()
        return None if n < 0 else self._text(n)

    def compact_string(self) -> str:
        n = self.uvarint() - 1
        if n < 0:
            raise DecodeError("null where a string is required")
        return self._text(n)

    def compact_nullable_string(self) -> str | None:
        n = self.uvarint() - 1
        return None if n < 0 else self._text(n)

    def bytes_(self) -> memoryview:
        n = self.int32()
        if n < 0:
            raise DecodeError("null where bytes are required")
        return self.raw(n)

    def nullable_bytes(self) -> memoryview | None:
        n = self.int32()
        return None if n < 0 else self.raw(n)

    def compact_bytes(self) -> memoryview:
        n = self.uvarint() - 1
        if n < 0:
            raise DecodeError("null where bytes are required")
        return self.raw(n)

    def compact_nullable_bytes(self) -> memoryview | None:
        n = self.uvarint() - 1
        return None if n < 0 else self.raw(n)

    # -- lengths -----------------------------------------------------------------------
    def array_length(self, min_element_size: int = 1) -> int:
        """int32 length; -1 means null.  Refuses lengths the remaining bytes cannot hold."""
        n = self.int32()
        if n > 0 and n * min_element_size > self.end - self.pos:
            raise DecodeError(f"array length {n} exceeds the frame")
        return n

    def compact_array_length(self, min_element_size: int = 1) -> int:
        n = self.uvarint() - 1
        if n > 0 and n * min_element_size > self.end - self.pos:
            raise DecodeError(f"array length {n} exceeds the frame")
        return n


class Writer:
    """Appends to a bytearray.  Out-of-band chunks (file regions sent with sendfile) split
    the output: :meth:`parts` returns bytes and those chunk objects in order."""

    __slots__ = ("buf", "_parts")

    def __init__(self) -> None:
        self.buf = bytearray()
        self._parts: list[Any] = []

    def int8(self, v: int) -> None:
        self.buf += _I8.pack(v)

    def int16(self, v: int) -> None:
        self.buf += _I16.pack(v)

    def uint16(self, v: int) -> None:
        self.buf += _U16.pack(v)

    def int32(self, v: int) -> None:
        self.buf += _I32.pack(v)

    def uint32(self, v: int) -> None:
        self.buf += _U32.pack(v)

    def int64(self, v: int) -> None:
        self.buf += _I64.pack(v)

    def float64(self, v: float) -> None:
        self.buf += _F64.pack(v)

    def bool(self, v: bool) -> None:
        self.buf.append(1 if v else 0)

    def uuid(self, v: uuid.UUID | bytes | None) -> None:
        if v is None:
            v = ZERO_UUID
        self.buf += v.bytes if isinstance(v, uuid.UUID) else bytes(v)

    def uvarint(self, v: int) -> None:
        write_uvarint(self.buf, v)

    def varint(self, v: int) -> None:
        write_varint(self.buf, v)

    def raw(self, b: bytes | bytearray | memoryview) -> None:
        self.buf += b

    def string(self, v: str | None) -> None:
        if v is None:
            self.int16(-1)
            return
        b = v.encode()
        self.int16(len(b))
        self.buf += b

    def compact_string(self, v: str | None) -> None:
        if v is None:
            self.uvarint(0)
            return
        b = v.encode()
        self.uvarint(len(b) + 1)
        self.buf += b

    def bytes_(self, v: bytes | bytearray | memoryview | None) -> None:
        if v is None:
            self.int32(-1)
            return
        self.int32(len(v))
        self.buf += v

    def compact_bytes(self, v: bytes | bytearray | memoryview | None) -> None:
        if v is None:
            self.uvarint(0)
            return
        self.uvarint(len(v) + 1)
        self.buf += v

    def chunk(self, obj: Any) -> None:
        """Append an out-of-band part (anything with a ``size`` attribute)."""
        if self.buf:
            self._parts.append(bytes(self.buf))
            self.buf = bytearray()
        self._parts.append(obj)

    @property
    def has_chunks(self) -> bool:
        """Whether out-of-band parts were appended (else ``buf`` is the whole output)."""
        return bool(self._parts)

    def parts(self) -> list[Any]:
        out = list(self._parts)
        if self.buf:
            out.append(bytes(self.buf))
        return out

    def getvalue(self) -> bytes:
        if self._parts:
            raise ValueError("writer holds out-of-band parts; use parts()")
        return bytes(self.buf)


def parts_size(parts: list[Any]) -> int:
    return sum(p.size if hasattr(p, "size") else len(p) for p in parts)
