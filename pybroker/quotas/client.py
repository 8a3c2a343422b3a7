"""The request-path side of client quotas, as Kafka's KafkaApis records them: Produce bytes
against producer_byte_rate (``produce_throttle``), Fetch bytes against consumer_byte_rate
(``fetch_bound``, ``fetch_throttle``: a violating fetch answers empty and throttled), and the
handler's time on the event loop against request_percentage (``request_timer``,
``throttle_after``, :class:`Timed`).  Exempt as in Kafka: ApiVersions, SASL, WriteTxnMarkers,
followers' fetches, acks=0 produces.  The user is the connection's principal name
(``ANONYMOUS`` without authentication).  Details: docs/internals.md
("pybroker/quotas/client.py").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, Protocol

from pybroker.quotas.entities import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE

if TYPE_CHECKING:
    from pybroker.quotas.manager import QuotaManager


class QuotaServices(Protocol):
    """What these functions use of the broker's services (pybroker/services.py)."""

    quotas: QuotaManager | None


class Principal(Protocol):
    """A connection's session (pybroker/security/sasl.py's Session): who is charged."""

    principal: str


# ApiVersions, SaslHandshake, SaslAuthenticate, WriteTxnMarkers
EXEMPT_FROM_REQUEST_QUOTA = frozenset({18, 17, 36, 27})


class Timed:
    """``await Timed(coro)`` runs ``coro`` and adds the time of each of its steps (from a
    resumption to its next suspension) to ``seconds``."""

    def __init__(self, coro: Coroutine, clock: Callable[[], float] = time.perf_counter) -> None:
        self.coro = coro
        self.seconds = 0.0
        self._clock = clock

    def __await__(self) -> Generator[Any, Any, Any]:
        value: Any = None
        error: BaseException | None = None
        while True:
            started = self._clock()
            try:
                step = self.coro.throw(error) if error is not None else self.coro.send(value)
            except StopIteration as stop:
                self.seconds += self._clock() - started
                return stop.value
            except BaseException:
                self.seconds += self._clock() - started
                raise
            self.seconds += self._clock() - started
            try:
                value, error = (yield step), None
            except BaseException as e:  # cancellation and the like: into the handler
                value, error = None, e


def request_timer(services: QuotaServices, api_key: int) -> bool:
    """Whether this request's handler time is to be measured (a request quota exists)."""
    q = services.quotas
    return (
        q is not None and api_key not in EXEMPT_FROM_REQUEST_QUOTA and q.enabled(REQUEST_PERCENTAGE)
    )


def _follower_fetch(body: dict) -> bool:
    rid = body.get("replica_id", -1)
    if rid is None or rid < 0:
        rid = (body.get("replica_state") or {}).get("replica_id", -1)
    return rid is not None and rid >= 0


def throttle_after(
    services: QuotaServices,
    session: Principal | None,
    client_id: str | None,
    api_key: int,
    size: int,
    body: dict,
    response: Any,
    handler_seconds: float | None,
) -> int:
    """After a handler: the quotas' throttle time, written into the answer; the mute."""
    q = services.quotas
    if q is None:
        return 0
    bandwidth = 0
    if api_key == 0:
        bandwidth = produce_throttle(services, session, client_id, size)
    elif isinstance(response, dict):
        bandwidth = response.get("throttle_time_ms") or 0  # Fetch's own (fetch_throttle)
    request = 0
    exempt = (api_key == 0 and body.get("acks") == 0) or (api_key == 1 and _follower_fetch(body))
    if handler_seconds is not None and not exempt:
        user, cid = user_of(session), client_id or ""
        request = q.record(REQUEST_PERCENTAGE, user, cid, handler_seconds * 100.0)
        if request:
            q.throttled(REQUEST_PERCENTAGE, request)
    ms = max(bandwidth, request)
    if ms and isinstance(response, dict) and "throttle_time_ms" in response:
        response["throttle_time_ms"] = ms
    return ms


def user_of(session: Principal | None) -> str:
    principal = getattr(session, "principal", None) or "User:ANONYMOUS"
    return principal.split(":", 1)[1] if ":" in principal else principal


def produce_throttle(
    services: QuotaServices, session: Principal | None, client_id: str | None, size: int
) -> int:
    q = services.quotas
    if q is None:
        return 0
    ms = q.record(PRODUCER_BYTE_RATE, user_of(session), client_id or "", size)
    if ms:
        q.throttled(PRODUCER_BYTE_RATE, ms)
    return ms


def fetch_bound(
    services: QuotaServices, session: Principal | None, client_id: str | None
) -> int | None:
    q = services.quotas
    if q is None:
        return None
    return q.max_value_in_window(CONSUMER_BYTE_RATE, user_of(session), client_id or "")


def fetch_throttle(
    services: QuotaServices, session: Principal | None, client_id: str | None, size: int
) -> int:
    q = services.quotas
    if q is None:
        return 0
    user, cid = user_of(session), client_id or ""
    ms = q.record(CONSUMER_BYTE_RATE, user, cid, size)
    if ms:
        q.unrecord(CONSUMER_BYTE_RATE, user, cid, size)
        q.throttled(CONSUMER_BYTE_RATE, ms)
    return ms
