"""The one generic codec: every API and version, driven by the declarations in schema.py.

For a (message, version) pair we compile a plan once (cached): the list of fields present in
that version with a reader and a writer closure each, chosen by type, nullability and whether
the version is flexible (compact encodings plus a tagged-field section closing every struct).
Decoding yields plain dicts; encoding takes dicts and fills absent keys with defaults.

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
import uuid
from collections.abc import Callable
from typing import Any

from pybroker.wire import messages as _messages  # noqa: F401  (registers the declarations)
from pybroker.wire import offset_commit_codec
from pybroker.wire.primitives import (
    ZERO_UUID,
    DecodeError,
    Reader,
    Writer,
    parts_size,
    uvarint_at,
    write_uvarint,
)
from pybroker.wire.schema import REQUEST_HEADER, RESPONSE_HEADER, SCHEMAS, Field, Message

ReadFn = Callable[[Reader], Any]
WriteFn = Callable[[Writer, Any], None]

# Minimum encoded size of one element, used to refuse absurd array lengths early.
_MIN_SIZE = {"int8": 1, "int16": 2, "uint16": 2, "int32": 4, "int64": 8, "float64": 8, "bool": 1}
_MIN_SIZE["uuid"] = 16

_API_HEAD = struct.Struct(">hhi")  # a request's api key, version and correlation id
_I16 = struct.Struct(">h")
_SIZE = struct.Struct(">i")
_SIZE_AND_CORRELATION = struct.Struct(">ii")
# APIs with a dedicated decoder and encoder of the common shape, None for the rest: the
# generic code (issue 28: OffsetCommit, one per poll in W18)
_DIRECT: dict[int, Any] = {8: offset_commit_codec}


class Encoded(bytes):
    """A struct value already encoded for one (message, field path, version)."""


class UnknownApiError(DecodeError):
    pass


class UnsupportedVersionError(DecodeError):
    def __init__(self, api_key: int, version: int) -> None:
        super().__init__(f"api {api_key} version {version} is not supported")
        self.api_key = api_key
        self.version = version


def _zero_default(f: Field, version: int) -> Any:
    if f.default is not None:
        return f.default
    if version in f.nullable:
        return None
    if f.is_array:
        return []
    t = f.type
    if t == "bool":
        return False
    if t == "float64":
        return 0.0
    if t == "string":
        return ""
    if t in ("bytes", "records"):
        return b""
    if t == "uuid":
        return ZERO_UUID
    if f.is_struct:
        return {}
    return 0


def _scalar(t: str) -> tuple[ReadFn, WriteFn]:
    return {
        "int8": (Reader.int8, Writer.int8),
        "int16": (Reader.int16, Writer.int16),
        "uint16": (Reader.uint16, Writer.uint16),
        "int32": (Reader.int32, Writer.int32),
        "int64": (Reader.int64, Writer.int64),
        "float64": (Reader.float64, Writer.float64),
        "bool": (Reader.bool, Writer.bool),
        "uuid": (Reader.uuid, _write_uuid),
    }[t]


def _write_uuid(w: Writer, v: Any) -> None:
    if isinstance(v, str):
        v = uuid.UUID(v)
    w.uuid(v)


_BYTES = (bytes, bytearray, memoryview)


def _write_records_classic(w: Writer, v: Any) -> None:
    if v is None:
        w.int32(-1)
    elif type(v) not in _BYTES and hasattr(v, "size"):
        w.int32(v.size)
        w.chunk(v)
    else:
        w.bytes_(v)


def _write_records_compact(w: Writer, v: Any) -> None:
    if v is None:
        w.buf.append(0)
    elif type(v) in _BYTES:
        if v:
            w.compact_bytes(v)
        else:
            w.buf.append(1)  # no records: length 0 + 1
    elif hasattr(v, "size"):
        w.uvarint(v.size + 1)
        w.chunk(v)
    else:
        w.compact_bytes(v)


def _blob(t: str, nullable: bool, flexible: bool) -> tuple[ReadFn, WriteFn]:
    if t == "string":
        if flexible:
            return (Reader.compact_nullable_string if nullable else Reader.compact_string), (
                Writer.compact_string
            )
        return (Reader.nullable_string if nullable else Reader.string), Writer.string
    if t == "records":
        if flexible:
            return Reader.compact_nullable_bytes, _write_records_compact
        return Reader.nullable_bytes, _write_records_classic
    # bytes
    if flexible:
        return (Reader.compact_nullable_bytes if nullable else Reader.compact_bytes), (
            Writer.compact_bytes
        )
    return (Reader.nullable_bytes if nullable else Reader.bytes_), Writer.bytes_


def _element(f: Field, version: int, flexible: bool) -> tuple[ReadFn, WriteFn, int]:
    """Reader/writer of one element of an array field (or of the field itself)."""
    if f.is_struct:
        dec, enc = _compile_struct(f.fields, version, flexible)
        return dec, enc, 1
    t = f.element_type
    if t in _MIN_SIZE:
        r, w = _scalar(t)
        return r, w, _MIN_SIZE[t]
    r, w = _blob(t, (not f.is_array) and version in f.nullable, flexible)
    return r, w, 1


def _field_codec(f: Field, version: int, flexible: bool) -> tuple[ReadFn, WriteFn]:
    if f.flexible_versions is not None:
        flexible = version in f.flexible_versions
    nullable = version in f.nullable
    if f.is_array:
        er, ew, min_size = _element(f, version, flexible)

        if flexible:

            def read_array(r: Reader) -> Any:
                p, end = r.pos, r.end
                if p < end and (b := r.buf[p]) < 0x80:  # a length below 127: one byte
                    r.pos = p = p + 1
                    n = b - 1
                    if n > 0 and n * min_size > end - p:
                        raise DecodeError(f"array length {n} exceeds the frame")
                else:
                    n = r.compact_array_length(min_size)
                if n < 0:
                    if nullable:
                        return None
                    raise DecodeError(f"null array {f.name}")
                return [er(r) for _ in range(n)]

            def write_array(w: Writer, v: Any) -> None:
                if v is None:
                    w.uvarint(0)
                    return
                w.uvarint(len(v) + 1)
                for item in v:
                    ew(w, item)

        else:

            def read_array(r: Reader) -> Any:
                n = r.array_length(min_size)
                if n < 0:
                    if nullable:
                        return None
                    raise DecodeError(f"null array {f.name}")
                return [er(r) for _ in range(n)]

            def write_array(w: Writer, v: Any) -> None:
                if v is None:
                    w.int32(-1)
                    return
                w.int32(len(v))
                for item in v:
                    ew(w, item)

        return read_array, write_array
    if f.is_struct:
        sr, sw, _ = _element(f, version, flexible)
        if not nullable:
            return sr, sw

        def read_opt(r: Reader) -> Any:
            return None if r.int8() < 0 else sr(r)

        def write_opt(w: Writer, v: Any) -> None:
            if v is None:
                w.int8(-1)
            else:
                w.int8(1)
                sw(w, v)

        return read_opt, write_opt
    r, w, _ = _element(f, version, flexible)
    return r, w


# Fixed-width scalars that one struct format packs and unpacks as the primitives do ('?' reads
# any non-zero byte as true and writes 0 or 1, as Reader.bool / Writer.bool).
_RUN_FORMAT = {
    "int8": "b",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "int64": "q",
    "float64": "d",
    "bool": "?",
}


def _compile_struct(
    fields: tuple[Field, ...], version: int, flexible: bool
) -> tuple[Callable[[Reader], dict], Callable[[Writer, dict], None]]:
    """The struct's decoder and encoder for ``version``: Python source generated from the
    declaration (one function each, fields in order), so that a struct costs one call and no
    loop over field descriptors.  Consecutive fixed-width scalars form a run read and written
    with one struct format (Fetch and Produce partition entries are mostly such runs); other
    fields call their reader or writer; the tagged-field section closes a flexible struct."""
    steps: list[tuple[Any, ...]] = []  # ("run", [(name, letter, default)]) / ("one", f, d)
    tagged: dict[int, tuple[str, ReadFn, WriteFn, Any]] = {}
    for f in fields:
        if version not in f.versions:
            continue
        d = _zero_default(f, version)
        if flexible and f.tag is not None and version in f.tagged:
            r, w = _field_codec(f, version, flexible)
            tagged[f.tag] = (f.name, r, w, d)
            continue
        letter = _run_letter(f)
        if letter is not None:
            if steps and steps[-1][0] == "run":
                steps[-1][1].append((f.name, letter, d))
            else:
                steps.append(("run", [(f.name, letter, d)]))
        else:
            steps.append(("one", f, d))
    env: dict[str, Any] = {
        "DecodeError": DecodeError,
        "Encoded": Encoded,
        "Reader": Reader,
        "Writer": Writer,
        "I16": _I16.unpack_from,
        "P16": _I16.pack,
        "uvarint_at": uvarint_at,
        "write_uvarint": write_uvarint,
    }
    dec = ["def decode(r):", "    out = {}"]
    if flexible or any(step[0] == "one" and _inline_string(step[1]) for step in steps):
        dec.append("    buf, end = r.buf, r.end")
    enc = [
        "def encode(w, obj):",
        "    if type(obj) is Encoded:",
        "        w.buf += obj",
        "        return",
        "    get = obj.get",
    ]
    for k, step in enumerate(steps):
        if step[0] == "run":
            names = [name for name, _, _ in step[1]]
            packer = struct.Struct(">" + "".join(letter for _, letter, _ in step[1]))
            env[f"U{k}"], env[f"P{k}"] = packer.unpack_from, packer.pack
            env[f"D{k}"] = tuple(d for _, _, d in step[1])
            values = ", ".join(f"a{j}" for j in range(len(names)))
            dec += [
                "    p = r.pos",
                f"    e = p + {packer.size}",
                "    if e > r.end:",
                f"        raise DecodeError(f'need {packer.size} bytes at {{p}}, frame has "
                "{r.end - p}')",
                "    r.pos = e",
                f"    {values}, = U{k}(r.buf, p)",
            ]
            dec += [f"    out[{name!r}] = a{j}" for j, name in enumerate(names)]
            gets = ", ".join(f"get({name!r})" for name in names)
            enc += [
                f"    t = ({gets},)",
                "    if None in t:",
                f"        t = tuple(d if v is None else v for v, d in zip(t, D{k}))",
                f"    w.buf += P{k}(*t)",
            ]
            continue
        _, f, d = step
        name = f.name
        if _inline_string(f):
            field_flexible = (
                flexible if f.flexible_versions is None else version in f.flexible_versions
            )
            env[f"D{k}"] = d
            dec += _string_decoder(name, field_flexible, version in f.nullable)
            enc += _string_encoder(name, f"D{k}", field_flexible)
            continue
        env[f"R{k}"], env[f"W{k}"] = _field_codec(f, version, flexible)
        env[f"D{k}"] = d
        dec.append(f"    out[{name!r}] = R{k}(r)")
        enc.append(f"    v = get({name!r})")
        if f.is_array and version in f.nullable:  # null inline: a length of -1 (compact: 0)
            field_flexible = (
                flexible if f.flexible_versions is None else version in f.flexible_versions
            )
            null = "w.buf.append(0)" if field_flexible else "w.buf += b'\\xff\\xff\\xff\\xff'"
            enc += ["    if v is None:", f"        {null}", "    else:", f"        W{k}(w, v)"]
        else:
            enc.append(f"    W{k}(w, D{k} if v is None else v)")
    if flexible:
        env["read_tagged"], env["write_tagged"] = _tagged_codec(tagged)
        # the common case inline: no tagged field (a count of 0)
        env["TD"] = {name: d for name, _, _, d in tagged.values()}
        dec += [
            "    p = r.pos",
            "    if p < end and buf[p] == 0:",
            "        r.pos = p + 1",
            "        out.update(TD)" if tagged else "        pass",
            "    else:",
            "        read_tagged(r, out)",
        ]
        # the common case inline: every tagged field absent or at its default
        if tagged:
            test = " or ".join(
                f"((v := get({name!r})) is not None and v != T{tag})"
                for tag, (name, _, _, _) in sorted(tagged.items())
            )
            env.update({f"T{tag}": d for tag, (_, _, _, d) in tagged.items()})
            enc += ["    if " + test + ":", "        write_tagged(w, get)", "    else:"]
            enc.append("        w.buf.append(0)")
        else:
            enc.append("    w.buf.append(0)")
    dec.append("    return out")
    exec(compile("\n".join(dec) + "\n\n" + "\n".join(enc) + "\n", "<codec>", "exec"), env)  # noqa: S102
    return env["decode"], env["encode"]


def _inline_string(f: Field) -> bool:
    """A string field whose reading and writing the generated code spells out (group ids,
    member ids, topic names: several per request), instead of four or five method calls."""
    return f.type == "string"


def _string_decoder(name: str, flexible: bool, nullable: bool) -> list[str]:
    """Generated lines reading string field ``name`` into ``out``, as Reader.string,
    nullable_string, compact_string and compact_nullable_string do (the same errors)."""
    if flexible:
        lines = [
            "    p = r.pos",
            "    if p < end and buf[p] < 0x80:",
            "        n = buf[p] - 1",
            "        p += 1",
            "    else:",
            "        n, p = uvarint_at(buf, p, end)",
            "        n -= 1",
        ]
    else:
        lines = [
            "    p = r.pos",
            "    if p + 2 > end:",
            "        raise DecodeError(f'need 2 bytes at {p}, frame has {end - p}')",
            "    n, = I16(buf, p)",
            "    p += 2",
        ]
    lines += ["    if n < 0:"]
    if nullable:
        lines += [f"        out[{name!r}] = None", "        r.pos = p", "    else:"]
        ind = "        "
    else:
        lines += ["        raise DecodeError('null where a string is required')"]
        ind = "    "
    lines += [
        f"{ind}e = p + n",
        f"{ind}if e > end:",
        f"{ind}    raise DecodeError(f'need {{n}} bytes at {{p}}, frame has {{end - p}}')",
        f"{ind}try:",
        f"{ind}    out[{name!r}] = str(buf[p:e], 'utf-8')",
        f"{ind}except UnicodeDecodeError as x:",
        f"{ind}    raise DecodeError(f'invalid utf-8 string: {{x}}') from None",
        f"{ind}r.pos = e",
    ]
    return lines


def _string_encoder(name: str, default: str, flexible: bool) -> list[str]:
    """Generated lines writing string field ``name`` (absent: ``default``; None: null), as
    Writer.string and Writer.compact_string do."""
    null = "w.buf.append(0)" if flexible else "w.buf += b'\\xff\\xff'"
    lines = [
        f"    v = get({name!r})",
        "    if v is None:",
        f"        v = {default}",
        "    if v is None:",
        f"        {null}",
        "    else:",
        "        b = v.encode()",
    ]
    if flexible:
        lines += [
            "        n = len(b) + 1",
            "        if n < 0x80:",
            "            w.buf.append(n)",
            "        else:",
            "            write_uvarint(w.buf, n)",
        ]
    else:
        lines += ["        w.buf += P16(len(b))"]
    lines += ["        w.buf += b"]
    return lines


def _run_letter(f: Field) -> str | None:
    """The struct format letter of a field that can join a run of fixed-width fields."""
    if f.is_array or f.is_struct or f.flexible_versions is not None:
        return None
    return _RUN_FORMAT.get(f.type)


def _tagged_codec(
    tagged: dict[int, tuple[str, ReadFn, WriteFn, Any]],
) -> tuple[Callable[[Reader, dict], None], Callable[[Writer, Callable], None]]:
    """A flexible struct's tagged-field section: absent fields take their defaults, unknown
    tags are skipped; fields at their default are not written."""
    defaults = {name: d for name, _, _, d in tagged.values()}
    order = [tagged[tag] + (tag,) for tag in sorted(tagged)]

    def read_tagged(r: Reader, out: dict) -> None:
        if defaults:
            out.update(defaults)
        for _ in range(r.uvarint()):
            tag = r.uvarint()
            size = r.uvarint()
            sub_end = r.pos + size
            if sub_end > r.end:
                raise DecodeError("tagged field exceeds the frame")
            entry = tagged.get(tag)
            if entry is not None:
                out[entry[0]] = entry[1](Reader(r.buf, r.pos, sub_end))
            r.pos = sub_end

    def write_tagged(w: Writer, get: Callable) -> None:
        present = []
        for name, _, wr, d, tag in order:
            v = get(name, d)
            if v is None or v == d:
                continue
            sub = Writer()
            wr(sub, v)
            present.append((tag, sub.getvalue()))
        w.uvarint(len(present))
        for tag, data in present:
            w.uvarint(tag)
            w.uvarint(len(data))
            w.raw(data)

    return read_tagged, write_tagged


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
        plan = _compile_struct(fields, version, flexible)
        _PLANS[key] = plan
    return plan


# -- public API ---------------------------------------------------------------------------


def encode_struct(message: Message, path: tuple[str, ...], version: int, obj: dict) -> Encoded:
    """One element of the struct (or struct array) field at ``path`` of ``message``, encoded
    for ``version``: give it back in place of the dict when encoding that message."""
    w = Writer()
    _plan(message, version, path)[1](w, obj)
    return Encoded(w.getvalue())


def decode_message(message: Message, version: int, data: bytes | memoryview | Reader) -> dict:
    r = data if isinstance(data, Reader) else Reader(data)
    return _plan(message, version)[0](r)


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
    a = SCHEMAS.by_key.get(api_key)
    if a is None:
        raise UnknownApiError(f"unknown api key {api_key}")
    if api_version not in a.request.versions:
        raise UnsupportedVersionError(api_key, api_version)
    direct = _DIRECT.get(api_key)
    if direct is not None and (got := direct.decode_request(frame, api_version)) is not None:
        return got
    r = Reader(frame)
    header = _plan(REQUEST_HEADER, request_header_version(api_key, api_version))[0](r)
    body = _plan(a.request, api_version)[0](r)
    # Bytes after the body are ignored, as Kafka's request parser does: librdkafka pads some
    # requests (Metadata v12 from librdkafka 2.x ends with three extra zero bytes).
    return header, body


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
    direct = _DIRECT.get(api_key)
    if direct is not None and (got := direct.encode_response(api_version, correlation_id, body)):
        return got
    a = SCHEMAS.by_key[api_key]
    w = Writer()
    # the size (patched below) and the response header, packed here (the generic encoder's
    # plan for two fields was ~2% of an OffsetCommit's path): the correlation id, and in
    # header v1 its tagged fields, none (uvarint 0)
    w.buf += _SIZE_AND_CORRELATION.pack(0, correlation_id)
    if response_header_version(api_key, api_version):
        w.buf.append(0)
    encode_message(a.response, api_version, body, w)
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
    header = _plan(RESPONSE_HEADER, response_header_version(api_key, api_version))[0](r)
    body = _plan(a.response, api_version)[0](r)
    return header["correlation_id"], body
