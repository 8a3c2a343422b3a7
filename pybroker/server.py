"""The listener: accepts connections up to max.connections and closes them all on shutdown,
letting each finish the request it is handling.

The listening sockets are ours, not ``loop.create_server``'s: asyncio's accept loop answers
EMFILE (out of descriptors) by logging a traceback and scheduling a retry for each of up to
``backlog`` further failing accept() calls of the same wake-up, every second, for as long as
descriptors are short (issue 10: 238 MB of log in 90 s).  Here a resource error on accept()
(EMFILE, ENFILE, ENOBUFS, ENOMEM) stops accepting on that socket for ``ACCEPT_RETRY_S``, logs
one line when it starts (no traceback) and one when accepting works again; connections
already open are served throughout, and new ones wait in the kernel's listen backlog.

A wake-up of a listening socket accepts at most ``ACCEPT_BATCH`` (20) connections, as Kafka's
network thread sets up at most 20 new connections per poll: in a storm (W23, docs/scale.md)
the loop serves the open connections' requests between batches, and the rest wait in the
listen backlog (``BACKLOG``, above Kafka's socket.listen.backlog.size of 50), none lost.  A
plaintext connection's transport is made in the accept callback itself (asyncio's selector
loop's ``_make_socket_transport``, what ``connect_accepted_socket`` calls, without its task
and waiter); TLS, or a loop without it, takes ``connect_accepted_socket``.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING

from pybroker.config import Endpoint
from pybroker.connection import KafkaConnection
from pybroker.security.sasl import ListenerSasl

if TYPE_CHECKING:
    from pybroker.services import BrokerServices

log = logging.getLogger("pybroker.server")

BACKLOG = 1024
SSL_HANDSHAKE_TIMEOUT_S = 10.0  # an SSL listener's connection that does not finish it is closed
# accept() calls per wake-up of a listening socket: Kafka's Processor.ConnectionQueueSize, the
# new connections a network thread sets up per poll "to ensure that traffic and connection
# close notifications of existing channels are handled promptly" (a storm's setup work per
# loop iteration is bounded; the rest waits in the listen backlog, BACKLOG >= Kafka's 50)
ACCEPT_BATCH = 20
ACCEPT_RETRY_S = 0.5  # pause after running out of descriptors
CLOSE_WAIT_S = 1.5  # stop: how long connections may take to finish the request in hand
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class KafkaServer:
    def __init__(
        self,
        services: BrokerServices,
        endpoints: tuple[Endpoint, ...],
        *,
        max_request_bytes: int,
        max_connections: int,
        ssl_contexts: dict[str, ssl.SSLContext] | None = None,
        sasl: dict[str, ListenerSasl] | None = None,
        principal_rules: Callable[[str], str] | None = None,
    ) -> None:
        self.services = services
        self.endpoints = endpoints
        self.max_request_bytes = max_request_bytes
        self.max_connections = max_connections
        # Kafka's ConnectionQuotas per client address (the broker sets them, dynamically too)
        self.max_connections_per_ip = 2**31 - 1
        self.max_connections_per_ip_overrides: dict[str, int] = {}
        self._per_ip: dict[str, int] = {}
        self.connections: set[KafkaConnection] = set()
        self._sockets: list[socket.socket] = []
        self._retries: dict[int, asyncio.TimerHandle] = {}  # fd -> pending resume
        self._accepting_tasks: set[asyncio.Task] = set()
        self._throttled_sockets: set[socket.socket] = set()  # closed after their throttle
        self._out_of_resources = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._make_transport: Callable[..., asyncio.Transport] | None = None
        self.bound: list[tuple[str, int]] = []
        self._listener_of: dict[int, str] = {}  # listening socket's fd -> listener name
        self.ssl_contexts = ssl_contexts or {}  # SSL listeners' server contexts, by name
        self.sasl = sasl or {}  # SASL listeners' settings, by name
        self.principal_rules = principal_rules  # a client certificate's DN -> principal name
        self._serving = False
        # told the count of open connections at each new one (the broker's GC policy)
        self.on_open: Callable[[int], None] | None = None

    def _ip_limit(self, ip: str) -> int:
        return self.max_connections_per_ip_overrides.get(ip, self.max_connections_per_ip)

    def _release(self, ip: str | None) -> None:
        if ip is None:
            return
        left = self._per_ip.get(ip, 0) - 1
        if left > 0:
            self._per_ip[ip] = left
        else:
            self._per_ip.pop(ip, None)

    def _closed(self, conn: KafkaConnection, ip: str | None) -> None:
        """Once per connection: its slot and its address's count are released."""
        if conn in self.connections:
            self.connections.discard(conn)
            self._release(ip)

    def _new_connection(
        self, listener: str | None = None, ip: str | None = None
    ) -> asyncio.Protocol:
        if len(self.connections) >= self.max_connections:
            log.warning("max.connections=%d reached; refusing a connection", self.max_connections)
            self._release(ip)
            return _Refused()
        conn = KafkaConnection(
            self.services,
            self.max_request_bytes,
            on_close=lambda c: self._closed(c, ip),
            listener=listener,
            sasl=self.sasl.get(listener) if listener is not None else None,
            principal_rules=self.principal_rules,
        )
        self.connections.add(conn)
        if self.on_open is not None:
            self.on_open(len(self.connections))
        return conn

    @property
    def serving(self) -> bool:
        """True once ``start`` accepts connections (until ``stop``)."""
        return self._serving

    async def bind(self) -> None:
        """Bind every listener's sockets, accepting nothing yet (Kafka's SocketServer binds
        when it is made and serves later): the broker binds before it registers or claims the
        controller role, so a port in use stops it before it touches the cluster.  A bind
        failure is a :class:`ListenerBindError` naming ``listeners``."""
        if self._sockets:
            return
        self._loop = loop = asyncio.get_running_loop()
        # asyncio's selector loop makes a plaintext transport without a task (below, "The
        # listening sockets"); another loop (uvloop) takes connect_accepted_socket
        self._make_transport = getattr(loop, "_make_socket_transport", None)
        try:
            for ep in self.endpoints:
                try:
                    socks = await _listen(loop, ep.host or None, ep.port)
                except OSError as e:
                    raise ListenerBindError(ep, e) from None
                for sock in socks:
                    self._sockets.append(sock)
                    self._listener_of[sock.fileno()] = ep.listener
                    self.bound.append(sock.getsockname()[:2])
        except BaseException:
            self._close_sockets()
            raise

    async def start(self) -> None:
        """Accept connections on every listener (binding first if ``bind`` was not called)."""
        await self.bind()
        for sock in self._sockets:
            self._loop.add_reader(sock.fileno(), self._accept, sock)
        self._serving = True
        log.info("listening on %s", ", ".join(f"{h}:{p}" for h, p in self.bound))

    # -- accepting ---------------------------------------------------------------------------
    def _accept(self, sock: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _addr = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as e:
                if e.errno in _OUT_OF_RESOURCES:
                    self._pause(sock, e)
                else:
                    log.warning("accept() on %s failed: %s", sock.getsockname()[:2], e)
                return
            if self._out_of_resources:
                self._out_of_resources = False
                log.info("accepting connections again")
            conn.setblocking(False)
            if self._throttled_ip(conn, _addr):
                continue  # closed after its throttle time, never served nor counted
            ip = _addr[0] if isinstance(_addr, tuple) else None
            if ip is not None:
                limit = self._ip_limit(ip)
                if self._per_ip.get(ip, 0) >= limit:
                    conn.close()
                    log.info(
                        "Rejected connection from %s, address already has the configured "
                        "maximum of %d connections.",
                        ip,
                        limit,
                    )
                    continue
                self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
            listener = self._listener_of.get(sock.fileno())
            if self._make_transport is not None and listener not in self.ssl_contexts:
                self._connect_plain(conn, listener, ip)
                continue
            task = self._loop.create_task(self._connect(conn, listener, ip))
            self._accepting_tasks.add(task)
            task.add_done_callback(self._accepting_tasks.discard)

    def _throttled_ip(self, conn: socket.socket, addr: object) -> bool:
        """connection_creation_rate (quotas/manager.py): a connection over its IP's quota is
        closed after the throttle time, never served (Kafka's DelayedCloseSocket)."""
        quotas = self.services.quotas
        if quotas is None or not isinstance(addr, tuple) or not addr:
            return False
        ms = quotas.record_connection(str(addr[0]))
        if ms <= 0:
            return False
        log.info(
            "connection from %s over its connection_creation_rate; closing in %d ms", addr[0], ms
        )
        self._throttled_sockets.add(conn)

        def close() -> None:
            self._throttled_sockets.discard(conn)
            conn.close()

        self._loop.call_later(ms / 1000.0, close)
        return True

    def _connect_plain(self, conn: socket.socket, listener: str | None, ip: str | None) -> None:
        """A plaintext connection's transport, made at once: what ``connect_accepted_socket``
        does without its task and waiter (the transport calls ``connection_made`` on the
        loop's next iteration, then starts reading)."""
        protocol = self._new_connection(listener, ip)
        try:
            self._make_transport(conn, protocol)
        except OSError as e:  # the peer went away before its transport was made
            conn.close()
            if isinstance(protocol, KafkaConnection):
                self._closed(protocol, ip)
            _log_setup_failure(e, listener, ip, False)

    async def _connect(
        self, conn: socket.socket, listener: str | None, ip: str | None = None
    ) -> None:
        made: list[asyncio.Protocol] = []

        def factory() -> asyncio.Protocol:
            made.append(self._new_connection(listener, ip))
            return made[-1]

        try:
            context = self.ssl_contexts.get(listener) if listener is not None else None
            await self._loop.connect_accepted_socket(
                factory,
                conn,
                ssl=context,
                ssl_handshake_timeout=SSL_HANDSHAKE_TIMEOUT_S if context is not None else None,
            )
        except OSError as e:  # the peer went away, or no descriptor for the transport
            conn.close()
            # (a failed TLS handshake never tells the protocol it was connected or lost)
            if made and isinstance(made[0], KafkaConnection):
                self._closed(made[0], ip)
            elif not made:
                self._release(ip)
            _log_setup_failure(e, listener, ip, context is not None)

    def _pause(self, sock: socket.socket, e: OSError) -> None:
        fd = sock.fileno()
        self._loop.remove_reader(fd)
        if not self._out_of_resources:
            self._out_of_resources = True
            log.error(
                "cannot accept connections on %s: %s; serving the %d open connections and "
                "accepting again when descriptors are free (retrying every %.1fs)",
                sock.getsockname()[:2],
                e.strerror or e,
                len(self.connections),
                ACCEPT_RETRY_S,
            )
        if fd not in self._retries:
            self._retries[fd] = self._loop.call_later(ACCEPT_RETRY_S, self._resume, sock)

    def _resume(self, sock: socket.socket) -> None:
        fd = sock.fileno()
        self._retries.pop(fd, None)
        if fd >= 0 and sock in self._sockets:
            self._loop.add_reader(fd, self._accept, sock)

    def _close_sockets(self) -> None:
        for handle in self._retries.values():
            handle.cancel()
        self._retries.clear()
        for sock in self._sockets:
            if self._loop is not None and sock.fileno() >= 0:
                self._loop.remove_reader(sock.fileno())
            sock.close()
        self._sockets.clear()
        for conn in self._throttled_sockets:
            conn.close()
        self._throttled_sockets.clear()

    async def stop(self) -> None:
        """Stop accepting and close every connection; each finishes the request it is
        handling (at most CLOSE_WAIT_S, then its task is cancelled), a request parked in the
        purgatory (a long poll) is dropped at once.  Every connection's task has ended when
        this returns (a task left pending is destroyed with its loop, half-way)."""
        self._serving = False
        self._close_sockets()
        tasks = list(self._accepting_tasks)
        for task in tasks:
            task.cancel()
        for conn in list(self.connections):
            conn.close()
            if conn.task is not None:
                tasks.append(conn.task)
        self.services.purgatory.cancel_parked()
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=CLOSE_WAIT_S)
        for task in pending:
            task.cancel()
        if pending:
            log.warning(
                "stop: %d connections still busy after %.1f s; cancelled",
                len(pending),
                CLOSE_WAIT_S,
            )
            await asyncio.wait(pending, timeout=CLOSE_WAIT_S)


async def _listen(
    loop: asyncio.AbstractEventLoop, host: str | None, port: int
) -> list[socket.socket]:
    """Bound, listening, non-blocking sockets for ``host`` (None: every interface), as
    ``loop.create_server(..., reuse_address=True)`` would make them."""
    infos = await loop.getaddrinfo(
        host, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    socks: list[socket.socket] = []
    seen = set()
    try:
        for family, type_, proto, _, addr in infos:
            if (family, addr) in seen:
                continue
            seen.add((family, addr))
            try:
                sock = socket.socket(family, type_, proto)
            except OSError:  # a family this host does not support (no IPv6): skip it
                continue
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(addr)
            sock.listen(BACKLOG)
            sock.setblocking(False)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    if not socks:
        raise OSError(f"no address to listen on for {host}:{port}")
    return socks


_CLIENT_WENT_AWAY = (ConnectionResetError, BrokenPipeError, ssl.SSLEOFError)


def _log_setup_failure(e: OSError, listener: str | None, ip: str | None, tls: bool) -> None:
    """Why an accepted connection was never served, at the level it deserves: a client that
    closed (or reset) before the TLS handshake ended is its own business (DEBUG); a failed
    handshake is the client's misconfiguration, logged at INFO as Kafka logs "Failed
    authentication ... (SSL handshake failed)"; anything else (no descriptor left) is ours."""
    who = f"{ip or 'a client'} on the {listener or '?'} listener"
    if isinstance(e, _CLIENT_WENT_AWAY) or (isinstance(e, ConnectionAbortedError) and not str(e)):
        log.debug(
            "%s closed the connection%s", who, " before the TLS handshake completed" if tls else ""
        )
    elif isinstance(e, ssl.SSLError):
        log.info("TLS handshake with %s failed: %s", who, e.reason or e)
    elif tls and isinstance(e, (ConnectionAbortedError, TimeoutError)):  # the handshake timeout
        log.info("TLS handshake with %s failed: %s", who, e)
    else:
        log.warning("could not set up a connection from %s: %s", who, e or type(e).__name__)


class ListenerBindError(OSError):
    """A listener's port cannot be bound: the message names ``listeners`` and the address."""

    def __init__(self, endpoint: Endpoint, cause: OSError) -> None:
        host = endpoint.host or "every interface"
        reason = os.strerror(cause.errno) if cause.errno else str(cause)
        hint = ""
        if cause.errno == errno.EADDRINUSE:
            hint = " (another process listens there: stop it, or give another port in listeners)"
        elif cause.errno == errno.EADDRNOTAVAIL:
            hint = " (no interface of this host has that address)"
        elif cause.errno == errno.EACCES:
            hint = " (ports below 1024 need privileges)"
        self.message = (
            f"listeners: the {endpoint.listener} listener cannot bind to "
            f"{host}:{endpoint.port}: {reason}{hint}"
        )
        super().__init__(cause.errno, self.message)

    def __str__(self) -> str:
        return self.message


class _Refused(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()
