"""Sans-I/O frame decoder: ``feed(bytes)`` then ``next_frame()``.

Kafka frames are an int32 size followed by that many bytes.  A size above the limit
(socket.request.max.bytes) or below the smallest possible request header is refused as soon
as the four size bytes arrive, before any of the body is buffered, so a peer cannot make us
hold more than one maximal frame.
"""

from __future__ import annotations

MIN_REQUEST_SIZE = 8  # api key, api version, correlation id


def _not_kafka(head: bytes | bytearray) -> str:
    """A hint when a frame's first bytes are another protocol's: a TLS record (a client set to
    SSL on a plaintext listener) or an HTTP request (both read as huge frame sizes)."""
    if len(head) >= 3 and head[0] in (0x15, 0x16) and head[1] == 0x03 and head[2] <= 0x04:
        return " (the client speaks TLS: this listener is not an SSL one)"
    if bytes(head[:4]) in (b"GET ", b"POST", b"HEAD", b"PUT ", b"OPTI", b"DELE", b"PRI "):
        return " (an HTTP request: this is a Kafka listener)"
    return ""


class FrameError(ValueError):
    """The peer broke framing; the connection must be closed."""


class FrameDecoder:
    __slots__ = ("max_size", "_buf", "_need")

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._buf = bytearray()
        self._need = -1  # body size of the frame being read, -1 while reading the size

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._buf += data

    def buffered(self) -> int:
        return len(self._buf)

    def next_frame(self) -> bytearray | None:
        """The next complete frame body (a fresh, writable bytearray), or None."""
        buf = self._buf
        if self._need < 0:
            if len(buf) < 4:
                return None
            size = int.from_bytes(buf[:4], "big", signed=True)
            if size < MIN_REQUEST_SIZE:
                raise FrameError(f"invalid frame size {size}")
            if size > self.max_size:
                raise FrameError(
                    f"frame of {size} bytes exceeds socket.request.max.bytes={self.max_size}"
                    + _not_kafka(buf)
                )
            del buf[:4]
            self._need = size
        if len(buf) < self._need:
            return None
        n = self._need
        self._need = -1
        if len(buf) == n:
            self._buf = bytearray()
            return buf
        frame = buf[:n]
        del buf[:n]
        return frame
