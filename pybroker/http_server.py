"""A minimal HTTP/1.1 server on the broker's event loop, with a router.

It serves ``metrics.listener`` (``/metrics``, pybroker/metrics.py) and the web console
(pybroker/console/): ``HttpServer.route(path, fn)`` adds an exact path,
``HttpServer.route_prefix(prefix, fn)`` every path under a prefix (the longest matching prefix
wins, exact paths first), where ``fn(request) -> HttpResponse`` is a coroutine run on the event
loop (it must not block it: long work yields or goes to a thread).

What it speaks: GET and HEAD (anything else: 405), path match after dropping the query string
(``HttpRequest.path`` stays percent-encoded; unknown path: 404), request headers up to
``MAX_HEAD_BYTES`` (else 431), a request body is refused (413 on GET/HEAD, 405 otherwise)
since no route takes one, and the connection is then closed (the body is never read),
keep-alive unless the client asks to close (or speaks HTTP/1.0 without keep-alive),
``Content-Length`` on every answer, a connection idle for ``IDLE_TIMEOUT_S`` is closed.  A
route that raises answers 500 and is logged.  ``HttpRequest.peer`` is the client's address.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger("pybroker.http_server")

MAX_HEAD_BYTES = 16 * 1024
IDLE_TIMEOUT_S = 30.0

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
}


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # names lower-cased
    peer: tuple | None = None  # the client's (host, port, ...)


@dataclass
class HttpResponse:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


Route = Callable[[HttpRequest], Awaitable[HttpResponse]]


class HttpServer:
    """Listens on ``host:port`` (port 0: any free port; ``bound`` says which)."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.routes: dict[str, Route] = {}
        self.prefixes: dict[str, Route] = {}
        self.bound: tuple[str, int] | None = None
        self._server: asyncio.AbstractServer | None = None
        self._conns: set[asyncio.Task] = set()

    def route(self, path: str, fn: Route) -> None:
        self.routes[path] = fn

    def route_prefix(self, prefix: str, fn: Route) -> None:
        """Serve every path starting with ``prefix`` (e.g. ``/topics/``) with ``fn``."""
        self.prefixes[prefix] = fn

    def _find(self, path: str) -> Route | None:
        fn = self.routes.get(path)
        if fn is not None:
            return fn
        best = max((p for p in self.prefixes if path.startswith(p)), key=len, default=None)
        return None if best is None else self.prefixes[best]

    async def bind(self) -> None:
        """Bind the port, serving nothing yet; a failure names ``metrics.listener``."""
        if self._server is not None:
            return
        try:
            self._server = await asyncio.start_server(
                self._serve,
                self.host or None,
                self.port,
                limit=MAX_HEAD_BYTES,
                reuse_address=True,
                start_serving=False,
            )
        except OSError as e:
            why = os.strerror(e.errno) if e.errno else str(e)
            raise OSError(
                f"metrics.listener: cannot bind to {self.host}:{self.port}: {why}"
            ) from None
        self.bound = self._server.sockets[0].getsockname()[:2]

    async def start(self) -> None:
        await self.bind()
        await self._server.start_serving()
        log.info("HTTP listener on %s:%d", *self.bound)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._conns):
            t.cancel()
        if self._conns:
            await asyncio.wait(self._conns, timeout=1.0)
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._conns.add(task)
        try:
            while True:
                try:
                    async with asyncio.timeout(IDLE_TIMEOUT_S):
                        head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.LimitOverrunError:
                    await self._write(writer, "HEAD", HttpResponse(431, b"headers too large\n"))
                    return
                except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
                    return
                request, version = _parse(head, writer.get_extra_info("peername"))
                if request is None:
                    await self._write(writer, "GET", HttpResponse(400, b"bad request\n"))
                    return
                keep = _keep_alive(version, request.headers) and not _has_body(request)
                response = await self._dispatch(request)
                await self._write(writer, request.method, response, keep)
                if not keep:
                    return
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            if task is not None:
                self._conns.discard(task)
            writer.close()

    async def _dispatch(self, request: HttpRequest) -> HttpResponse:
        fn = self._find(request.path)
        if fn is None:
            return HttpResponse(404, b"not found\n")
        if request.method not in ("GET", "HEAD"):
            return HttpResponse(405, b"GET or HEAD only\n", headers={"Allow": "GET, HEAD"})
        if _has_body(request):
            return HttpResponse(413, b"no route takes a request body\n")
        try:
            return await fn(request)
        except Exception:
            log.exception("HTTP route %s failed", request.path)
            return HttpResponse(500, b"internal error\n")

    @staticmethod
    async def _write(
        writer: asyncio.StreamWriter, method: str, r: HttpResponse, keep: bool = False
    ) -> None:
        lines = [
            f"HTTP/1.1 {r.status} {_REASONS.get(r.status, 'Unknown')}",
            f"Content-Type: {r.content_type}",
            f"Content-Length: {len(r.body)}",
            f"Connection: {'keep-alive' if keep else 'close'}",
        ]
        lines += [f"{k}: {v}" for k, v in r.headers.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        if method != "HEAD":
            writer.write(r.body)
        await writer.drain()


def _has_body(request: HttpRequest) -> bool:
    h = request.headers
    return h.get("content-length", "0").strip() not in ("", "0") or "chunked" in h.get(
        "transfer-encoding", ""
    )


def _parse(head: bytes, peer: tuple | None = None) -> tuple[HttpRequest | None, str]:
    try:
        text = head.decode("latin-1")
        first, *rest = text.split("\r\n")
        method, target, version = first.split(" ")
    except ValueError:
        return None, ""
    if not version.startswith("HTTP/1."):
        return None, version
    headers: dict[str, str] = {}
    for line in rest:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            return None, version
        headers[name.strip().lower()] = value.strip()
    parts = urlsplit(target)
    request = HttpRequest(method, parts.path or "/", parse_qs(parts.query), headers, peer)
    return request, version


def _keep_alive(version: str, headers: dict[str, str]) -> bool:
    conn = headers.get("connection", "").lower()
    if version == "HTTP/1.0":
        return conn == "keep-alive"
    return conn != "close"
