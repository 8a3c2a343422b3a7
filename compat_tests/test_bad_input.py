"""Bad bytes against the live broker, built by hand with struct (independent of our codec).

Only framing/decoding violations may close a connection; nothing may crash the broker
(each test's teardown stops the broker with SIGTERM and requires exit code 0).
"""

from __future__ import annotations

import socket
import struct

import pytest

from pybroker.testing import rawkafka as rk
from pybroker.testing.client_helpers import create_topic, read_all, unique_topic

pytestmark = pytest.mark.timeout(60)


def assert_serves(broker) -> None:
    with rk.Conn(broker.host, broker.port) as c:
        corr, body = c.roundtrip(rk.api_versions_v0(1001))
    assert corr == 1001 and rk.parse_api_versions_v0(body)[0] == 0


def test_frame_above_socket_request_max_bytes(start_broker):
    broker = start_broker(**{"socket.request.max.bytes": 4096})
    with rk.Conn(broker.host, broker.port) as bystander:
        assert bystander.roundtrip(rk.api_versions_v0(1))[0] == 1
        with rk.Conn(broker.host, broker.port) as bad:
            bad.send(struct.pack(">i", 10_000_000) + rk.request_header(3, 1, 2) + b"\x00" * 64)
            assert bad.closed_by_peer(), "oversized frame did not close the connection"
        # an exactly-at-limit-plus-one frame as well
        with rk.Conn(broker.host, broker.port) as bad:
            bad.send(struct.pack(">i", 4097) + b"\x00" * 4097)
            assert bad.closed_by_peer()
        assert bystander.roundtrip(rk.api_versions_v0(3))[0] == 3
    assert_serves(broker)


def test_unknown_api_key(broker):
    with rk.Conn(broker.host, broker.port) as c:
        c.send(rk.frame(rk.request_header(9999, 0, 5) + b"\x00\x00\x00\x00"))
        c.sock.settimeout(10)
        try:
            got = c.recv_frame()
        except (ConnectionResetError, TimeoutError):
            got = None
        # Kafka closes the connection; an answer with our correlation id is tolerated
        print(f"[{broker.backend}] unknown api key -> {'closed' if got is None else got}")
        assert got is None or got[0] == 5
    assert_serves(broker)


def test_api_versions_unsupported_version(broker):
    with rk.Conn(broker.host, broker.port) as c:
        # what a flexible-version client would send: header v2, v3-style body
        body = b"\x05compat" + b"\x021" + b"\x00"  # compact strings name/version + tags
        corr, resp = c.roundtrip(rk.frame(rk.request_header_v2(18, 99, 77) + body))
        assert corr == 77
        error, ranges = rk.parse_api_versions_v0(resp)
        assert error == 35, f"expected UNSUPPORTED_VERSION (35), got {error}"
        assert 18 in ranges and ranges[18][0] == 0, ranges
        print(f"[{broker.backend}] ApiVersions v99 -> error 35, key 18 range {ranges[18]}")
        # the client retries lower on the same connection
        corr, resp = c.roundtrip(rk.api_versions_v0(78))
        assert corr == 78 and rk.parse_api_versions_v0(resp)[0] == 0


def test_truncated_body_closes_connection(broker):
    with rk.Conn(broker.host, broker.port) as c:
        # Metadata v1 claiming 3 topics but carrying one: the frame is whole, the body is short
        payload = rk.request_header(3, 1, 9) + struct.pack(">i", 3) + rk.kstring("only-one")
        c.send(rk.frame(payload))
        assert c.closed_by_peer(), "undecodable body did not close the connection"
    with rk.Conn(broker.host, broker.port) as c:
        # a frame cut short by the client closing its side
        c.send(struct.pack(">i", 100) + rk.request_header(18, 0, 10))
        c.sock.shutdown(socket.SHUT_WR)
        assert c.closed_by_peer()
    with rk.Conn(broker.host, broker.port) as c:
        # a header cut inside the client id
        c.send(rk.frame(struct.pack(">hhih", 18, 0, 11, 20) + b"abc"))
        assert c.closed_by_peer()
    assert_serves(broker)


def test_garbage_after_valid_header(broker):
    with rk.Conn(broker.host, broker.port) as c:
        c.send(rk.frame(rk.request_header(3, 1, 12) + b"\x7f\xff\xff\xff" + b"garbage!" * 4))
        assert c.closed_by_peer(), "garbage body did not close the connection"
    with rk.Conn(broker.host, broker.port) as c:
        # a valid ApiVersions v0 followed by trailing junk inside the same frame
        c.send(rk.frame(rk.request_header(18, 0, 13) + b"junkjunk"))
        c.sock.settimeout(10)
        try:
            got = c.recv_frame()
        except (ConnectionResetError, TimeoutError):
            got = None
        print(
            f"[{broker.backend}] trailing junk after ApiVersions v0 -> "
            f"{'closed' if got is None else 'answered'}"
        )
        assert got is None or got[0] == 13
    with rk.Conn(broker.host, broker.port) as c:
        c.send(b"\x00\x00\x00\x08" + b"\xde\xad\xbe\xef" * 2)
        assert c.closed_by_peer()
    assert_serves(broker)


def test_corrupt_crc_is_rejected_and_not_appended(broker):
    topic = unique_topic("crc")
    create_topic(broker.bootstrap, topic, 1)
    good = rk.record_batch_v2([(b"k0", b"good-0"), (b"k1", b"good-1")])
    with rk.Conn(broker.host, broker.port) as c:
        corr, body = c.roundtrip(rk.produce_v3(20, topic, 0, good))
        assert corr == 20
        assert rk.parse_produce_v3(body) == [(topic, 0, 0, 0)]
        corr, body = c.roundtrip(rk.produce_v3(21, topic, 0, rk.corrupt_crc(good)))
        assert corr == 21
        [(t, p, error, _)] = rk.parse_produce_v3(body)
        assert (t, p, error) == (topic, 0, 2), f"expected CORRUPT_MESSAGE (2), got {error}"
        # the connection stays usable
        corr, body = c.roundtrip(
            rk.produce_v3(22, topic, 0, rk.record_batch_v2([(None, b"good-2")]))
        )
        assert rk.parse_produce_v3(body) == [(topic, 0, 0, 2)]
    got = read_all(broker.bootstrap, topic, [0], 3)[0]
    print(f"[{broker.backend}] produced 2 good batches + 1 corrupt; read back {len(got)} records")
    assert [(r.offset, r.key, r.value) for r in got] == [
        (0, b"k0", b"good-0"),
        (1, b"k1", b"good-1"),
        (2, None, b"good-2"),
    ]
