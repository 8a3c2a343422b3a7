"""The generated codec (pybroker/wire/codec.py) against a plain interpreter of the same
declarations written with the Reader/Writer primitives, field by field: for every API and
version, valid messages decode to the same values and encode to the same bytes, and damaged
bytes fail (DecodeError) or decode alike in both.  It keeps the code generator's inlined
paths (strings, array lengths, empty tagged sections) equal to what the primitives define."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.wire import codec
from pybroker.wire.primitives import DecodeError, Reader, Writer
from pybroker.wire.schema import REQUEST_HEADER, SCHEMAS, Field, Message
from tests.test_codec import MESSAGES, _normalize, _struct

_SCALARS = ("int8", "int16", "uint16", "int32", "int64", "float64", "bool", "uuid")
_MIN = {"int8": 1, "int16": 2, "uint16": 2, "int32": 4, "int64": 8, "float64": 8, "bool": 1}


def zero_default(f: Field, version: int) -> Any:
    """A field's value when absent (Kafka's defaults: the declared one, else null where
    nullable, else zero, empty, false; written here again, not taken from the codec)."""
    if f.default is not None:
        return f.default
    if version in f.nullable:
        return None
    if f.is_array:
        return []
    zeros = {"bool": False, "float64": 0.0, "string": "", "bytes": b"", "records": b""}
    if f.type in zeros:
        return zeros[f.type]
    if f.type == "uuid":
        return uuid.UUID(int=0)
    return {} if f.is_struct else 0


def _flex(f: Field, version: int, flexible: bool) -> bool:
    return flexible if f.flexible_versions is None else version in f.flexible_versions


def _read_blob(r: Reader, t: str, nullable: bool, flexible: bool) -> Any:
    if t == "string":
        if flexible:
            return r.compact_nullable_string() if nullable else r.compact_string()
        return r.nullable_string() if nullable else r.string()
    if t == "records":
        return r.compact_nullable_bytes() if flexible else r.nullable_bytes()
    if flexible:
        return r.compact_nullable_bytes() if nullable else r.compact_bytes()
    return r.nullable_bytes() if nullable else r.bytes_()


def _read_value(r: Reader, f: Field, t: str, version: int, flexible: bool, nullable: bool) -> Any:
    if f.is_struct:
        return _read_struct(r, f.fields, version, flexible)
    if t in _SCALARS:
        return getattr(r, t)()
    return _read_blob(r, t, nullable, flexible)


def _read_field(r: Reader, f: Field, version: int, flexible: bool) -> Any:
    flexible = _flex(f, version, flexible)
    nullable = version in f.nullable
    if f.is_array:
        size = 1 if f.is_struct else _MIN.get(f.element_type, 16 if f.element_type == "uuid" else 1)
        n = r.compact_array_length(size) if flexible else r.array_length(size)
        if n < 0:
            if nullable:
                return None
            raise DecodeError("null array")
        return [_read_value(r, f, f.element_type, version, flexible, False) for _ in range(n)]
    if f.is_struct and nullable and r.int8() < 0:
        return None
    return _read_value(r, f, f.type, version, flexible, nullable)


def _read_struct(r: Reader, fields: tuple[Field, ...], version: int, flexible: bool) -> dict:
    out: dict[str, Any] = {}
    tagged: dict[int, Field] = {}
    for f in fields:
        if version not in f.versions:
            continue
        if flexible and f.tag is not None and version in f.tagged:
            tagged[f.tag] = f
            out[f.name] = zero_default(f, version)
            continue
        out[f.name] = _read_field(r, f, version, flexible)
    if flexible:
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            end = r.pos + size
            if end > r.end:
                raise DecodeError("tagged field exceeds the frame")
            if tag in tagged:
                out[tagged[tag].name] = _read_field(
                    Reader(r.buf, r.pos, end), tagged[tag], version, flexible
                )
            r.pos = end
    return out


def _write_value(w: Writer, f: Field, t: str, v: Any, version: int, flexible: bool) -> None:
    if f.is_struct:
        _write_struct(w, f.fields, v, version, flexible)
    elif t in _SCALARS:
        getattr(w, t)(v)
    elif t == "string":
        (w.compact_string if flexible else w.string)(v)
    else:
        (w.compact_bytes if flexible else w.bytes_)(v)


def _write_field(w: Writer, f: Field, v: Any, version: int, flexible: bool) -> None:
    flexible = _flex(f, version, flexible)
    if v is None:
        v = zero_default(f, version)
    if f.is_array:
        if v is None:
            (w.uvarint if flexible else w.int32)(0 if flexible else -1)
            return
        (w.uvarint if flexible else w.int32)(len(v) + 1 if flexible else len(v))
        for e in v:
            _write_value(w, f, f.element_type, e, version, flexible)
    elif f.is_struct and version in f.nullable:
        if v is None:
            w.int8(-1)
        else:
            w.int8(1)
            _write_struct(w, f.fields, v, version, flexible)
    else:
        _write_value(w, f, f.type, v, version, flexible)


def _write_struct(w: Writer, fields: tuple[Field, ...], obj: dict, version: int, flexible: bool):
    tagged = []
    for f in fields:
        if version not in f.versions:
            continue
        if flexible and f.tag is not None and version in f.tagged:
            d = zero_default(f, version)
            v = obj.get(f.name, d)
            if v is not None and v != d:
                sub = Writer()
                _write_field(sub, f, v, version, flexible)
                tagged.append((f.tag, sub.getvalue()))
            continue
        _write_field(w, f, obj.get(f.name), version, flexible)
    if flexible:
        w.uvarint(len(tagged))
        for tag, data in sorted(tagged):
            w.uvarint(tag)
            w.uvarint(len(data))
            w.raw(data)


def _decode(message: Message, version: int, data: bytes) -> Any:
    try:
        return _normalize(codec.decode_message(message, version, data))
    except DecodeError:
        return DecodeError


def _reference_decode(message: Message, version: int, data: bytes) -> Any:
    try:
        r = Reader(data)
        return _normalize(_read_struct(r, message.fields, version, version in message.flexible))
    except DecodeError:
        return DecodeError


@pytest.mark.parametrize("name,message,version", MESSAGES, ids=[m[0] for m in MESSAGES])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_codec_matches_the_reference(name, message, version, data) -> None:
    flexible = version in message.flexible
    obj = data.draw(_struct(message.fields, version, flexible))
    encoded = codec.encode_message(message, version, obj).getvalue()
    w = Writer()
    _write_struct(w, message.fields, obj, version, flexible)
    assert encoded == w.getvalue()
    assert _decode(message, version, encoded) == _reference_decode(message, version, encoded)
    damaged = bytearray(encoded)
    for _ in range(data.draw(st.integers(1, 3))):
        if damaged:
            damaged[data.draw(st.integers(0, len(damaged) - 1))] = data.draw(st.integers(0, 255))
    cut = bytes(damaged[: data.draw(st.integers(0, len(damaged)))])
    assert _decode(message, version, cut) == _reference_decode(message, version, cut)


# -- whole frames: a request's header and body (one generated decoder), an answer's frame --

_TEXT = st.one_of(
    st.text(max_size=6), st.text(min_size=120, max_size=140), st.sampled_from(["", "é" * 70])
)


def _long_strings(obj: Any) -> st.SearchStrategy:
    """``obj`` with some of its strings replaced by long ones (multi-byte compact lengths)."""
    if isinstance(obj, dict):
        return st.fixed_dictionaries({k: _long_strings(v) for k, v in obj.items()})
    if isinstance(obj, list):
        return st.tuples(*[_long_strings(v) for v in obj]).map(list)
    if isinstance(obj, str):
        return st.one_of(st.just(obj), _TEXT)
    return st.just(obj)


def _reference_request(frame: bytes) -> Any:
    """(header, body) of a request frame, by the reference interpreter; DecodeError if bad."""
    key, version = int.from_bytes(frame[0:2], "big"), int.from_bytes(frame[2:4], "big")
    message = SCHEMAS.by_key[key].request
    hv = 2 if version in message.flexible else 1
    try:
        r = Reader(frame)
        header = _read_struct(r, REQUEST_HEADER.fields, hv, hv in REQUEST_HEADER.flexible)
        body = _read_struct(r, message.fields, version, version in message.flexible)
    except DecodeError:
        return DecodeError
    return _normalize(header), _normalize(body)


def _generated_request(frame: bytes) -> Any:
    try:
        header, body = codec.decode_request(memoryview(frame))
    except DecodeError:
        return DecodeError
    return _normalize(header), _normalize(body)


def _versions(kind: str) -> list[tuple[str, int, int]]:
    return [
        (f"{a.name}{kind.title()}v{v}", a.key, v)
        for a in SCHEMAS.by_key.values()
        for v in range(a.request.versions.lo, a.request.versions.hi + 1)
    ]


REQUESTS, RESPONSES = _versions("request"), _versions("response")


@pytest.mark.parametrize("name,key,version", REQUESTS, ids=[r[0] for r in REQUESTS])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_request_frames_decode_as_the_reference_decodes_them(name, key, version, data) -> None:
    """Every API and version: a request frame (header and body), long strings included,
    then damaged and cut: the same (header, body), or DecodeError from both."""
    message = SCHEMAS.by_key[key].request
    body = data.draw(_struct(message.fields, version, version in message.flexible))
    body = data.draw(_long_strings(body))
    client_id = data.draw(st.one_of(st.none(), _TEXT))
    frame = codec.encode_request(key, version, 7, client_id, body)[4:]
    want = _reference_request(frame)
    assert want != DecodeError
    assert _generated_request(frame) == want
    damaged = bytearray(frame)
    for _ in range(data.draw(st.integers(1, 3))):
        damaged[data.draw(st.integers(8, len(damaged) - 1))] = data.draw(st.integers(0, 255))
    cut = bytes(damaged[: data.draw(st.integers(8, len(damaged)))])
    assert _generated_request(cut) == _reference_request(cut)


def _reference_answer(key: int, version: int, correlation_id: int, body: dict) -> bytes:
    message = SCHEMAS.by_key[key].response
    w = Writer()
    w.int32(correlation_id)
    if key != 18 and version in message.flexible:  # header v1 (ApiVersions: always v0)
        w.uvarint(0)
    _write_struct(w, message.fields, body, version, version in message.flexible)
    return len(w.buf).to_bytes(4, "big") + w.getvalue()


@pytest.mark.parametrize("name,key,version", RESPONSES, ids=[r[0] for r in RESPONSES])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_answers_encode_to_the_reference_bytes(name, key, version, data) -> None:
    """Every API and version: an answer's frame (size, header, body), long strings
    included, and the same answer read back as the reference reads it."""
    message = SCHEMAS.by_key[key].response
    body = data.draw(_struct(message.fields, version, version in message.flexible))
    body = data.draw(_long_strings(body))
    correlation_id = data.draw(st.integers(-(2**31), 2**31 - 1))
    parts = codec.encode_response(key, version, correlation_id, body)
    assert parts == [_reference_answer(key, version, correlation_id, body)]
    frame = parts[0][4:]
    got = codec.decode_response(key, version, frame)
    assert got[0] == correlation_id
    r = Reader(frame, 5 if key != 18 and version in message.flexible else 4)
    want = _read_struct(r, message.fields, version, version in message.flexible)
    assert _normalize(got[1]) == _normalize(want)


def _commit(metadata: str | None = "m", name: str = "t") -> dict:
    return {
        "group_id": "g",
        "generation_id_or_member_epoch": 3,
        "member_id": "m-1",
        "group_instance_id": None,
        "retention_time_ms": -1,
        "topics": [{"name": name, "partitions": [
            {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": 2,
             "commit_timestamp": -1, "committed_metadata": metadata}
        ]}],
    }  # fmt: skip


_COMMIT_VERSIONS = range(SCHEMAS.by_key[8].request.versions.lo, 10)


@pytest.mark.parametrize("version", _COMMIT_VERSIONS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_commits_decode_alike_or_fail_alike(version: int, data) -> None:
    """W18's OffsetCommit, damaged (bytes changed, then cut) many ways."""
    frame = bytearray(codec.encode_request(8, version, 1, "c", _commit("meta"))[4:])
    for _ in range(data.draw(st.integers(1, 4))):
        frame[data.draw(st.integers(8, len(frame) - 1))] = data.draw(st.integers(0, 255))
    cut = bytes(frame[: data.draw(st.integers(8, len(frame)))])
    assert _generated_request(cut) == _reference_request(cut)


@pytest.mark.parametrize("version", _COMMIT_VERSIONS)
def test_absent_and_null_answer_fields_take_their_defaults(version: int) -> None:
    bodies = [
        {},
        {"topics": None},
        {"throttle_time_ms": None, "topics": [{"name": None, "partitions": None}]},
        {"topics": [{"partitions": [{}, {"partition_index": 3, "error_code": None}]}]},
        {"topics": [{"name": "é" * 200, "partitions": [{"partition_index": 1, "error_code": 15}] * 130}]},
    ]  # fmt: skip
    for body in bodies:
        assert codec.encode_response(8, version, 9, body) == [
            _reference_answer(8, version, 9, body)
        ], body


@pytest.mark.parametrize("version", _COMMIT_VERSIONS)
def test_pre_encoded_entries_and_bad_values_in_an_answer(version: int) -> None:
    response = SCHEMAS.by_key[8].response
    entry = {"name": "t", "partitions": [{"partition_index": 1, "error_code": 3}]}
    encoded = codec.encode_struct(response, ("topics",), version, entry)
    assert codec.encode_response(8, version, 1, {"topics": [encoded]}) == [
        _reference_answer(8, version, 1, {"topics": [entry]})
    ]
    bad = {"topics": [{"name": "t", "partitions": [{"partition_index": 2**40}]}]}
    with pytest.raises(struct.error):
        codec.encode_response(8, version, 1, bad)


def _without_some_keys(obj: Any) -> st.SearchStrategy:
    """``obj`` with keys left out at every level (the encoder's defaults fill them in)."""
    if isinstance(obj, dict):
        keys = sorted(obj)
        return st.tuples(
            st.sets(st.sampled_from(keys)) if keys else st.just(set()),
            st.fixed_dictionaries({k: _without_some_keys(v) for k, v in obj.items()}),
        ).map(lambda kept: {k: v for k, v in kept[1].items() if k in kept[0]})
    if isinstance(obj, list):
        return st.tuples(*[_without_some_keys(v) for v in obj]).map(list)
    return st.just(obj)


@pytest.mark.parametrize("name,message,version", MESSAGES, ids=[m[0] for m in MESSAGES])
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_absent_fields_encode_as_the_reference_defaults_them(name, message, version, data):
    """Every API and version: a message with fields left out (at every level; none at all
    first) encodes to the reference's bytes, defaults filled in the same way."""
    flexible = version in message.flexible
    w = Writer()
    _write_struct(w, message.fields, {}, version, flexible)
    assert codec.encode_message(message, version, {}).getvalue() == w.getvalue()
    obj = data.draw(_without_some_keys(data.draw(_struct(message.fields, version, flexible))))
    w = Writer()
    _write_struct(w, message.fields, obj, version, flexible)
    assert codec.encode_message(message, version, obj).getvalue() == w.getvalue()
