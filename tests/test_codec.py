"""The generic codec: round trips of every declared API and version (hypothesis builds valid
messages from the declarations themselves), random and mutated bytes, headers, framing."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.wire import codec
from pybroker.wire.framing import FrameDecoder, FrameError
from pybroker.wire.primitives import DecodeError, Reader, Writer
from pybroker.wire.schema import SCHEMAS, Field, Message

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


def _value(f: Field, version: int, flexible: bool, depth: int = 0) -> st.SearchStrategy:
    nullable = version in f.nullable
    if f.is_array:
        elem = (
            _struct(f.fields, version, flexible, depth + 1)
            if f.is_struct
            else _scalar(f.element_type, False)
        )
        arr = st.lists(elem, max_size=3 if depth < 2 else 1)
        return st.one_of(st.none(), arr) if nullable else arr
    if f.is_struct:
        s = _struct(f.fields, version, flexible, depth + 1)
        return st.one_of(st.none(), s) if nullable else s
    return _scalar(f.type, nullable)


def _scalar(t: str, nullable: bool) -> st.SearchStrategy:
    if t in INT_RANGES:
        lo, hi = INT_RANGES[t]
        return st.integers(lo, hi)
    if t == "bool":
        return st.booleans()
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "uuid":
        return st.uuids()
    if t == "string":
        s = st.text(max_size=20)
    else:  # bytes, records
        s = st.binary(max_size=40)
    return st.one_of(st.none(), s) if nullable else s


def _struct(fields, version: int, flexible: bool, depth: int = 0) -> st.SearchStrategy:
    parts = {f.name: _value(f, version, flexible, depth) for f in fields if version in f.versions}
    return st.fixed_dictionaries(parts)


def _all_messages() -> list[tuple[str, Message, int]]:
    out = []
    for a in SCHEMAS.by_key.values():
        for m in (a.request, a.response):
            for v in range(m.versions.lo, m.versions.hi + 1):
                out.append((f"{m.name}v{v}", m, v))
    return out


def _normalize(x):
    if isinstance(x, memoryview):
        return bytes(x)
    if isinstance(x, dict):
        return {k: _normalize(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_normalize(v) for v in x]
    return x


MESSAGES = _all_messages()


@pytest.mark.parametrize("name,message,version", MESSAGES, ids=[m[0] for m in MESSAGES])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip(name: str, message: Message, version: int, data) -> None:
    obj = data.draw(_struct(message.fields, version, version in message.flexible))
    encoded = codec.encode_message(message, version, obj).getvalue()
    decoded = _normalize(codec.decode_message(message, version, encoded))
    # Every field we set comes back; tagged fields left at defaults come back as defaults.
    for key, value in obj.items():
        assert decoded[key] == _normalize(value), key
    assert codec.encode_message(message, version, decoded).getvalue() == encoded


def _with_struct_field() -> list[tuple[str, Message, int, str]]:
    out = []
    for name, m, v in MESSAGES:
        f = next((f for f in m.fields if f.is_struct and v in f.versions), None)
        if f is not None:
            out.append((name, m, v, f.name))
    return out


STRUCT_FIELDS = _with_struct_field()


@pytest.mark.parametrize(
    "name,message,version,field", STRUCT_FIELDS, ids=[m[0] for m in STRUCT_FIELDS]
)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_pre_encoded_structs_encode_like_their_dicts(name, message, version, field, data) -> None:
    obj = data.draw(_struct(message.fields, version, version in message.flexible))
    expected = codec.encode_message(message, version, obj).getvalue()
    value = obj[field]
    if isinstance(value, list):
        pre = [codec.encode_struct(message, (field,), version, e) for e in value]
    elif value is not None:
        pre = codec.encode_struct(message, (field,), version, value)
    else:
        pre = None
    assert codec.encode_message(message, version, {**obj, field: pre}).getvalue() == expected


def test_encode_struct_refuses_a_path_that_is_not_a_struct() -> None:
    metadata = SCHEMAS.by_key[3].response
    with pytest.raises(KeyError):
        codec.encode_struct(metadata, ("cluster_id",), 12, {})
    with pytest.raises(KeyError):
        codec.encode_struct(metadata, ("no_such_field",), 12, {})


@pytest.mark.parametrize("name,message,version", MESSAGES, ids=[m[0] for m in MESSAGES])
@settings(max_examples=10, deadline=None)
@given(blob=st.binary(max_size=200))
def test_random_bytes_only_raise_decode_error(name, message, version, blob) -> None:
    try:
        codec.decode_message(message, version, blob)
    except DecodeError:
        pass


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_mutated_requests_only_raise_decode_errors(data) -> None:
    key = data.draw(st.sampled_from(sorted(SCHEMAS.by_key)))
    a = SCHEMAS.by_key[key]
    version = data.draw(st.integers(a.request.versions.lo, a.request.versions.hi))
    body = data.draw(_struct(a.request.fields, version, version in a.request.flexible))
    frame = bytearray(codec.encode_request(key, version, 1, "fuzz", body)[4:])
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(4, max(4, len(frame) - 1)))
        if pos < len(frame):
            frame[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(4, len(frame)))
    try:
        codec.decode_request(bytes(frame[:cut]))
    except DecodeError:
        pass


def test_request_header_v2_keeps_classic_client_id() -> None:
    frame = codec.encode_request(
        18, 3, 42, "abc", {"client_software_name": "x", "client_software_version": "1"}
    )
    # size, key 18, version 3, correlation 42, int16 length 3 "abc", empty tagged fields
    assert frame[4:18] == struct.pack(">hhih", 18, 3, 42, 3) + b"abc" + b"\x00"
    header, body = codec.decode_request(frame[4:])
    assert header["client_id"] == "abc" and body["client_software_name"] == "x"


def test_api_versions_response_header_is_v0_even_when_flexible() -> None:
    parts = codec.encode_response(18, 3, 7, {"error_code": 0, "api_keys": []})
    frame = b"".join(parts)
    size, cid = struct.unpack(">ii", frame[:8])
    assert size == len(frame) - 4 and cid == 7
    # v3 body begins right after the correlation id: error code, compact array (empty = 1)
    assert frame[8:11] == b"\x00\x00\x01"


def test_flexible_response_header_has_tagged_fields() -> None:
    parts = codec.encode_response(3, 9, 7, {"brokers": [], "topics": []})
    frame = b"".join(parts)
    assert frame[8] == 0  # empty tagged-field section of header v1


def test_unknown_tagged_fields_are_skipped() -> None:
    m = SCHEMAS.by_key[18].request
    w = Writer()
    w.compact_string("name")
    w.compact_string("1.0")
    w.uvarint(1)  # one tagged field with an unknown tag
    w.uvarint(99)
    w.uvarint(3)
    w.raw(b"abc")
    assert codec.decode_message(m, 3, w.getvalue()) == {
        "client_software_name": "name",
        "client_software_version": "1.0",
    }


def test_absurd_array_length_is_refused_without_allocating() -> None:
    m = SCHEMAS.by_key[3].request  # Metadata v1: topics array
    with pytest.raises(DecodeError):
        codec.decode_message(m, 1, struct.pack(">i", 2**31 - 1))


def test_unknown_api_and_unsupported_version() -> None:
    with pytest.raises(codec.UnknownApiError):
        codec.decode_request(struct.pack(">hhih", 999, 0, 1, -1))
    with pytest.raises(codec.UnsupportedVersionError):
        codec.decode_request(struct.pack(">hhih", 18, 99, 1, -1))


def test_trailing_bytes_are_ignored_like_kafka() -> None:
    # Captured from confluent-kafka 2.16 (librdkafka): Metadata v12, all topics, 3 pad bytes.
    frame = bytes.fromhex("0003000c00000003000772646b61666b610000000000000000")
    header, body = codec.decode_request(frame)
    assert header["client_id"] == "rdkafka"
    assert body["topics"] is None and body["allow_auto_topic_creation"] is False


def test_varints() -> None:
    for v in (0, 1, -1, 63, -64, 2**31 - 1, -(2**31), 2**62):
        w = Writer()
        w.varint(v)
        assert Reader(w.getvalue()).varint() == v
    with pytest.raises(DecodeError):
        Reader(b"\xff" * 11).uvarint()


def test_uuid_field_accepts_uuid_objects() -> None:
    u = uuid.uuid4()
    w = Writer()
    w.uuid(u)
    assert Reader(w.getvalue()).uuid() == u


class _Region:
    def __init__(self, size: int) -> None:
        self.size = size


def test_records_region_becomes_an_out_of_band_part() -> None:
    region = _Region(100)
    body = {
        "responses": [{"topic": "t", "partitions": [{"partition_index": 0, "records": region}]}]
    }
    parts = codec.encode_response(1, 11, 5, body)
    assert region in parts
    size = struct.unpack(">i", parts[0][:4])[0]
    assert size == sum(p.size if p is region else len(p) for p in parts) - 4


# -- framing --------------------------------------------------------------------------------


def test_frames_split_across_reads() -> None:
    d = FrameDecoder(1000)
    payload = struct.pack(">i", 10) + b"0123456789" + struct.pack(">i", 8) + b"abcdefgh"
    frames = []
    for i in range(len(payload)):
        d.feed(payload[i : i + 1])
        while (f := d.next_frame()) is not None:
            frames.append(bytes(f))
    assert frames == [b"0123456789", b"abcdefgh"]


def test_oversized_frame_refused_before_its_body() -> None:
    d = FrameDecoder(100)
    d.feed(struct.pack(">i", 101))
    with pytest.raises(FrameError):
        d.next_frame()
    assert d.buffered() == 4  # nothing of the body was needed to decide


@pytest.mark.parametrize("size", [-1, 0, 7])
def test_impossible_frame_sizes_refused(size: int) -> None:
    d = FrameDecoder(100)
    d.feed(struct.pack(">i", size))
    with pytest.raises(FrameError):
        d.next_frame()
