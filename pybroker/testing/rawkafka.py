"""Kafka wire bytes built by hand with struct, independent of pybroker's codec.

Only what the compat tests need: request framing (header v1/v2), ApiVersions, Metadata v1,
Produce v3 with a hand-built record batch v2 (CRC-32C via the `crc32c` package).
"""

from __future__ import annotations

import socket
import struct
import time

import crc32c

API_PRODUCE = 0
API_METADATA = 3
API_VERSIONS = 18


def kstring(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def request_header(
    api_key: int, api_version: int, correlation_id: int, client_id="compat"
) -> bytes:
    """Request header v1: api_key, api_version, correlation_id, client_id (int16 string)."""
    return struct.pack(">hhi", api_key, api_version, correlation_id) + kstring(client_id)


def request_header_v2(api_key, api_version, correlation_id, client_id="compat") -> bytes:
    """Request header v2 (flexible requests): v1 + an empty tagged-field section."""
    return request_header(api_key, api_version, correlation_id, client_id) + b"\x00"


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def api_versions_v0(correlation_id: int) -> bytes:
    return frame(request_header(API_VERSIONS, 0, correlation_id))


def metadata_v1(correlation_id: int, topics: list[str] | None = None) -> bytes:
    body = struct.pack(">i", -1) if topics is None else struct.pack(">i", len(topics))
    for t in topics or []:
        body += kstring(t)
    return frame(request_header(API_METADATA, 1, correlation_id) + body)


# --- record batch v2 -----------------------------------------------------------------------


def zigzag_varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _varbytes(b: bytes | None) -> bytes:
    if b is None:
        return zigzag_varint(-1)
    return zigzag_varint(len(b)) + b


def record_batch_v2(
    records: list[tuple[bytes | None, bytes | None]], *, base_timestamp: int | None = None
) -> bytes:
    """An uncompressed magic-2 batch, base offset 0, no producer id, CreateTime."""
    ts = int(time.time() * 1000) if base_timestamp is None else base_timestamp
    body = bytearray()
    for i, (key, value) in enumerate(records):
        rec = b"\x00" + zigzag_varint(0) + zigzag_varint(i) + _varbytes(key) + _varbytes(value)
        rec += zigzag_varint(0)  # no headers
        body += zigzag_varint(len(rec)) + rec
    after_crc = struct.pack(
        ">hiqqqhii",
        0,  # attributes: no compression, CreateTime
        len(records) - 1,  # last offset delta
        ts,  # base timestamp
        ts,  # max timestamp
        -1,  # producer id
        -1,  # producer epoch
        -1,  # base sequence
        len(records),
    ) + bytes(body)
    crc = crc32c.crc32c(after_crc)
    # batchLength counts from partitionLeaderEpoch to the end
    inner = struct.pack(">ibI", -1, 2, crc) + after_crc
    return struct.pack(">qi", 0, len(inner)) + inner


def corrupt_crc(batch: bytes) -> bytes:
    """Flip one bit inside the CRC-covered part (the last value byte)."""
    b = bytearray(batch)
    b[-2] ^= 0x01
    return bytes(b)


def produce_v3(correlation_id: int, topic: str, partition: int, records: bytes, acks=-1) -> bytes:
    body = kstring(None) + struct.pack(">hi", acks, 10_000)
    body += struct.pack(">i", 1) + kstring(topic)
    body += struct.pack(">i", 1) + struct.pack(">i", partition)
    body += struct.pack(">i", len(records)) + records
    return frame(request_header(API_PRODUCE, 3, correlation_id) + body)


# --- responses ---------------------------------------------------------------------------


class Reader:
    def __init__(self, buf: bytes):
        self.buf = buf
        self.pos = 0

    def take(self, fmt: str):
        vals = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return vals if len(vals) > 1 else vals[0]

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        s = self.buf[self.pos : self.pos + n].decode()
        self.pos += n
        return s


def parse_api_versions_v0(body: bytes) -> tuple[int, dict[int, tuple[int, int]]]:
    """(error_code, {api_key: (min, max)}) from an ApiVersions v0 response body."""
    r = Reader(body)
    error = r.take(">h")
    n = r.take(">i")
    ranges = {}
    for _ in range(max(n, 0)):
        key, lo, hi = r.take(">hhh")
        ranges[key] = (lo, hi)
    return error, ranges


def parse_produce_v3(body: bytes) -> list[tuple[str, int, int, int]]:
    """[(topic, partition, error_code, base_offset)] from a Produce v3 response body."""
    r = Reader(body)
    out = []
    for _ in range(r.take(">i")):
        topic = r.string()
        for _ in range(r.take(">i")):
            partition, error, base_offset, _log_append_time = r.take(">ihqq")
            out.append((topic, partition, error, base_offset))
    return out


# --- socket helpers ----------------------------------------------------------------------


def closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    """True if the peer closes ``sock`` (EOF or reset) within ``timeout`` without sending
    anything; the socket's timeout is ``timeout`` afterwards."""
    sock.settimeout(timeout)
    try:
        data = sock.recv(65536)
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return data == b""


class Conn:
    """A blocking client socket with frame-level helpers."""

    def __init__(self, host: str, port: int, timeout: float = 10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv_exact(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> tuple[int, bytes] | None:
        """(correlation_id, body after a v0 response header) or None when the peer closed."""
        head = self._recv_exact(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        payload = self._recv_exact(size)
        if payload is None:
            return None
        (corr,) = struct.unpack(">i", payload[:4])
        return corr, payload[4:]

    def closed_by_peer(self, timeout: float = 10.0) -> bool:
        """True if the peer closes (EOF or reset) within `timeout` without sending a frame."""
        return closed_by_peer(self.sock, timeout)

    def roundtrip(self, data: bytes) -> tuple[int, bytes]:
        self.send(data)
        got = self.recv_frame()
        assert got is not None, "broker closed the connection instead of answering"
        return got
