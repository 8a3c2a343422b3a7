"""A minimal asynchronous Kafka client used between brokers (followers fetching from leaders).

One request in flight per connection, frames built and parsed by the generic codec.  Any
transport or decoding failure closes the connection and raises ConnectionError; the caller
reconnects with backoff.
"""

from __future__ import annotations

import asyncio
import itertools

from pybroker.wire import codec
from pybroker.wire.primitives import DecodeError


class BrokerConnection:
    def __init__(self, host: str, port: int, client_id: str, *, timeout_s: float = 30.0) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._ids = itertools.count(1)

    async def connect(self) -> None:
        self._reader, self._writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port, limit=2**20), self.timeout_s
        )

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def request(
        self, api_key: int, api_version: int, body: dict, *, timeout_s: float | None = None
    ) -> dict:
        if not self.connected:
            await self.connect()
        cid = next(self._ids) & 0x7FFFFFFF
        frame = codec.encode_request(api_key, api_version, cid, self.client_id, body)
        try:
            self._writer.write(frame)
            await self._writer.drain()
            size = int.from_bytes(
                await asyncio.wait_for(self._reader.readexactly(4), timeout_s or self.timeout_s),
                "big",
            )
            data = await asyncio.wait_for(
                self._reader.readexactly(size), timeout_s or self.timeout_s
            )
            got, response = codec.decode_response(api_key, api_version, data)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, DecodeError) as e:
            self.close()
            raise ConnectionError(f"request to {self.host}:{self.port} failed: {e!r}") from e
        if got != cid:
            self.close()
            raise ConnectionError(f"correlation id {got} != {cid}")
        return response

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._writer = None
        self._reader = None
