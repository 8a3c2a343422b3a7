"""OffsetCommit's dedicated decoder and encoder (pybroker/wire/offset_commit_codec.py) against
the generic codec, over every version pybroker serves and random inputs: a request decodes
to the same header and body (or is left to the generic code, which then decides), damaged
bytes never decode differently, and an answer encodes to the same bytes."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.wire import codec, offset_commit_codec
from pybroker.wire.primitives import DecodeError, Reader
from pybroker.wire.schema import REQUEST_HEADER, SCHEMAS
from tests.test_codec import _struct

API = SCHEMAS.by_key[8]
VERSIONS = list(range(API.request.versions.lo, API.request.versions.hi + 1))
_NAMES = st.one_of(
    st.text(max_size=4), st.text(min_size=120, max_size=140), st.sampled_from(["", "é" * 70])
)


def _generic_decode(frame: bytes) -> tuple[dict, dict]:
    r = Reader(frame)
    version = frame[3]
    header = codec._plan(REQUEST_HEADER, codec.request_header_version(8, version))[0](r)
    return header, codec._plan(API.request, version)[0](r)


def _generic_encode(version: int, correlation_id: int, body: dict) -> list:
    saved = codec._DIRECT.pop(8)
    try:
        return codec.encode_response(8, version, correlation_id, body)
    finally:
        codec._DIRECT[8] = saved


def test_the_dedicated_codec_covers_every_version_served() -> None:
    assert list(offset_commit_codec.VERSIONS) == VERSIONS
    assert API.response.versions.lo == VERSIONS[0] and API.response.versions.hi == VERSIONS[-1]


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_requests_decode_as_the_generic_codec_decodes_them(version: int, data) -> None:
    body = data.draw(_struct(API.request.fields, version, version >= 8))
    client_id = data.draw(st.one_of(st.none(), _NAMES))
    frame = codec.encode_request(
        8, version, data.draw(st.integers(-(2**31), 2**31 - 1)), client_id, body
    )[4:]
    got = offset_commit_codec.decode_request(memoryview(frame), version)
    want = _generic_decode(frame)
    if got is not None:
        assert got == want
    assert codec.decode_request(memoryview(frame)) == want


def _commit(version: int, metadata: str | None = "m", name: str = "t") -> dict:
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


@pytest.mark.parametrize("version", VERSIONS)
def test_the_common_request_takes_the_dedicated_decoder(version: int) -> None:
    """(So that the comparisons above compare something: W18's commit shape is not left to
    the generic code.)"""
    frame = codec.encode_request(8, version, 7, "rdkafka", _commit(version))[4:]
    assert offset_commit_codec.decode_request(frame, version) == _generic_decode(frame)
    frame = codec.encode_request(8, version, 7, None, _commit(version, None, "x" * 200))[4:]
    assert offset_commit_codec.decode_request(frame, version) == _generic_decode(frame)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_requests_decode_alike_or_fail_alike(version: int, data) -> None:
    frame = bytearray(codec.encode_request(8, version, 1, "c", _commit(version, "meta"))[4:])
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(8, len(frame) - 1))
        frame[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(8, len(frame)))
    frame = bytes(frame[:cut])
    try:
        want = _generic_decode(frame)
    except DecodeError:
        want = None
    got = offset_commit_codec.decode_request(frame, version)
    assert got is None or got == want
    if want is None:
        with pytest.raises(DecodeError):
            codec.decode_request(frame)
    else:
        assert codec.decode_request(frame) == want


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_answers_encode_to_the_generic_codecs_bytes(version: int, data) -> None:
    body = data.draw(_struct(API.response.fields, version, version >= 8))
    correlation_id = data.draw(st.integers(-(2**31), 2**31 - 1))
    got = offset_commit_codec.encode_response(version, correlation_id, body)
    assert got is not None
    assert got == _generic_encode(version, correlation_id, body)
    assert codec.encode_response(8, version, correlation_id, body) == got


@pytest.mark.parametrize("version", VERSIONS)
def test_absent_and_null_answer_fields_take_the_generic_defaults(version: int) -> None:
    bodies = [
        {},
        {"topics": None},
        {"throttle_time_ms": None, "topics": [{"name": None, "partitions": None}]},
        {"topics": [{"partitions": [{}, {"partition_index": 3, "error_code": None}]}]},
        {"topics": [{"name": "é" * 200, "partitions": [{"partition_index": 1, "error_code": 15}] * 130}]},
    ]  # fmt: skip
    for body in bodies:
        got = offset_commit_codec.encode_response(version, 9, body)
        assert got == _generic_encode(version, 9, body), body


@pytest.mark.parametrize("version", VERSIONS)
def test_answers_it_does_not_take_go_to_the_generic_codec(version: int) -> None:
    encoded = codec.encode_struct(
        API.response, ("topics",), version, {"name": "t", "partitions": []}
    )
    body = {"topics": [encoded]}
    assert offset_commit_codec.encode_response(version, 1, body) is None
    assert codec.encode_response(8, version, 1, body) == _generic_encode(version, 1, body)
    bad = {"topics": [{"name": "t", "partitions": [{"partition_index": 2**40}]}]}
    assert offset_commit_codec.encode_response(version, 1, bad) is None
    with pytest.raises(Exception) as direct:
        codec.encode_response(8, version, 1, bad)
    with pytest.raises(Exception) as generic:
        _generic_encode(version, 1, bad)
    assert type(direct.value) is type(generic.value)
