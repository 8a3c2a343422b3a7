"""The frames of the node's metadata-store protocol (metadata/remote.py, metadata/store_server.py).

Every message, both ways, is one frame::

    u32 length (big-endian) | value

and a value is a tag byte followed by its body (all integers big-endian)::

    'N'                         None
    'T' / 'F'                   True / False
    'i' i64                     an int (session ids, versions, times in ms)
    's' u32 n, n bytes          a str, UTF-8 (surrogates passed through, as paths may carry them)
    'b' u32 n, n bytes          bytes (node data)
    'l' u32 n, n values         a list

Only these types exist: decoding builds nothing else, so a peer's bytes cannot run code (no
pickle).  A frame over MAX_FRAME, a truncated value or an unknown tag is a FrameError, and the
reader closes the connection.

Requests are ``[request id (>= 1), op, args...]``; answers ``[request id, 0, result]`` or
``[request id, 1, error class name, message, path, op index]``, in request order; watch
events ``[0, "data" | "child", event type, path]``.  The ops and their arguments are listed in
store_server.py.
"""

from __future__ import annotations

import struct
from typing import Any

from pybroker.coord.metadata.store import Check, Create, Delete, Op, SetData

MAX_FRAME = 256 * 1024 * 1024  # a get_children of 100,000s of topics fits; a bad length does not
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")


class FrameError(ValueError):
    """Bytes that are not a frame of this protocol."""


def encode(value: Any) -> bytes:
    out = bytearray(4)
    _put(out, value)
    _U32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def _put(out: bytearray, v: Any) -> None:
    if v is None:
        out += b"N"
    elif v is True:
        out += b"T"
    elif v is False:
        out += b"F"
    elif isinstance(v, int):
        out += b"i"
        out += _I64.pack(v)
    elif isinstance(v, str):
        data = v.encode("utf-8", "surrogatepass")
        out += b"s"
        out += _U32.pack(len(data))
        out += data
    elif isinstance(v, bytes | bytearray | memoryview):
        out += b"b"
        out += _U32.pack(len(v))
        out += v
    elif isinstance(v, list | tuple):
        out += b"l"
        out += _U32.pack(len(v))
        for item in v:
            _put(out, item)
    else:
        raise TypeError(f"cannot encode {type(v).__name__}")


def decode(frame: bytes) -> Any:
    """The value of one frame's body (without the length)."""
    value, end = _get(memoryview(frame), 0, 0)
    if end != len(frame):
        raise FrameError(f"{len(frame) - end} bytes after the value")
    return value


def _get(buf: memoryview, i: int, depth: int) -> tuple[Any, int]:
    if depth > 16:
        raise FrameError("values nested too deep")
    if i >= len(buf):
        raise FrameError("truncated value")
    tag = buf[i]
    i += 1
    if tag == 0x4E:  # N
        return None, i
    if tag == 0x54:  # T
        return True, i
    if tag == 0x46:  # F
        return False, i
    if tag == 0x69:  # i
        if i + 8 > len(buf):
            raise FrameError("truncated int")
        return _I64.unpack_from(buf, i)[0], i + 8
    if i + 4 > len(buf):
        raise FrameError("truncated length")
    (n,) = _U32.unpack_from(buf, i)
    i += 4
    if tag in (0x73, 0x62):  # s, b
        if i + n > len(buf):
            raise FrameError("truncated string")
        raw = bytes(buf[i : i + n])
        if tag == 0x62:
            return raw, i + n
        try:
            return raw.decode("utf-8", "surrogatepass"), i + n
        except UnicodeDecodeError as e:
            raise FrameError(f"bad UTF-8: {e}") from None
    if tag == 0x6C:  # l
        if n > len(buf) - i:  # every value takes at least one byte
            raise FrameError("list longer than the frame")
        items = []
        for _ in range(n):
            item, i = _get(buf, i, depth + 1)
            items.append(item)
        return items, i
    raise FrameError(f"unknown tag {tag:#x}")


def frame_length(header: bytes) -> int:
    (n,) = _U32.unpack(header)
    if n > MAX_FRAME:
        raise FrameError(f"frame of {n} bytes is over the limit of {MAX_FRAME}")
    return n


def _data(v: Any) -> bytes:
    if v is None:
        return b""
    if not isinstance(v, bytes):
        raise ValueError("node data must be bytes")
    return v


def decode_op(item: Any) -> Op:
    """[kind, path, data, version, ephemeral, sequence] -> an Op (ValueError if malformed)."""
    if not isinstance(item, list) or len(item) != 6:
        raise ValueError(f"bad multi operation {item!r:.100}")
    kind, path, data, version, ephemeral, sequence = item
    if not isinstance(path, str) or not isinstance(version, int) or isinstance(version, bool):
        raise ValueError("bad multi operation fields")
    if kind == "create":
        return Create(path, _data(data), bool(ephemeral), bool(sequence))
    if kind == "set":
        return SetData(path, _data(data), version)
    if kind == "delete":
        return Delete(path, version)
    if kind == "check":
        return Check(path, version)
    raise ValueError(f"unknown multi operation {kind!r:.40}")


def encode_op(op: Op) -> list[Any]:
    if isinstance(op, Create):
        return ["create", op.path, op.data, -1, op.ephemeral, op.sequence]
    if isinstance(op, SetData):
        return ["set", op.path, op.data, op.version, False, False]
    if isinstance(op, Delete):
        return ["delete", op.path, None, op.version, False, False]
    if isinstance(op, Check):
        return ["check", op.path, None, op.version, False, False]
    raise TypeError(f"not a store operation: {op!r}")
