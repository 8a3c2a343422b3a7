"""A minimal asynchronous Kafka client used between brokers (followers fetching from leaders).

One request in flight per connection, frames built and parsed by the generic codec.  Any
transport or decoding failure closes the connection and raises ConnectionError; the caller
reconnects with backoff.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from pybroker.security.scram import AuthenticationFailed, ScramClient
from pybroker.wire import codec
from pybroker.wire.primitives import DecodeError

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


class BrokerConnection:
    def __init__(
        self,
        host: str,
        port: int,
        client_id: str,
        *,
        timeout_s: float = 30.0,
        ssl: Any = None,
        sasl: tuple[str, str, str] | None = None,
    ) -> None:
        self.ssl = ssl  # an ssl.SSLContext: the inter-broker listener has TLS
        self.sasl = sasl  # (mechanism, username, password): the listener has SASL
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._ids = itertools.count(1)

    async def connect(self) -> None:
        async with asyncio.timeout(self.timeout_s):
            self._reader, self._writer = await asyncio.open_connection(
                self.host,
                self.port,
                limit=2**20,
                ssl=self.ssl,
                server_hostname=self.host if self.ssl is not None else None,
            )
        if self.sasl is not None:
            try:
                await self._login(*self.sasl)
            except (AuthenticationFailed, KeyError, ValueError) as e:
                self.close()
                raise ConnectionError(f"SASL login to {self.host}:{self.port}: {e}") from e

    async def _login(self, mechanism: str, username: str, password: str) -> None:
        """SaslHandshake v1 + SaslAuthenticate v2, as a Kafka broker's own client does."""
        r = await self.request(SASL_HANDSHAKE, 1, {"mechanism": mechanism})
        if r["error_code"] != 0:
            raise AuthenticationFailed(f"SaslHandshake: error {r['error_code']}")

        async def token(data: bytes) -> bytes:
            r = await self.request(SASL_AUTHENTICATE, 2, {"auth_bytes": data})
            if r["error_code"] != 0:
                raise AuthenticationFailed(r["error_message"] or f"error {r['error_code']}")
            return bytes(r["auth_bytes"])

        if mechanism == "PLAIN":
            await token(b"\x00" + username.encode() + b"\x00" + password.encode())
            return
        client = ScramClient(mechanism, username, password)
        server_first = await token(client.first())
        client.check(await token(client.final(server_first)))

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def request(
        self, api_key: int, api_version: int, body: dict, *, timeout_s: float | None = None
    ) -> dict:
        if not self.connected:
            await self.connect()
            if not self.connected:
                raise ConnectionError(f"connection to {self.host}:{self.port} closed")
        # This request's own stream: close() (from another task, e.g. a fetcher being stopped)
        # may drop the attributes at any await below; the stream it closed then ends the read.
        reader, writer = self._reader, self._writer
        cid = next(self._ids) & 0x7FFFFFFF
        frame = codec.encode_request(api_key, api_version, cid, self.client_id, body)
        try:
            writer.write(frame)
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
            # cancellation that arrives as the read completes, and a task being stopped
            # would carry on.
            async with asyncio.timeout(timeout_s or self.timeout_s):
                await writer.drain()
                size = int.from_bytes(await reader.readexactly(4), "big")
                data = await reader.readexactly(size)
            if writer is not self._writer:
                raise ConnectionResetError("connection closed during the request")
            got, response = codec.decode_response(api_key, api_version, data)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, DecodeError) as e:
            self._close(writer)
            raise ConnectionError(f"request to {self.host}:{self.port} failed: {e!r}") from e
        if got != cid:
            self._close(writer)
            raise ConnectionError(f"correlation id {got} != {cid}")
        return response

    def _close(self, writer: asyncio.StreamWriter) -> None:
        """Close this request's stream, and forget it if it is still the current one."""
        writer.close()
        if writer is self._writer:
            self.close()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._writer = None
        self._reader = None
