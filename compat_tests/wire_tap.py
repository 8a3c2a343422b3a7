"""A recording TCP proxy between a real client and a broker: what the client really sends.

Start the broker with advertised.listeners naming the tap's port (so the client, after its
first Metadata, keeps coming through the tap), then point the client at ``tap.bootstrap``.
Every request and response frame is forwarded unchanged and decoded with the project's codec;
``exchanges(api_key)`` gives the (version, request body, response body) triples seen, in order.
Frames the codec cannot decode (an API or version the schemas lack) are forwarded and skipped.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pybroker.testing.debug_process import BrokerProcess
from pybroker.wire.codec import decode_request, decode_response


@dataclass
class Exchange:
    api_key: int
    version: int
    request: dict
    response: dict | None = None


@dataclass
class WireTap:
    target: tuple[str, int]
    host: str = "127.0.0.1"
    port: int = 0
    _log: list[Exchange] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._server = socket.create_server((self.host, self.port))
        self.port = self._server.getsockname()[1]
        self._stopped = False
        self._generation = 0  # reset() starts a new one; older connections are not recorded
        self._socks: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> WireTap:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stopped = True
        self._server.close()
        for s in list(self._socks):
            try:
                s.close()
            except OSError:
                pass

    def __enter__(self) -> WireTap:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reset(self) -> None:
        """Close every connection through the tap and forget what it saw: from now on it
        records what new connections carry (a shared tap, one test after another)."""
        with self._lock:
            self._generation += 1
            socks, self._socks = self._socks, []
            self._log.clear()
        for s in socks:  # (a close alone would leave the pump blocked in recv, the peer open)
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def exchanges(self, api_key: int) -> list[Exchange]:
        with self._lock:
            return [e for e in self._log if e.api_key == api_key and e.response is not None]

    # -- plumbing -------------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks += [client, upstream]
                generation = self._generation
            pending: dict[int, Exchange] = {}
            threading.Thread(
                target=self._pump, args=(client, upstream, pending, True, generation), daemon=True
            ).start()
            threading.Thread(
                target=self._pump, args=(upstream, client, pending, False, generation), daemon=True
            ).start()

    @staticmethod
    def _read(sock: socket.socket, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def _pump(self, src, dst, pending: dict[int, Exchange], requests: bool, generation: int):
        try:
            while True:
                size_b = self._read(src, 4)
                if size_b is None:
                    break
                frame = self._read(src, int.from_bytes(size_b, "big", signed=True))
                if frame is None:
                    break
                if requests:
                    self._note_request(frame, pending, generation)
                else:
                    self._note_response(frame, pending)
                dst.sendall(size_b + frame)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _note_request(self, frame: bytes, pending: dict[int, Exchange], generation: int) -> None:
        try:
            header, body = decode_request(frame)
        except Exception:
            return
        e = Exchange(header["request_api_key"], header["request_api_version"], body)
        with self._lock:
            if generation != self._generation:
                return  # a connection from before reset()
            pending[header["correlation_id"]] = e
            self._log.append(e)

    def _note_response(self, frame: bytes, pending: dict[int, Exchange]) -> None:
        corr = int.from_bytes(frame[:4], "big", signed=True)
        with self._lock:
            e = pending.pop(corr, None)
        if e is None:
            return
        try:
            _, body = decode_response(e.api_key, e.version, frame)
        except Exception:
            return
        with self._lock:
            e.response = body


@contextlib.contextmanager
def tapped_broker(path: Path) -> Iterator[tuple[BrokerProcess, WireTap]]:
    """A broker whose advertised listener is a tap in front of it (its clients go through the
    tap), stopped and removed afterwards."""
    b = BrokerProcess(path, overrides={"group.initial.rebalance.delay.ms": "0"})
    tap = WireTap(("127.0.0.1", b.port)).start()
    b.overrides["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{tap.port}"
    b.start()
    try:
        yield b, tap
    finally:
        tap.close()
        try:
            b.stop()
        finally:
            b.cleanup()
