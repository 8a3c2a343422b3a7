"""ApiVersions and connection-level behaviour of a real broker over TCP (Kafka as the spec)."""

from __future__ import annotations

import struct

import pytest
from broker_fixture import (
    API_VERSIONS,
    METADATA,
    NONE,
    UNSUPPORTED_VERSION,
    Client,
)

from pybroker.handlers._share import SHARE_APIS
from pybroker.registry import supported_versions
from pybroker.wire import codec

# The README's table: the APIs and versions these protocol tests exercise (other APIs may be
# registered too; whatever is registered is advertised, exactly).
DOCUMENTED = {0: (0, 12), 1: (4, 12), 2: (1, 7), 3: (0, 12), 18: (0, 4), 19: (2, 7), 22: (0, 4)}


def api_versions_body(version: int) -> dict:
    if version >= 3:
        return {"client_software_name": "protocol-tests", "client_software_version": "1.0"}
    return {}


def assert_serves(c: Client) -> None:
    body = c.request(API_VERSIONS, 0, {})
    assert body["error_code"] == NONE


@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_lists_exactly_the_registered_ranges(broker, version):
    with broker.client() as c:
        body = c.request(API_VERSIONS, version, api_versions_body(version))
    assert body["error_code"] == NONE
    got = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
    assert len(got) == len(body["api_keys"]), "an api key listed twice"
    registered = {r["api_key"]: (r["min_version"], r["max_version"]) for r in supported_versions()}
    if not broker.broker.config.group_share_enable:  # share groups off: their APIs unlisted
        registered = {k: v for k, v in registered.items() if k not in SHARE_APIS}
    assert got == registered
    assert list(got) == sorted(got)
    for key, (lo, hi) in DOCUMENTED.items():
        assert got[key][0] <= lo and got[key][1] >= hi, (key, got[key])
    if version >= 1:
        assert body["throttle_time_ms"] == 0


def test_every_advertised_version_is_answered(broker):
    """A client may pick any advertised version: Metadata at each one gets an answer."""
    with broker.client() as c:
        for v in range(DOCUMENTED[METADATA][0], DOCUMENTED[METADATA][1] + 1):
            body = c.metadata(None if v >= 1 else [], version=v)
            assert [b["node_id"] for b in body["brokers"]] == [broker.broker_id]


def test_api_versions_unknown_version_gets_error_35_with_key_18_range(broker):
    with broker.client() as c:
        # What a newer client sends: header v2 and a v3-style body, with version 99.
        frame = bytearray(codec.encode_request(API_VERSIONS, 3, 77, "newer", api_versions_body(3)))
        struct.pack_into(">h", frame, 6, 99)
        c.send_raw(bytes(frame))
        corr, body = codec.decode_response(API_VERSIONS, 0, c.recv_frame())
        assert corr == 77
        assert body["error_code"] == UNSUPPORTED_VERSION
        ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
        assert ranges[API_VERSIONS] == DOCUMENTED[API_VERSIONS]
        # the client retries with a version it now knows, on the same connection
        body = c.request(API_VERSIONS, 3, api_versions_body(3))
        assert body["error_code"] == NONE


def test_api_versions_v3_invalid_software_name(broker):
    with broker.client() as c:
        body = c.request(
            API_VERSIONS, 3, {"client_software_name": "bad name!", "client_software_version": "1"}
        )
    assert body["error_code"] == 42  # INVALID_REQUEST, as Kafka validates it


def test_unknown_api_key_closes_the_connection(broker):
    with broker.client() as c:
        frame = bytearray(codec.encode_request(API_VERSIONS, 0, 5, "x", {}))
        struct.pack_into(">h", frame, 4, 9999)
        c.send_raw(bytes(frame))
        assert c.closed_by_peer()
    with broker.client() as c:
        assert_serves(c)


def test_unsupported_version_of_other_api_closes_the_connection(broker):
    """Kafka answers nothing but ApiVersions at an unsupported version: it closes."""
    with broker.client() as c:
        frame = bytearray(codec.encode_request(METADATA, 1, 6, "x", {"topics": None}))
        struct.pack_into(">h", frame, 6, 99)
        c.send_raw(bytes(frame))
        assert c.closed_by_peer()


def test_frame_above_socket_request_max_bytes_closes_only_that_connection(start_broker):
    broker = start_broker(**{"socket.request.max.bytes": 4096})
    with broker.client() as bystander:
        assert_serves(bystander)
        with broker.client() as bad:
            # Size prefix above the limit: refused before the body is read.
            bad.send_raw(struct.pack(">i", 10_000_000) + b"\x00\x12\x00\x00" + b"\x00" * 64)
            assert bad.closed_by_peer()
        with broker.client() as bad:
            bad.send_raw(struct.pack(">i", 4097) + b"\x00" * 4097)
            assert bad.closed_by_peer()
        # A real request just below the limit is served.
        with broker.client() as ok:
            name = "x" * 1000
            body = ok.metadata([name], version=4, allow_auto_topic_creation=False)
            assert body["topics"][0]["name"] == name
        assert_serves(bystander)
    with broker.client() as c:
        assert_serves(c)


def test_pipelined_requests_are_answered_in_order(broker):
    with broker.client() as c:
        corrs = [c.send(API_VERSIONS, v % 5, api_versions_body(v % 5)) for v in range(10)]
        for i, corr in enumerate(corrs):
            body = c.receive(API_VERSIONS, i % 5, corr)
            assert body["error_code"] == NONE
