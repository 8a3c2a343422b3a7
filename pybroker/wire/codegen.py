"""Python source generated from the schema declarations (wire/schema.py): one decoder and one
encoder function per (message, version), nested structs and arrays written out in place, so a
whole request or answer costs one call and no loop over field descriptors (issue 28).

codec.py compiles them lazily, on the first use of a (message, version), and keeps them; the
format is defined once, here, by what the generator emits for each kind of field (the
primitives' rules, primitives.py, spelled out inline: the same bounds checks and the same
:class:`DecodeError` for truncated or damaged bytes).  tests/test_codec_reference.py compares
the result with a field-by-field interpreter of the same declarations for every API and
version.

A decoder is ``decode(buf, p, end) -> (dict, p)`` over a memoryview; an encoder is
``encode(w, obj)`` appending to a :class:`Writer` (its ``buf``, and out-of-band chunks for
``records`` values that are file regions).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pybroker.wire.primitives import ZERO_UUID, DecodeError, Writer, uvarint_at, write_uvarint
from pybroker.wire.schema import Field, VersionRange

# Fixed-width scalars as struct format letters ('?' reads any non-zero byte as true and writes
# 0 or 1, as Reader.bool / Writer.bool); their sizes bound array lengths (uuid: 16 bytes).
RUN_FORMAT = {
    "int8": "b",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "int64": "q",
    "float64": "d",
    "bool": "?",
}
MIN_SIZE = {t: struct.calcsize(">" + c) for t, c in RUN_FORMAT.items()} | {"uuid": 16}
_NO_TAG = VersionRange(1, 0)


class Encoded(bytes):
    """A struct value already encoded for one (message, field path, version)."""


def zero_default(f: Field, version: int) -> Any:
    """The value of a field absent from an encoded struct's dict or tagged section."""
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


def write_uuid(buf: bytearray, v: Any) -> None:
    if isinstance(v, str):
        v = uuid.UUID(v)
    if v is None:
        v = ZERO_UUID
    buf += v.bytes if isinstance(v, uuid.UUID) else bytes(v)


_BYTES = (bytes, bytearray, memoryview)
_I32 = struct.Struct(">i")


def write_records(w: Writer, v: Any, flexible: bool) -> None:
    """A ``records`` value: bytes, or an out-of-band chunk (anything with ``size``)."""
    buf = w.buf
    if v is None:
        buf += b"\x00" if flexible else b"\xff\xff\xff\xff"
        return
    chunk = type(v) not in _BYTES and hasattr(v, "size")
    n = v.size if chunk else len(v)
    if flexible:
        write_uvarint(buf, n + 1)
    else:
        buf += _I32.pack(n)
    if chunk:
        w.chunk(v)
    else:
        buf += v


def _read_tagged(buf: Any, p: int, end: int, out: dict, known: dict) -> int:
    """A tagged-field section that is not empty: known tags decoded (within their size),
    unknown ones skipped."""
    count, p = uvarint_at(buf, p, end)
    for _ in range(count):
        tag, p = uvarint_at(buf, p, end)
        size, p = uvarint_at(buf, p, end)
        sub_end = p + size
        if sub_end > end:
            raise DecodeError("tagged field exceeds the frame")
        entry = known.get(tag)
        if entry is not None:
            out[entry[0]] = entry[1](buf, p, sub_end)[0][entry[0]]
        p = sub_end
    return p


def _write_tagged(w: Writer, get: Callable, known: list) -> None:
    """A tagged-field section with at least one field away from its default."""
    present = []
    for tag, name, encode, d in known:
        v = get(name, d)
        if v is None or v == d:
            continue
        sub = Writer()
        encode(sub, {name: v})
        present.append((tag, sub.getvalue()))
    buf = w.buf
    write_uvarint(buf, len(present))
    for tag, data in present:
        write_uvarint(buf, tag)
        write_uvarint(buf, len(data))
        buf += data


class _Source:
    """The lines of one generated module and the constants its code names."""

    def __init__(self) -> None:
        self.env: dict[str, Any] = {
            "DecodeError": DecodeError,
            "Encoded": Encoded,
            "UUID": uuid.UUID,
            "uvarint_at": uvarint_at,
            "write_uvarint": write_uvarint,
            "write_uuid": write_uuid,
            "write_records": write_records,
            "read_tagged": _read_tagged,
            "write_tagged": _write_tagged,
            "unpack_from": struct.unpack_from,
            "pack": struct.pack,
            "I16": struct.Struct(">h").unpack_from,
            "I32": struct.Struct(">i").unpack_from,
            "P16": struct.Struct(">h").pack,
            "P32": _I32.pack,
        }
        self.count = 0

    def const(self, prefix: str, value: Any) -> str:
        self.count += 1
        name = f"{prefix}{self.count}"
        self.env[name] = value
        return name

    def var(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"


def _flexible(f: Field, version: int, flexible: bool) -> bool:
    return flexible if f.flexible_versions is None else version in f.flexible_versions


def _need(n: str, ind: str) -> list[str]:
    """Lines refusing ``n`` more bytes than the frame holds from ``p``."""
    return [
        f"{ind}if p + {n} > end:",
        f"{ind}    raise DecodeError(f'need {{{n}}} bytes at {{p}}, frame has {{end - p}}')",
    ]


def _length(flexible: bool, ind: str) -> list[str]:
    """Lines reading a length into ``n`` (compact: uvarint - 1; classic strings: int16)."""
    if flexible:
        return [
            f"{ind}if p < end and (n := buf[p]) < 0x80:",
            f"{ind}    n -= 1",
            f"{ind}    p += 1",
            f"{ind}else:",
            f"{ind}    n, p = uvarint_at(buf, p, end)",
            f"{ind}    n -= 1",
        ]
    return [*_need("2", ind), f"{ind}n, = I16(buf, p)", f"{ind}p += 2"]


def _decode_blob(t: str, nullable: bool, flexible: bool, target: str, ind: str) -> list[str]:
    """Lines decoding a string, bytes or records value into ``target``."""
    nullable = nullable or t == "records"  # (records: a null reads as None in every version)
    if t == "string" and flexible:  # the common case first: a length below 127, in the frame
        fast = ind + "    "
        return [
            f"{ind}if p < end and 0 < (n := buf[p]) < 0x80 and (e := p + n) <= end:",
            f"{fast}try:",
            f"{fast}    {target} = str(buf[p + 1:e], 'utf-8')",
            f"{fast}except UnicodeDecodeError as x:",
            f"{fast}    raise DecodeError(f'invalid utf-8 string: {{x}}') from None",
            f"{fast}p = e",
            f"{ind}else:",
            *_decode_blob_general(t, nullable, flexible, target, fast),
        ]
    return _decode_blob_general(t, nullable, flexible, target, ind)


def _decode_blob_general(
    t: str, nullable: bool, flexible: bool, target: str, ind: str
) -> list[str]:
    if t == "string" or flexible:
        lines = _length(flexible, ind)
    else:
        lines = [*_need("4", ind), f"{ind}n, = I32(buf, p)", f"{ind}p += 4"]
    lines.append(f"{ind}if n < 0:")
    if nullable:
        lines += [f"{ind}    {target} = None", f"{ind}else:"]
    else:
        what = "a string is" if t == "string" else "bytes are"
        lines += [f"{ind}    raise DecodeError('null where {what} required')"]
        lines += [f"{ind}if True:"]
    i = ind + "    "
    lines += [
        f"{i}e = p + n",
        f"{i}if e > end:",
        f"{i}    raise DecodeError(f'need {{n}} bytes at {{p}}, frame has {{end - p}}')",
    ]
    if t == "string":
        lines += [
            f"{i}try:",
            f"{i}    {target} = str(buf[p:e], 'utf-8')",
            f"{i}except UnicodeDecodeError as x:",
            f"{i}    raise DecodeError(f'invalid utf-8 string: {{x}}') from None",
        ]
    else:
        lines.append(f"{i}{target} = buf[p:e]")
    lines.append(f"{i}p = e")
    return lines


def _decode_value(
    src: _Source, f: Field, t: str, version: int, flexible: bool, nullable: bool, target: str,
    ind: str,
) -> list[str]:  # fmt: skip
    """Lines decoding one value of field ``f`` (of element type ``t``) into ``target``."""
    # (fixed-width scalars are read in runs, and their arrays with one format, elsewhere)
    if f.is_struct:
        return decode_struct(src, f.fields, version, flexible, target, ind)
    if t == "uuid":
        return [*_need("16", ind), f"{ind}{target} = UUID(bytes=bytes(buf[p:p + 16]))"] + [
            f"{ind}p += 16"
        ]
    return _decode_blob(t, nullable, flexible, target, ind)


def _decode_field(
    src: _Source, f: Field, version: int, flexible: bool, target: str, ind: str
) -> list[str]:
    flexible = _flexible(f, version, flexible)
    nullable = version in f.nullable
    if f.is_array:
        t = f.element_type
        size = 1 if f.is_struct else MIN_SIZE.get(t, 1)
        if flexible:
            lines = _length(True, ind)
        else:
            lines = [*_need("4", ind), f"{ind}n, = I32(buf, p)", f"{ind}p += 4"]
        lines += [
            f"{ind}if n > 0 and n{f' * {size}' if size > 1 else ''} > end - p:",
            f"{ind}    raise DecodeError(f'array length {{n}} exceeds the frame')",
            f"{ind}if n < 0:",
        ]
        if nullable:
            lines += [f"{ind}    {target} = None", f"{ind}else:"]
        else:
            lines += [f"{ind}    raise DecodeError('null array {f.name}')", f"{ind}if True:"]
        i = ind + "    "
        if not f.is_struct and t in RUN_FORMAT:  # the whole array with one format
            lines += [
                f"{i}{target} = list(unpack_from(f'>{{n}}{RUN_FORMAT[t]}', buf, p))",
                f"{i}p += n * {size}",
            ]
            return lines
        a, x = src.var("a"), src.var("x")
        lines += [f"{i}{a} = []", f"{i}for _ in range(n):"]
        lines += _decode_value(src, f, t, version, flexible, False, x, i + "    ")
        lines += [f"{i}    {a}.append({x})", f"{i}{target} = {a}"]
        return lines
    if f.is_struct and nullable:
        lines = [*_need("1", ind), f"{ind}if buf[p] >= 0x80:", f"{ind}    p += 1"]
        lines += [f"{ind}    {target} = None", f"{ind}else:", f"{ind}    p += 1"]
        return lines + _decode_value(src, f, f.type, version, flexible, True, target, ind + "    ")
    return _decode_value(src, f, f.type, version, flexible, nullable, target, ind)


def _tagged_fields(fields: tuple[Field, ...], version: int, flexible: bool) -> dict[int, Field]:
    if not flexible:
        return {}
    return {
        f.tag: f
        for f in fields
        if version in f.versions and f.tag is not None and version in f.tagged
    }


def _untagged(f: Field) -> Field:
    return replace(f, tag=None, tagged=_NO_TAG)


def _tag_codecs(src: _Source, tagged: dict[int, Field], version: int) -> tuple[str, str]:
    """Constants naming each tagged field's own decoder and encoder (a one-field struct
    without a tagged section of its own), for read_tagged and write_tagged."""
    known, order = {}, []
    for tag in sorted(tagged):
        f = tagged[tag]
        dec, enc = compile_struct((_untagged(f),), version, True, close=False)
        known[tag] = (f.name, dec)
        order.append((tag, f.name, enc, zero_default(f, version)))
    return src.const("TK", known), src.const("TO", order)


def _layout(
    fields: tuple[Field, ...], version: int, flexible: bool, close: bool
) -> tuple[dict[int, Field], list[Field | tuple[struct.Struct, list[Field]]]]:
    """A struct's tagged fields in ``version`` (by tag; none unless ``close``), and its other
    fields present there, in order, each run of fixed-width scalars grouped under the one
    format that reads or writes it."""
    tagged = _tagged_fields(fields, version, flexible) if close else {}
    present = [
        f for f in fields if version in f.versions and (f.tag is None or f.tag not in tagged)
    ]
    parts: list[Field | tuple[struct.Struct, list[Field]]] = []
    run: list[Field] = []
    for f in present + [None]:  # (None: the end, closing the last run)
        if f is not None and not f.is_array and f.type in RUN_FORMAT:
            run.append(f)
            continue
        if run:
            parts.append((struct.Struct(">" + "".join(RUN_FORMAT[r.type] for r in run)), run))
            run = []
        if f is not None:
            parts.append(f)
    return tagged, parts


def decode_struct(
    src: _Source, fields: tuple[Field, ...], version: int, flexible: bool, out: str, ind: str,
    close: bool = True,
) -> list[str]:  # fmt: skip
    """Lines decoding a struct into a new dict ``out``, fields in order, then (flexible) its
    tagged-field section."""
    lines: list[str] = []
    names: list[tuple[str, str]] = []  # (field name, the local holding its value)
    tagged, parts = _layout(fields, version, flexible, close)
    for part in parts:
        if isinstance(part, tuple):
            packer, run = part
            s = src.const("S", packer)
            local = [(f.name, src.var("f")) for f in run]
            names += local
            targets = "".join(f"{v}, " for _, v in local)
            lines += _need(str(packer.size), ind)
            lines += [f"{ind}{targets}= {s}.unpack_from(buf, p)", f"{ind}p += {packer.size}"]
            continue
        f = part
        local = src.var("f")
        names.append((f.name, local))
        lines += _decode_field(src, f, version, flexible, local, ind)
    lines.append(f"{ind}{out} = {{{', '.join(f'{n!r}: {v}' for n, v in names)}}}")
    if flexible and close:
        known = _tag_codecs(src, tagged, version)[0] if tagged else src.const("TK", {})
        if tagged:  # (absent tagged fields take their defaults)
            defaults = {f.name: zero_default(f, version) for f in tagged.values()}
            lines.append(f"{ind}{out}.update({src.const('TD', defaults)})")
        lines += [f"{ind}if p < end and buf[p] == 0:", f"{ind}    p += 1", f"{ind}else:"]
        lines += [f"{ind}    p = read_tagged(buf, p, end, {out}, {known})"]
    return lines


def _literal(src: _Source, d: Any) -> str:
    """Source for a default value: the literal of a plain one, else a constant's name."""
    if type(d) in (int, bool, str, bytes) or (type(d) is float and d - d == 0):
        return repr(d)
    return src.const("D", d)


def _encode_blob(t: str, flexible: bool, v: str, ind: str, nullable: bool = True) -> list[str]:
    """Lines writing string or bytes value ``v`` (None: null, unless ``nullable`` is false:
    never None), as Writer.string, compact_string, bytes_ and compact_bytes do."""
    if t == "records":
        return [f"{ind}write_records(w, {v}, {flexible})", f"{ind}buf = w.buf"]
    null = "b'\\x00'" if flexible else "b'\\xff\\xff'" if t == "string" else "b'\\xff' * 4"
    if nullable:
        lines = [f"{ind}if {v} is None:", f"{ind}    buf += {null}", f"{ind}else:"]
    else:
        lines = [f"{ind}if True:"]
    if t == "string":
        lines.append(f"{ind}    {v} = {v}.encode()")
    if flexible:
        lines += [
            f"{ind}    n = len({v}) + 1",
            f"{ind}    if n < 0x80:",
            f"{ind}        buf.append(n)",
            f"{ind}    else:",
            f"{ind}        write_uvarint(buf, n)",
        ]
    else:
        lines.append(f"{ind}    buf += {'P16' if t == 'string' else 'P32'}(len({v}))")
    return lines + [f"{ind}    buf += {v}"]


def _encode_value(
    src: _Source, f: Field, t: str, version: int, flexible: bool, v: str, ind: str
) -> list[str]:
    """Lines writing one value ``v`` of field ``f`` (element type ``t``), no default."""
    # (fixed-width scalars are written in runs, and their arrays with one format, elsewhere)
    if f.is_struct:
        return encode_struct(src, f.fields, version, flexible, v, ind)
    if t == "uuid":
        return [f"{ind}write_uuid(buf, {v})"]
    return _encode_blob(t, flexible, v, ind)


def _encode_field(
    src: _Source, f: Field, version: int, flexible: bool, get: str, ind: str
) -> list[str]:
    flexible = _flexible(f, version, flexible)
    nullable = version in f.nullable
    v = src.var("v")
    lines = [f"{ind}{v} = {get}({f.name!r})"]
    d = None
    if not (f.is_array and nullable):  # (a nullable array's None is null whatever its default)
        d = zero_default(f, version)
        if d is not None:
            lines += [f"{ind}if {v} is None:", f"{ind}    {v} = {_literal(src, d)}"]
    if f.is_array:
        t = f.element_type
        if d is None:
            null = "buf.append(0)" if flexible else "buf += b'\\xff' * 4"
            lines += [f"{ind}if {v} is None:", f"{ind}    {null}", f"{ind}else:"]
        else:  # (never None here)
            lines.append(f"{ind}if True:")
        i = ind + "    "
        if flexible:
            lines += [f"{i}n = len({v}) + 1", f"{i}if n < 0x80:", f"{i}    buf.append(n)"]
            lines += [f"{i}else:", f"{i}    write_uvarint(buf, n)"]
        else:
            lines.append(f"{i}buf += P32(len({v}))")
        if not f.is_struct and t in RUN_FORMAT:
            lines.append(f"{i}buf += pack(f'>{{len({v})}}{RUN_FORMAT[t]}', *{v})")
            return lines
        x = src.var("x")
        lines.append(f"{i}for {x} in {v}:")
        return lines + _encode_value(src, f, t, version, flexible, x, i + "    ")
    if f.is_struct and nullable:
        lines += [f"{ind}if {v} is None:", f"{ind}    buf.append(255)", f"{ind}else:"]
        lines += [f"{ind}    buf.append(1)"]
        return lines + _encode_value(src, f, f.type, version, flexible, v, ind + "    ")
    if f.type in ("string", "bytes") and d is not None:
        return lines + _encode_blob(f.type, flexible, v, ind, nullable=False)
    return lines + _encode_value(src, f, f.type, version, flexible, v, ind)


def encode_struct(
    src: _Source, fields: tuple[Field, ...], version: int, flexible: bool, obj: str, ind: str,
    close: bool = True,
) -> list[str]:  # fmt: skip
    """Lines writing struct ``obj`` (a dict; absent or None entries take their defaults; or
    an :class:`Encoded` struct, written as is), then (flexible) its tagged-field section."""
    get = f"{obj}.get"  # (LOAD_METHOD: no bound method made)
    lines = [f"{ind}if type({obj}) is Encoded:", f"{ind}    buf += {obj}", f"{ind}else:"]
    ind += "    "
    lines.append(f"{ind}pass")  # (a struct with no field in this version)
    tagged, parts = _layout(fields, version, flexible, close)
    for part in parts:
        if isinstance(part, tuple):
            packer, run = part
            s = src.const("S", packer)
            values = []
            for f in run:
                v = src.var("v")
                values.append(v)
                lines += [f"{ind}{v} = {get}({f.name!r})", f"{ind}if {v} is None:"]
                lines.append(f"{ind}    {v} = {_literal(src, zero_default(f, version))}")
            lines.append(f"{ind}buf += {s}.pack({', '.join(values)})")
            continue
        lines += _encode_field(src, part, version, flexible, get, ind)
    if flexible and close:
        if tagged:
            order = _tag_codecs(src, tagged, version)[1]
            test = " or ".join(
                f"(({v} := {get}({f.name!r})) is not None and {v} != {src.const('T', zero_default(f, version))})"  # noqa: E501
                for f in (tagged[tag] for tag in sorted(tagged))
                for v in [src.var("v")]
            )
            lines += [
                f"{ind}if {test}:",
                f"{ind}    write_tagged(w, {get}, {order})",
                f"{ind}    buf = w.buf",
                f"{ind}else:",
                f"{ind}    buf.append(0)",
            ]
        else:
            lines.append(f"{ind}buf.append(0)")
    return lines


def compile_struct(
    fields: tuple[Field, ...], version: int, flexible: bool, close: bool = True
) -> tuple[Callable[..., tuple[dict, int]], Callable[[Writer, Any], None]]:
    """The decoder and encoder of a struct (a message, or a message's nested struct) for
    ``version``: ``decode(buf, p, end) -> (dict, p)`` and ``encode(w, obj)``."""
    src = _Source()
    dec = ["def decode(buf, p, end):"]
    dec += decode_struct(src, fields, version, flexible, "out", "    ", close)
    dec.append("    return out, p")
    enc = ["def encode(w, obj):", "    buf = w.buf"]
    enc += encode_struct(src, fields, version, flexible, "obj", "    ", close)
    code = "\n".join(dec) + "\n\n" + "\n".join(enc) + "\n"
    exec(compile(code, "<codegen>", "exec"), src.env)  # noqa: S102
    return src.env["decode"], src.env["encode"]


def compile_request(
    header: tuple[Field, ...], header_flexible: bool, header_version: int,
    body: tuple[Field, ...], version: int, flexible: bool,
) -> Callable[[Any], tuple[dict, dict]]:  # fmt: skip
    """One request's decoder, header and body in one function: ``decode(buf) -> (header,
    body)``; bytes after the body are ignored (as Kafka's request parser does)."""
    src = _Source()
    lines = ["def decode(buf):", "    p, end = 0, len(buf)"]
    lines += decode_struct(src, header, header_version, header_flexible, "h", "    ")
    lines += decode_struct(src, body, version, flexible, "out", "    ")
    lines.append("    return h, out")
    exec(compile("\n".join(lines) + "\n", "<codegen>", "exec"), src.env)  # noqa: S102
    return src.env["decode"]
