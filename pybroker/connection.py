"""One client connection: frames in, responses out in request order.  Frames queue up
(pipelining) and one task per connection handles them one at a time, as Kafka does; a frame
reaching an idle connection is handled in the callback that read it (``_answer_now``): a
handler answering without awaiting (a plain function returning the response) has its answer
written there, with no task switch; one that waits goes to the task, whose coroutine begins
there.  Reading pauses while too much is queued, so a fast sender cannot grow memory without
bound; log file regions go out through pybroker/transport_layer.py (sendfile, or read and
written through the TLS layer).  Only framing and decoding violations close the connection;
errors a handler can express become error codes.  Each connection has a ``Session``: on a
SASL listener only ApiVersions and the SASL requests are served before login (KIP-368
re-authentication too); on an SSL listener the principal is the client certificate's mapped
name.  Details: docs/internals.md ("pybroker/connection.py").
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any

from pybroker import handlers  # noqa: F401  (registers every handler)
from pybroker.errors import ErrorCode
from pybroker.handlers.context import CloseConnection, RequestContext
from pybroker.quotas.client import Timed, request_timer, throttle_after
from pybroker.registry import HANDLERS
from pybroker.security.exchange import step as sasl_step
from pybroker.security.sasl import ListenerSasl, Session, distinguished_name
from pybroker.security.scram import AuthenticationFailed
from pybroker.transport_layer import TransportLayer
from pybroker.wire import codec
from pybroker.wire.framing import FrameDecoder, FrameError
from pybroker.wire.primitives import DecodeError

if TYPE_CHECKING:
    from pybroker.services import BrokerServices

log = logging.getLogger("pybroker.connection")

MAX_QUEUED_FRAMES = 16
SASL_MAX_RECEIVE_SIZE = 524288  # Kafka's sasl.server.max.receive.size
_BEFORE_LOGIN = frozenset({18, 17, 36})  # ApiVersions, SaslHandshake, SaslAuthenticate
_BYTES = (bytes, bytearray, memoryview)
# APIs whose answer most requests get alike, encoded once (codec.encode_response_memo):
# ApiVersions, which every connection asks first and W23's 10,000 clients every second
# (encoding its ~60 API ranges was 36 of ~100 us of such a request)
ANSWERED_ALIKE = frozenset({18})


class _Flag:
    """``asyncio.Event`` for one waiting task, without the Event's waiter deque (an empty
    deque is ~760 bytes and a connection had three: idle connections cost RSS, issue 27's
    W23).  ``set`` wakes the waiter; ``clear`` does not undo a wake already given."""

    __slots__ = ("_is_set", "_waiter", "_loop")

    def __init__(self, is_set: bool = False) -> None:
        self._is_set = is_set
        self._waiter: asyncio.Future[None] | None = None
        # the connection's loop, remembered: get_running_loop is a getpid system call on
        # 3.11, once per request here (issue 28)
        self._loop: asyncio.AbstractEventLoop | None = None

    def is_set(self) -> bool:
        return self._is_set

    def set(self) -> None:
        self._is_set = True
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self._is_set = False

    async def wait(self) -> None:
        if self._is_set:
            return
        waiter = self._waiter
        if waiter is None or waiter.done():  # done: a cancelled wait left it behind
            loop = self._loop
            if loop is None:
                loop = self._loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
        await waiter


class _Ready:
    """An awaitable of a value known already (an answer begun in data_received that the task
    sends: file regions, a mute to keep)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, None, Any]:
        return self.value
        yield  # (a generator: awaiting it never suspends)


class KafkaConnection(asyncio.Protocol):
    def __init__(
        self,
        services: BrokerServices,
        max_request_bytes: int,
        on_close: Callable[[KafkaConnection], None] | None = None,
        listener: str | None = None,
        sasl: ListenerSasl | None = None,
        principal_rules: Callable[[str], str] | None = None,
    ) -> None:
        self.services = services
        self.listener = listener  # the name of the listener it was accepted on
        self.session = Session.for_listener(sasl, None)
        self._principal_rules = principal_rules
        self.decoder = FrameDecoder(
            max_request_bytes if sasl is None else min(max_request_bytes, SASL_MAX_RECEIVE_SIZE)
        )
        self.max_request_bytes = max_request_bytes
        self.frames: list[bytearray] = []  # at most ~MAX_QUEUED_FRAMES (a deque: 760 bytes idle)
        self.queued_bytes = 0
        self.transport: asyncio.Transport | None = None
        self._layer: TransportLayer | None = None
        self.peer: tuple | None = None
        self.reading_paused = False
        self.closed = False
        self._wakeup = _Flag()
        self._can_write = _Flag(True)
        self._task: asyncio.Task | None = None
        self._idle = True  # the task (if any) waits for a frame: nothing in hand
        self._carry: Awaitable[Any] | None = None  # a request begun in data_received
        self._on_close = on_close
        self._in_sendfile = False
        self._deferred_close: str | None = None  # "close" / "abort" asked during a sendfile
        self._metrics = services.metrics if services is not None else None
        self._muted_until = 0.0  # client quotas: monotonic time reading resumes

    @property
    def task(self) -> asyncio.Task | None:
        """The request loop's task (from the first frame on)."""
        return self._task

    # -- asyncio.Protocol -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """The request loop's task starts with the first frame (data_received): a connection
        that never sends one costs no task, and the first request is handled at once."""
        self.transport = transport  # type: ignore[assignment]
        self.peer = transport.get_extra_info("peername")
        cert = transport.get_extra_info("peercert")  # a verified client certificate, if any
        if cert and self.session.sasl is None:
            dn = distinguished_name(cert)
            name = self._principal_rules(dn) if self._principal_rules is not None else dn
            self.session.principal = f"User:{name}"

    @property
    def layer(self) -> TransportLayer:
        """How answers with log regions are written (made at the first such answer; dropped
        when the connection is lost, which breaks its reference cycle with this object)."""
        if self._layer is None:
            self._layer = TransportLayer(
                self.transport,
                lambda: self.closed,
                self._can_write.wait,
            )
        return self._layer

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        count = len(self.frames)  # queued before this data: the task's
        try:
            self.decoder.feed(data)
            while (frame := self.decoder.next_frame()) is not None:
                self.frames.append(frame)
                self.queued_bytes += len(frame)
        except FrameError as e:
            log.warning("closing connection from %s: %s", self.peer, e)
            self.abort()
            return
        if self.frames:
            if (
                self._idle
                and count == 0
                and self._carry is None
                and not self._muted_until
                and self._can_write.is_set()
            ):
                self._answer_now()
            if self.frames or self._carry is not None:
                self._idle = False
                if self._task is None:
                    self._task = asyncio.get_running_loop().create_task(self._run())
                self._wakeup.set()
        if (
            len(self.frames) >= MAX_QUEUED_FRAMES or self.queued_bytes > self.max_request_bytes
        ) and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._wakeup.set()
        self._can_write.set()
        if self._layer is not None:
            self._layer.wake()
            self._layer = None
        if self._on_close:
            self._on_close(self)
        shares = self.services.shares if self.services is not None else None
        if shares is not None:  # its share sessions end (KIP-932: records released)
            shares.disconnected(id(self.session))

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # -- the request loop -------------------------------------------------------------------
    def abort(self) -> None:
        self.closed = True
        self._close_transport("abort")
        self._wakeup.set()

    def close(self) -> None:
        """Graceful: stop reading, let the task finish the current request and flush."""
        self.closed = True
        self._wakeup.set()
        self._close_transport("close")

    def _close_transport(self, how: str) -> None:
        """Close (or abort) the transport, but never under a running sendfile: asyncio
        (3.11) then fails in the transport's connection_lost ('InvalidStateError' on the
        finished empty-waiter, logged with a traceback) and closes the socket sendfile is
        using.  The sendfile ends (it fails or completes) and _send closes it then."""
        if self.transport is None:
            return
        if self._in_sendfile:
            if self._deferred_close != "abort":
                self._deferred_close = how
            return
        if how == "abort":
            self.transport.abort()
        else:
            self.transport.close()

    def _answer_now(self) -> None:
        """The first frame to reach an idle connection is handled here, in the callback that
        read it (issue 28: no task switch for a request answered at once): a handler that
        answers without awaiting has its answer written now; one that returns an awaitable
        (its coroutine not begun) is handed to the task with the frames after it, as is an
        answer of file regions, a quota's mute or a full send buffer."""
        frame = self.frames.pop(0)
        self.queued_bytes -= len(frame)
        try:
            parts = self._handle_now(frame)
            if parts is False:
                self.abort()
            elif parts is None:
                if self._muted_until:
                    self._carry = _Ready(None)
            elif type(parts) is not list:
                self._carry = parts
            elif len(parts) == 1 and type(parts[0]) is bytes:
                self._write(parts[0])
                if self._muted_until:
                    self._carry = _Ready(None)
                why, self.session.close_after_response = self.session.close_after_response, None
                if why is not None:
                    log.info("closing %s after the answer: %s", self.peer, why)
                    self.close()
            else:
                self._carry = _Ready(parts)
        except (ConnectionError, OSError) as e:
            log.debug("connection %s lost while sending: %s", self.peer, e)
            self.abort()
        except Exception:
            log.exception("unexpected error on connection %s; closing it", self.peer)
            self.abort()

    async def _run(self) -> None:
        frame: bytearray | None = None
        parts: Any = None
        try:
            while True:
                carry = self._carry
                if carry is not None:  # begun in data_received (_answer_now): in hand, so
                    self._carry = None  # finished even if the connection closed meanwhile
                    parts = await carry
                elif self.closed:
                    return
                elif self.frames:
                    frame = self.frames.pop(0)
                    self.queued_bytes -= len(frame)
                    if self.reading_paused and len(self.frames) < MAX_QUEUED_FRAMES // 2:
                        self.reading_paused = False
                        self.transport.resume_reading()
                    if not self._can_write.is_set():  # an answer written in data_received
                        await self._can_write.wait()
                    parts = self._handle_now(frame)
                    if parts is not None and parts is not False and type(parts) is not list:
                        parts = await parts
                else:
                    frame = parts = None  # an idle connection keeps no request or answer
                    self._idle = True
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    self._idle = False
                    continue
                if parts is None:
                    if self._muted_until:
                        await self._mute()
                    await asyncio.sleep(0)  # (see below)
                    continue
                if parts is False:
                    self.abort()
                    return
                if len(parts) == 1 and type(parts[0]) is bytes and self._can_write.is_set():
                    self._write(parts[0])  # the common case of _send, without its coroutine
                    if not self._can_write.is_set():
                        await self._can_write.wait()
                else:
                    await self._send(parts)
                if self._muted_until:  # (a client quota throttled this connection once)
                    await self._mute()
                # One request at a time, then the loop's other work: a client pipelining many
                # requests (each answered without suspending) must not hold the loop for all
                # of them (the long fuzz: 37 pipelined requests, 162 ms).  With nothing
                # queued the wait for the next frame yields anyway (one step less per request).
                if self.frames:
                    await asyncio.sleep(0)
                why, self.session.close_after_response = self.session.close_after_response, None
                if why is not None:
                    log.info("closing %s after the answer: %s", self.peer, why)
                    self.close()
                    return
        except asyncio.CancelledError:
            raise
        except (ConnectionError, OSError) as e:
            log.debug("connection %s lost while sending: %s", self.peer, e)
            self.abort()
        except Exception:
            log.exception("unexpected error on connection %s; closing it", self.peer)
            self.abort()

    async def _raw_token(self, frame: bytearray) -> list[Any] | bool:
        """SaslHandshake v0: a bare SASL token in, a bare size-prefixed token out."""
        try:
            token = await sasl_step(
                self.session, bytes(frame), self.services.credentials, self._now_ms()
            )
        except AuthenticationFailed as e:
            log.info("closing %s: SASL authentication failed: %s", self.peer, e)
            return False
        self._after_login()
        return [len(token).to_bytes(4, "big") + token]

    def _now_ms(self) -> int:
        return self.services.clock.time_ms()

    def _after_login(self) -> None:
        if self.session.authenticated:
            self.decoder.max_size = self.max_request_bytes

    def _handle_now(self, frame: bytearray) -> list[Any] | None | bool | Awaitable[Any]:
        """The request's answer frame parts (None: no answer; False: close the connection),
        or, when its handler waits, an awaitable of them (a coroutine not yet begun)."""
        session = self.session
        if session.raw_tokens and session.server is not None:
            return self._raw_token(frame)
        try:
            api_key, api_version, correlation_id = codec.peek_api(frame)
        except DecodeError:
            return False
        if not session.authenticated and api_key not in _BEFORE_LOGIN:
            log.info("closing %s: api %d before SASL authentication completed", self.peer, api_key)
            return False
        if (
            session.expires_at_ms is not None
            and session.expired(self._now_ms())
            and api_key not in _BEFORE_LOGIN
        ):
            log.info("closing %s: SASL session expired (connections.max.reauth.ms)", self.peer)
            return False
        try:
            header, body = codec.decode_request(memoryview(frame))
        except codec.UnsupportedVersionError:
            if api_key == 18:  # tell the client which ApiVersions versions we speak (KIP-511)
                reg = HANDLERS[18]
                return codec.encode_response(
                    18,
                    0,
                    correlation_id,
                    {
                        "error_code": ErrorCode.UNSUPPORTED_VERSION,
                        "api_keys": [
                            {
                                "api_key": 18,
                                "min_version": reg.min_version,
                                "max_version": reg.max_version,
                            }
                        ],
                    },
                )
            log.warning("closing %s: api %d v%d not supported", self.peer, api_key, api_version)
            return False
        except DecodeError as e:
            log.warning(
                "closing %s: cannot decode api %d v%d: %s", self.peer, api_key, api_version, e
            )
            log.debug("undecodable frame: %s", bytes(frame[:512]).hex())
            return False
        reg = HANDLERS.get(api_key)
        if reg is None or not reg.min_version <= api_version <= reg.max_version:
            if api_key == 18:
                raise AssertionError("ApiVersions must be registered")
            log.warning("closing %s: api %d v%d not served", self.peer, api_key, api_version)
            return False
        ctx = RequestContext(
            services=self.services,
            api_key=api_key,
            api_version=api_version,
            correlation_id=correlation_id,
            client_id=header.get("client_id"),
            peer=self.peer,
            listener=self.listener,
            session=session,
        )
        started = time.perf_counter() if self._metrics is not None else 0.0
        if request_timer(self.services, api_key):
            return self._answer_timed(ctx, reg.fn, body, len(frame), started)
        try:
            response = reg.fn(ctx, body)
            if type(response) is not dict and response is not None:
                if hasattr(response, "__await__"):  # the handler waits: in the task
                    return self._answer_later(ctx, body, len(frame), started, response)
        except CloseConnection as e:
            return self._closing(ctx, body, started, e)
        return self._answer(ctx, body, len(frame), started, response, None)

    async def _answer_later(
        self, ctx: RequestContext, body: dict, size: int, started: float, waiting: Awaitable
    ) -> list[Any] | None | bool:
        try:
            response = await waiting
        except CloseConnection as e:
            return self._closing(ctx, body, started, e)
        return self._answer(ctx, body, size, started, response, None)

    async def _answer_timed(
        self, ctx: RequestContext, fn: Callable, body: dict, size: int, started: float
    ) -> list[Any] | None | bool:
        """A request whose handler time counts for a request quota (quotas/client.py)."""
        try:
            began = time.perf_counter()
            response = fn(ctx, body)
            seconds = time.perf_counter() - began
            if type(response) is not dict and hasattr(response, "__await__"):
                timer = Timed(response)
                response = await timer
                seconds += timer.seconds
        except CloseConnection as e:
            return self._closing(ctx, body, started, e)
        return self._answer(ctx, body, size, started, response, seconds)

    def _closing(self, ctx: RequestContext, body: dict, started: float, e: Exception) -> bool:
        if self._metrics is not None:
            self._metrics.request(
                ctx.api_key, ctx.api_version, body, None, time.perf_counter() - started
            )
        log.info("closing %s: %s", self.peer, e)
        return False

    def _answer(
        self,
        ctx: RequestContext,
        body: dict,
        size: int,
        started: float,
        response: Any,
        seconds: float | None,
    ) -> list[Any] | None:
        """Metrics, quotas, and the response encoded (None: no answer)."""
        api_key, api_version = ctx.api_key, ctx.api_version
        metrics = self._metrics
        if metrics is not None:
            metrics.request(api_key, api_version, body, response, time.perf_counter() - started)
        self._after_login()
        self._throttle(api_key, size, ctx, body, response, seconds)
        if response is None:
            return None
        correlation_id = ctx.correlation_id
        if api_key in ANSWERED_ALIKE:
            return codec.encode_response_memo(api_key, api_version, correlation_id, response)
        try:
            return codec.encode_response(api_key, api_version, correlation_id, response)
        except struct.error:  # a message quoting a (very long) client name past a string's
            # int16 length: the messages are shortened, never the data they come with
            short = _short_messages(response)
            return codec.encode_response(api_key, api_version, correlation_id, short)

    def _throttle(
        self,
        api_key: int,
        size: int,
        ctx: RequestContext,
        body: dict,
        response: Any,
        seconds: float | None,
    ) -> None:
        """Client quotas (quotas/client.py): the answer's throttle time, if any, mutes the
        connection that long from now (``_mute``)."""
        ms = throttle_after(
            self.services,
            self.session,
            ctx.client_id,
            api_key,
            size,
            body,
            response,
            seconds,
        )
        if ms > 0:
            self._muted_until = max(self._muted_until, time.monotonic() + ms / 1000.0)

    async def _mute(self) -> None:
        """KIP-219: after a throttled answer is sent, nothing more is read from the client
        until its throttle time has passed (requests it already sent wait too)."""
        left = self._muted_until - time.monotonic()
        if left <= 0:  # served: the connection may answer in data_received again
            self._muted_until = 0.0
            return
        if self.closed:
            return
        self.transport.pause_reading()
        try:
            await asyncio.sleep(left)
        finally:
            if not self.reading_paused and not self.closed:
                self.transport.resume_reading()

    async def _send(self, parts: list[Any]) -> None:
        transport = self.transport
        if len(parts) == 1 and isinstance(parts[0], _BYTES):  # no log region: the common case
            self._write(parts[0])
        elif all(isinstance(part, _BYTES) for part in parts):
            for part in parts:
                self._write(part)
        elif transport.is_closing():
            # A peer that went away: the transport closes before connection_lost runs.
            if not self.closed:
                raise ConnectionResetError("the peer closed the connection")
        elif not self.closed:
            # Log regions (transport_layer.py): straight onto the socket (once the transport
            # has written what it buffers), in chunks through the TLS layer, else asyncio's
            # sendfile (a transport without a socket).
            layer = self.layer
            self._in_sendfile = True
            try:
                if layer.direct:
                    await layer.write_direct(parts)
                elif layer.through:
                    await layer.write_through(parts)
                else:
                    await self._sendfile_parts(parts)
            finally:
                self._in_sendfile = False
                deferred, self._deferred_close = self._deferred_close, None
                if deferred is not None:
                    self._close_transport(deferred)
        if not self._can_write.is_set():
            await self._can_write.wait()

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closed:
            return
        # A failed write closes the transport before connection_lost reaches us; writing on
        # would only make asyncio warn once per answer.
        if self.transport.is_closing():
            raise ConnectionError("transport closed before the answer was sent")
        self.transport.write(data)

    async def _sendfile_parts(self, parts: list[Any]) -> None:
        """asyncio's loop.sendfile per region (a transport with no socket of its own)."""
        loop = asyncio.get_running_loop()
        transport = self.transport
        for part in parts:
            if self.closed:
                return
            if isinstance(part, _BYTES):
                self._write(part)
                continue
            # A peer that went away (the transport closes before connection_lost runs) makes
            # sendfile raise RuntimeError("Transport is closing"): the peer is gone, as below.
            if transport.is_closing():
                raise ConnectionResetError("the peer closed the connection")
            try:
                sent = await loop.sendfile(transport, part.file, part.position, part.size)
            except RuntimeError as e:
                if not transport.is_closing():
                    raise
                raise ConnectionResetError(f"the peer closed the connection: {e}") from None
            if sent != part.size:  # the file shrank under us: the frame is broken, drop the peer
                raise ConnectionError(f"sent {sent} of {part.size} bytes of a log region")


def _short_messages(value: Any, limit: int = 1024) -> Any:
    """``value`` with every ``*message`` string longer than ``limit`` characters cut."""
    if isinstance(value, dict):
        return {
            k: (
                v[:limit] + "..."
                if k.endswith("message") and isinstance(v, str) and len(v) > limit
                else _short_messages(v, limit)
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_short_messages(v, limit) for v in value]
    return value
