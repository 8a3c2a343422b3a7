"""The one generic codec: every API and version, driven by the declarations in schema.py.

For a (message, version) pair a decoder and an encoder are generated from the declaration on
first use and kept (wire/codegen.py: Python source, nested structs and arrays written out in
one function each; a request's header and body in one decoder).  Decoding yields plain dicts;
encoding takes dicts and fills absent keys with defaults.

A ``records`` value being encoded may be bytes-like or an out-of-band chunk (any object with
a ``size`` attribute, e.g. a log file region); the latter is emitted as a separate part so the
connection can send it with sendfile.

A struct value may also be given already encoded (:class:`Encoded`, made by
:func:`encode_struct` for the same message, field path and version); it is written as is.
Handlers use this to cache parts of a response that rarely change (Metadata's topic entries).
"""

from __future__ import annotations

import copy
import struct
from collections.abc import Callable
from typing import Any

from pybroker.wire import messages as _messages  # noqa: F401  (registers the declarations)
from pybroker.wire.codegen import Encoded, compile_request, compile_struct
from pybroker.wire.primitives import DecodeError, Reader, Writer, parts_size
from pybroker.wire.schema import REQUEST_HEADER, RESPONSE_HEADER, SCHEMAS, Message

__all__ = ["Encoded", "DecodeError"]

_API_HEAD = struct.Struct(">hhi")  # a request's api key, version and correlation id
_SIZE = struct.Struct(">i")
_SIZE_AND_CORRELATION = struct.Struct(">ii")


class UnknownApiError(DecodeError):
    pass


class UnsupportedVersionError(DecodeError):
    def __init__(self, api_key: int, version: int) -> None:
        super().__init__(f"api {api_key} version {version} is not supported")
        self.api_key = api_key
        self.version = version


# Plans keyed by the message object's identity: hashing a frozen schema dataclass walks the
# whole field tree (6-22 us, several times per request in the profile); identity is enough
# because the declarations are module-level singletons, kept alive by the registry.  ``path``
# names a nested struct field (empty: the message itself).
_PLANS: dict[tuple[int, int, tuple[str, ...]], tuple[Callable, Callable]] = {}


def _plan(message: Message, version: int, path: tuple[str, ...] = ()) -> tuple[Callable, Callable]:
    key = (id(message), version, path)
    plan = _PLANS.get(key)
    if plan is None:
        fields, flexible = message.fields, version in message.flexible
        for name in path:
            f = next((f for f in fields if f.name == name), None)
            if f is None or not f.is_struct or version not in f.versions:
                raise KeyError(f"{message.name} v{version} has no struct field {'.'.join(path)}")
            if f.flexible_versions is not None:
                flexible = version in f.flexible_versions
            fields = f.fields
        plan = _PLANS[key] = compile_struct(fields, version, flexible)
    return plan


# Answer encoders (and whether the response header has a tagged section) by (api key, version).
_RESPONSES: dict[tuple[int, int], tuple[Callable[[Writer, Any], None], int]] = {}


def _response_encoder(api_key: int, version: int) -> tuple[Callable[[Writer, Any], None], int]:
    answer = _RESPONSES[api_key, version] = (
        _plan(SCHEMAS.by_key[api_key].response, version)[1],
        response_header_version(api_key, version),
    )
    return answer


# Request decoders (header and body in one function) by (api key, version).
_REQUESTS: dict[tuple[int, int], Callable[[Any], tuple[dict, dict]]] = {}


def _request_decoder(api_key: int, version: int) -> Callable[[Any], tuple[dict, dict]]:
    message = SCHEMAS.by_key[api_key].request
    hv = request_header_version(api_key, version)
    decode = _REQUESTS[api_key, version] = compile_request(
        REQUEST_HEADER.fields, hv in REQUEST_HEADER.flexible, hv,
        message.fields, version, version in message.flexible,
    )  # fmt: skip
    return decode


# -- public API ---------------------------------------------------------------------------


def encode_struct(message: Message, path: tuple[str, ...], version: int, obj: dict) -> Encoded:
    """One element of the struct (or struct array) field at ``path`` of ``message``, encoded
    for ``version``: give it back in place of the dict when encoding that message."""
    w = Writer()
    _plan(message, version, path)[1](w, obj)
    return Encoded(w.getvalue())


def decode_message(message: Message, version: int, data: bytes | memoryview | Reader) -> dict:
    r = data if isinstance(data, Reader) else Reader(data)
    out, r.pos = _plan(message, version)[0](r.buf, r.pos, r.end)
    return out


def encode_message(message: Message, version: int, obj: dict, w: Writer | None = None) -> Writer:
    w = w or Writer()
    _plan(message, version)[1](w, obj)
    return w


def request_header_version(api_key: int, api_version: int) -> int:
    a = SCHEMAS.by_key.get(api_key)
    if a is not None and api_version in a.request.flexible:
        return 2
    return 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == 18:  # ApiVersions answers with header v0 always (KIP-511)
        return 0
    a = SCHEMAS.by_key.get(api_key)
    return 1 if a is not None and api_version in a.response.flexible else 0


def peek_api(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from a request frame's first 8 bytes."""
    if len(frame) < 8:
        raise DecodeError(f"need 8 bytes at 0, frame has {len(frame)}")
    return _API_HEAD.unpack_from(frame)


def decode_request(frame: bytes | memoryview) -> tuple[dict, dict]:
    """Decode a whole request frame (without its size prefix) into (header, body).

    Raises UnknownApiError / UnsupportedVersionError (the caller decides: ApiVersions gets an
    error answer, anything else closes the connection) and DecodeError for bad bytes.
    """
    api_key, api_version, _ = peek_api(frame)
    decode = _REQUESTS.get((api_key, api_version))  # (only served versions are kept)
    if decode is None:
        a = SCHEMAS.by_key.get(api_key)
        if a is None:
            raise UnknownApiError(f"unknown api key {api_key}")
        if api_version not in a.request.versions:
            raise UnsupportedVersionError(api_key, api_version)
        decode = _request_decoder(api_key, api_version)
    # Bytes after the body are ignored, as Kafka's request parser does: librdkafka pads some
    # requests (Metadata v12 from librdkafka 2.x ends with three extra zero bytes).
    return decode(frame if type(frame) is memoryview else memoryview(frame))


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: dict
) -> bytes:
    """Whole request frame including its size prefix (used by tests and tools)."""
    a = SCHEMAS.by_key[api_key]
    w = Writer()
    w.int32(0)
    hv = request_header_version(api_key, api_version)
    header = {
        "request_api_key": api_key,
        "request_api_version": api_version,
        "correlation_id": correlation_id,
        "client_id": client_id,
    }
    encode_message(REQUEST_HEADER, hv, header, w)
    encode_message(a.request, api_version, body, w)
    out = w.getvalue()
    return (len(out) - 4).to_bytes(4, "big", signed=True) + out[4:]


def encode_response(api_key: int, api_version: int, correlation_id: int, body: dict) -> list[Any]:
    """Response frame parts (size prefix included): bytes, and out-of-band chunks in order."""
    encode, header_v1 = _RESPONSES.get((api_key, api_version)) or _response_encoder(
        api_key, api_version
    )
    w = Writer()
    # the size (patched below) and the response header: the correlation id, and in header v1
    # its tagged fields, none (uvarint 0)
    buf = w.buf
    buf += _SIZE_AND_CORRELATION.pack(0, correlation_id)
    if header_v1:
        buf.append(0)
    encode(w, body)
    buf = w.buf
    if not w.has_chunks:  # no log region: the size patched into the one buffer, one copy
        _SIZE.pack_into(buf, 0, len(buf) - 4)
        return [bytes(buf)]
    parts = w.parts()
    size = parts_size(parts) - 4
    first = bytearray(parts[0])
    first[0:4] = size.to_bytes(4, "big", signed=True)
    parts[0] = bytes(first)
    return parts


_BODIES: dict[tuple[int, int], tuple[dict, bytes]] = {}


def encode_response_memo(
    api_key: int, api_version: int, correlation_id: int, body: dict
) -> list[Any]:
    """``encode_response`` for an answer most requests get alike (ApiVersions: every
    connection asks it first): the body encoded once per distinct answer, kept with a copy
    of it and used again only for an equal one (compared whole, so a changed configuration or
    error is never answered from the memo), behind each request's own header.  Answers
    without log regions only."""
    memo = _BODIES.get((api_key, api_version))
    header = b"" if response_header_version(api_key, api_version) == 0 else b"\x00"
    if memo is None or memo[0] != body:
        frame = encode_response(api_key, api_version, 0, body)[0]
        memo = _BODIES[api_key, api_version] = (copy.deepcopy(body), frame[8 + len(header) :])
    encoded = memo[1]
    size = 4 + len(header) + len(encoded)
    return [_SIZE_AND_CORRELATION.pack(size, correlation_id) + header + encoded]


def decode_response(api_key: int, api_version: int, frame: bytes | memoryview) -> tuple[int, dict]:
    """(correlation_id, body) of a response frame without its size prefix (tests and tools)."""
    a = SCHEMAS.by_key[api_key]
    r = Reader(frame)
    header = decode_message(RESPONSE_HEADER, response_header_version(api_key, api_version), r)
    return header["correlation_id"], decode_message(a.response, api_version, r)
