"""The asyncio listener: accepts connections up to max.connections and closes them all on
shutdown, letting each finish the request it is handling."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pybroker.config import Endpoint
from pybroker.connection import KafkaConnection

log = logging.getLogger("pybroker.server")


class KafkaServer:
    def __init__(
        self,
        services: Any,
        endpoints: tuple[Endpoint, ...],
        *,
        max_request_bytes: int,
        max_connections: int,
    ) -> None:
        self.services = services
        self.endpoints = endpoints
        self.max_request_bytes = max_request_bytes
        self.max_connections = max_connections
        self.connections: set[KafkaConnection] = set()
        self._servers: list[asyncio.base_events.Server] = []
        self.bound: list[tuple[str, int]] = []

    def _new_connection(self) -> asyncio.Protocol:
        if len(self.connections) >= self.max_connections:
            log.warning("max.connections=%d reached; refusing a connection", self.max_connections)
            return _Refused()
        conn = KafkaConnection(
            self.services, self.max_request_bytes, on_close=self.connections.discard
        )
        self.connections.add(conn)
        return conn

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for ep in self.endpoints:
            srv = await loop.create_server(
                self._new_connection, ep.host or None, ep.port, reuse_address=True, backlog=1024
            )
            self._servers.append(srv)
            for sock in srv.sockets:
                self.bound.append(sock.getsockname()[:2])
        log.info("listening on %s", ", ".join(f"{h}:{p}" for h, p in self.bound))

    async def stop(self) -> None:
        for srv in self._servers:
            srv.close()
        for conn in list(self.connections):
            conn.close()
        for srv in self._servers:
            try:
                await asyncio.wait_for(srv.wait_closed(), 5)
            except TimeoutError:
                log.warning("connections still open at shutdown")


class _Refused(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()
